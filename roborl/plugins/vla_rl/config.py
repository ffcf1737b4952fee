"""VLA-RL's configuration (`algo.*`): model size, the SFT and RPRM stages, PPO and the
curriculum.

Apart from `algorithm.py` so that module holds the algorithm, whose docstring gives the
paper's and the official code's values these defaults follow and where they deviate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roborl.core.config import rng


@dataclass
class VLARLConfig:
    hidden_size: int = field(default=64, metadata=rng(8, 4096))
    layers: int = field(default=2, metadata=rng(1, 64))
    heads: int = field(default=4, metadata=rng(1, 64))
    demos_per_task: int = field(default=20, metadata=rng(1, None))
    demo_noise: float = field(default=0.1, metadata=rng(0.0, 1.0))
    sft_steps: int = field(default=400, metadata=rng(0, None))
    sft_lr: float = field(default=1e-3, metadata=rng(0.0, 1.0))
    sft_batch_size: int = field(default=64, metadata=rng(1, None))
    iterations: int = field(default=20, metadata=rng(0, None))
    num_envs: int = field(default=8, metadata=rng(1, 256))
    rollout_steps: int = field(default=32, metadata=rng(1, None))
    temperature: float = field(default=1.0, metadata=rng(1e-3, 10.0))
    gamma: float = field(default=0.99, metadata=rng(0.0, 1.0))
    gae_lambda: float = field(default=0.95, metadata=rng(0.0, 1.0))
    clip: float = field(default=0.2, metadata=rng(0.0, 1.0))
    value_clip: float = field(default=0.2, metadata=rng(0.0, None))
    epochs: int = field(default=1, metadata=rng(1, 100))
    minibatches: int = field(default=4, metadata=rng(1, 1024))
    lr: float = field(default=3e-5, metadata=rng(0.0, 1.0))
    value_lr: float = field(default=1e-4, metadata=rng(0.0, 1.0))
    max_grad_norm: float = field(default=1.0, metadata=rng(0.0, None))
    critic_warmup_iterations: int = field(default=5, metadata=rng(0, None))
    use_prm: bool = True
    prm_coef: float = field(default=0.05, metadata=rng(0.0, None))
    prm_steps: int = field(default=300, metadata=rng(0, None))
    curriculum: bool = True
    curriculum_temperature: float = field(default=0.1, metadata=rng(1e-3, None))
    eval_episodes_per_task: int = field(default=10, metadata=rng(1, None))

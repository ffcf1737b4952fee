"""WSRL's configuration: the official locomotion defaults and the baselines' switches.

Its own module so that `wsrl.py` holds the algorithm (the class whose docstring cites the
paper and names the deviations) and this file the keys a user sets (`algo.*`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roborl.core.actor_critic import SoftActorCriticConfig
from roborl.core.config import rng


@dataclass
class WSRLConfig(SoftActorCriticConfig):
    batch_size: int = field(
        default=1024, metadata=rng(1, None, "online batch, split into utd_ratio critic steps")
    )
    actor_lr: float = field(default=1e-4, metadata=rng(0.0, 1.0, "actor Adam learning rate"))
    alpha_lr: float = field(default=1e-4, metadata=rng(0.0, 1.0, "temperature Adam learning rate"))
    pretrain: str = field(default="calql", metadata={"choices": ["calql", "cql", "iql", "none"]})
    pretrain_steps: int = field(default=1_000_000, metadata=rng(0, None, "gradient steps"))
    pretrain_batch_size: int = field(default=256, metadata=rng(1, None))
    warmup_steps: int = field(default=5_000, metadata=rng(0, None, "frozen-policy env steps"))
    utd_ratio: int = field(default=4, metadata=rng(1, 1024, "critic steps per online env step"))
    offline_ratio: float = field(default=0.0, metadata=rng(0.0, 1.0, "RLPD baseline: 0.5"))
    num_critics: int = field(default=10, metadata=rng(1, 64))
    critic_subsample: int = field(
        default=2, metadata=rng(1, 64, "REDQ: target critics in the min (drawn with replacement)")
    )
    layer_norm: bool = field(default=True, metadata={"help": "LayerNorm in the critics"})
    actor_layer_norm: bool = field(default=True, metadata={"help": "LayerNorm in the actor"})
    backup_entropy: bool = field(
        default=False, metadata={"help": "subtract alpha log pi' in the online TD target"}
    )
    cql_alpha: float = field(default=5.0, metadata=rng(0.0, None))
    cql_n_actions: int = field(default=10, metadata=rng(1, 1024))
    cql_temperature: float = field(default=1.0, metadata=rng(1e-6, None))
    cql_max_target_backup: bool = field(
        default=True, metadata={"help": "pre-training target: max over cql_n_actions next actions"}
    )
    iql_expectile: float = field(default=0.7, metadata=rng(0.5, 1.0))
    iql_temperature: float = field(default=3.0, metadata=rng(0.0, None))
    capture: bool = field(
        default=False,
        metadata={
            "help": "record the whole online update as one CUDA graph (CUDA only; capturable Adam); "
            "elsewhere, or when capture fails, eager with a one-line warning"
        },
    )
    max_episode_steps: int = field(default=1000, metadata=rng(1, None))
    pretrained: str | None = None

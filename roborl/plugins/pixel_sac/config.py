"""The pixel SAC algorithms' configurations: `algo=drq` (DrQ's DMC values) and `algo=rlpd`
(RLPD's ensemble and update ratio, SERL's values).

Apart from `drq.py` so that module holds the algorithms (with the papers and deviations in
its docstring) and this one the keys a user sets; each default is explained there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roborl.core.actor_critic import SoftActorCriticConfig
from roborl.core.config import rng
from roborl.core.errors import ConfigError


@dataclass
class DrQConfig(SoftActorCriticConfig):
    """algo=drq: pixel SAC from scratch (DrQ, with DrQ-v2's encoder)."""

    actor_lr: float = field(default=1e-3, metadata=rng(0.0, 1.0, "actor Adam learning rate"))
    critic_lr: float = field(
        default=1e-3, metadata=rng(0.0, 1.0, "critic + encoder Adam learning rate")
    )
    alpha_lr: float = field(default=1e-3, metadata=rng(0.0, 1.0, "temperature Adam rate"))
    tau: float = field(default=0.01, metadata=rng(0.0, 1.0, "Polyak rate of the target critics"))
    encoder_tau: float = field(
        default=0.05, metadata=rng(0.0, 1.0, "Polyak rate of the target encoder")
    )
    init_alpha: float = field(default=0.1, metadata=rng(1e-8, None, "initial temperature"))
    num_critics: int = field(default=2, metadata=rng(1, 64, "critics in the ensemble"))
    critic_subsample: int | None = field(
        default=None,
        metadata=rng(1, 64, "target min over a random subset of this many critics; null = all"),
    )
    critic_layer_norm: bool = field(
        default=False, metadata={"help": "LayerNorm after each critic hidden layer (RLPD)"}
    )
    actor_q: str = field(
        default="min",
        metadata={"choices": ["min", "mean"], "help": "ensemble reduction in the actor loss"},
    )
    backup_entropy: bool = field(
        default=True, metadata={"help": "subtract alpha log pi(a'|s') in the TD target"}
    )
    critic_steps: int = field(
        default=1,
        metadata=rng(
            1, 1024, "critic steps per update call, on minibatches split from the batch; "
            "the actor and temperature step once, on the last (RLPD's update)",
        ),
    )  # fmt: skip
    feature_dim: int = field(default=50, metadata=rng(1, None, "trunk features per camera"))
    conv_channels: int = field(default=32, metadata=rng(1, None, "channels of each conv"))
    conv_layers: int = field(default=4, metadata=rng(1, 16, "3x3 conv layers (first stride 2)"))
    pretrained_encoder: str | None = field(
        default=None,
        metadata={
            "help": "a success classifier (roborl reward train) whose conv net becomes the "
            "frozen encoder (needs conv_channels=32 conv_layers=4 and conv_strided=3, or 1 for a "
            "classifier on frames under 64 px)"
        },
    )
    conv_strided: int = field(
        default=1, metadata=rng(1, 16, "leading conv layers with stride 2 (DrQ-v2: 1)")
    )
    image_pad: int = field(
        default=4, metadata=rng(0, 64, "random-shift padding in pixels; 0 = no augmentation")
    )
    image_pad_fraction: float | None = field(
        default=None,
        metadata=rng(
            0.0, 0.5, "random-shift padding as a fraction of the image's side (rounded to "
            "pixels; replaces image_pad): the same relative shift at every image size; null = "
            "image_pad in pixels",
        ),
    )  # fmt: skip
    shift_next_obs: str = field(
        default="independent",
        metadata={
            "choices": ["independent", "same"],
            "help": "draw next obs' shift apart from obs' (DrQ, DrQ-v2, SERL) or reuse it",
        },
    )
    actor_layer_norm: bool = field(
        default=False, metadata={"help": "LayerNorm after each actor hidden layer (SERL)"}
    )
    capture: bool = field(
        default=False,
        metadata={
            "help": "record the whole update (every critic step, actor, temperature) as one CUDA graph (CUDA only; capturable Adam); "
            "elsewhere, or when capture fails, eager with a one-line warning"
        },
    )
    bc_weight: float = field(
        default=0.0,
        metadata=rng(
            0.0, None, "weight of a behaviour-cloning term on the demo and intervention rows "
            "in the actor loss (Nair et al. 2018); 0 = off (SERL, RLPD)",
        ),
    )  # fmt: skip
    bc_q_filter: bool = field(
        default=True,
        metadata={
            "help": "clone a demo action only where the critics rate it above the policy's "
            "(Nair et al. 2018's Q-filter)"
        },
    )
    log_std_min: float = field(default=-10.0, metadata={"help": "actor log-std lower bound"})
    log_std_max: float = field(default=2.0, metadata={"help": "actor log-std upper bound"})

    def __post_init__(self) -> None:
        if self.critic_subsample is not None and self.critic_subsample > self.num_critics:
            raise ConfigError(
                f"algo.critic_subsample={self.critic_subsample} exceeds algo.num_critics="
                f"{self.num_critics}; choose at most num_critics (or null for all)."
            )
        if self.conv_strided > self.conv_layers:
            raise ConfigError(
                f"algo.conv_strided={self.conv_strided} exceeds algo.conv_layers="
                f"{self.conv_layers}: at most every layer can have stride 2."
            )
        if self.batch_size < self.critic_steps:
            raise ConfigError(
                f"algo.batch_size={self.batch_size} is smaller than algo.critic_steps="
                f"{self.critic_steps}: each critic step needs at least one row."
            )


@dataclass
class RLPDConfig(DrQConfig):
    """algo=rlpd: DrQ + RLPD's LayerNorm ensemble, with RLPD's pixel config (one random
    critic in the target, no entropy backup) and demos."""

    actor_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0, "actor Adam learning rate"))
    critic_lr: float = field(
        default=3e-4, metadata=rng(0.0, 1.0, "critic + encoder Adam learning rate")
    )
    alpha_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0, "temperature Adam rate"))
    tau: float = field(default=0.005, metadata=rng(0.0, 1.0, "Polyak rate of the target critics"))
    encoder_tau: float = field(
        default=0.005, metadata=rng(0.0, 1.0, "Polyak rate of the target encoder")
    )
    num_critics: int = field(default=10, metadata=rng(1, 64, "critics in the ensemble"))
    critic_subsample: int | None = field(
        default=1,
        metadata=rng(1, 64, "target min over a random subset of this many critics; null = all"),
    )
    critic_layer_norm: bool = field(
        default=True, metadata={"help": "LayerNorm after each critic hidden layer (RLPD)"}
    )
    actor_q: str = field(
        default="mean",
        metadata={"choices": ["min", "mean"], "help": "ensemble reduction in the actor loss"},
    )
    backup_entropy: bool = field(
        default=False, metadata={"help": "subtract alpha log pi(a'|s') in the TD target"}
    )
    critic_steps: int = field(
        default=4,
        metadata=rng(
            1, 1024, "critic steps per update call, on minibatches split from the batch; "
            "the actor and temperature step once, on the last (RLPD's update)",
        ),
    )  # fmt: skip

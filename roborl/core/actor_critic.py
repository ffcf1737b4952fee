"""The one soft actor-critic building block of the SAC family.

SAC, DSAC-T, SAC-Lagrangian and WSRL (and any plugin's soft actor-critic) share the same
parts: a continuous, bounded action space mapped to tanh's [-1, 1], a tanh-Gaussian actor, a
batched critic ensemble with a Polyak target copy, and a learned temperature log(alpha).
`SoftActorCritic` builds those parts once, so the Box check raises one error type, and the
state-dict names (`actor`, `critic`, `critic_target`, `log_alpha`) and the seeded
initialisation order (actor, then critic) are the same for every member. Each algorithm keeps
its own losses and optimiser layout: that is where the members differ.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.actor_graph import ActorGraph, MethodModule, flat_actor_graph
from roborl.core.config import OffPolicyConfig, rng
from roborl.core.errors import CheckpointError, ConfigError
from roborl.core.interfaces import Algorithm, Policy
from roborl.core.nn import ActionScaler, EnsembleMLP, TanhGaussianActor, obs_tensor
from roborl.core.policies import SquashedGaussianPolicy
from roborl.core.spaces import flat_dim

ACTIVATION_CHOICES = ["relu", "gelu", "elu", "tanh", "silu"]


@dataclass
class SoftActorCriticConfig(OffPolicyConfig):
    """Fields every soft actor-critic has; members override defaults and add their own."""

    tau: float = field(default=0.005, metadata=rng(0.0, 1.0, "Polyak rate of the targets"))
    actor_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0, "actor Adam learning rate"))
    critic_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0, "critic Adam learning rate"))
    alpha_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0, "temperature Adam learning rate"))
    hidden_sizes: list[int] = field(
        default_factory=lambda: [256, 256],
        metadata=rng(1, None, "hidden widths, actor and critics"),
    )
    activation: str = field(
        default="relu", metadata={"choices": ACTIVATION_CHOICES, "help": "hidden activation"}
    )
    init_alpha: float = field(default=1.0, metadata=rng(1e-8, None, "initial temperature"))
    autotune_alpha: bool = field(
        default=True, metadata={"help": "learn alpha so the entropy tracks target_entropy"}
    )
    target_entropy: float | None = field(
        default=None, metadata={"help": "entropy the temperature aims for; null = -dim(A)"}
    )


@dataclass
class SACConfig(SoftActorCriticConfig):
    """Config of the twin-critic soft actor-critic (algo=sac), and the base of its variants
    (SAC-Lagrangian, a plugin's SAC), which then share SAC's defaults by construction."""

    num_critics: int = field(default=2, metadata=rng(1, 64, "critics in the clipped-min"))
    target_update_every: int = field(
        default=1, metadata=rng(1, None, "gradient steps between Polyak updates")
    )
    compile: bool = field(
        default=False,
        metadata={"help": "torch.compile the loss; falls back to eager with a warning"},
    )
    compile_mode: str | None = field(
        default=None, metadata={"help": "inductor mode; null = default"}
    )
    cudagraphs: bool = field(
        default=False, metadata={"help": "CUDA graphs (CUDA only; ignored with a warning)"}
    )
    capture: bool = field(
        default=False,
        metadata={
            "help": "record the whole update as one CUDA graph (CUDA only; capturable Adam); "
            "elsewhere, or when capture fails, eager with a one-line warning"
        },
    )
    fast_update: bool = field(
        default=True,
        metadata={
            "help": "algo=sac: hand-derived gradients for ReLU networks (same maths, fewer "
            "GEMMs); false = the autograd update"
        },
    )


def require_box(action_space: gym.Space, algo: str) -> gym.spaces.Box:
    """The action space as a bounded Box, or a ConfigError naming it and what is accepted.

    Tanh-squashed policies act in [-1, 1] and are rescaled to the env's bounds, so the bounds
    must be finite.
    """
    if not isinstance(action_space, gym.spaces.Box):
        raise ConfigError(
            f"algo={algo} needs a continuous action space (gymnasium.spaces.Box with finite "
            f"bounds), but the env's action space is {action_space}. Choose an env with "
            "continuous actions, or an algorithm for discrete actions."
        )
    low, high = np.asarray(action_space.low), np.asarray(action_space.high)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ConfigError(
            f"algo={algo} needs finite action bounds (its tanh policy is rescaled to them), "
            f"but the env's action space is {action_space}. Wrap the env with "
            "gymnasium.wrappers.RescaleAction or clip its actions to finite bounds."
        )
    return action_space


class SoftActorCritic(Algorithm):
    """Base class that builds the shared parts; subclasses add losses and optimisers.

    After `__init__`: `scaler`, `actor`, `critic` (`num_critics` members with
    `critic_outputs` outputs each), `critic_target` (a frozen copy), `log_alpha` (a scalar
    tensor that requires grad when `autotune_alpha`), `target_entropy`, `obs_dim`, `act_dim`.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: SoftActorCriticConfig,
        device: str | torch.device = "cpu",
        *,
        num_critics: int = 2,
        critic_outputs: int = 1,
        critic_layer_norm: bool = False,
        actor_layer_norm: bool = False,
        log_std_bounds: tuple[float, float] = (-20.0, 2.0),
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        require_box(action_space, self.name)
        cfg = config
        self.obs_dim, self.act_dim = flat_dim(observation_space), flat_dim(action_space)
        hidden = list(cfg.hidden_sizes)
        self.scaler = ActionScaler(action_space, self.device)
        self.actor = TanhGaussianActor(
            self.obs_dim, self.act_dim, hidden, cfg.activation, log_std_bounds, actor_layer_norm
        ).to(self.device)
        self.critic = EnsembleMLP(
            num_critics,
            self.obs_dim + self.act_dim,
            hidden,
            critic_outputs,
            cfg.activation,
            critic_layer_norm,
        ).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(
            math.log(cfg.init_alpha), device=self.device, requires_grad=cfg.autotune_alpha
        )
        self.target_entropy = float(
            cfg.target_entropy if cfg.target_entropy is not None else -self.act_dim
        )

    # -- acting ------------------------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = obs_tensor(obs, self.device).flatten(1)
        a = self.actor.deterministic(x) if deterministic else self.actor.sample(x)[0]
        return self.scaler.to_env(a.cpu().numpy())

    def policy(self) -> Policy:
        """The deterministic tanh(mean) policy, sharing the actor's weights."""
        return SquashedGaussianPolicy(self.actor, self.observation_space, self.action_space)

    def actor_graph(self) -> ActorGraph:
        """`policy()` as tensor ops for ONNX export: tanh(mean), scaled to the bounds."""
        return flat_actor_graph(
            MethodModule(self.actor, "deterministic"), self.observation_space, self.action_space
        )

    # -- learning helpers --------------------------------------------------------------------

    def q_values(
        self, obs: torch.Tensor, unit_actions: torch.Tensor, detach: bool = False
    ) -> torch.Tensor:
        """(num_critics, B) values of a one-output critic; actions in [-1, 1]. `detach`
        evaluates with detached critic weights (gradients reach the actions only)."""
        return self.critic(torch.cat([obs, unit_actions], -1), detach).squeeze(-1)

    # -- state -------------------------------------------------------------------------------

    def networks_state(self) -> dict[str, Any]:
        """The shared parts' state under their fixed checkpoint names."""
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
        }

    def load_networks_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of `networks_state`; a layout mismatch is a CheckpointError that names the
        config keys that decide the layout."""
        for key in ("actor", "critic", "critic_target"):
            try:
                getattr(self, key).load_state_dict(state[key])
            except RuntimeError as exc:
                detail = " ".join(str(exc).split())[:400]
                raise CheckpointError(
                    f"the checkpoint's {key!r} does not fit algo={self.name} as configured "
                    f"(hidden_sizes, activation, the number of critics and the LayerNorm "
                    f"settings decide its layout; a checkpoint written before a change of "
                    f"these needs the old values): {detail}"
                ) from None
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])

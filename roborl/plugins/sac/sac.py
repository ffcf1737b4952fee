"""Soft Actor-Critic.

Haarnoja et al., "Soft Actor-Critic Algorithms and Applications", arXiv 1812.05905 (2018):

- twin soft Q critics with target networks updated by Polyak averaging, tau = 0.005
  (Sec. 5, "clipped double-Q"; target value eq. 3 with the min of the two targets);
- tanh-squashed Gaussian actor with the change-of-variables log-likelihood (Appendix C, eq. 21);
- actor loss E[alpha log pi(a|s) - min_i Q_i(s, a)] (eq. 7 with the twin-Q min);
- automatic temperature, J(alpha) = E[-alpha (log pi(a|s) + target_entropy)] with
  target_entropy = -dim(A) (eq. 18, Sec. 5);
- Adam 3e-4 for all three losses, batch 256, two hidden layers of 256 ReLU units, gamma 0.99,
  uniform random actions for the first `learning_starts` steps (Table 1 of the paper and the
  softlearning defaults).

Implementation notes and deviations:

- Both critics are one `EnsembleMLP` (stacked weights, one batched matmul per layer).
- Critic, actor and temperature losses are computed from the same parameters and applied with
  one backward pass: the actor sees the critics through detached weights and the temperature
  loss sees a detached log-prob, so each gradient is exactly its own loss's gradient. The
  paper's reference code (softlearning) also evaluates the three losses on the same batch and
  parameters in one graph; updating the critics first (as SB3 and CleanRL do) differs only by
  one step's staleness of the actor's critic.
- The critic loss is 0.5 * sum over the two critics of the mean squared TD error (SB3's
  scaling); the paper writes each critic's loss separately, which gives the same gradients.
- log-std is clipped to [-20, 2] as in the reference code. Actions are learned in [-1, 1] and
  rescaled to the env's bounds.
- The temperature is learned as log(alpha), initialised at alpha = `init_alpha` (1.0).
- The next-state actor sample and the target are computed under `no_grad`, so the backward
  pass covers only the current-state actor forward (about 11% fewer FLOPs than one forward of
  [obs; next_obs] with a detached half). The Gaussian noise is drawn outside the loss and
  passed in, so the loss is a pure tensor function (compilable, comparable with its compiled
  self).
- Speed options (`compile`, `compile_mode`, `cudagraphs`; all off by default, chosen by
  measurement: on a 2-core CPU compiling took 30-120 s and was not faster than eager, see
  benchmarks/results/offpolicy_speed_cpu.json): `roborl.core.compile.CompiledCall`, which
  falls back to eager with a one-line warning when compilation fails. Adam is the fused kernel
  where torch has one (CPU and CUDA), else foreach. Metrics are returned as tensors, so an
  update never waits for the device.
- `n_step` > 1 (off by default) uses n-step targets from `ReplayBuffer.sample_nstep`, an
  extension beyond the paper (which uses one-step targets).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.compile import CompiledCall, fused_adam_kwargs
from roborl.core.config import rng
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.nn import (
    ActionScaler,
    EnsembleMLP,
    TanhGaussianActor,
    obs_tensor,
    polyak_update,
)
from roborl.core.policies import SquashedGaussianPolicy
from roborl.core.spaces import flat_dim


@dataclass
class SACConfig:
    gamma: float = field(default=0.99, metadata=rng(0.0, 1.0))
    tau: float = field(default=0.005, metadata=rng(0.0, 1.0, "Polyak rate of the targets"))
    actor_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    critic_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    alpha_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    batch_size: int = field(default=256, metadata=rng(1, None))
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = field(
        default="relu", metadata={"choices": ["relu", "gelu", "elu", "tanh", "silu"]}
    )
    num_critics: int = field(default=2, metadata=rng(1, 64))
    init_alpha: float = field(default=1.0, metadata=rng(1e-8, None))
    autotune_alpha: bool = True
    target_entropy: float | None = None  # None = -dim(A)
    buffer_size: int = field(default=1_000_000, metadata=rng(1, None))
    target_update_every: int = field(default=1, metadata=rng(1, None))
    # n-step returns (1 = the paper's one-step target); the runner samples them via the buffer
    n_step: int = field(default=1, metadata=rng(1, 100))
    # torch.compile of the loss (forward + backward graphs); falls back to eager with a warning
    compile: bool = False
    compile_mode: str | None = None  # None = inductor's default; "max-autotune-no-cudagraphs"...
    cudagraphs: bool = False  # CUDA only ("reduce-overhead"); ignored with a warning elsewhere


class SAC(Algorithm):
    name = "sac"
    Config = SACConfig
    loop = "offpolicy"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: SACConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"SAC needs a continuous (Box) action space, got {action_space}")
        cfg = config
        obs_dim, act_dim = flat_dim(observation_space), flat_dim(action_space)
        self.act_dim = act_dim
        self.scaler = ActionScaler(action_space, self.device)
        self.actor = TanhGaussianActor(obs_dim, act_dim, list(cfg.hidden_sizes), cfg.activation)
        self.critic = EnsembleMLP(
            cfg.num_critics, obs_dim + act_dim, cfg.hidden_sizes, 1, cfg.activation
        )
        self.actor.to(self.device)
        self.critic.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(
            float(np.log(cfg.init_alpha)), device=self.device, requires_grad=cfg.autotune_alpha
        )
        self.target_entropy = float(
            cfg.target_entropy if cfg.target_entropy is not None else -act_dim
        )
        adam = fused_adam_kwargs(self.device)
        groups = [
            {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
            {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
        ]
        if cfg.autotune_alpha:
            groups.append({"params": [self.log_alpha], "lr": cfg.alpha_lr})
        # One Adam with per-network learning rates: identical to three Adams (Adam is
        # per-parameter), but one fused step.
        self.optimizer = torch.optim.Adam(groups, **adam)
        self.updates = 0
        self._gamma = torch.tensor(cfg.gamma, device=self.device)
        self._params = list(self.critic.parameters())
        self._target_params = list(self.critic_target.parameters())
        self._loss_call = CompiledCall(
            self._losses,
            enabled=cfg.compile,
            mode=cfg.compile_mode,
            cudagraphs=cfg.cudagraphs,
            device=self.device,
            name="sac",
        )

    # -- acting ------------------------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = obs_tensor(obs, self.device).flatten(1)
        a = self.actor.deterministic(x) if deterministic else self.actor.sample(x)[0]
        return self.scaler.to_env(a.cpu().numpy())

    def policy(self) -> Policy:
        return SquashedGaussianPolicy(self.actor, self.observation_space, self.action_space)

    # -- learning ----------------------------------------------------------------------------

    def q_values(
        self, obs: torch.Tensor, unit_actions: torch.Tensor, detach: bool = False
    ) -> torch.Tensor:
        """(num_critics, B) Q-values; actions in [-1, 1]."""
        return self.critic(torch.cat([obs, unit_actions], -1), detach).squeeze(-1)

    def _losses(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        discount: torch.Tensor,
        noise: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Summed critic + actor (+ temperature) loss and detached metrics; a pure tensor
        function (the actor's noise comes in as `noise`, (2B, A)), so it can be compiled and
        compared with its compiled self."""
        b = obs.shape[0]
        alpha_t = self.log_alpha.exp()
        alpha = alpha_t.detach()
        pi_a, logp = self.actor.sample(obs, noise[:b])
        with torch.no_grad():  # the target needs no graph: no backward through next-state work
            next_a, next_logp = self.actor.sample(next_obs, noise[b:])
            q_next = self.critic_target(torch.cat([next_obs, next_a], -1)).squeeze(-1).min(0).values
            target = rewards + discount * (1.0 - terminated) * (q_next - alpha * next_logp)

        q = self.q_values(obs, actions)
        critic_loss = 0.5 * (q - target).pow(2).mean(-1).sum()
        q_pi = self.q_values(obs, pi_a, detach=True).min(0).values
        actor_loss = (alpha * logp - q_pi).mean()
        loss = critic_loss + actor_loss
        if self.config.autotune_alpha:
            loss = loss - (alpha_t * (logp.detach() + self.target_entropy)).mean()
        metrics = {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": alpha,
            "entropy": -logp.detach().mean(),
            "q_mean": q.detach().mean(),
        }
        return loss, metrics

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One gradient step on all three losses; metrics stay tensors (no device sync)."""
        cfg = self.config
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        actions = self.scaler.to_unit(batch.actions)
        discount = self._gamma if batch.discount is None else batch.discount
        noise = torch.randn(2 * obs.shape[0], self.act_dim, device=self.device)
        self.optimizer.zero_grad(set_to_none=True)
        _, metrics = self._loss_call(
            obs, actions, batch.rewards, next_obs, batch.terminated, discount, noise,
            after=self._backward, reset=self._zero_grad,
        )  # fmt: skip
        self.optimizer.step()
        self.updates += 1
        if self.updates % cfg.target_update_every == 0:
            polyak_update(self._target_params, self._params, cfg.tau)
        return metrics

    @staticmethod
    def _backward(out: tuple[torch.Tensor, Any]) -> None:
        out[0].backward()

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state.get("updates", 0))

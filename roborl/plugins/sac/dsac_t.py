"""DSAC-T: Distributional Soft Actor-Critic with Three Refinements.

Duan et al., "Distributional Soft Actor-Critic with Three Refinements", IEEE TPAMI 2025,
arXiv 2310.05858 (DSAC-v2), and the defaults of the official implementation
(Jingliang-Duan/DSAC-v2, `dsac_v2.py`, "form5" critic loss). Where each piece lives:

- Gaussian return distributions Z(s, a) ~ N(mean, std^2) for two critics, with target
  critics and a target actor: `DSACT.__init__` (critic = one `EnsembleMLP` with 2 outputs per
  member: mean and log-std, log-std clamped to [LOG_STD_MIN, LOG_STD_MAX]).
- Refinement 1, expected value substitution: the mean is regressed on the *expected* target
  y = r + gamma (1-d) (min_i mean'_i - alpha log pi') rather than on a sampled return:
  `dsac_t_targets` (`target`) and the Huber term of `dsac_t_critic_loss`.
- Refinement 2, twin value distribution learning: the next-state distribution comes from the
  critic with the smaller next mean, and the sampled target draws from it with the standard
  normal noise clipped to +-3: `dsac_t_targets` (`q_next`, `q_next_sample`).
- Refinement 3, variance-based critic gradient adjustment: the sampled target is bounded to
  mean +- 3 sigma_bar, where sigma_bar is a moving average (rate `tau_b`) of the batch-mean std,
  and each sample's loss is weighted by clip(sigma_bar^2 / (std^2 + 0.1), 0.1, 10):
  `dsac_t_targets` (`target_bound`) and `dsac_t_critic_loss` (`ratio`).
- Critic loss (official form5), per critic, averaged over the batch:
  ratio * (huber(mean, y, 50) + std * (std_d^2 - huber(mean_d, y_bound, 50)) / (std_d + 0.1)),
  with `_d` = detached; its gradient moves the mean towards y and the std towards the spread
  of the bounded sampled targets.
- Actor, temperature and target networks updated every `delay_update` = 2 critic steps;
  actor loss E[alpha log pi - min_i mean_i(s, a)]; temperature loss
  -log_alpha (log pi + target_entropy) with target entropy -dim(A); Polyak tau = 0.005.
- Defaults: MLP 256x3 with GELU, lr 1e-4 (actor, critic), 3e-4 (alpha), batch 256, gamma 0.99.

Deviations: the official code computes std = softplus(raw); here the critic outputs a log-std
clamped to [-5, 4] (the issue's "log-std bounded"), which is equally positive and keeps the
std away from 0. The two critics run as one batched ensemble. Everything else follows the
official code.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch.nn import functional as F

from roborl.core.config import rng
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.nn import ActionScaler, EnsembleMLP, obs_tensor, polyak_update
from roborl.core.spaces import flat_dim
from roborl.plugins.sac.sac import SquashedGaussianPolicy, TanhGaussianActor

LOG_STD_MIN, LOG_STD_MAX = -5.0, 4.0
BIAS = 0.1
HUBER_DELTA = 50.0
TD_BOUND = 3.0


@dataclass
class DSACTConfig:
    gamma: float = field(default=0.99, metadata=rng(0.0, 1.0))
    tau: float = field(default=0.005, metadata=rng(0.0, 1.0))
    tau_b: float = field(default=0.005, metadata=rng(0.0, 1.0, "rate of the sigma_bar average"))
    actor_lr: float = field(default=1e-4, metadata=rng(0.0, 1.0))
    critic_lr: float = field(default=1e-4, metadata=rng(0.0, 1.0))
    alpha_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    batch_size: int = field(default=256, metadata=rng(1, None))
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256, 256])
    activation: str = field(default="gelu", metadata={"choices": ["gelu", "relu", "elu", "silu"]})
    init_alpha: float = field(default=1.0, metadata=rng(1e-8, None))
    autotune_alpha: bool = True
    target_entropy: float | None = None
    delay_update: int = field(default=2, metadata=rng(1, None))
    buffer_size: int = field(default=1_000_000, metadata=rng(1, None))


def dsac_t_targets(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    discount: float | torch.Tensor,
    next_mean: torch.Tensor,
    next_std: torch.Tensor,
    next_logp: torch.Tensor,
    alpha: float | torch.Tensor,
    mean: torch.Tensor,
    sigma_bar: torch.Tensor,
    noise: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Expected target, sampled target and its +-3 sigma_bar bound (refinements 1-3).

    next_mean/next_std/noise: (2, B) from the two target critics; mean: (2, B) current means;
    sigma_bar: (2,) moving averages. Returns tensors of shape (B,) or (2, B).
    """
    lower = next_mean[0] <= next_mean[1]
    q_next = torch.where(lower, next_mean[0], next_mean[1])
    samples = next_mean + noise.clamp(-TD_BOUND, TD_BOUND) * next_std
    q_next_sample = torch.where(lower, samples[0], samples[1])
    cont = discount * (1.0 - terminated)
    target = rewards + cont * (q_next - alpha * next_logp)
    target_sample = rewards + cont * (q_next_sample - alpha * next_logp)
    bound = TD_BOUND * sigma_bar[:, None]
    target_bound = mean + (target_sample - mean).clamp(-bound, bound)
    return {
        "target": target,
        "target_sample": target_sample,
        "target_bound": target_bound,
        "q_next": q_next,
    }


def dsac_t_critic_loss(
    mean: torch.Tensor,
    std: torch.Tensor,
    sigma_bar: torch.Tensor,
    target: torch.Tensor,
    target_bound: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Official form5 loss summed over the critics; returns (loss, ratio (2, B))."""
    std_d = std.detach().clamp(min=0.0)
    ratio = (sigma_bar[:, None] ** 2 / (std_d**2 + BIAS)).clamp(0.1, 10.0)
    mean_term = F.huber_loss(mean, target.expand_as(mean), delta=HUBER_DELTA, reduction="none")
    spread = F.huber_loss(mean.detach(), target_bound, delta=HUBER_DELTA, reduction="none")
    std_term = std * (std_d**2 - spread) / (std_d + BIAS)
    return (ratio * (mean_term + std_term)).mean(-1).sum(), ratio


class DSACT(Algorithm):
    name = "dsac_t"
    Config = DSACTConfig
    loop = "offpolicy"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DSACTConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"DSAC-T needs a continuous (Box) action space, got {action_space}")
        cfg = config
        obs_dim, act_dim = flat_dim(observation_space), flat_dim(action_space)
        self.scaler = ActionScaler(action_space, self.device)
        hidden = list(cfg.hidden_sizes)
        self.actor = TanhGaussianActor(obs_dim, act_dim, hidden, cfg.activation).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = EnsembleMLP(2, obs_dim + act_dim, hidden, 2, cfg.activation).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(
            float(np.log(cfg.init_alpha)), device=self.device, requires_grad=cfg.autotune_alpha
        )
        self.target_entropy = float(
            cfg.target_entropy if cfg.target_entropy is not None else -act_dim
        )
        adam = {"foreach": True} if self.device.type == "cpu" else {"fused": True}
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr, **adam)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr, **adam)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr)
        self.sigma_bar = torch.full((2,), -1.0, device=self.device)  # < 0: not yet initialised
        self.updates = 0

    def distribution(self, obs: torch.Tensor, unit_actions: torch.Tensor, target: bool = False):
        """(mean, std), each (2, B)."""
        net = self.critic_target if target else self.critic
        out = net(torch.cat([obs, unit_actions], -1))
        return out[..., 0], out[..., 1].clamp(LOG_STD_MIN, LOG_STD_MAX).exp()

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = obs_tensor(obs, self.device).flatten(1)
        a = self.actor.deterministic(x) if deterministic else self.actor.sample(x)[0]
        return self.scaler.to_env(a.cpu().numpy())

    def policy(self) -> Policy:
        return SquashedGaussianPolicy(self.actor, self.observation_space, self.action_space)

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        actions = self.scaler.to_unit(batch.actions)
        alpha = self.log_alpha.exp().detach()
        discount = cfg.gamma if batch.discount is None else batch.discount

        mean, std = self.distribution(obs, actions)
        with torch.no_grad():
            batch_std = std.detach().mean(-1)
            if bool((self.sigma_bar < 0).any()):
                self.sigma_bar.copy_(batch_std)
            else:
                self.sigma_bar.lerp_(batch_std, cfg.tau_b)
            next_a, next_logp = self.actor_target.sample(next_obs)
            next_mean, next_std = self.distribution(next_obs, next_a, target=True)
            targets = dsac_t_targets(
                batch.rewards, batch.terminated, discount, next_mean, next_std, next_logp,
                alpha, mean.detach(), self.sigma_bar, torch.randn_like(next_mean),
            )  # fmt: skip
        critic_loss, ratio = dsac_t_critic_loss(
            mean, std, self.sigma_bar, targets["target"], targets["target_bound"]
        )
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        self.updates += 1
        metrics: dict[str, Any] = {
            "critic_loss": critic_loss.detach(),
            "q_mean": mean.detach().mean(),
            "q_std": std.detach().mean(),
            "sigma_bar": self.sigma_bar.mean(),
            "weight_mean": ratio.mean(),
            "alpha": alpha,
        }
        if self.updates % cfg.delay_update == 0:
            pi_a, logp = self.actor.sample(obs)
            out = self.critic(torch.cat([obs, pi_a], -1), detach=True)
            actor_loss = (alpha * logp - out[..., 0].min(0).values).mean()
            self.actor_opt.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_opt.step()
            if cfg.autotune_alpha:
                alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
                self.alpha_opt.zero_grad(set_to_none=True)
                alpha_loss.backward()
                self.alpha_opt.step()
            polyak_update(self.critic_target.parameters(), self.critic.parameters(), cfg.tau)
            polyak_update(self.actor_target.parameters(), self.actor.parameters(), cfg.tau)
            metrics["actor_loss"] = actor_loss.detach()
            metrics["entropy"] = -logp.detach().mean()
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "sigma_bar": self.sigma_bar.clone(),
            "critic_opt": self.critic_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key in ("actor", "actor_target", "critic", "critic_target"):
            getattr(self, key).load_state_dict(state[key])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
            self.sigma_bar.copy_(state["sigma_bar"])
        for key in ("critic_opt", "actor_opt", "alpha_opt"):
            if key in state:
                getattr(self, key).load_state_dict(state[key])
        self.updates = int(state.get("updates", 0))

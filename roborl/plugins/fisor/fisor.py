"""FISOR: Safe Offline RL with a Feasibility-Guided Diffusion Model.

Zheng, Li, Yu, Liu, Xu, Yan, Zhan (ICLR 2024, arXiv 2401.10700), following the paper and the
defaults of its official code (JAX). Three parts, trained together on the offline data:

1. Feasibility (Hamilton-Jacobi reachability, Sec. 3.2): with h(s) = +1 where a step has cost
   > 0 and -1 otherwise (the official code's cost relabelling; h > 0 is a violation),
       Q_h(s,a) <- (1-gamma) h(s) + gamma max(h(s), V_h(s'))            (eq. 8, discounted HJ)
       L_V_h = E[ |tau_h - 1(Q_h - V_h > 0)| (Q_h - V_h)^2 ],  tau_h = 0.9   (reversed expectile)
   so V_h tracks the *lowest* in-data Q_h (the best feasible action). Q_h is an ensemble of 2,
   the target takes the max (pessimistic for safety). Feasible region: V_h(s) <= 0.
2. Reward values (IQL, Kostrikov et al. 2021): V_r with expectile 0.7 on min_i Q_r,i;
   Q_r <- r + gamma (1 - done) V_r(s').
3. Policy extraction as weighted diffusion behaviour cloning (Sec. 3.3, eq. 13-15):
   DDPM with T = 5 steps (VP/cosine schedule), noise-prediction loss weighted by
       w = 1[V_h(s) <= 0] 1[Q_h(s,a) <= 0] min(exp(3 A_r(s,a)), 100)
         + 1[V_h(s) > 0] min(exp(5 (V_h(s) - Q_h(s,a))), 150)
   (energy-guided: no time-dependent classifier is trained).
Action selection: draw 16 actions from the diffusion model, keep the one with the lowest Q_h.

Deviations: PyTorch; networks are MLPs (official actor: an MLP noise model with a Fourier time
embedding, which is what is used here too) of size `hidden_sizes`; the reward-scale
normalisation follows roborl's IQL (1000 / return range) rather than the official per-task
constants; training steps are set by the caller (paper: 1e6).
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
from torch import nn

from roborl.core.config import rng
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.nn import ActionScaler, EnsembleMLP, mlp, obs_tensor, polyak_update
from roborl.core.spaces import flat_dim


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """IQL's asymmetric L2: mean |tau - 1(u < 0)| u^2, diff = target - prediction."""
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def reversed_expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """FISOR's V_h loss on diff = Q_h - V_h: weight (1 - tau) when Q_h > V_h, tau otherwise, so
    with tau = 0.9 V_h approaches the minimum (safest) in-data Q_h."""
    weight = torch.where(diff > 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def cosine_beta_schedule(T: int, s: float = 0.008) -> torch.Tensor:
    """Nichol & Dhariwal's cosine schedule (used by the official code's VP diffusion)."""
    steps = torch.arange(T + 1, dtype=torch.float64)
    f = torch.cos(((steps / T) + s) / (1 + s) * math.pi / 2) ** 2
    alphas_bar = f / f[0]
    betas = 1 - alphas_bar[1:] / alphas_bar[:-1]
    return betas.clamp(1e-4, 0.999).float()


class FourierTime(nn.Module):
    """Random Fourier features of the diffusion step (as the official noise model)."""

    def __init__(self, dim: int = 16, scale: float = 1.0) -> None:
        super().__init__()
        self.register_buffer("w", torch.randn(dim // 2) * scale)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        x = t[:, None].float() * self.w[None] * 2 * math.pi
        return torch.cat([x.sin(), x.cos()], -1)


class DiffusionPolicy(nn.Module):
    """DDPM over actions in [-1, 1] conditioned on the observation; predicts the noise."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: list[int], T: int = 5, time_dim: int = 16
    ) -> None:
        super().__init__()
        self.act_dim, self.T = act_dim, T
        self.time = nn.Sequential(
            FourierTime(time_dim), nn.Linear(time_dim, 2 * time_dim), nn.Mish()
        )
        self.net = mlp(obs_dim + act_dim + 2 * time_dim, hidden, act_dim, "relu")
        betas = cosine_beta_schedule(T)
        alphas = 1 - betas
        self.register_buffer("betas", betas)
        self.register_buffer("alphas", alphas)
        self.register_buffer("alphas_bar", torch.cumprod(alphas, 0))

    def eps(self, obs: torch.Tensor, a_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, a_t, self.time(t)], -1))

    def loss(self, obs: torch.Tensor, actions: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Weighted noise-prediction loss (FISOR eq. 15 with w from the value functions)."""
        t = torch.randint(0, self.T, (obs.shape[0],), device=obs.device)
        noise = torch.randn_like(actions)
        ab = self.alphas_bar[t][:, None]
        a_t = ab.sqrt() * actions + (1 - ab).sqrt() * noise
        per = (self.eps(obs, a_t, t) - noise).pow(2).mean(-1)
        return (weight * per).mean()

    @torch.no_grad()
    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Ancestral DDPM sampling, clipping the action to [-1, 1] at every step."""
        B = obs.shape[0]
        a = torch.randn(B, self.act_dim, device=obs.device, generator=generator)
        for i in reversed(range(self.T)):
            t = torch.full((B,), i, device=obs.device, dtype=torch.long)
            eps = self.eps(obs, a, t)
            alpha, ab, beta = self.alphas[i], self.alphas_bar[i], self.betas[i]
            mean = (a - beta / (1 - ab).sqrt() * eps) / alpha.sqrt()
            if i > 0:
                var = beta * (1 - self.alphas_bar[i - 1]) / (1 - ab)
                z = torch.randn(a.shape, device=obs.device, generator=generator)
                a = mean + var.sqrt() * z
            else:
                a = mean
            a = a.clamp(-1.0, 1.0)
        return a


@dataclass
class FISORConfig:
    gamma: float = field(default=0.99, metadata=rng(0.0, 1.0))
    tau: float = field(default=0.005, metadata=rng(0.0, 1.0, "Polyak rate of the targets"))
    reward_expectile: float = field(default=0.7, metadata=rng(0.0, 1.0))
    cost_expectile: float = field(default=0.9, metadata=rng(0.0, 1.0, "reversed, for V_h"))
    reward_temperature: float = field(default=3.0, metadata=rng(0.0, None))
    cost_temperature: float = field(default=5.0, metadata=rng(0.0, None))
    reward_weight_clip: float = field(default=100.0, metadata=rng(0.0, None))
    cost_weight_clip: float = field(default=150.0, metadata=rng(0.0, None))
    diffusion_steps: int = field(default=5, metadata=rng(1, 1000))
    num_samples: int = field(default=16, metadata=rng(1, 1024, "candidates at action time"))
    actor_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    critic_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    batch_size: int = field(default=256, metadata=rng(1, None))
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    actor_hidden_sizes: list[int] = field(default_factory=lambda: [256, 256, 256])
    num_critics: int = field(default=2, metadata=rng(1, 64))
    normalize_reward: bool = True


class FISORPolicy(Policy):
    """Deployable FISOR policy: 16 diffusion samples, the one with the lowest Q_h."""

    def __init__(self, algo: FISOR) -> None:
        self.algo = algo
        self.observation_space = algo.observation_space
        self.action_space = algo.action_space

    def act(self, obs: np.ndarray) -> np.ndarray:
        return self.algo.act(obs, deterministic=True)


class FISOR(Algorithm):
    """FISOR; see the module docstring for the paper's equations and the deviations."""

    name = "fisor"
    Config = FISORConfig
    loop = "offline"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: FISORConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(f"fisor needs a Box action space, got {action_space}")
        cfg = config
        obs_dim, act_dim = flat_dim(observation_space), flat_dim(action_space)
        hidden = list(cfg.hidden_sizes)
        self.scaler = ActionScaler(action_space, self.device)
        self.q_r = EnsembleMLP(cfg.num_critics, obs_dim + act_dim, hidden, 1, "relu").to(
            self.device
        )
        self.v_r = EnsembleMLP(1, obs_dim, hidden, 1, "relu").to(self.device)
        self.q_h = EnsembleMLP(cfg.num_critics, obs_dim + act_dim, hidden, 1, "relu").to(
            self.device
        )
        self.v_h = EnsembleMLP(1, obs_dim, hidden, 1, "relu").to(self.device)
        self.q_r_target = copy.deepcopy(self.q_r).requires_grad_(False)
        self.q_h_target = copy.deepcopy(self.q_h).requires_grad_(False)
        self.actor = DiffusionPolicy(
            obs_dim, act_dim, list(cfg.actor_hidden_sizes), cfg.diffusion_steps
        )
        self.actor.to(self.device)
        self.critic_opt = torch.optim.Adam(
            [*self.q_r.parameters(), *self.q_h.parameters()], lr=cfg.critic_lr
        )
        self.value_opt = torch.optim.Adam(
            [*self.v_r.parameters(), *self.v_h.parameters()], lr=cfg.critic_lr
        )
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.reward_scale = torch.ones((), device=self.device)
        self.updates = 0

    def prepare(self, dataset: Any) -> None:
        """Reward scale 1000 / (max - min episode return), as roborl's IQL."""
        if self.config.normalize_reward:
            rets = dataset.episode_returns()
            spread = float(rets.max() - rets.min())
            self.reward_scale.fill_(1000.0 / spread if spread > 1e-8 else 1.0)

    # -- values ----------------------------------------------------------------------------
    def qh_values(self, obs: torch.Tensor, actions_unit: torch.Tensor) -> torch.Tensor:
        """Max over the Q_h ensemble (pessimistic feasibility), shape (B,)."""
        return self.q_h(torch.cat([obs, actions_unit], -1)).max(0).values.squeeze(-1)

    def vh_values(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v_h(obs)[0, :, 0]

    # -- acting ----------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = obs_tensor(obs, self.device).flatten(1)
        B, N = x.shape[0], self.config.num_samples
        xr = x.repeat_interleave(N, 0)
        a = self.actor.sample(xr)
        qh = self.qh_values(xr, a).view(B, N)
        best = qh.argmin(1)
        a = a.view(B, N, -1)[torch.arange(B, device=self.device), best]
        return self.scaler.to_env(a.cpu().numpy())

    def policy(self) -> Policy:
        return FISORPolicy(self)

    # -- learning --------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        if batch.costs is None:
            raise ValueError("fisor needs a dataset with per-step costs (Batch.costs is None)")
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        actions = self.scaler.to_unit(batch.actions).clamp(-1.0, 1.0)
        rewards = batch.rewards * self.reward_scale
        h = torch.where(batch.costs > 0, 1.0, -1.0)
        done = batch.terminated
        sa = torch.cat([obs, actions], -1)

        # values: V_r expectile on min Q_r target, V_h reversed expectile on max Q_h target
        with torch.no_grad():
            q_r_t = self.q_r_target(sa).min(0).values.squeeze(-1)
            q_h_t = self.q_h_target(sa).max(0).values.squeeze(-1)
        v_r = self.v_r(obs)[0, :, 0]
        v_h = self.v_h(obs)[0, :, 0]
        value_loss = expectile_loss(q_r_t - v_r, cfg.reward_expectile) + reversed_expectile_loss(
            q_h_t - v_h, cfg.cost_expectile
        )
        self.value_opt.zero_grad(set_to_none=True)
        value_loss.backward()
        self.value_opt.step()

        # critics
        with torch.no_grad():
            nv_r = self.v_r(next_obs)[0, :, 0]
            nv_h = self.v_h(next_obs)[0, :, 0]
            y_r = rewards + cfg.gamma * (1.0 - done) * nv_r
            y_h_cont = (1 - cfg.gamma) * h + cfg.gamma * torch.maximum(h, nv_h)
            y_h = torch.where(done > 0, h, y_h_cont)
        q_r = self.q_r(sa).squeeze(-1)
        q_h = self.q_h(sa).squeeze(-1)
        critic_loss = (q_r - y_r[None]).pow(2).mean() + (q_h - y_h[None]).pow(2).mean()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        # actor: feasibility-guided weighted diffusion BC
        with torch.no_grad():
            adv = q_r_t - self.v_r(obs)[0, :, 0]
            vh = self.v_h(obs)[0, :, 0]
            feasible = vh <= 0
            w_r = (cfg.reward_temperature * adv).exp().clamp(max=cfg.reward_weight_clip)
            w_r = w_r * (q_h_t <= 0).float()
            w_c = (cfg.cost_temperature * (vh - q_h_t)).exp().clamp(max=cfg.cost_weight_clip)
            weight = torch.where(feasible, w_r, w_c)
        actor_loss = self.actor.loss(obs, actions, weight)
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        polyak_update(self.q_r_target.parameters(), self.q_r.parameters(), cfg.tau)
        polyak_update(self.q_h_target.parameters(), self.q_h.parameters(), cfg.tau)
        self.updates += 1
        return {
            "value_loss": float(value_loss.detach()),
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "feasible_frac": float(feasible.float().mean()),
            "v_h": float(vh.mean()),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "q_r": self.q_r.state_dict(),
            "v_r": self.v_r.state_dict(),
            "q_h": self.q_h.state_dict(),
            "v_h": self.v_h.state_dict(),
            "q_r_target": self.q_r_target.state_dict(),
            "q_h_target": self.q_h_target.state_dict(),
            "actor": self.actor.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "value_opt": self.value_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "reward_scale": self.reward_scale,
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for k in ("q_r", "v_r", "q_h", "v_h", "q_r_target", "q_h_target", "actor"):
            getattr(self, k).load_state_dict(state[k])
        for k in ("critic_opt", "value_opt", "actor_opt"):
            getattr(self, k).load_state_dict(state[k])
        self.reward_scale.copy_(state["reward_scale"])
        self.updates = int(state["updates"])

"""FISOR: Safe Offline RL with a Feasibility-Guided Diffusion Model.

Zheng, Li, Yu, Yang, Li, Zhan, Liu (ICLR 2024, arXiv 2401.10700), checked line by line against
the official JAX code (github.com/ZhengYinan-AIR/FISOR, ``jaxrl5/agents/fisor/fisor.py`` and
``configs/train_config.py``). Three parts, trained together on the offline data:

1. Feasibility (Hamilton-Jacobi reachability, Sec. 3.2). Costs are relabelled
   h(s) = +cost_scale (25) where a step has cost > 0 and -1 otherwise (official
   ``DSRLDataset(critic_type='hj', cost_scale=25)``; h > 0 is a violation), then
       Q_h(s,a) <- (1-gamma) h(s) + gamma max(h(s), V_h(s'))   (h(s) at terminals; eq. 8)
       L_V_h = E[ |tau_h - 1(Q_h - V_h > 0)| (Q_h - V_h)^2 ],  tau_h = 0.9   (reversed expectile)
   so V_h tracks the *lowest* in-data Q_h (the best feasible action). Q_h is an ensemble of 2,
   its target taking the max (pessimistic for safety). Feasible region: V_h(s) <= 0.
2. Reward values (IQL, Kostrikov et al. 2021): V_r with expectile 0.9 (the official config's
   ``critic_hyperparam``) on min_i of the target Q_r,i; Q_r <- r + gamma (1 - done) V_r(s').
   Rewards are scaled by T / (R_max - R_min) (official ``normalize_returns``).
3. Policy extraction as weighted diffusion behaviour cloning (Sec. 3.3, eq. 13-15): DDPM,
   T = 5, VP beta schedule, noise-prediction loss (summed over action dims) weighted by
       w = 1[V_h(s) <= 0] 1[Q_h(s,a) <= 0] clip(exp(3 (Q_r(s,a) - V_r(s))), 0, 100)
         + 1[V_h(s) > 0] clip(exp(5 (V_h(s) - Q_h(s,a))), 0, 150)
   with Q_r, Q_h from the target critics (energy-guided: no time-dependent classifier).
   The infeasible branch is clipped below at 0 as the official code (fisor.py:479, since its
   commit 6164990; its first commit clipped at 1, which clones every action of an infeasible
   state, however unsafe, at weight >= 1).
   Noise model: the official ``ln_resnet`` (IDQL's MLPResNet: 3 blocks of width 256, 4x
   expansion, LayerNorm, dropout 0.1, Mish) with learnable Fourier time features -> MLP(128,
   128); Adam 3e-4 with cosine decay over 3e6 steps; sampling uses an EMA of the actor
   (rate 0.001) and the ancestral sampler with variance beta_t, clipped to [-1, 1] each step.
Action selection: 16 diffusion samples, keep the one with the lowest (max-ensemble target) Q_h.
Order per step as the official ``update``: actor, V_r, Q_r, V_h, Q_h; Polyak 0.005; gamma 0.99.

Remaining deviations (everything else matches the official defaults):
- Batches: one actor step on the same `batch_size` (256) batch as the critics; the official
  code takes two actor steps on two halves of a 2048 batch per critic step (256). On a CPU
  budget this is 8x cheaper per update; raise `batch_size` to get closer.
- Timeouts: the official code treats time-limit truncations as terminal for both Q_r and Q_h
  (``masks = 1 - (terminals | timeouts)``); here only true terminals stop bootstrapping, as
  the rest of roborl does (Batch.terminated).
- Reward scale: T is the longest dataset episode and R_max, R_min the dataset's episode
  returns; the official code uses the env's time limit and DSRL's reference returns (the same
  where the data holds a timed-out episode and the references come from that data).
- Dropout in the noise model is applied only while training (as the official ``training``
  flag); the EMA actor samples without it.
- Paper-scale training is 1e6 steps; the number of steps is the caller's choice.
- Note (not a deviation): the reversed expectile only approximates the min over in-data
  actions. With h = +25 for violations and tau_h = 0.9, a state where half the data's actions
  are safe and half lead to violation can get V_h > 0 (e.g. a gamma = 0.9 chain: V_h = +1.1);
  `cost_scale=1` or a higher `cost_expectile` makes such states feasible.
- Note (not a deviation): h is flat (= cost_scale) inside the violation set, so Q_h ranks no
  way out of a hazard above staying in it: FISOR avoids entering, it does not minimise time
  inside. And its safety at evaluation rests on Q_h generalising to the policy's own states:
  on `SafePointGoal-v0` with 40 scripted episodes, Q_h flags 96% of the behaviour data's
  states within 10 steps of a hazard on unseen layouts, yet at 7 of the 8 hazard entries of
  trained policies we traced its chosen sample had Q_h between -1.1 and -0.07 ("safe") one
  step before. That, not the update, is where a trained FISOR's cost comes from there.
- Official per-task overrides (e.g. its PointRobot: temperatures 2/5, N = 8) are not applied:
  roborl's tasks are not those tasks, so the general defaults are used.
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

from roborl.core.actor_critic import require_box
from roborl.core.actor_graph import ActorGraph, GraphInput, ScaleToBounds, observation_inputs
from roborl.core.config import rng
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.nn import ActionScaler, EnsembleMLP, obs_tensor, polyak_update
from roborl.core.policies import AlgorithmPolicy
from roborl.core.spaces import flat_dim
from roborl.plugins.fisor.diffusion import DiffusionPolicy


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """IQL's asymmetric L2: mean |tau - 1(u < 0)| u^2, diff = target - prediction."""
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def reversed_expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """FISOR's V_h loss on diff = Q_h - V_h: weight (1 - tau) when Q_h > V_h, tau otherwise, so
    with tau = 0.9 V_h approaches the minimum (safest) in-data Q_h."""
    weight = torch.where(diff > 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


class SampleAndSelect(nn.Module):
    """FISOR's action selection as tensor ops: N diffusion samples per observation from the
    given noise, keep the one with the lowest max-ensemble Q_h (`FISOR.act`), scale to the
    bounds. Inputs: obs (B, *obs_shape) and noise (B, N, T, |A|)."""

    def __init__(
        self, actor: DiffusionPolicy, q_h: EnsembleMLP, num_samples: int, action_space: gym.Space
    ) -> None:
        super().__init__()
        self.actor, self.q_h, self.num_samples = actor, q_h, num_samples
        self.to_env = ScaleToBounds(action_space)

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1)
        B, N, A = x.shape[0], self.num_samples, self.actor.act_dim
        xr = x.unsqueeze(1).expand(B, N, x.shape[1]).reshape(B * N, x.shape[1])
        a = self.actor.denoise(xr, noise.reshape(B * N, self.actor.T, A))
        qh = self.q_h(torch.cat([xr, a], -1)).max(0).values.reshape(B, N)
        best = qh.argmin(1)
        chosen = torch.gather(a.reshape(B, N, A), 1, best.reshape(B, 1, 1).expand(B, 1, A))
        return self.to_env(chosen.squeeze(1))


@dataclass
class FISORConfig:
    gamma: float = field(default=0.99, metadata=rng(0.0, 1.0))
    tau: float = field(default=0.005, metadata=rng(0.0, 1.0, "Polyak rate of the targets"))
    reward_expectile: float = field(default=0.9, metadata=rng(0.0, 1.0))
    cost_expectile: float = field(default=0.9, metadata=rng(0.0, 1.0, "reversed, for V_h"))
    cost_scale: float = field(default=25.0, metadata=rng(0.0, None, "h of a violating step"))
    reward_temperature: float = field(default=3.0, metadata=rng(0.0, None))
    cost_temperature: float = field(default=5.0, metadata=rng(0.0, None))
    reward_weight_clip: float = field(default=100.0, metadata=rng(0.0, None))
    cost_weight_clip: float = field(default=150.0, metadata=rng(0.0, None))
    diffusion_steps: int = field(default=5, metadata=rng(1, 1000))
    beta_schedule: str = field(default="vp", metadata={"choices": ["vp", "cosine"]})
    num_samples: int = field(default=16, metadata=rng(1, 1024, "candidates at action time"))
    actor_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    actor_decay_steps: int = field(default=3_000_000, metadata=rng(0, None, "cosine lr decay"))
    actor_tau: float = field(default=0.001, metadata=rng(0.0, 1.0, "EMA of the sampling actor"))
    actor_width: int = field(default=256, metadata=rng(1, None))
    actor_blocks: int = field(default=3, metadata=rng(0, 64))
    actor_dropout: float = field(default=0.1, metadata=rng(0.0, 1.0))
    critic_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    batch_size: int = field(default=256, metadata=rng(1, None))
    hidden_sizes: list[int] = field(
        default_factory=lambda: [256, 256], metadata=rng(1, None, "hidden widths")
    )
    num_critics: int = field(default=2, metadata=rng(1, 64))
    normalize_reward: bool = True


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
        require_box(action_space, self.name)
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
            obs_dim,
            act_dim,
            cfg.actor_width,
            cfg.actor_blocks,
            cfg.diffusion_steps,
            cfg.actor_dropout,
            schedule=cfg.beta_schedule,
        ).to(self.device)
        # the sampling actor: an EMA of the trained one (official: target_score_model)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False).eval()
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
        """Reward scale T / (R_max - R_min) over the dataset's episodes, T the longest episode
        (the official code's ``normalize_returns(max_ep_reward, min_ep_reward, max_steps)``)."""
        if self.config.normalize_reward:
            rets = dataset.episode_returns()
            spread = float(rets.max() - rets.min())
            horizon = float(dataset.episode_lengths().max())
            self.reward_scale.fill_(horizon / spread if spread > 1e-8 else 1.0)

    # -- values ----------------------------------------------------------------------------
    def qh_values(self, obs: torch.Tensor, actions_unit: torch.Tensor) -> torch.Tensor:
        """Max over the target Q_h ensemble (pessimistic feasibility), shape (B,)."""
        return self.q_h_target(torch.cat([obs, actions_unit], -1)).max(0).values.squeeze(-1)

    def vh_values(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v_h(obs)[0, :, 0]

    # -- acting ----------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = obs_tensor(obs, self.device).flatten(1)
        B, N = x.shape[0], self.config.num_samples
        xr = x.repeat_interleave(N, 0)
        a = self.actor_target.sample(xr)
        qh = self.qh_values(xr, a).view(B, N)
        best = qh.argmin(1)
        a = a.view(B, N, -1)[torch.arange(B, device=self.device), best]
        return self.scaler.to_env(a.cpu().numpy())

    def policy(self) -> Policy:
        return AlgorithmPolicy(self)  # 16 diffusion samples, lowest Q_h

    def actor_graph(self) -> ActorGraph:
        """`policy()` as tensor ops for ONNX export, its randomness an input: ``noise``
        (B, num_samples, T, |A|) standard normal; `draw_noise` draws it from torch's generator
        as `act` does, so graph and policy agree under one seed."""
        module = SampleAndSelect(
            self.actor_target, self.q_h_target, self.config.num_samples, self.action_space
        )
        N, T, A = self.config.num_samples, self.actor_target.T, self.actor_target.act_dim

        def draw_noise(batch: int) -> dict[str, torch.Tensor]:
            rows = self.actor_target.draw_noise(batch * N, self.device)
            return {"noise": rows.reshape(batch, N, T, A).cpu()}

        inputs = [*observation_inputs(self.observation_space)]
        inputs.append(GraphInput("noise", (N, T, A), "float32", noise=True))
        notes = [f"{N} diffusion samples from the noise input, the one with the lowest Q_h kept"]
        return ActorGraph(module, inputs, draw_noise, notes)

    # -- learning --------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        if batch.costs is None:
            raise ValueError("fisor needs a dataset with per-step costs (Batch.costs is None)")
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        actions = self.scaler.to_unit(batch.actions).clamp(-1.0 + 1e-5, 1.0 - 1e-5)
        rewards = batch.rewards * self.reward_scale
        h = torch.where(batch.costs > 0, cfg.cost_scale, -1.0)
        done = batch.terminated
        sa = torch.cat([obs, actions], -1)

        # 1. actor first, from the values before this step's value updates (official order):
        #    feasibility-guided weighted diffusion BC
        with torch.no_grad():
            q_r_t = self.q_r_target(sa).min(0).values.squeeze(-1)
            q_h_t = self.q_h_target(sa).max(0).values.squeeze(-1)
            v_r = self.v_r(obs)[0, :, 0]
            vh = self.v_h(obs)[0, :, 0]
            feasible = vh <= 0
            w_r = (cfg.reward_temperature * (q_r_t - v_r)).exp().clamp(0.0, cfg.reward_weight_clip)
            w_r = w_r * (q_h_t <= 0).float()
            # official clip(., 0, cost_ub) (fisor.py:479); its first commit clipped at 1, which
            # cloned every infeasible-region action, however unsafe, at weight >= 1
            w_c = (cfg.cost_temperature * (vh - q_h_t)).exp().clamp(0.0, cfg.cost_weight_clip)
            weight = torch.where(feasible, w_r, w_c)
        if cfg.actor_decay_steps > 0:  # optax.cosine_decay_schedule(actor_lr, decay_steps)
            frac = min(self.updates, cfg.actor_decay_steps) / cfg.actor_decay_steps
            for g in self.actor_opt.param_groups:
                g["lr"] = cfg.actor_lr * 0.5 * (1 + math.cos(math.pi * frac))
        self.actor.train()
        actor_loss = self.actor.loss(obs, actions, weight)
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        polyak_update(self.actor_target.parameters(), self.actor.parameters(), cfg.actor_tau)

        # 2. values: V_r expectile of min target Q_r, V_h reversed expectile of max target Q_h
        v_r = self.v_r(obs)[0, :, 0]
        v_h = self.v_h(obs)[0, :, 0]
        value_loss = expectile_loss(q_r_t - v_r, cfg.reward_expectile) + reversed_expectile_loss(
            q_h_t - v_h, cfg.cost_expectile
        )
        self.value_opt.zero_grad(set_to_none=True)
        value_loss.backward()
        self.value_opt.step()

        # 3. critics from the updated values
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

        polyak_update(self.q_r_target.parameters(), self.q_r.parameters(), cfg.tau)
        polyak_update(self.q_h_target.parameters(), self.q_h.parameters(), cfg.tau)
        self.updates += 1
        return {
            "value_loss": float(value_loss.detach()),
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "feasible_frac": float(feasible.float().mean()),
            "v_h": float(vh.mean()),
            "weight_mean": float(weight.mean()),
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
            "actor_target": self.actor_target.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "value_opt": self.value_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "reward_scale": self.reward_scale,
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for k in ("q_r", "v_r", "q_h", "v_h", "q_r_target", "q_h_target", "actor", "actor_target"):
            getattr(self, k).load_state_dict(state[k])
        for k in ("critic_opt", "value_opt", "actor_opt"):
            getattr(self, k).load_state_dict(state[k])
        self.reward_scale.copy_(state["reward_scale"])
        self.updates = int(state["updates"])

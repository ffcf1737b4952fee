"""Implicit Q-Learning (IQL) and Robust IQL (RIQL).

IQL: Kostrikov, Nair, Levine, "Offline Reinforcement Learning with Implicit Q-Learning",
arXiv 2110.06169 (2021), with the defaults of its locomotion experiments:

- V regressed by expectile regression against the min of the twin *target* Qs (eq. 5):
  L_V = E[ L2^tau(min_i Q_target_i(s, a) - V(s)) ], L2^tau(u) = |tau - 1(u < 0)| u^2, tau=0.7;
- Q regressed to r + gamma (1 - d) V(s') with MSE, both critics (eq. 6);
- advantage-weighted regression for the actor (eq. 7): L_pi = -E[ w log pi(a|s) ],
  w = min(exp(beta (Q_target(s, a) - V(s))), 100), beta = 3 (temperature 1/beta in the paper's
  notation; the official code's `temperature=3.0` multiplies the advantage);
- Gaussian actor with tanh-squashed mean and state-independent log-std clipped to [-5, 2]
  (official code, `tanh_squash_distribution=False`), two hidden layers of 256 ReLU units;
- Adam 3e-4 for all networks, cosine decay of the actor's learning rate to 0 over the run's
  `total_updates` (`max_steps` overrides), then held at 0 as `optax.cosine_decay_schedule`
  does; batch 256, gamma 0.99, Polyak 0.005;
- locomotion rewards scaled by 1000 / (max episode return - min episode return) of the
  dataset (official `normalize` for MuJoCo tasks), computed in `prepare(dataset)`.
- Update order as in the official code: V, then the actor (new V), then Q (new V on s'), then
  the target critics.

Deviations from the official IQL code (github.com/ikostrikov/implicit_q_learning):
- the episodes behind the reward scale end at terminals and timeouts (CORL's
  `return_reward_range`); the official code also cuts where s'_t != s_{t+1}, which on clean
  D4RL data is the same cut (its loader drops the timed-out steps) but on corrupted
  observations or dynamics would cut at every corrupted row and inflate the scale;
- dataset actions are not clipped to +-(1 - 1e-5) (official `clip_to_eps`): the actor's
  distribution is not tanh-squashed, so in-bound data is unaffected, and RIQL's corrupted
  actions stay as the corruption protocol leaves them;
- networks use PyTorch's default initialisation, not the official orthogonal one.

RIQL: Yang, Zhong, Xu, Zhang, Zhang, Han, Zhang, "Towards Robust Offline Reinforcement Learning
under Diverse Data Corruption", ICLR 2024 (arXiv 2310.12955), checked against the official code
(github.com/YangRui2015/RIQL, `RIQL.py` and `RIQL_config.py`). On top of IQL:

- observation normalisation with the mean and std (+1e-3) of the dataset's observations *and*
  next observations together (official `compute_mean_std` on their concatenation);
- Huber loss on the Q regression (Sec. 4.2) in the official parametrisation: with
  delta = 1 / sigma^2, l(u) = 0.5 u^2 / delta if |u| < delta else |u| - 0.5 delta (a Huber loss
  divided by delta, i.e. `smooth_l1_loss(beta=delta)`), u = Q_i(s, a) - y;
- Q targets y = r + gamma (1 - d) V(s') clipped to [-100, 1000] (official `torch.clamp`);
- a K-critic ensemble whose alpha-quantile replaces the min in V's target and in the advantage
  (Sec. 4.3): Q_alpha(s, a) = quantile_alpha{Q_i(s, a)}_{i<=K};
- a deterministic tanh actor trained by advantage-weighted regression to the dataset actions:
  L_pi = E[ w ||pi(s) - a||^2 ] (the official script always builds `DeterministicPolicy`; its
  `iql_deterministic` flag is never read);
- no reward scaling (the official script does not rescale rewards, so its per-task Huber
  deltas are in raw-reward units): `normalize_reward=False`.

Defaults: sigma = 1 (delta = 1), alpha = 0.25, K = 5, the official script's defaults. The
per-task, per-corruption values of the official `RIQL_config.get_config` (sigma, alpha, K) are
selectable with `preset="<task>/<mode>/<field>"`, e.g. `algo.preset=hopper/random/dynamics`
(task in hopper, walker2d, halfcheetah; mode random or adversarial; field obs, action, reward,
dynamics); a preset overrides `huber_delta`, `quantile` and `num_critics`.

Deviations from the official RIQL code:
- update order is IQL's (V, actor with the new V, Q with the new V); the official RIQL script
  computes V(s') and the advantage with the V from *before* its update;
- critics use PyTorch's default init, not the EDAC init (bias 0.1, last layer U(+-3e-3));
- the quantile interpolates linearly between ensemble members (`torch.quantile`, as the official
  code does); the critic loss is summed, not averaged, over the ensemble (a constant factor K);
- the actor's cosine horizon is the run's length, as in the official script (whose run is
  3e6 updates); held at 0 past it rather than rising again as its `CosineAnnealingLR` would.
All critics are one `EnsembleMLP` (batched matmuls). No dropout (locomotion setting).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from roborl.core.actor_critic import require_box
from roborl.core.actor_graph import ActorGraph, MethodModule, flat_actor_graph
from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.nn import ActionScaler, EnsembleMLP, mlp, obs_tensor, polyak_update
from roborl.core.policies import BatchedPolicy
from roborl.core.spaces import flat_dim

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
DEFAULT_HORIZON = 1_000_000  # official IQL's max_steps, when no run length is known


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """Mean of |tau - 1(u < 0)| u^2 over `diff` = target - prediction (IQL eq. 5)."""
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def riql_huber_loss(diff: torch.Tensor, delta: float) -> torch.Tensor:
    """Elementwise official-RIQL Huber: 0.5 u^2 / delta inside |u| < delta, |u| - delta/2 outside."""
    return F.smooth_l1_loss(diff, torch.zeros_like(diff), beta=delta, reduction="none")


# Official RIQL_config.get_config: (task, mode, corrupted field) -> (sigma, alpha, K);
# the Huber threshold is delta = 1 / sigma^2.
_RIQL_TABLE: dict[tuple[str, str], dict[str, tuple[float, float, int]]] = {
    ("random", "obs"): {"halfcheetah": (0.1, 0.1, 5), "walker2d": (0.1, 0.25, 5), "hopper": (0.1, 0.25, 3)},
    ("random", "action"): {"halfcheetah": (0.5, 0.25, 3), "walker2d": (0.5, 0.1, 5), "hopper": (0.1, 0.25, 5)},
    ("random", "reward"): {"halfcheetah": (3.0, 0.25, 5), "walker2d": (3.0, 0.1, 5), "hopper": (1.0, 0.25, 3)},
    ("random", "dynamics"): {"halfcheetah": (3.0, 0.25, 5), "walker2d": (1.0, 0.25, 3), "hopper": (1.0, 0.5, 5)},
    ("adversarial", "obs"): {"halfcheetah": (0.1, 0.1, 5), "walker2d": (1.0, 0.25, 5), "hopper": (1.0, 0.25, 5)},
    ("adversarial", "action"): {"halfcheetah": (1.0, 0.1, 5), "walker2d": (1.0, 0.1, 5), "hopper": (1.0, 0.25, 5)},
    ("adversarial", "reward"): {"halfcheetah": (1.0, 0.1, 5), "walker2d": (3.0, 0.1, 5), "hopper": (0.1, 0.25, 5)},
    ("adversarial", "dynamics"): {"halfcheetah": (1.0, 0.1, 5), "walker2d": (1.0, 0.25, 5), "hopper": (1.0, 0.5, 5)},
}  # fmt: skip


def riql_preset(name: str) -> dict[str, Any]:
    """`"hopper/random/dynamics"` -> {huber_delta, quantile, num_critics} of the official table."""
    parts = name.lower().split("/")
    tasks = ("halfcheetah", "walker2d", "hopper")
    if len(parts) == 3:
        task, mode, fld = parts
        task = task.split("-")[0]
        row = _RIQL_TABLE.get((mode, fld), {})
        if task in row:
            sigma, alpha, k = row[task]
            return {"huber_delta": 1.0 / sigma**2, "quantile": alpha, "num_critics": k}
    raise ConfigError(
        f"unknown RIQL preset {name!r}; accepted: '<task>/<mode>/<field>' with task in "
        f"{', '.join(tasks)}, mode in random, adversarial and field in obs, action, reward, "
        "dynamics (e.g. 'hopper/random/dynamics'), or null for the defaults."
    )


def ensemble_quantile(q: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha-quantile over the ensemble axis 0 of (K, B) Q-values (RIQL Sec. 4.3)."""
    return torch.quantile(q, alpha, dim=0)


@dataclass
class IQLConfig:
    gamma: float = field(default=0.99, metadata=rng(0.0, 1.0))
    tau: float = field(default=0.005, metadata=rng(0.0, 1.0, "Polyak rate of the targets"))
    expectile: float = field(default=0.7, metadata=rng(0.0, 1.0))
    beta: float = field(default=3.0, metadata=rng(0.0, None, "inverse AWR temperature"))
    max_weight: float = field(default=100.0, metadata=rng(0.0, None))
    actor_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    critic_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    value_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0))
    batch_size: int = field(default=256, metadata=rng(1, None))
    hidden_sizes: list[int] = field(
        default_factory=lambda: [256, 256], metadata=rng(1, None, "hidden widths")
    )
    activation: str = field(default="relu", metadata={"choices": ["relu", "gelu", "elu", "tanh"]})
    num_critics: int = field(default=2, metadata=rng(1, 64))
    max_steps: int | None = field(
        default=None,
        metadata=rng(1, None, "cosine actor-lr horizon in updates; null = the run's total_updates"),
    )
    normalize_reward: bool = True
    normalize_obs: bool = False
    deterministic_actor: bool = False
    huber_delta: float | None = None  # None = MSE (IQL); a number = Huber (RIQL)
    quantile: float | None = None  # None = min over critics (IQL); alpha (RIQL)
    target_clip: list[float] | None = None  # [lo, hi] clamp of Q targets (RIQL: [-100, 1000])
    obs_stats_with_next: bool = False  # obs mean/std over obs and next_obs together (RIQL)


@dataclass
class RIQLConfig(IQLConfig):
    num_critics: int = field(default=5, metadata=rng(1, 64))
    normalize_obs: bool = True
    deterministic_actor: bool = True
    normalize_reward: bool = False
    huber_delta: float | None = 1.0
    quantile: float | None = 0.25
    target_clip: list[float] | None = field(default_factory=lambda: [-100.0, 1000.0])
    obs_stats_with_next: bool = True
    preset: str | None = None  # "<task>/<mode>/<field>": the official per-task sigma, alpha, K


class Actor(nn.Module):
    """Gaussian (tanh mean, state-independent std) or deterministic tanh actor."""

    def __init__(
        self, obs_dim: int, act_dim: int, hidden: list[int], act: str, deterministic: bool
    ) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim, act)
        self.deterministic = deterministic
        self.log_std = nn.Parameter(torch.zeros(act_dim))

    def mean(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        mean = self.mean(obs)
        log_std = self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        z = (actions - mean) / log_std.exp()
        return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


class IQLPolicy(BatchedPolicy):
    """Deterministic policy: normalise the observation (RIQL), tanh mean, rescale."""

    def __init__(
        self,
        actor: Actor,
        obs_mean: torch.Tensor,
        obs_std: torch.Tensor,
        obs_space: gym.Space,
        action_space: gym.spaces.Box,
    ) -> None:
        super().__init__(obs_space, action_space)
        self.actor = actor
        self.obs_mean, self.obs_std = obs_mean, obs_std
        self.scaler = ActionScaler(action_space)
        self.device = next(actor.parameters()).device

    @torch.no_grad()
    def act_batch(self, obs: np.ndarray) -> np.ndarray:
        x = obs_tensor(obs, self.device).flatten(1)
        x = (x - self.obs_mean) / self.obs_std
        return self.scaler.to_env(self.actor.mean(x).cpu().numpy())


class IQL(Algorithm):
    """Implicit Q-Learning; see the module docstring for equations and defaults."""

    name = "iql"
    Config = IQLConfig
    loop = "offline"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: IQLConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        require_box(action_space, self.name)
        preset = getattr(config, "preset", None)
        if preset:
            config = dataclasses.replace(config, **riql_preset(preset))
            self.config = config
        cfg = config
        obs_dim, act_dim = flat_dim(observation_space), flat_dim(action_space)
        hidden = list(cfg.hidden_sizes)
        self.scaler = ActionScaler(action_space, self.device)
        self.actor = Actor(obs_dim, act_dim, hidden, cfg.activation, cfg.deterministic_actor)
        self.critic = EnsembleMLP(cfg.num_critics, obs_dim + act_dim, hidden, 1, cfg.activation)
        self.value = EnsembleMLP(1, obs_dim, hidden, 1, cfg.activation)
        for m in (self.actor, self.critic, self.value):
            m.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr)
        self.value_opt = torch.optim.Adam(self.value.parameters(), lr=cfg.value_lr)
        # Cosine horizon: the config's max_steps, else the run's total_updates (set by the
        # offline loop), else the official 1e6 for code that drives `update` by hand.
        self.lr_horizon = int(cfg.max_steps) if cfg.max_steps is not None else DEFAULT_HORIZON
        self.obs_mean = torch.zeros(obs_dim, device=self.device)
        self.obs_std = torch.ones(obs_dim, device=self.device)
        self.reward_scale = torch.ones((), device=self.device)
        self.updates = 0

    # -- data ----------------------------------------------------------------------------

    def set_total_updates(self, total_updates: int) -> None:
        """The run's length is the cosine horizon unless `max_steps` sets one."""
        if self.config.max_steps is None:
            self.lr_horizon = int(total_updates)
            self._set_actor_lr()

    def _set_actor_lr(self) -> None:
        """Cosine decay of the actor's learning rate to 0 at the horizon, then held at 0.

        Closed form of the official `optax.cosine_decay_schedule`, which clamps the count at
        the horizon; torch's `CosineAnnealingLR` would rise again past `T_max`.
        """
        t = min(self.updates, self.lr_horizon) / max(self.lr_horizon, 1)
        lr = self.config.actor_lr * 0.5 * (1.0 + math.cos(math.pi * t))
        for group in self.actor_opt.param_groups:
            group["lr"] = lr

    def prepare(self, dataset: Any) -> None:
        """Reward scale (1000 / return range) and observation statistics from the dataset."""
        if self.config.normalize_reward:
            rets = dataset.episode_returns()
            spread = float(rets.max() - rets.min())
            self.reward_scale.fill_(1000.0 / spread if spread > 1e-8 else 1.0)
        if self.config.normalize_obs:
            obs = np.asarray(dataset.observations, np.float64).reshape(len(dataset), -1)
            if self.config.obs_stats_with_next:
                nxt = np.asarray(dataset.next_observations, np.float64).reshape(len(dataset), -1)
                obs = np.concatenate([obs, nxt])
            self.obs_mean.copy_(torch.as_tensor(obs.mean(0), dtype=torch.float32))
            self.obs_std.copy_(torch.as_tensor(obs.std(0) + 1e-3, dtype=torch.float32))

    def _norm(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs.flatten(1) - self.obs_mean) / self.obs_std

    # -- acting --------------------------------------------------------------------------

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        x = self._norm(obs_tensor(obs, self.device))
        a = self.actor.mean(x)
        if not deterministic and not self.actor.deterministic:
            std = self.actor.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
            a = (a + std * torch.randn_like(a)).clamp(-1.0, 1.0)
        return self.scaler.to_env(a.cpu().numpy())

    def policy(self) -> Policy:
        return IQLPolicy(
            self.actor, self.obs_mean, self.obs_std, self.observation_space, self.action_space
        )

    def actor_graph(self) -> ActorGraph:
        """`policy()` as tensor ops for ONNX export, the observation normalisation included
        (identity statistics when `normalize_obs` is off, as the torch policy applies them)."""
        return flat_actor_graph(
            MethodModule(self.actor, "mean"),
            self.observation_space,
            self.action_space,
            self.obs_mean,
            self.obs_std,
        )

    # -- learning ------------------------------------------------------------------------

    def _target_q(self, q: torch.Tensor) -> torch.Tensor:
        """Min over critics (IQL) or the alpha-quantile over the ensemble (RIQL)."""
        if self.config.quantile is None:
            return q.min(0).values
        return ensemble_quantile(q, self.config.quantile)

    def update(self, batch: Batch) -> dict[str, float]:
        cfg = self.config
        obs, next_obs = self._norm(batch.obs), self._norm(batch.next_obs)
        actions = self.scaler.to_unit(batch.actions)
        rewards = batch.rewards * self.reward_scale
        discount = cfg.gamma  # one-step offline batches: algo.gamma is the only discount
        sa = torch.cat([obs, actions], -1)

        with torch.no_grad():
            q_t = self._target_q(self.critic_target(sa).squeeze(-1))
        # V: expectile regression towards the target Q.
        v = self.value(obs).squeeze(-1)[0]
        value_loss = expectile_loss(q_t - v, cfg.expectile)
        self.value_opt.zero_grad(set_to_none=True)
        value_loss.backward()
        self.value_opt.step()

        # Actor: advantage-weighted regression with the updated V.
        with torch.no_grad():
            adv = q_t - self.value(obs).squeeze(-1)[0]
            weight = torch.exp(cfg.beta * adv).clamp(max=cfg.max_weight)
        if self.actor.deterministic:
            bc = (self.actor.mean(obs) - actions).pow(2).sum(-1)
            actor_loss = (weight * bc).mean()
        else:
            actor_loss = -(weight * self.actor.log_prob(obs, actions)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        # Q: regress to r + gamma (1 - d) V(s') (MSE, or Huber for RIQL).
        with torch.no_grad():
            next_v = self.value(next_obs).squeeze(-1)[0]
            target = rewards + discount * (1.0 - batch.terminated) * next_v
            if cfg.target_clip is not None:
                target = target.clamp(cfg.target_clip[0], cfg.target_clip[1])
        q = self.critic(sa).squeeze(-1)
        tgt = target.expand_as(q)
        if cfg.huber_delta is None:
            critic_loss = F.mse_loss(q, tgt, reduction="none").mean(1).sum()
        else:
            critic_loss = riql_huber_loss(q - tgt, cfg.huber_delta).mean(1).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        polyak_update(self.critic_target.parameters(), self.critic.parameters(), cfg.tau)
        self.updates += 1
        self._set_actor_lr()
        return {
            "value_loss": value_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "q_mean": q.detach().mean(),
            "v_mean": v.detach().mean(),
            "adv_mean": adv.mean(),
        }

    # -- state ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "value": self.value.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "value_opt": self.value_opt.state_dict(),
            "lr_horizon": self.lr_horizon,
            "obs_mean": self.obs_mean,
            "obs_std": self.obs_std,
            "reward_scale": self.reward_scale,
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.value.load_state_dict(state["value"])
        for key in ("actor_opt", "critic_opt", "value_opt"):
            if key in state:
                getattr(self, key).load_state_dict(state[key])
        self.obs_mean.copy_(torch.as_tensor(state["obs_mean"]))
        self.obs_std.copy_(torch.as_tensor(state["obs_std"]))
        self.reward_scale.copy_(torch.as_tensor(state["reward_scale"]))
        self.updates = int(state.get("updates", 0))
        # Checkpoints before the clamped schedule kept a CosineAnnealingLR state instead.
        old_sched = state.get("actor_sched")
        if "lr_horizon" in state:
            self.lr_horizon = int(state["lr_horizon"])
        elif isinstance(old_sched, Mapping) and "T_max" in old_sched:
            self.lr_horizon = int(old_sched["T_max"])
        self._set_actor_lr()


class RIQL(IQL):
    """Robust IQL: obs normalisation, Huber Q loss, ensemble quantile, deterministic actor."""

    name = "riql"
    Config = RIQLConfig

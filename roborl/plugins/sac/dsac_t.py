"""DSAC-T: Distributional Soft Actor-Critic with Three Refinements.

Duan et al., "Distributional Soft Actor-Critic with Three Refinements", IEEE TPAMI 2025,
arXiv 2310.05858 (DSAC-v2), and the official implementation (Jingliang-Duan/DSAC-v2:
`dsac_v2.py`, `networks/mlp.py`, `utils/act_distribution_cls.py`, defaults from
`example_train/dsacv2_mlp_mujoco_offserial.py`). Where each piece lives:

- Gaussian return distributions Z(s, a) ~ N(mean, std^2) for two critics, with target
  critics and a target actor: `DSACT.__init__` (critic = one `EnsembleMLP` with 2 outputs per
  member: the mean and a raw std, std = softplus(raw) as in the official `ActionValueDistri`,
  unbounded above so the std can grow with the reward scale).
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
- Gradient timing as in the official `__compute_gradient`/`__update`: every gradient is
  computed from the pre-step networks on the same batch (here in one backward pass: the actor
  sees the critics through detached weights), then the critics step, and on every
  `delay_update`-th call the actor and temperature step and the targets move.
- Official defaults: MLP 256x3 with GELU for actor and critics; one shared actor head for mean
  and log-std, log-std clamped to [-20, 0.5]; Adam 1e-4 (actor, critic), 3e-4 (alpha);
  log_alpha starts at 1 (alpha = e); batch 256, gamma 0.99, tau 0.005, tau_b = tau.

Remaining deviations from the official code:
- Warm-up: the official trainer fills the buffer with 10,000 transitions from the initial
  stochastic policy before the first update; here the run-level `learning_starts` (default
  1,000) decides, with uniform random actions.
- Sampling ratio: the official serial trainer collects 20 env steps per gradient step
  (`sample_batch_size` 20); here the run-level `utd_ratio` (default 1 update per env step).
- The tanh log-likelihood is the exact, numerically stable form; the official code uses
  log(1 + 1e-6 - tanh(u)^2).
- The two critics run as one batched ensemble, and the three official Adams are one Adam with
  per-network learning rates (identical updates). The official code computes the actor
  gradient on every call and discards it on non-delayed calls; here it is computed only when
  it is applied.
- `n_step` > 1 (off by default) gives n-step targets through the replay buffer, an extension
  the official code does not have.

Speed option (no effect on the maths): `capture` (CUDA) records the update's tensor work
(`_update_step`) as two CUDA graphs, one for critic-only steps and one for steps with the
actor, with capturable fused Adam (`roborl.core.compile.CapturedUpdate`); elsewhere it runs
eagerly with a one-line warning.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import torch
from torch.nn import functional as F

from roborl.core.actor_critic import SoftActorCritic, SoftActorCriticConfig
from roborl.core.compile import CapturedUpdate, CompiledCall, adam_kwargs, fused_adam_step
from roborl.core.config import rng
from roborl.core.interfaces import Batch
from roborl.core.nn import polyak_update

# Official DSAC-v2 mujoco defaults (example_train/dsacv2_mlp_mujoco_offserial.py): the actor's
# log-std is clamped to [policy_min_log_std, policy_max_log_std] = [-20, 0.5].
ACTOR_LOG_STD_BOUNDS = (-20.0, 0.5)
BIAS = 0.1
HUBER_DELTA = 50.0
TD_BOUND = 3.0


@dataclass
class DSACTConfig(SoftActorCriticConfig):
    actor_lr: float = field(default=1e-4, metadata=rng(0.0, 1.0, "actor Adam learning rate"))
    critic_lr: float = field(default=1e-4, metadata=rng(0.0, 1.0, "critic Adam learning rate"))
    hidden_sizes: list[int] = field(
        default_factory=lambda: [256, 256, 256],
        metadata=rng(1, None, "hidden widths, actor and critics"),
    )
    activation: str = field(
        default="gelu",
        metadata={"choices": ["gelu", "relu", "elu", "silu"], "help": "hidden activation"},
    )
    init_alpha: float = field(
        default=math.e,
        metadata=rng(1e-8, None, "initial temperature (official: log_alpha starts at 1)"),
    )
    tau_b: float = field(default=0.005, metadata=rng(0.0, 1.0, "rate of the sigma_bar average"))
    delay_update: int = field(
        default=2, metadata=rng(1, None, "critic steps per actor/temperature/target step")
    )
    compile: bool = field(
        default=False, metadata={"help": "torch.compile the losses; eager fallback with a warning"}
    )
    compile_mode: str | None = field(
        default=None, metadata={"help": "inductor mode; null = default"}
    )
    cudagraphs: bool = field(default=False, metadata={"help": "CUDA graphs (CUDA only)"})
    capture: bool = field(
        default=False,
        metadata={
            "help": "record the whole update as one CUDA graph (CUDA only; capturable Adam); "
            "elsewhere, or when capture fails, eager with a one-line warning"
        },
    )


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


class DSACT(SoftActorCritic):
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
        # two critics, each with a mean and a raw std output
        super().__init__(
            observation_space,
            action_space,
            config,
            device,
            num_critics=2,
            critic_outputs=2,
            log_std_bounds=ACTOR_LOG_STD_BOUNDS,
        )
        cfg = config
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        groups = [
            {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
            {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
        ]
        if cfg.autotune_alpha:
            groups.append({"params": [self.log_alpha], "lr": cfg.alpha_lr})
        # One (fused) Adam with per-network learning rates: identical to the official code's
        # three Adams, since Adam is per-parameter and skips parameters without gradients.
        self.optimizer = torch.optim.Adam(groups, **adam_kwargs(self.device, cfg.capture))
        self.sigma_bar = torch.full((2,), -1.0, device=self.device)  # < 0: not yet initialised
        self.updates = 0
        self._params = [*self.critic.parameters(), *self.actor.parameters()]
        self._target_params = [*self.critic_target.parameters(), *self.actor_target.parameters()]
        self._loss_call = CompiledCall(
            self._losses,
            enabled=cfg.compile,
            mode=cfg.compile_mode,
            cudagraphs=cfg.cudagraphs,
            device=self.device,
            name="dsac_t",
        )
        self._capture = CapturedUpdate(
            self._update_step,
            enabled=cfg.capture,
            device=self.device,
            name="dsac_t",
            blocked="compile/cudagraphs are asked too (use one or the other)"
            if cfg.compile or cfg.cudagraphs
            else None,
            before_capture=self._zero_grad,
        )

    def distribution(
        self, obs: torch.Tensor, unit_actions: torch.Tensor, target: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std), each (2, B); std = softplus(raw), unbounded above as in the official
        `ActionValueDistri`, so the return spread can follow the reward scale."""
        net = self.critic_target if target else self.critic
        out = net(torch.cat([obs, unit_actions], -1))
        return out[..., 0], F.softplus(out[..., 1])

    def _losses(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        discount: torch.Tensor,
        noise: torch.Tensor,
        q_noise: torch.Tensor,
        with_actor: bool,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Critic loss (+ actor and temperature losses when `with_actor`) and metrics.

        A pure tensor function (the actor noise (2B, A) and the return-sample noise (2, B)
        come in as arguments) so it can be compiled. The actor sees the critics through
        detached weights, i.e. the pre-step critics, as in the official code, which computes
        all gradients before stepping any optimiser. The new sigma_bar is returned in the
        metrics and stored by the caller.
        """
        b = obs.shape[0]
        alpha_t = self.log_alpha.exp()
        alpha = alpha_t.detach()
        mean, std = self.distribution(obs, actions)
        with torch.no_grad():
            batch_std = std.mean(-1)
            # first update: sigma_bar starts at the batch mean (official code); then EMA tau_b
            sigma_bar = torch.where(
                self.sigma_bar < 0, batch_std, self.sigma_bar.lerp(batch_std, self.config.tau_b)
            )
            next_a, next_logp = self.actor_target.sample(next_obs, noise[b:])
            next_mean, next_std = self.distribution(next_obs, next_a, target=True)
            targets = dsac_t_targets(
                rewards, terminated, discount, next_mean, next_std, next_logp,
                alpha, mean.detach(), sigma_bar, q_noise,
            )  # fmt: skip
        critic_loss, ratio = dsac_t_critic_loss(
            mean, std, sigma_bar, targets["target"], targets["target_bound"]
        )
        metrics: dict[str, torch.Tensor] = {
            "critic_loss": critic_loss.detach(),
            "q_mean": mean.detach().mean(),
            "q_std": std.detach().mean(),
            "sigma_bar": sigma_bar.mean(),
            "weight_mean": ratio.mean(),
            "alpha": alpha,
            "_sigma_bar": sigma_bar,
        }
        loss = critic_loss
        if with_actor:
            pi_a, logp = self.actor.sample(obs, noise[:b])
            out = self.critic(torch.cat([obs, pi_a], -1), detach=True)
            actor_loss = (alpha * logp - out[..., 0].min(0).values).mean()
            loss = loss + actor_loss
            if self.config.autotune_alpha:
                loss = loss - self.log_alpha * (logp.detach() + self.target_entropy).mean()
            metrics["actor_loss"] = actor_loss.detach()
            metrics["entropy"] = -logp.detach().mean()
        return loss, metrics

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One critic step; actor, temperature and targets every `delay_update` steps.

        The tensor work is `_update_step` (with `capture`, one CUDA graph for critic-only
        steps and one for steps with the actor); the Python counter moves here."""
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        self.updates += 1
        with_actor = self.updates % self.config.delay_update == 0
        return self._capture(
            with_actor, obs, batch.actions, batch.rewards, next_obs, batch.terminated,
            batch.require_discount(self.name),
        )  # fmt: skip

    def _update_step(
        self,
        with_actor: bool,
        obs: torch.Tensor,
        env_actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        discount: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """Losses, gradients, the Adam step, sigma_bar and (with the actor) the Polyak update:
        tensor work only, so `CapturedUpdate` can record it."""
        actions = self.scaler.to_unit(env_actions)
        b = obs.shape[0]
        noise = torch.randn(2 * b, self.act_dim, device=self.device)
        q_noise = torch.randn(2, b, device=self.device)
        self.optimizer.zero_grad(set_to_none=True)
        _, metrics = self._loss_call(
            obs, actions, rewards, next_obs, terminated, discount, noise, q_noise,
            with_actor, after=self._backward, reset=self._zero_grad,
        )  # fmt: skip
        # Parameters without gradients (the actor and log_alpha on critic-only steps) are
        # skipped by Adam, so one optimiser steps the critics every call and the rest on
        # delayed calls. `fused_adam_step` is that step without step()'s Python bookkeeping.
        fused_adam_step(self.optimizer)
        self.sigma_bar.copy_(metrics.pop("_sigma_bar"))
        if with_actor:
            polyak_update(self._target_params, self._params, self.config.tau)
        return metrics

    @staticmethod
    def _backward(out: tuple[torch.Tensor, Any]) -> None:
        out[0].backward()

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.networks_state(),
            "actor_target": self.actor_target.state_dict(),
            "sigma_bar": self.sigma_bar.clone(),
            "critic_std": "softplus",
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.load_networks_state(state)
        self.actor_target.load_state_dict(state["actor_target"])
        if state.get("critic_std") != "softplus":
            warnings.warn(
                "this DSAC-T checkpoint predates the softplus critic std (its critics output "
                "a clamped log-std): the actor acts as before, but resumed training starts "
                "from a differently scaled std head.",
                stacklevel=2,
            )
        with torch.no_grad():
            self.sigma_bar.copy_(state["sigma_bar"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state.get("updates", 0))
        self._capture.reset()  # graphs recorded the replaced optimiser state

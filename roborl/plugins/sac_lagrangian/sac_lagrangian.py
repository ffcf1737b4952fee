"""SAC-Lagrangian: Soft Actor-Critic under an expected-cost constraint.

The constrained problem (a CMDP, Altman 1999) is
    max_pi  E[sum_t gamma^t r_t + alpha H(pi)]   s.t.   E[sum_t c_t] <= d      (d = `cost_limit`)
solved by primal-dual descent on the Lagrangian with a learned multiplier lambda >= 0, as in
Ha et al., "Learning to Walk in the Real World with Minimal Human Effort" (CoRL 2020, SAC with
a constraint critic and a learned multiplier), the Lagrangian baselines of Stooke et al.,
"Responsive Safety in RL by PID Lagrangian Methods" (ICML 2020), Yang et al., "WCSAC" (AAAI
2021) and OmniSafe's / Safety-Gymnasium's `SACLag`. Per update, on one replay batch:

- reward critics (twin, target min), exactly SAC (Haarnoja et al. 2018, eq. 3 and 5):
      Q_r(s,a) <- r + gamma (1 - done) (min_i Q_r,i'(s',a') - alpha log pi(a'|s')),  a' ~ pi(s')
- cost critic (one network, its own Polyak target; no entropy term in the cost backup):
      Q_c(s,a) <- c + gamma_c (1 - done) Q_c'(s',a')
- actor (OmniSafe's SACLag form, normalised by 1 + lambda so its scale stays bounded):
      L_pi = E_s[ alpha log pi(a|s) - min_i Q_r,i(s,a) + lambda Q_c(s,a) ] / (1 + lambda)
- temperature as SAC: J(alpha) = E[-alpha (log pi + target_entropy)], target_entropy = -dim(A);
- multiplier, projected gradient descent on
      L(lambda) = -lambda (E_s[Q_c(s, pi(s))] - d_Q),   lambda <- clip(lambda, 0, lambda_max)
  so lambda rises while the estimated cost exceeds the budget and falls (to 0) otherwise.
  d_Q = d (1 - gamma_c^T) / ((1 - gamma_c) T) is the episode budget d spread evenly over an
  episode of T = `episode_length` steps and discounted, i.e. on the cost critic's scale (the
  same conversion as WCSAC's code and FISOR's official code, whose `qc_thres` is this d_Q).

Defaults: SAC's (Adam 3e-4, batch 256, 256x256 ReLU, gamma 0.99, tau 0.005, alpha learned from
1.0); cost_limit 25 (Safety-Gymnasium's budget); gamma_c 0.99; lambda from 0 with Adam 3e-4.

Built on `roborl.core.actor_critic.SoftActorCritic` (Box check, action scaling, actor, reward
critics, log_alpha); `SACLagrangianConfig` extends SAC's `SACConfig`, so every SAC default is
shared; SAC's `compile`/`cudagraphs`/`capture` and `n_step` > 1 are refused with a ConfigError.

Remaining deviations from OmniSafe's SACLag (the reference implementation) and choices:
- The multiplier is updated every gradient step from the cost critic's estimate on the batch
  (Ha et al., WCSAC) rather than once per epoch from measured episode costs (OmniSafe), because
  roborl's off-policy runner hands the algorithm batches, not episodes. This makes it track the
  critic's (biased) estimate; `lambda_lr` is per update accordingly (OmniSafe: per epoch).
- OmniSafe initialises lambda at 0.001; here 0 (`lambda_init`). lambda is capped at
  `lambda_max` (100) to bound the penalty when the budget is infeasible.
- Reward critics, cost critic, actor and temperature losses share one backward pass with the
  actor seeing detached critic weights (the same single-graph scheme as roborl's SAC plugin);
  gradients equal those of separate losses, but the actor sees the pre-step critics where
  OmniSafe steps the critics first.
- Costs come from `info["cost"]` through the replay buffer (`Batch.costs`); they are used as
  reported (Safety-Gymnasium tasks report 0/1 per step).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import torch

from roborl.core.actor_critic import SACConfig, SoftActorCritic
from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.core.nn import EnsembleMLP, polyak_update


@dataclass
class SACLagrangianConfig(SACConfig):
    """SAC's config (same defaults) plus the constraint. SAC's `compile`, `cudagraphs`,
    `capture` and `n_step` > 1 are not available here and are refused."""

    cost_limit: float = field(default=25.0, metadata=rng(0.0, None, "episode cost budget d"))
    cost_gamma: float = field(default=0.99, metadata=rng(0.0, 1.0, "discount of the costs"))
    episode_length: int = field(
        default=1000, metadata=rng(1, None, "T, converts d to the cost critic's scale")
    )
    lambda_init: float = field(default=0.0, metadata=rng(0.0, None, "initial multiplier"))
    lambda_lr: float = field(default=3e-4, metadata=rng(0.0, 1.0, "multiplier Adam rate"))
    lambda_max: float = field(default=100.0, metadata=rng(0.0, None, "multiplier cap"))


class SACLagrangian(SoftActorCritic):
    """SAC with a cost critic and a learned Lagrange multiplier (see the module docstring)."""

    name = "sac_lagrangian"
    Config = SACLagrangianConfig
    loop = "offpolicy"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: SACLagrangianConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        cfg = config
        unsupported = {"compile": cfg.compile, "cudagraphs": cfg.cudagraphs, "capture": cfg.capture}
        for key, value in unsupported.items():
            if value:
                raise ConfigError(
                    f"algo.{key}=true is not available for algo=sac_lagrangian (only the SAC "
                    f"family compiles or captures its update); set algo.{key}=false."
                )
        if cfg.n_step != 1:
            raise ConfigError(
                f"algo.n_step={cfg.n_step}: algo=sac_lagrangian uses one-step reward and cost "
                "targets; set algo.n_step=1."
            )
        super().__init__(
            observation_space, action_space, config, device, num_critics=cfg.num_critics
        )
        self.cost_critic = EnsembleMLP(
            1, self.obs_dim + self.act_dim, list(cfg.hidden_sizes), 1, cfg.activation
        ).to(self.device)
        self.cost_critic_target = copy.deepcopy(self.cost_critic).requires_grad_(False)
        self.lagrange = torch.tensor(float(cfg.lambda_init), device=self.device, requires_grad=True)
        T, gc = cfg.episode_length, cfg.cost_gamma
        per_step = cfg.cost_limit / T
        self.cost_limit_q = per_step * (T if gc >= 1.0 else (1 - gc**T) / (1 - gc))
        groups = [
            {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
            {
                "params": [*self.critic.parameters(), *self.cost_critic.parameters()],
                "lr": cfg.critic_lr,
            },
        ]
        if cfg.autotune_alpha:
            groups.append({"params": [self.log_alpha], "lr": cfg.alpha_lr})
        self.optimizer = torch.optim.Adam(groups)
        self.lambda_optimizer = torch.optim.Adam([self.lagrange], lr=cfg.lambda_lr)
        self.updates = 0

    @property
    def lagrange_multiplier(self) -> float:
        return float(self.lagrange.detach())

    # -- learning ----------------------------------------------------------------------------

    def update(self, batch: Batch) -> dict[str, Any]:
        cfg = self.config
        if batch.costs is None:
            raise ConfigError(
                "algo=sac_lagrangian needs per-step costs (Batch.costs is None): train it on a "
                "safe task that reports info['cost'], e.g. env=safe_point_goal."
            )
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        actions = self.scaler.to_unit(batch.actions)
        alpha = self.log_alpha.exp().detach()
        lam = self.lagrange.detach().clamp(min=0.0)
        not_done = 1.0 - batch.terminated
        discount = batch.require_discount(self.name)  # algo.gamma, set by the loop's sampler

        b = obs.shape[0]
        both_a, both_logp = self.actor.sample(torch.cat([obs, next_obs], 0))
        pi_a, logp = both_a[:b], both_logp[:b]
        with torch.no_grad():
            next_a, next_logp = both_a[b:].detach(), both_logp[b:].detach()
            nsa = torch.cat([next_obs, next_a], -1)
            q_next = self.critic_target(nsa).squeeze(-1).min(0).values
            y_r = batch.rewards + discount * not_done * (q_next - alpha * next_logp)
            y_c = batch.costs + cfg.cost_gamma * not_done * self.cost_critic_target(nsa)[0, :, 0]

        sa = torch.cat([obs, actions], -1)
        q = self.critic(sa).squeeze(-1)
        qc = self.cost_critic(sa)[0, :, 0]
        critic_loss = 0.5 * (q - y_r).pow(2).mean(-1).sum() + 0.5 * (qc - y_c).pow(2).mean()

        spa = torch.cat([obs, pi_a], -1)
        q_pi = self.critic(spa, True).squeeze(-1).min(0).values
        qc_pi = self.cost_critic(spa, True)[0, :, 0]
        actor_loss = ((alpha * logp - q_pi + lam * qc_pi) / (1.0 + lam)).mean()

        loss = critic_loss + actor_loss
        if cfg.autotune_alpha:
            loss = loss - (self.log_alpha.exp() * (logp.detach() + self.target_entropy)).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

        # dual step: gradient of -lambda (Jc - d) is -(Jc - d), so lambda grows when Jc > d
        jc = qc_pi.detach().mean()
        lambda_loss = -self.lagrange * (jc - self.cost_limit_q)
        self.lambda_optimizer.zero_grad(set_to_none=True)
        lambda_loss.backward()
        self.lambda_optimizer.step()
        with torch.no_grad():
            self.lagrange.clamp_(0.0, cfg.lambda_max)

        self.updates += 1
        if self.updates % cfg.target_update_every == 0:
            polyak_update(self.critic_target.parameters(), self.critic.parameters(), cfg.tau)
            polyak_update(
                self.cost_critic_target.parameters(), self.cost_critic.parameters(), cfg.tau
            )
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": alpha,
            "lagrange_multiplier": self.lagrange.detach().clone(),
            "cost_q_mean": jc,
            "cost_limit_q": self.cost_limit_q,
            "q_mean": q.detach().mean(),
            "entropy": -logp.detach().mean(),
        }

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.networks_state(),
            "cost_critic": self.cost_critic.state_dict(),
            "cost_critic_target": self.cost_critic_target.state_dict(),
            "lagrange": self.lagrange.detach().clone(),
            "optimizer": self.optimizer.state_dict(),
            "lambda_optimizer": self.lambda_optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.load_networks_state(state)
        for k in ("cost_critic", "cost_critic_target"):
            getattr(self, k).load_state_dict(state[k])
        with torch.no_grad():
            self.lagrange.copy_(state["lagrange"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        if "lambda_optimizer" in state:
            self.lambda_optimizer.load_state_dict(state["lambda_optimizer"])
        self.updates = int(state.get("updates", 0))

"""WSRL: warm-start RL, offline-to-online fine-tuning without retaining offline data.

Zhou, Peng, Li, Levine, Kumar, "Efficient Online Reinforcement Learning Fine-Tuning Need Not
Retain Offline Data", ICLR 2025, arXiv 2412.07762, and its official code
(github.com/zhouzypaul/wsrl: `finetune.py`, `wsrl/agents/{sac,cql}.py`,
`experiments/configs/{sac,cql,wsrl,train}_config.py`, the locomotion launch scripts). Three
phases driven by `train(ctx)` (in `training.py`, a mixin of this class):

1. Pre-training on `dataset=` with Cal-QL (Nakamoto et al., arXiv 2303.05479), CQL (Kumar et
   al. 2020) or IQL (Kostrikov et al., arXiv 2110.06169), selected by `pretrain`. CQL/Cal-QL
   as the official `CQLAgent` with `--use_redq`: 10 LayerNorm critics; TD target
   r + gamma (1 - d) max_j min_{i in S} Q'_i(s', a'_j) over `cql_n_actions` next actions
   a'_j ~ pi(s') (`cql_max_target_backup`, on as in the official configs) and a random REDQ
   subset S of 2 target critics, no entropy backup; TD loss averaged over all critics; the
   CQL gap (Kumar et al. eq. 3, importance-sampled log-sum-exp over `cql_n_actions` uniform,
   pi(s) and pi(s') actions, all evaluated at s) on another random subset of 2 critics, with
   Cal-QL's bound max(Q(s, a_pi), MC(s)) on the policy actions (Cal-QL eq. 5), weight
   `cql_alpha`; actor and temperature as in fine-tuning; all losses from the same parameters
   in one step, then the Polyak update.
2. Warm-up: an empty online buffer, `warmup_steps` (5,000) env steps rolled out with the frozen
   pre-trained policy (stochastic actions), no gradient updates.
3. Fine-tuning: SAC with no CQL term and no offline data in the buffer, as the official
   `SACAgent.update_high_utd`: each update takes one batch of `batch_size` (1024), splits it
   into `utd_ratio` (4) minibatches, makes one critic step (and Polyak update) on each, then
   one actor and temperature step on the whole batch. Target r + gamma (1 - d) min over a
   random subset of 2 of the 10 target critics, without entropy term (`backup_entropy`
   false, the official default). Every network starts from pre-training.

In both phases the actor loss is E[alpha log pi(a|s) - min_i Q_i(s, a)], the minimum over the
whole ensemble (the official `policy_loss_fn`); the temperature loss is
-alpha (log pi + target_entropy) with target entropy -dim(A). Official locomotion defaults:
256x256 ReLU actor and critics, both with LayerNorm; actor std clipped to [1e-5, 10]; Adam
1e-4 (actor), 3e-4 (critic), 1e-4 (temperature); gamma 0.99, tau 0.005, initial alpha 1.

Baselines in the same class (configs `algo=wsrl_scratch|wsrl_rlpd|wsrl_no_warmup`): SAC from
scratch (`pretrain: none`, uniform random actions for the warm-up, as SAC's learning starts),
fine-tuning that keeps the offline data (`offline_ratio: 0.5`, the official RLPD launch
script's `--offline_data_ratio 0.5`), fine-tuning without warm-up (`warmup_steps: 0`). Note
that `wsrl_rlpd` pre-trains first (fine-tuning with data retention); the official RLPD
baseline starts from scratch (`--num_offline_steps 0`): `algo=wsrl_rlpd algo.pretrain=none`.

Two counters, each under its own name: pre-training moves `updates` only (its length is
`algo.pretrain_steps` gradient updates, and the schedule counts updates then); online, `step`
counts env steps from 0 to `total_steps` (the schedule counts env steps). `train/phase` is 0
(pre-training), 1 (warm-up), 2 (fine-tuning); `phase/boundary_updates` is logged once where
online starts, and `wsrl.json` in the run directory records it. Online, the run's `updates`
count critic gradient steps (`utd_ratio` per online env step).

Remaining deviations from the official code:
- Initialisation: PyTorch's default (Kaiming-uniform) instead of the official orthogonal
  init with a 1e-2 scale on the last hidden layer (`kernel_scale_final`).
- Temperature: learned as log(alpha), entropy estimated on the batch's states; the official
  code learns a softplus-parameterised multiplier and estimates the entropy on next states.
- Online updates start right after the warm-up; the official loop also waits until the
  online buffer holds batch_size * (1 - offline_ratio) transitions, which only matters when
  `warmup_steps` is below that (the no-warm-up baseline).
- Fresh Adam state at the phase switch (weights and temperature carry over); the official
  fine-tuning restores the optimiser state with the pre-trained checkpoint.
- The online buffer holds all `run.total_steps` transitions (official capacity 2M).
- `pretrain` defaults to Cal-QL, the paper's pre-training for AntMaze, Kitchen and Adroit;
  the official locomotion scripts pre-train with CQL (`algo.pretrain=cql`) for 250k steps.
  `cql_alpha` 5 is the locomotion value (Adroit uses 1).
- A resumed online phase restarts the current episode (the env state is not checkpointed).
- The IQL actor is a tanh-Gaussian trained by advantage-weighted log-likelihood of the clipped
  dataset action, so SAC can fine-tune the same network.
- Online evaluation every `eval_every` env steps; pre-training evaluation every `eval_every`
  gradient steps.

Speed option (no effect on the maths): `capture` (CUDA) records the online update's tensor
work (`_online_step`: every critic step, the actor and temperature step, the Polyak updates)
as one CUDA graph with capturable fused Adam (`roborl.core.compile.CapturedUpdate`);
pre-training stays eager. Elsewhere it runs eagerly with a one-line warning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch

from roborl.core.actor_critic import SoftActorCritic
from roborl.core.compile import CapturedUpdate, adam_kwargs
from roborl.core.errors import CheckpointError, ConfigError
from roborl.core.interfaces import Batch
from roborl.core.nn import EnsembleMLP, polyak_update
from roborl.plugins.wsrl.calql import calql_regulariser
from roborl.plugins.wsrl.config import WSRLConfig
from roborl.plugins.wsrl.training import WSRLTraining

# Official `Policy` clips the actor's std to [std_min, std_max] = [1e-5, 10].
LOG_STD_BOUNDS = (math.log(1e-5), math.log(10.0))


class WSRL(WSRLTraining, SoftActorCritic):
    name = "wsrl"
    accepts_pretrained = True  # the runner's top-level `pretrained=CKPT` is honoured
    Config = WSRLConfig
    loop = "custom"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: WSRLConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        cfg = config
        if cfg.critic_subsample > cfg.num_critics:
            raise ConfigError(
                f"algo.critic_subsample={cfg.critic_subsample} exceeds algo.num_critics="
                f"{cfg.num_critics}; the REDQ subsample must be at most the ensemble size."
            )
        if cfg.batch_size % cfg.utd_ratio:
            raise ConfigError(
                f"algo.batch_size={cfg.batch_size} is not divisible by algo.utd_ratio="
                f"{cfg.utd_ratio}: each online update splits the batch into utd_ratio equal "
                "critic minibatches (official WSRL: 1024 = 4 x 256)."
            )
        if cfg.n_step != 1:
            raise ConfigError(
                f"algo.n_step={cfg.n_step}: WSRL uses one-step targets (as the official code); "
                "set algo.n_step=1."
            )
        super().__init__(
            observation_space,
            action_space,
            config,
            device,
            num_critics=cfg.num_critics,
            critic_layer_norm=cfg.layer_norm,
            actor_layer_norm=cfg.actor_layer_norm,
            log_std_bounds=LOG_STD_BOUNDS,
        )
        self.value = EnsembleMLP(
            1, self.obs_dim, list(cfg.hidden_sizes), 1, cfg.activation, cfg.layer_norm
        ).to(self.device)  # IQL's V (unused by Cal-QL and SAC)
        self.phase = {"pretrain_updates": 0, "online_steps": 0, "pretrain_done": False}
        self.updates = 0
        self._capture = CapturedUpdate(
            self._online_step,
            enabled=cfg.capture,
            device=self.device,
            name="wsrl",
            before_capture=self._zero_grad,
        )
        self._make_optimizer()

    def _make_optimizer(self) -> None:
        cfg = self.config
        groups = [
            {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
            {"params": list(self.critic.parameters()), "lr": cfg.critic_lr},
            {"params": list(self.value.parameters()), "lr": cfg.critic_lr},
        ]
        if cfg.autotune_alpha:
            groups.append({"params": [self.log_alpha], "lr": cfg.alpha_lr})
        # One Adam with per-network learning rates: Adam is per-parameter and skips parameters
        # without a gradient, so a critic-only step leaves the actor's and alpha's state alone.
        if cfg.capture and self.device.type == "cuda":
            self.optimizer = torch.optim.Adam(groups, **adam_kwargs(self.device, capture=True))
        else:
            self.optimizer = torch.optim.Adam(groups, foreach=self.device.type == "cpu")
        self._capture.reset()  # a new optimiser (the phase switch): record the update again

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    # -- losses ------------------------------------------------------------------------------

    def q(self, obs: torch.Tensor, unit_a: torch.Tensor, detach: bool = False) -> torch.Tensor:
        return self.q_values(obs, unit_a, detach)

    def _subsample(self) -> torch.Tensor:
        """A random REDQ subset of critic indices, drawn with replacement (official code)."""
        cfg = self.config
        return torch.randint(cfg.num_critics, (cfg.critic_subsample,), device=self.device)

    def td_target(
        self,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        next_obs: torch.Tensor,
        *,
        entropy: bool,
        max_backup: bool,
    ) -> torch.Tensor:
        """r + gamma (1 - d) V(s'), V from the min over a REDQ subset of the target critics.

        `max_backup` (CQL's max-target backup) samples `cql_n_actions` next actions per state
        and keeps the largest subset-min; otherwise one next action. `entropy` subtracts
        alpha log pi(a'|s') before that choice, as the official `_process_target_next_qs`.
        """
        cfg = self.config
        n = cfg.cql_n_actions if max_backup else 1
        with torch.no_grad():
            rep = next_obs.repeat_interleave(n, 0) if n > 1 else next_obs
            next_a, next_logp = self.actor.sample(rep)
            qn = self.critic_target(torch.cat([rep, next_a], -1)).squeeze(-1)  # (E, B n)
            qn = qn[self._subsample()].min(0).values.view(-1, n)
            if entropy:
                qn = qn - self.log_alpha.exp() * next_logp.view(-1, n)
            v_next = qn.max(-1).values
            return rewards + self.config.gamma * (1.0 - terminated) * v_next

    def _actor_losses(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Actor loss E[alpha log pi - min_i Q_i(s, a)] over the whole ensemble (official
        `policy_loss_fn`; critic weights detached), temperature loss, and log pi."""
        alpha = self.log_alpha.exp().detach()
        pi_a, logp = self.actor.sample(obs)
        q_pi = self.q_values(obs, pi_a, detach=True).min(0).values
        actor_loss = (alpha * logp - q_pi).mean()
        alpha_loss = (
            -(self.log_alpha.exp() * (logp.detach() + self.target_entropy)).mean()
            if self.config.autotune_alpha
            else torch.zeros((), device=self.device)
        )
        return actor_loss, alpha_loss, logp.detach()

    def _critic_loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Online TD loss, mean over critics and samples (official `critic_loss_fn`)."""
        target = self.td_target(
            rewards, terminated, next_obs, entropy=self.config.backup_entropy, max_backup=False
        )
        q = self.q_values(obs, actions)
        return (q - target).pow(2).mean(), q.detach().mean()

    def _step(self, loss: torch.Tensor, target_update: bool = True) -> None:
        self._apply(loss, target_update)
        self.updates += 1

    def _apply(self, loss: torch.Tensor, target_update: bool = True) -> None:
        """One optimiser step on `loss` (+ Polyak); tensor work only (capturable)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if target_update:
            polyak_update(
                self.critic_target.parameters(), self.critic.parameters(), self.config.tau
            )

    def update(self, batch: Batch) -> dict[str, Any]:
        """One online update per env step, as the official `update_high_utd`.

        The batch (`batch_size` transitions) is split into `utd_ratio` minibatches; each gets
        one critic step and a Polyak update. Then one actor and temperature step on the whole
        batch, against the updated critics. With `utd_ratio` 1 all three losses take one step
        from the same parameters (the official `update`). The tensor work is `_online_step`
        (with `capture`, one CUDA graph); the step counter moves here.
        """
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        metrics = self._capture(None, obs, batch.actions, batch.rewards, next_obs, batch.terminated)
        utd = self.config.utd_ratio
        self.updates += 1 if utd == 1 else utd + 1
        return metrics

    def _online_step(
        self,
        key: Any,
        obs: torch.Tensor,
        env_actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """`update`'s tensor work: contiguous minibatch slices (static shapes), every optimiser
        step and Polyak update, metrics as tensors."""
        cfg = self.config
        actions = self.scaler.to_unit(env_actions)
        if cfg.utd_ratio == 1:
            critic_loss, q_mean = self._critic_loss(obs, actions, rewards, next_obs, terminated)
            actor_loss, alpha_loss, logp = self._actor_losses(obs)
            alpha = self.log_alpha.exp().detach()
            self._apply(critic_loss + actor_loss + alpha_loss)
        else:
            m = obs.shape[0] // cfg.utd_ratio  # contiguous minibatches, as the official reshape
            losses, qs = [], []
            for idx in (slice(i * m, (i + 1) * m) for i in range(cfg.utd_ratio)):
                c_loss, q_m = self._critic_loss(
                    obs[idx], actions[idx], rewards[idx], next_obs[idx], terminated[idx]
                )
                self._apply(c_loss)
                losses.append(c_loss.detach())
                qs.append(q_m)
            critic_loss, q_mean = torch.stack(losses).mean(), torch.stack(qs).mean()
            actor_loss, alpha_loss, logp = self._actor_losses(obs)
            alpha = self.log_alpha.exp().detach()
            self._apply(actor_loss + alpha_loss, target_update=False)
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": alpha,
            "entropy": -logp.mean(),
            "q_mean": q_mean,
        }

    def pretrain_update(self, batch: Batch) -> dict[str, Any]:
        """One Cal-QL (or CQL / IQL) gradient step on an offline batch with `extras['mc']`."""
        if self.config.pretrain == "iql":
            return self._iql_update(batch)
        cfg = self.config
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        actions = self.scaler.to_unit(batch.actions)
        target = self.td_target(
            batch.rewards,
            batch.terminated,
            next_obs,
            entropy=False,
            max_backup=cfg.cql_max_target_backup,
        )
        q = self.q_values(obs, actions)
        td_loss = (q - target).pow(2).mean()

        b, n = obs.shape[0], cfg.cql_n_actions
        rep = obs.repeat_interleave(n, 0)
        rep_next = next_obs.repeat_interleave(n, 0)
        with torch.no_grad():
            a_cur, lp_cur = self.actor.sample(rep)
            a_next, lp_next = self.actor.sample(rep_next)
        a_rand = torch.rand(b * n, self.act_dim, device=self.device) * 2 - 1
        sub = self._subsample()  # the official CQL gap uses a REDQ subset of the critics too
        q_rand = self.q_values(rep, a_rand).view(-1, b, n)[sub]
        q_cur = self.q_values(rep, a_cur).view(-1, b, n)[sub]
        q_next = self.q_values(rep, a_next).view(-1, b, n)[sub]
        mc = batch.extras.get("mc") if cfg.pretrain == "calql" else None
        gap = calql_regulariser(
            q[sub],
            q_rand,
            q_cur,
            lp_cur.view(b, n),
            q_next,
            lp_next.view(b, n),
            mc,
            self.act_dim,
            cfg.cql_temperature,
        )
        cql_loss = cfg.cql_alpha * gap.mean()
        actor_loss, alpha_loss, logp = self._actor_losses(obs)
        self._step(td_loss + cql_loss + actor_loss + alpha_loss)
        return {
            "td_loss": td_loss.detach(),
            "cql_gap": gap.detach().mean(),
            "actor_loss": actor_loss.detach(),
            "alpha": self.log_alpha.exp().detach(),
            "entropy": -logp.mean(),
            "q_mean": q.detach().mean(),
        }

    def _iql_update(self, batch: Batch) -> dict[str, Any]:
        cfg = self.config
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        actions = self.scaler.to_unit(batch.actions)
        with torch.no_grad():
            q_t = self.critic_target(torch.cat([obs, actions], -1)).squeeze(-1).min(0).values
            v_next = self.value(next_obs).squeeze(-1).squeeze(0)
            target = batch.rewards + cfg.gamma * (1.0 - batch.terminated) * v_next
        v = self.value(obs).squeeze(-1).squeeze(0)
        diff = q_t - v
        weight = torch.where(diff > 0, cfg.iql_expectile, 1 - cfg.iql_expectile)
        v_loss = (weight * diff.pow(2)).mean()
        q = self.q_values(obs, actions)
        q_loss = (q - target).pow(2).mean(-1).sum()
        adv_w = torch.exp(cfg.iql_temperature * diff.detach()).clamp(max=100.0)
        actor_loss = -(adv_w * self.actor.log_prob(obs, actions)).mean()
        self._step(v_loss + q_loss + actor_loss)
        return {"v_loss": v_loss.detach(), "td_loss": q_loss.detach(), "q_mean": q.detach().mean()}

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.networks_state(),
            "value": self.value.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
            "phase": dict(self.phase),
        }

    def load_state_dict(self, state: Mapping[str, Any], weights_only: bool = False) -> None:
        first = state["actor"].get("net.1.weight")
        has_ln = first is not None and first.dim() == 1  # LayerNorm weights are 1-d
        if self.config.hidden_sizes and has_ln != self.config.actor_layer_norm:
            raise CheckpointError(
                f"the checkpoint's WSRL actor {'has' if has_ln else 'has no'} LayerNorm but "
                f"algo.actor_layer_norm={str(self.config.actor_layer_norm).lower()} (WSRL's "
                "actor has LayerNorm since it was aligned with the official configs); load it "
                f"with algo.actor_layer_norm={str(has_ln).lower()}."
            )
        self.load_networks_state(state)
        self.value.load_state_dict(state["value"])
        if weights_only:
            return
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state.get("updates", 0))
        self._capture.reset()  # graphs recorded the replaced optimiser state
        self.phase = dict(state.get("phase", self.phase))

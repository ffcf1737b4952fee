"""Soft Actor-Critic.

Haarnoja et al., "Soft Actor-Critic Algorithms and Applications", arXiv 1812.05905 (2018),
and the authors' code (rail-berkeley/softlearning, `examples/development/variants.py`;
the first release, haarnoja/sac):

- twin soft Q critics with target networks updated by Polyak averaging, tau = 0.005
  (Sec. 5, "clipped double-Q"; target value eq. 3 with the min of the two targets);
- tanh-squashed Gaussian actor with the change-of-variables log-likelihood (Appendix C, eq. 21);
- actor loss E[alpha log pi(a|s) - min_i Q_i(s, a)] (eq. 7 with the twin-Q min);
- automatic temperature, J(alpha) = E[-alpha (log pi(a|s) + target_entropy)] with
  target_entropy = -dim(A) (eq. 18, Sec. 5), alpha learned as log(alpha) from alpha = 1;
- Adam 3e-4 for all three losses, batch 256, two hidden layers of 256 ReLU units, gamma 0.99,
  one gradient step per env step, uniform random actions before learning starts (Table 1 of
  the paper and the softlearning defaults).

Built on `roborl.core.actor_critic.SoftActorCritic` (Box check, action scaling, actor,
critic ensemble, log_alpha); both critics are one `EnsembleMLP` (stacked weights, one batched
matmul per layer).

Remaining deviations from the authors' code:

- Warm-up: softlearning collects 10 x max_path_length (10,000 on MuJoCo) uniform-random
  steps before training; here the run-level `learning_starts` (default 1,000) decides.
- Actor std: log-std clipped to [-20, 2], as in the first release (haarnoja/sac); the current
  softlearning uses std = softplus(raw) + 1e-5. Actions are learned in [-1, 1] and rescaled
  to the env's bounds.
- Update order: critic, actor and temperature losses are computed from the same parameters
  and applied with one backward pass (the actor sees the critics through detached weights,
  the temperature loss a detached log-prob, so each gradient is exactly its own loss's
  gradient). The first release ran the three updates in one graph the same way; the TF2
  softlearning, SB3 and CleanRL step the critics first, which differs by one step's staleness
  of the actor's critic.
- The critic loss is 0.5 * sum over the two critics of the mean squared TD error (SB3's
  scaling); softlearning writes each critic's loss separately, which gives the same gradients.
- `n_step` > 1 (off by default) uses n-step targets from `ReplayBuffer.sample_nstep`, an
  extension beyond the paper (which uses one-step targets).

Implementation notes (no effect on the maths):

- Fast path (`fast_update`, on by default): for ReLU networks (the default) the gradients of
  the three losses are computed by hand in `roborl.plugins.sac.fast_update` (merged 2B-row
  passes, reused buffers) and Adam's fused kernel is called directly
  (`roborl.core.compile.fused_adam_step`): 1.37x the autograd update's updates/s and
  1.66x SB3's in the same run on a loaded 2-core CPU (benchmarks/results/update_efficiency_cpu.md). Other activations, `compile` and
  `cudagraphs` take the autograd path below, which the fast path is tested against.

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
- `capture` (off by default; for CUDA): the whole update (`_update_step`: losses, gradients by
  the fast path or autograd, the Adam step, the Polyak update) is recorded once as a CUDA
  graph and replayed (`roborl.core.compile.CapturedUpdate`), with Adam `capturable` and fused.
  The shapes are already static (no data-dependent op). On CPU, with `compile`/`cudagraphs`,
  or when recording fails it runs eagerly with a one-line warning and the same numbers;
  tests/sac/test_static_update_equivalence.py pins the update to the one before the rewrite.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch

from roborl.core.actor_critic import SACConfig, SoftActorCritic
from roborl.core.compile import CapturedUpdate, CompiledCall, adam_kwargs, fused_adam_step
from roborl.core.interfaces import Batch
from roborl.core.nn import polyak_update
from roborl.core.policies import SquashedGaussianPolicy
from roborl.plugins.sac.fast_update import Workspace, fast_losses_and_grads, fast_path_reason

__all__ = ["SAC", "SACConfig", "SquashedGaussianPolicy"]


class SAC(SoftActorCritic):
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
        super().__init__(
            observation_space, action_space, config, device, num_critics=config.num_critics
        )
        cfg = config
        adam = adam_kwargs(self.device, capture=cfg.capture)
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
        # Hand-derived gradients where they apply (ReLU, eager): same losses, fewer GEMMs.
        self.fast_path = fast_path_reason(self) is None
        self.fast_workspace = Workspace()
        self.direct_adam_step = True  # fused_adam_step on the fast path (False: step())
        self._capture = CapturedUpdate(
            self._update_step,
            enabled=cfg.capture,
            device=self.device,
            name="sac",
            blocked="compile/cudagraphs are asked too (use one or the other)"
            if cfg.compile or cfg.cudagraphs
            else None,
            before_capture=self._zero_grad,
        )

    # -- learning ----------------------------------------------------------------------------

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
        """One gradient step on all three losses; metrics stay tensors (no device sync).

        The tensor work is `_update_step`, run eagerly or, with `capture`, replayed as one
        CUDA graph; the Python counters move here."""
        cfg = self.config
        obs, next_obs = batch.obs.flatten(1), batch.next_obs.flatten(1)
        discount = batch.require_discount(self.name)  # algo.gamma, set by the loop's sampler
        metrics = self._capture(
            None, obs, batch.actions, batch.rewards, next_obs, batch.terminated, discount
        )
        self.updates += 1
        if cfg.target_update_every != 1 and self.updates % cfg.target_update_every == 0:
            polyak_update(self._target_params, self._params, cfg.tau)
        return metrics

    def _update_step(
        self,
        key: Any,
        obs: torch.Tensor,
        env_actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        discount: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """The update's tensor work: losses, gradients, the Adam step and (when it is every
        step) the Polyak update; nothing that reads back from the device or moves a Python
        counter, so `CapturedUpdate` can record it."""
        actions = self.scaler.to_unit(env_actions)
        noise = torch.randn(2 * obs.shape[0], self.act_dim, device=self.device)
        args = (obs, actions, rewards, next_obs, terminated, discount, noise)
        if self.fast_path:
            metrics = fast_losses_and_grads(self, *args)  # sets every .grad
        else:
            self.optimizer.zero_grad(set_to_none=True)
            _, metrics = self._loss_call(*args, after=self._backward, reset=self._zero_grad)
        if self.fast_path and self.direct_adam_step:
            fused_adam_step(self.optimizer)  # the same kernel without step()'s bookkeeping
        else:
            self.optimizer.step()
        if self.config.target_update_every == 1:
            polyak_update(self._target_params, self._params, self.config.tau)
        return metrics

    @staticmethod
    def _backward(out: tuple[torch.Tensor, Any]) -> None:
        out[0].backward()

    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            **self.networks_state(),
            "optimizer": self.optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.load_networks_state(state)
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state.get("updates", 0))
        self._capture.reset()  # graphs recorded the replaced optimiser state

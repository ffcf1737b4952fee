"""SAC-Lagrangian's update, multiplier included, equals the equations (float64 reference).

The CMDP's Lagrangian (Altman 1999) by primal-dual descent, SACLag form (OmniSafe; Ha et al.
2020): reward critics as SAC, y_r = r + gamma (1 - d) (min_i Q'_i(s', a') - alpha log pi(a'|s'));
cost critic y_c = c + gamma_c (1 - d) Q'_c(s', a'); actor
E[(alpha log pi - min_i Q_i(s, a) + lambda Q_c(s, a)) / (1 + lambda)]; temperature as SAC;
multiplier: Adam on L(lambda) = -lambda (E[Q_c(s, pi(s))] - d_Q), projected to
[0, lambda_max], with d_Q = (d / T) (1 - gamma_c^T) / (1 - gamma_c) (the episode budget
spread over T steps and discounted). Shares only the initial weights and the actor noise.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from update_reference import (
    Adam,
    Snap,
    approx,
    assert_grads,
    assert_values,
    ensemble_forward,
    ensemble_ops,
    forward,
    polyak,
    seq_ops,
    tanh_gaussian,
)

from roborl.core.interfaces import Batch
from roborl.plugins.sac_lagrangian.sac_lagrangian import SACLagrangian, SACLagrangianConfig

OBS, ACT, B = 4, 2, 16
ACT_LOW, ACT_HIGH = np.array([-1.0, -3.0]), np.array([1.0, 1.0])
LRS = {"actor": 1e-3, "critic": 3e-3, "alpha": 2e-3, "lambda": 0.05}
T, GAMMA_C = 50, 0.9


def make(cost_limit: float, lambda_init: float, lambda_max: float) -> SACLagrangian:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(ACT_LOW.astype(np.float32), ACT_HIGH.astype(np.float32))
    cfg = SACLagrangianConfig(
        hidden_sizes=[16, 16], cost_limit=cost_limit, cost_gamma=GAMMA_C, episode_length=T,
        lambda_init=lambda_init, lambda_lr=LRS["lambda"], lambda_max=lambda_max,
        actor_lr=LRS["actor"], critic_lr=LRS["critic"], alpha_lr=LRS["alpha"],
    )  # fmt: skip
    algo = SACLagrangian(obs_space, act_space, cfg)
    with torch.no_grad():  # positive cost estimates, as a task with costs gives
        algo.cost_critic.head.bias.add_(1.0)
    return algo


def random_batch(gen: torch.Generator) -> Batch:
    low, high = torch.tensor(ACT_LOW).float(), torch.tensor(ACT_HIGH).float()
    return Batch(
        obs=torch.randn(B, OBS, generator=gen),
        actions=low + (high - low) * torch.rand(B, ACT, generator=gen),
        rewards=torch.randn(B, generator=gen),
        next_obs=torch.randn(B, OBS, generator=gen),
        terminated=(torch.rand(B, generator=gen) < 0.25).float(),
        costs=(torch.rand(B, generator=gen) < 0.5).float(),
    )


class Reference:
    def __init__(self, algo: SACLagrangian) -> None:
        self.cfg = algo.config
        self.actor, self.critic, self.target, self.cost, self.cost_t = (Snap() for _ in range(5))
        self.actor_ops = seq_ops(self.actor, [*algo.actor.net, algo.actor.head])
        self.q_ops = ensemble_ops(self.critic, algo.critic)
        self.qt_ops = ensemble_ops(self.target, algo.critic_target)
        self.qc_ops = ensemble_ops(self.cost, algo.cost_critic)[0]
        self.qct_ops = ensemble_ops(self.cost_t, algo.cost_critic_target)[0]
        self.log_alpha = algo.log_alpha.detach().double().clone().requires_grad_(True)
        self.lam = algo.lagrange.detach().double().clone().requires_grad_(True)
        self.adam = Adam()
        c = self.cfg
        self.d_q = c.cost_limit / T * (1 - GAMMA_C**T) / (1 - GAMMA_C)

    def pi(self, s, eps):
        mean, log_std = forward(s, self.actor_ops).chunk(2, -1)
        return tanh_gaussian(mean, log_std.clamp(-20.0, 2.0), eps.double())

    def step(self, batch: Batch, eps: torch.Tensor) -> dict:
        cfg = self.cfg
        s, s2 = batch.obs.double(), batch.next_obs.double()
        center = torch.tensor((ACT_HIGH + ACT_LOW) / 2)
        a = (batch.actions.double() - center) / torch.tensor((ACT_HIGH - ACT_LOW) / 2)
        r, c, d = batch.rewards.double(), batch.costs.double(), batch.terminated.double()
        alpha = self.log_alpha.detach().exp()
        lam = self.lam.detach().clamp(min=0.0)
        with torch.no_grad():
            a2, logp2 = self.pi(s2, eps[B:])
            s2a2 = torch.cat([s2, a2], -1)
            y_r = r + cfg.gamma * (1 - d) * (
                ensemble_forward(s2a2, self.qt_ops).min(0).values - alpha * logp2
            )
            y_c = c + GAMMA_C * (1 - d) * forward(s2a2, self.qct_ops).squeeze(-1)
        sa = torch.cat([s, a], -1)
        q, qc = ensemble_forward(sa, self.q_ops), forward(sa, self.qc_ops).squeeze(-1)
        j_q = sum(0.5 * ((qi - y_r) ** 2).mean() for qi in q) + 0.5 * ((qc - y_c) ** 2).mean()

        a_pi, logp = self.pi(s, eps[:B])
        spa = torch.cat([s, a_pi], -1)
        q_pi = ensemble_forward(spa, self.q_ops, detach=True).min(0).values
        qc_pi = forward(spa, self.qc_ops, detach=True).squeeze(-1)
        j_pi = ((alpha * logp - q_pi + lam * qc_pi) / (1 + lam)).mean()
        j_alpha = -(self.log_alpha.exp() * (logp.detach() - ACT)).mean()

        groups = {
            "actor": self.actor.leaves,
            "critic": self.critic.leaves + self.cost.leaves,
            "alpha": [self.log_alpha],
        }
        flat = [p for ps in groups.values() for p in ps]
        grads = list(torch.autograd.grad(j_q + j_pi + j_alpha, flat))
        out = {}
        for name, ps in groups.items():
            out[name], grads = grads[: len(ps)], grads[len(ps) :]
            self.adam.step(ps, out[name], LRS[name])

        jc = qc_pi.detach().mean()
        lam_loss = -self.lam * (jc - self.d_q)
        out["lambda"] = torch.autograd.grad(lam_loss, [self.lam])
        self.adam.step([self.lam], out["lambda"], LRS["lambda"])
        with torch.no_grad():
            self.lam.clamp_(0.0, cfg.lambda_max)
        polyak(self.target, self.critic, cfg.tau)
        polyak(self.cost_t, self.cost, cfg.tau)
        return {**out, "critic_loss": j_q, "actor_loss": j_pi, "cost_q_mean": jc}


@pytest.mark.parametrize(
    ("cost_limit", "lambda_init", "lambda_max", "lam_moves"),
    [(0.0, 0.5, 0.6, "up"), (1e4, 0.08, 100.0, "down")],
    ids=["over_budget_rises_to_the_cap", "under_budget_falls_to_zero"],
)
def test_sac_lagrangian_update_equals_the_equations(
    cost_limit: float, lambda_init: float, lambda_max: float, lam_moves: str
) -> None:
    algo = make(cost_limit, lambda_init, lambda_max)
    ref = Reference(algo)
    assert algo.cost_limit_q == approx(ref.d_q)
    gen = torch.Generator().manual_seed(1)
    lams = [lambda_init]
    for step in range(4):
        batch = random_batch(gen)
        batch.discount = torch.full((B,), algo.config.gamma)  # as the loop's sampler sets it
        torch.manual_seed(100 + step)
        eps = torch.randn(2 * B, ACT)  # the update's noise: obs rows, then next_obs rows
        torch.manual_seed(100 + step)
        got = algo.update(batch)
        want = ref.step(batch, eps)
        for key in ("critic_loss", "actor_loss", "cost_q_mean"):
            assert float(got[key]) == approx(want[key]), key
        assert_grads(ref.actor.grads(), want["actor"], what="actor")
        assert_grads(ref.critic.grads() + ref.cost.grads(), want["critic"], what="critic")
        assert float(algo.log_alpha.grad) == approx(want["alpha"][0], rel=1e-4)
        assert float(algo.lagrange.grad) == approx(want["lambda"][0], rel=1e-4)
        assert float(got["lagrange_multiplier"]) == approx(ref.lam, abs_=1e-6)
        lams.append(float(got["lagrange_multiplier"]))
    if lam_moves == "up":
        assert lams[1] > lams[0] and lams[-1] == pytest.approx(lambda_max)
    else:
        assert lams[1] < lams[0] and lams[-1] == 0.0
    for name in ("actor", "critic", "target", "cost", "cost_t"):
        snap = getattr(ref, name)
        assert_values(snap.values(), snap.leaves, what=name)

"""WSRL's pre-training (CQL, Cal-QL) and fine-tuning updates equal the equations (float64).

Pre-training, as the official `CQLAgent` with `--use_redq` (zhouzypaul/wsrl):
- TD target y = r + gamma (1 - d) max_j min_{i in S} Q'_i(s', a'_j), a'_j ~ pi(.|s'),
  j = 1..n (CQL's max-target backup), S a random subset of the target critics; TD loss the
  mean of (Q_i(s, a) - y)^2 over all critics and rows;
- CQL(H) (Kumar et al. 2020, eq. 4, importance-sampled as in their Appendix F / official
  code): per critic i of another random subset and row, T log sum_k exp(x_k / T) over
  x = {Q_i(s, a_unif) - log(1/2^d)} u {Q_i(s, a'~pi(s')) - log pi(a'|s')} u
  {Q_i(s, a~pi(s)) - log pi(a|s)}, minus Q_i(s, a_data); Cal-QL (Nakamoto et al. 2023,
  eq. 5) replaces the policy-action values by max(Q, MC(s)); loss cql_alpha * mean gap;
- actor E[alpha log pi(a|s) - min_i Q_i(s, a)] over the whole ensemble, temperature
  -alpha (log pi + target entropy); all four losses summed, one Adam step, Polyak targets.
Fine-tuning (official `update_high_utd`): the batch split into `utd_ratio` contiguous
minibatches, one TD step (target r + gamma (1 - d) min_{i in S} Q'_i(s', a'), no entropy
term) and Polyak update on each, then one actor and temperature step on the whole batch.

The reference shares the initial weights with roborl and replays the same random draws (the
same seed, drawn in the update's order: next actions, REDQ subset, ...).
"""

from __future__ import annotations

import math

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
from roborl.plugins.wsrl.wsrl import WSRL, WSRLConfig

OBS, ACT, B, N_ACT, E = 3, 2, 16, 4, 4
ACT_LOW, ACT_HIGH = np.array([-1.0, 0.0]), np.array([1.0, 2.0])
LOG_STD_BOUNDS = (math.log(1e-5), math.log(10.0))


def make(**kw) -> WSRL:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(ACT_LOW.astype(np.float32), ACT_HIGH.astype(np.float32))
    cfg = WSRLConfig(hidden_sizes=[16, 16], num_critics=E, critic_subsample=2,
                     cql_n_actions=N_ACT, batch_size=B, pretrain_batch_size=B,
                     actor_lr=1e-3, critic_lr=3e-3, alpha_lr=2e-3, **kw)  # fmt: skip
    return WSRL(obs_space, act_space, cfg)


def random_batch(gen: torch.Generator) -> Batch:
    low, high = torch.tensor(ACT_LOW).float(), torch.tensor(ACT_HIGH).float()
    return Batch(
        obs=torch.randn(B, OBS, generator=gen),
        actions=low + (high - low) * torch.rand(B, ACT, generator=gen),
        rewards=torch.randn(B, generator=gen),
        next_obs=torch.randn(B, OBS, generator=gen),
        terminated=(torch.rand(B, generator=gen) < 0.25).float(),
        # MC returns around the critics' initial values, so max(Q, MC) takes either side
        extras={"mc": 0.3 * torch.randn(B, generator=gen)},
    )


class Reference:
    def __init__(self, algo: WSRL) -> None:
        self.cfg = algo.config
        self.actor, self.critic, self.target = Snap(), Snap(), Snap()
        self.actor_ops = seq_ops(self.actor, [*algo.actor.net, algo.actor.head])
        self.q_ops = ensemble_ops(self.critic, algo.critic)
        self.qt_ops = ensemble_ops(self.target, algo.critic_target)
        self.log_alpha = algo.log_alpha.detach().double().clone().requires_grad_(True)
        self.adam = Adam()

    def pi(self, s: torch.Tensor, eps: torch.Tensor):
        mean, log_std = forward(s, self.actor_ops).chunk(2, -1)
        return tanh_gaussian(mean, log_std.clamp(*LOG_STD_BOUNDS), eps.double())

    def q(self, s, a, detach: bool = False) -> torch.Tensor:
        return ensemble_forward(torch.cat([s, a], -1), self.q_ops, detach)

    def actor_losses(self, s, eps):
        alpha = self.log_alpha.exp()
        a_pi, logp = self.pi(s, eps)
        actor = (alpha.detach() * logp - self.q(s, a_pi, detach=True).min(0).values).mean()
        temp = -(alpha * (logp.detach() + (-float(ACT)))).mean()
        return actor, temp

    def step(self, loss: torch.Tensor, polyak_update: bool = True) -> dict:
        params = {"actor": self.actor.leaves, "critic": self.critic.leaves}
        flat = [*params["actor"], *params["critic"], self.log_alpha]
        grads = torch.autograd.grad(loss, flat, allow_unused=True)
        na, nc = len(params["actor"]), len(params["critic"])
        out = {
            "actor": list(grads[:na]),
            "critic": list(grads[na : na + nc]),
            "alpha": [grads[-1]],
        }
        self.adam.step(params["actor"], out["actor"], self.cfg.actor_lr)
        self.adam.step(params["critic"], out["critic"], self.cfg.critic_lr)
        self.adam.step([self.log_alpha], out["alpha"], self.cfg.alpha_lr)
        if polyak_update:
            polyak(self.target, self.critic, self.cfg.tau)
        return out

    def pretrain(self, batch: Batch, draws: dict, calql: bool) -> dict:
        cfg, n = self.cfg, N_ACT
        s, s2 = batch.obs.double(), batch.next_obs.double()
        center = torch.tensor((ACT_HIGH + ACT_LOW) / 2)
        a = (batch.actions.double() - center) / torch.tensor((ACT_HIGH - ACT_LOW) / 2)
        r, d = batch.rewards.double(), batch.terminated.double()
        with torch.no_grad():  # max over n next actions of the subset-min target Q
            s2n = s2.repeat_interleave(n, 0)
            a2, _ = self.pi(s2n, draws["eps_target"])
            qn = ensemble_forward(torch.cat([s2n, a2], -1), self.qt_ops)[draws["sub_target"]]
            y = r + cfg.gamma * (1 - d) * qn.min(0).values.view(B, n).max(-1).values
        q = self.q(s, a)
        td = ((q - y) ** 2).mean()

        with torch.no_grad():
            sn = s.repeat_interleave(n, 0)
            a_cur, lp_cur = self.pi(sn, draws["eps_cur"])
            a_nxt, lp_nxt = self.pi(s2n, draws["eps_next"])
        a_unif = draws["unif"].double() * 2 - 1
        sub = draws["sub_cql"]
        q_unif = self.q(sn, a_unif)[sub].view(-1, B, n)
        q_cur = self.q(sn, a_cur)[sub].view(-1, B, n)
        q_nxt = self.q(sn, a_nxt)[sub].view(-1, B, n)
        if calql:
            mc = batch.extras["mc"].double().view(1, B, 1)
            q_cur, q_nxt = torch.maximum(q_cur, mc), torch.maximum(q_nxt, mc)
        x = torch.cat(
            [
                q_unif - ACT * math.log(0.5),
                q_nxt - lp_nxt.view(1, B, n),
                q_cur - lp_cur.view(1, B, n),
            ],
            -1,
        )
        t = cfg.cql_temperature
        lse = t * torch.log(torch.exp(x / t).sum(-1))
        gap = lse - q[sub]
        actor, temp = self.actor_losses(s, draws["eps_actor"])
        out = self.step(td + cfg.cql_alpha * gap.mean() + actor + temp)
        return {**out, "td_loss": td, "cql_gap": gap.mean(), "actor_loss": actor, "q_mean": q}

    def online(self, batch: Batch, draws: list) -> dict:
        cfg = self.cfg
        s, s2 = batch.obs.double(), batch.next_obs.double()
        center = torch.tensor((ACT_HIGH + ACT_LOW) / 2)
        a = (batch.actions.double() - center) / torch.tensor((ACT_HIGH - ACT_LOW) / 2)
        r, d = batch.rewards.double(), batch.terminated.double()
        m = B // cfg.utd_ratio
        if cfg.utd_ratio == 1:  # the official `update`: all losses from the same parameters
            eps, sub = draws[0]
            with torch.no_grad():
                a2, _ = self.pi(s2, eps)
                qn = ensemble_forward(torch.cat([s2, a2], -1), self.qt_ops)[sub]
                y = r + cfg.gamma * (1 - d) * qn.min(0).values
            loss = ((self.q(s, a) - y) ** 2).mean()
            actor, temp = self.actor_losses(s, draws[-1])
            out = self.step(loss + actor + temp)
            return {"critic_loss": loss, "actor_loss": actor,
                    "critic_grads": [out], "actor_grads": out}  # fmt: skip
        losses, grads = [], []
        for k in range(cfg.utd_ratio):
            rows = slice(k * m, (k + 1) * m)
            eps, sub = draws[k]
            with torch.no_grad():
                a2, _ = self.pi(s2[rows], eps)
                qn = ensemble_forward(torch.cat([s2[rows], a2], -1), self.qt_ops)[sub]
                y = r[rows] + cfg.gamma * (1 - d[rows]) * qn.min(0).values
            loss = ((self.q(s[rows], a[rows]) - y) ** 2).mean()
            losses.append(loss.detach())
            grads.append(self.step(loss))
        actor, temp = self.actor_losses(s, draws[-1])
        last = self.step(actor + temp, polyak_update=False)
        return {"critic_loss": torch.stack(losses).mean(), "actor_loss": actor,
                "critic_grads": grads, "actor_grads": last}  # fmt: skip


def pretrain_draws(seed: int) -> dict:
    """The pre-training update's random draws, in its order, from the same seed."""
    torch.manual_seed(seed)
    return {
        "eps_target": torch.randn(B * N_ACT, ACT),
        "sub_target": torch.randint(E, (2,)),
        "eps_cur": torch.randn(B * N_ACT, ACT),
        "eps_next": torch.randn(B * N_ACT, ACT),
        "unif": torch.rand(B * N_ACT, ACT),
        "sub_cql": torch.randint(E, (2,)),
        "eps_actor": torch.randn(B, ACT),
    }


@pytest.mark.parametrize("pretrain", ["calql", "cql"])
def test_pretrain_update_equals_cql_and_calql_equations(pretrain: str) -> None:
    algo = make(pretrain=pretrain, cql_alpha=2.0)
    ref = Reference(algo)
    gen = torch.Generator().manual_seed(1)
    for step in range(3):
        batch = random_batch(gen)
        draws = pretrain_draws(100 + step)
        torch.manual_seed(100 + step)
        got = algo.pretrain_update(batch)
        want = ref.pretrain(batch, draws, calql=pretrain == "calql")
        for key in ("td_loss", "cql_gap", "actor_loss"):
            assert float(got[key]) == approx(want[key]), key
        assert float(got["q_mean"]) == approx(want["q_mean"].mean())
        assert_grads(ref.critic.grads(), want["critic"], what="critic")
        assert_grads(ref.actor.grads(), want["actor"], what="actor")
        assert float(algo.log_alpha.grad) == approx(want["alpha"][0], rel=1e-4)
    for name in ("actor", "critic", "target"):
        snap = getattr(ref, name)
        assert_values(snap.values(), snap.leaves, what=name)
    assert float(algo.log_alpha.detach()) == approx(ref.log_alpha, abs_=5e-6)


def test_calql_bound_changes_the_loss_on_the_test_batch() -> None:
    """On the batch above, MC(s) is above some policy-action values and below others, so
    Cal-QL's max(Q, MC) matters (CQL and Cal-QL give different gaps)."""
    gaps = []
    for pretrain in ("calql", "cql"):
        algo = make(pretrain=pretrain, cql_alpha=2.0)
        torch.manual_seed(100)
        gaps.append(
            float(algo.pretrain_update(random_batch(torch.Generator().manual_seed(1)))["cql_gap"])
        )
    assert abs(gaps[0] - gaps[1]) > 1e-3


@pytest.mark.parametrize("utd", [1, 2])
def test_online_update_equals_the_high_utd_equations(utd: int) -> None:
    algo = make(pretrain="none", utd_ratio=utd)
    ref = Reference(algo)
    gen = torch.Generator().manual_seed(2)
    m = B // utd
    for step in range(3):
        batch = random_batch(gen)
        torch.manual_seed(200 + step)
        draws: list = [(torch.randn(m, ACT), torch.randint(E, (2,))) for _ in range(utd)]
        draws.append(torch.randn(B, ACT))
        torch.manual_seed(200 + step)
        got = algo.update(batch)
        want = ref.online(batch, draws)
        for key in ("critic_loss", "actor_loss"):
            assert float(got[key]) == approx(want[key]), key
        assert_grads(ref.actor.grads(), want["actor_grads"]["actor"], what="actor")
        assert float(algo.log_alpha.grad) == approx(want["actor_grads"]["alpha"][0], rel=1e-4)
        if utd == 1:  # one step for all losses: the critic's gradient is the TD loss's
            assert_grads(ref.critic.grads(), want["critic_grads"][0]["critic"], what="critic")
    for name in ("actor", "critic", "target"):
        snap = getattr(ref, name)
        assert_values(snap.values(), snap.leaves, what=name)

"""IQL's and RIQL's `update` equal their papers' equations on a fixed batch (float64 reference).

IQL (Kostrikov et al. 2021, arXiv 2110.06169): expectile regression of V towards the min of
the target critics (eq. 5), advantage-weighted regression of the actor with the updated V
(eq. 7, w = min(exp(beta A), 100)), MSE of each Q towards r + gamma (1 - d) V(s') (eq. 6),
Adam for each network, the actor's cosine learning rate, Polyak targets. RIQL (Yang et al.
2024, arXiv 2310.12955) changes: normalised observations, the alpha-quantile of the ensemble
in place of the min (Sec. 4.3), Huber loss with threshold delta for Q (Sec. 4.2) and targets
clipped to [-100, 1000] (official code), a deterministic actor regressed by w ||pi(s) - a||^2.
The reference below is written from those equations; it shares only the initial weights with
roborl.
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
)

from roborl.core.interfaces import Batch
from roborl.plugins.offline.iql import IQL, RIQL, IQLConfig, RIQLConfig

OBS, ACT, B = 4, 2, 24
ACT_LOW, ACT_HIGH = np.array([-2.0, 0.0]), np.array([2.0, 1.0])
HORIZON = 4  # cosine horizon: the actor's learning rate changes at every one of the steps


def make(cls, cfg_cls, **kw):
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(ACT_LOW.astype(np.float32), ACT_HIGH.astype(np.float32))
    cfg = cfg_cls(hidden_sizes=[16, 16], batch_size=B, max_steps=HORIZON,
                  actor_lr=1e-2, critic_lr=3e-3, value_lr=5e-3, **kw)  # fmt: skip
    algo = cls(obs_space, act_space, cfg)
    # Non-trivial statistics, as `prepare(dataset)` would set them.
    algo.reward_scale.fill_(2.5 if not isinstance(algo, RIQL) else 1.0)
    if cfg.normalize_obs:
        algo.obs_mean.copy_(torch.tensor([0.3, -0.2, 0.1, 0.5]))
        algo.obs_std.copy_(torch.tensor([1.5, 0.7, 2.0, 1.1]))
    return algo


def random_batch(gen: torch.Generator, big_rewards: bool) -> Batch:
    low, high = torch.tensor(ACT_LOW).float(), torch.tensor(ACT_HIGH).float()
    rewards = 2.0 * torch.randn(B, generator=gen)
    if big_rewards:  # RIQL's target clip [-100, 1000] must bite on some rows
        rewards[:3] = torch.tensor([1500.0, -400.0, 2000.0])
    return Batch(
        obs=torch.randn(B, OBS, generator=gen),
        actions=low + (high - low) * torch.rand(B, ACT, generator=gen),
        rewards=rewards,
        next_obs=torch.randn(B, OBS, generator=gen),
        terminated=(torch.rand(B, generator=gen) < 0.25).float(),
    )


def quantile(q: torch.Tensor, alpha: float) -> torch.Tensor:
    """Linear-interpolation alpha-quantile over axis 0 (numpy's default definition)."""
    k = q.shape[0]
    s = q.sort(0).values
    pos = alpha * (k - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


class Reference:
    def __init__(self, algo: IQL) -> None:
        self.cfg = algo.config
        self.actor, self.critic, self.target, self.value = Snap(), Snap(), Snap(), Snap()
        self.actor_ops = seq_ops(self.actor, list(algo.actor.net))
        self.log_std = self.actor.add(algo.actor.log_std)
        self.q_ops = ensemble_ops(self.critic, algo.critic)
        self.qt_ops = ensemble_ops(self.target, algo.critic_target)
        self.v_ops = ensemble_ops(self.value, algo.value)
        self.mean = algo.obs_mean.double().clone()
        self.std = algo.obs_std.double().clone()
        self.r_scale = float(algo.reward_scale)
        self.adams = {k: Adam() for k in ("actor", "critic", "value")}
        self.t = 0

    def step(self, batch: Batch) -> dict:
        cfg = self.cfg
        s = (batch.obs.double() - self.mean) / self.std
        s2 = (batch.next_obs.double() - self.mean) / self.std
        center = torch.tensor((ACT_HIGH + ACT_LOW) / 2)
        scale = torch.tensor((ACT_HIGH - ACT_LOW) / 2)
        a = (batch.actions.double() - center) / scale
        r, d = batch.rewards.double() * self.r_scale, batch.terminated.double()
        sa = torch.cat([s, a], -1)
        out = {}

        with torch.no_grad():
            q_all = ensemble_forward(sa, self.qt_ops)
            q_t = q_all.min(0).values if cfg.quantile is None else quantile(q_all, cfg.quantile)
        # eq. 5: L_V = E[|tau - 1(u < 0)| u^2], u = Q_target(s, a) - V(s)
        u = q_t - ensemble_forward(s, self.v_ops)[0]
        tau = cfg.expectile
        out["value_loss"] = (torch.abs(tau - (u < 0).double()) * u**2).mean()
        out["value_grads"] = torch.autograd.grad(out["value_loss"], self.value.leaves)
        self.adams["value"].step(self.value.leaves, out["value_grads"], cfg.value_lr)

        # eq. 7 with the updated V: w = min(exp(beta (Q - V)), 100)
        with torch.no_grad():
            adv = q_t - ensemble_forward(s, self.v_ops)[0]
            w = torch.minimum(torch.exp(cfg.beta * adv), torch.tensor(cfg.max_weight))
        mu = torch.tanh(forward(s, self.actor_ops))
        if cfg.deterministic_actor:
            out["actor_loss"] = (w * ((mu - a) ** 2).sum(-1)).mean()
        else:
            log_std = self.log_std.clamp(-5.0, 2.0)
            logp = (
                -0.5 * ((a - mu) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
            ).sum(-1)
            out["actor_loss"] = -(w * logp).mean()
        out["adv_mean"] = adv.mean()
        leaves = self.actor.leaves
        grads = torch.autograd.grad(out["actor_loss"], leaves, allow_unused=True)
        out["actor_grads"] = list(grads)
        lr = cfg.actor_lr * 0.5 * (1 + math.cos(math.pi * min(self.t, HORIZON) / HORIZON))
        self.adams["actor"].step(leaves, grads, lr)

        # eq. 6: y = r + gamma (1 - d) V(s'); MSE (IQL) or Huber/delta (RIQL) per critic
        with torch.no_grad():
            y = r + cfg.gamma * (1 - d) * ensemble_forward(s2, self.v_ops)[0]
            if cfg.target_clip is not None:
                y = y.clamp(*cfg.target_clip)
        diff = ensemble_forward(sa, self.q_ops) - y
        if cfg.huber_delta is None:
            per = diff**2
        else:
            k = cfg.huber_delta
            per = torch.where(diff.abs() < k, 0.5 * diff**2 / k, diff.abs() - 0.5 * k)
        out["critic_loss"] = per.mean(1).sum()
        out["critic_grads"] = torch.autograd.grad(out["critic_loss"], self.critic.leaves)
        self.adams["critic"].step(self.critic.leaves, out["critic_grads"], cfg.critic_lr)
        polyak(self.target, self.critic, cfg.tau)
        self.t += 1
        return out


@pytest.mark.parametrize(
    ("cls", "cfg_cls", "kw"),
    [
        (IQL, IQLConfig, {}),
        (IQL, IQLConfig, {"num_critics": 3, "beta": 10.0, "max_weight": 5.0}),
        (RIQL, RIQLConfig, {}),
        (RIQL, RIQLConfig, {"quantile": 0.6, "huber_delta": 0.5, "num_critics": 4}),
    ],
    ids=["iql", "iql_clipped_weights", "riql", "riql_other_quantile"],
)
def test_iql_update_equals_the_equations(cls, cfg_cls, kw) -> None:
    algo = make(cls, cfg_cls, **kw)
    ref = Reference(algo)
    gen = torch.Generator().manual_seed(1)
    for _ in range(HORIZON + 1):  # the last step runs at learning rate 0 for the actor
        batch = random_batch(gen, big_rewards=cls is RIQL)
        got = algo.update(batch)
        want = ref.step(batch)
        for key in ("value_loss", "actor_loss", "critic_loss", "adv_mean"):
            assert float(got[key]) == approx(want[key]), key
        assert_grads(ref.value.grads(), want["value_grads"], what="value")
        assert_grads(ref.actor.grads(), want["actor_grads"], what="actor")
        assert_grads(ref.critic.grads(), want["critic_grads"], what="critic")
    for name in ("actor", "critic", "target", "value"):
        snap = getattr(ref, name)
        assert_values(snap.values(), snap.leaves, what=name)


def test_iql_weights_are_not_trivial_on_the_test_batch() -> None:
    """The advantage weights in the test above vary (a weight of 1 everywhere, plain BC, would
    give another actor loss) and some hit the cap; some RIQL targets are clipped."""
    algo = make(IQL, IQLConfig, num_critics=3, beta=10.0, max_weight=5.0)
    ref = Reference(algo)
    batch = random_batch(torch.Generator().manual_seed(1), big_rewards=False)
    s = batch.obs.double()
    center = torch.tensor((ACT_HIGH + ACT_LOW) / 2)
    a = (batch.actions.double() - center) / torch.tensor((ACT_HIGH - ACT_LOW) / 2)
    with torch.no_grad():
        q_t = ensemble_forward(torch.cat([s, a], -1), ref.qt_ops).min(0).values
        w = torch.exp(10.0 * (q_t - ensemble_forward(s, ref.v_ops)[0])).clamp(max=5.0)
    assert float(w.std()) > 0.3 and bool((w == 5.0).any()) and bool((w < 1.0).any())

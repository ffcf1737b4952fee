"""FISOR's `update` equals the paper's equations on fixed batches (float64 reference).

Zheng et al., ICLR 2024 (arXiv 2401.10700), with the official code's choices that the FISOR
docstring lists. Per step, in the official order:
- h(s) = +cost_scale where the step's cost > 0, else -1 (h > 0 is a violation);
- actor (Sec. 3.3, eq. 13-15) from the values *before* this step's value updates: DDPM
  noise-prediction loss E_t,eps[w ||eps_theta(sqrt(abar_t) a + sqrt(1 - abar_t) eps, s, t) -
  eps||^2], with
      w = 1[V_h(s) <= 0] 1[Q_h(s, a) <= 0] clip(exp(3 (Q_r(s, a) - V_r(s))), 0, 100)
        + 1[V_h(s) > 0] clip(exp(5 (V_h(s) - Q_h(s, a))), 0, 150),
  Q_r = min and Q_h = max over the target ensembles; VP beta schedule; Adam with a cosine
  learning rate; the sampling actor an EMA of the trained one;
- V_r: expectile 0.9 of min_i Q'_r,i (IQL); V_h: *reversed* expectile, weight 1 - tau_h where
  Q_h > V_h and tau_h where Q_h < V_h, towards max_i Q'_h,i (eq. 9), one Adam for both;
- Q_r <- r + gamma (1 - d) V_r(s'); Q_h <- (1 - gamma) h + gamma max(h, V_h(s')), h at
  terminals (eq. 8), from the updated values; MSE over ensemble and batch; Polyak targets.
The diffusion noise (t, eps) is the update's own draw from torch's generator, replayed here.
Everything else is written from the equations and shares only the initial weights.
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
from roborl.plugins.fisor.fisor import FISOR, FISORConfig

OBS, ACT, B = 3, 2, 32
ACT_LOW, ACT_HIGH = np.array([-2.0, 0.0]), np.array([2.0, 1.0])
DECAY = 3  # cosine horizon of the actor's learning rate: it changes at every step
LRS = {"actor": 1e-2, "critic": 3e-3}


def make(**kw) -> FISOR:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(ACT_LOW.astype(np.float32), ACT_HIGH.astype(np.float32))
    cfg = FISORConfig(
        hidden_sizes=[16, 16], actor_width=16, actor_blocks=2, actor_dropout=0.0,
        actor_lr=LRS["actor"], critic_lr=LRS["critic"], actor_decay_steps=DECAY,
        actor_tau=0.2, tau=0.1, batch_size=B, **kw,
    )  # fmt: skip
    algo = FISOR(obs_space, act_space, cfg)
    algo.reward_scale.fill_(2.5)  # as `prepare(dataset)` would set it
    # spread the values so that every branch of the weight is taken (V_h's shift -0.4: at -0.3
    # one time-MLP weight's first gradient was 6e-8 of its leaf's largest, below float32
    # resolution, and Adam's first step (+-lr whatever |g|) made float32 and float64 differ)
    with torch.no_grad():
        for net, gain, shift in (
            (algo.q_r, 6.0, 2.0), (algo.q_r_target, 6.0, 2.0), (algo.v_r, 4.0, 0.3),
            (algo.q_h, 6.0, -1.0), (algo.q_h_target, 6.0, -1.0), (algo.v_h, 6.0, -0.4),
        ):  # fmt: skip
            net.head.weight.mul_(gain)
            net.head.bias.add_(shift)
    return algo


def random_batch(gen: torch.Generator) -> Batch:
    low, high = torch.tensor(ACT_LOW).float(), torch.tensor(ACT_HIGH).float()
    actions = low + (high - low) * torch.rand(B, ACT, generator=gen)
    actions[:2] = high  # on the bound: the update's [-1 + 1e-5, 1 - 1e-5] clamp bites
    return Batch(
        obs=torch.randn(B, OBS, generator=gen),
        actions=actions,
        rewards=torch.randn(B, generator=gen),
        next_obs=torch.randn(B, OBS, generator=gen),
        terminated=(torch.rand(B, generator=gen) < 0.25).float(),
        costs=(torch.rand(B, generator=gen) < 0.4).float() * torch.rand(B, generator=gen),
    )


def vp_alphas_bar(T: int) -> torch.Tensor:
    """IDQL's / FISOR's discretised VP schedule, b_min 0.1, b_max 10, then prod(1 - beta)."""
    t = torch.arange(1, T + 1, dtype=torch.float64)
    beta = 1 - torch.exp(-0.1 / T - 0.5 * (10.0 - 0.1) * (2 * t - 1) / T**2)
    return torch.cumprod(1 - beta, 0)


class DiffusionRef:
    """The noise model eps_theta(a_t, s, t) as the official ln_resnet, on float64 copies."""

    def __init__(self, snap: Snap, actor) -> None:
        self.fourier = snap.add(actor.time[0].w)  # (d/2, 1)
        self.time_ops = seq_ops(snap, list(actor.time)[1:])
        net = list(actor.net)
        self.in_ops = seq_ops(snap, [net[0]])
        self.blocks = []
        for block in net[1:-2]:
            body = list(block.body)
            assert isinstance(body[0], torch.nn.Identity)  # dropout 0
            self.blocks.append(seq_ops(snap, body[1:]))
        self.out_ops = seq_ops(snap, net[-2:])

    def eps(self, s, a_t, t):
        f = 2 * math.pi * t[:, None].double() @ self.fourier.t()
        cond = forward(torch.cat([f.cos(), f.sin()], -1), self.time_ops)
        x = forward(torch.cat([a_t, s, cond], -1), self.in_ops)
        for ops in self.blocks:
            x = x + forward(x, ops)
        return forward(x, self.out_ops)


class Reference:
    def __init__(self, algo: FISOR) -> None:
        self.cfg = algo.config
        self.actor, self.actor_t = Snap(), Snap()
        self.critic, self.target, self.value = Snap(), Snap(), Snap()
        self.pi = DiffusionRef(self.actor, algo.actor)
        DiffusionRef(self.actor_t, algo.actor_target)
        assert len(self.actor.leaves) == len(list(algo.actor.parameters()))
        self.qr_ops = ensemble_ops(self.critic, algo.q_r)
        self.qh_ops = ensemble_ops(self.critic, algo.q_h)
        self.qrt_ops = ensemble_ops(self.target, algo.q_r_target)
        self.qht_ops = ensemble_ops(self.target, algo.q_h_target)
        self.vr_ops = ensemble_ops(self.value, algo.v_r)[0]
        self.vh_ops = ensemble_ops(self.value, algo.v_h)[0]
        self.r_scale = float(algo.reward_scale)
        self.abar = vp_alphas_bar(self.cfg.diffusion_steps)
        self.adams = {k: Adam() for k in ("actor", "critic", "value")}
        self.k = 0

    def v(self, ops, s):
        return forward(s, ops).squeeze(-1)

    def step(self, batch: Batch, rng_state: torch.Tensor) -> dict:
        cfg = self.cfg
        s, s2 = batch.obs.double(), batch.next_obs.double()
        center = torch.tensor((ACT_HIGH + ACT_LOW) / 2)
        a = ((batch.actions.double() - center) / torch.tensor((ACT_HIGH - ACT_LOW) / 2)).clamp(
            -1 + 1e-5, 1 - 1e-5
        )
        r, d = batch.rewards.double() * self.r_scale, batch.terminated.double()
        h = torch.where(batch.costs > 0, cfg.cost_scale, -1.0).double()
        sa = torch.cat([s, a], -1)
        out = {}

        # actor: feasibility-guided weights from the values before this step's updates
        with torch.no_grad():
            q_r = ensemble_forward(sa, self.qrt_ops).min(0).values
            q_h = ensemble_forward(sa, self.qht_ops).max(0).values
            v_r, v_h = self.v(self.vr_ops, s), self.v(self.vh_ops, s)
            w_feas = (
                (v_h <= 0).double()
                * (q_h <= 0).double()
                * torch.exp(cfg.reward_temperature * (q_r - v_r)).clamp(0, cfg.reward_weight_clip)
            )
            w_infeas = (v_h > 0).double() * torch.exp(cfg.cost_temperature * (v_h - q_h)).clamp(
                0, cfg.cost_weight_clip
            )
            w = w_feas + w_infeas
        gen_state = torch.get_rng_state()
        torch.set_rng_state(rng_state)  # the update's own draws: t, then eps
        t = torch.randint(0, cfg.diffusion_steps, (B,))
        noise = torch.randn(B, ACT).double()
        torch.set_rng_state(gen_state)
        abar = self.abar[t][:, None]
        a_t = abar.sqrt() * a + (1 - abar).sqrt() * noise
        per = ((self.pi.eps(s, a_t, t) - noise) ** 2).sum(-1)
        out["actor_loss"] = (w * per).mean()
        out["actor_grads"] = torch.autograd.grad(out["actor_loss"], self.actor.leaves)
        lr = cfg.actor_lr * 0.5 * (1 + math.cos(math.pi * min(self.k, DECAY) / DECAY))
        self.adams["actor"].step(self.actor.leaves, out["actor_grads"], lr)
        polyak(self.actor_t, self.actor, cfg.actor_tau)
        out.update(weight=w, feasible=(v_h <= 0).double(), v_h_before=v_h)

        # values: expectile towards min Q'_r, reversed expectile towards max Q'_h
        u_r = q_r - self.v(self.vr_ops, s)
        u_h = q_h - self.v(self.vh_ops, s)
        tau_r, tau_h = cfg.reward_expectile, cfg.cost_expectile
        l_vr = (torch.abs(tau_r - (u_r < 0).double()) * u_r**2).mean()
        l_vh = (torch.abs(tau_h - (u_h > 0).double()) * u_h**2).mean()
        out["value_loss"] = l_vr + l_vh
        out["value_grads"] = torch.autograd.grad(out["value_loss"], self.value.leaves)
        self.adams["value"].step(self.value.leaves, out["value_grads"], cfg.critic_lr)

        # critics from the updated values
        with torch.no_grad():
            y_r = r + cfg.gamma * (1 - d) * self.v(self.vr_ops, s2)
            y_h = torch.where(
                d > 0,
                h,
                (1 - cfg.gamma) * h + cfg.gamma * torch.maximum(h, self.v(self.vh_ops, s2)),
            )
        l_qr = ((ensemble_forward(sa, self.qr_ops) - y_r) ** 2).mean()
        l_qh = ((ensemble_forward(sa, self.qh_ops) - y_h) ** 2).mean()
        out["critic_loss"] = l_qr + l_qh
        out["critic_grads"] = torch.autograd.grad(out["critic_loss"], self.critic.leaves)
        self.adams["critic"].step(self.critic.leaves, out["critic_grads"], cfg.critic_lr)
        polyak(self.target, self.critic, cfg.tau)
        self.k += 1
        return out


@pytest.mark.parametrize("cost_scale", [25.0, 1.0], ids=["official_h", "unit_h"])
def test_fisor_update_equals_the_equations(cost_scale: float) -> None:
    torch.set_num_threads(1)
    algo = make(cost_scale=cost_scale)
    ref = Reference(algo)
    gen = torch.Generator().manual_seed(1)
    seen = {"feasible": 0.0, "infeasible": 0.0, "qh_veto": 0.0, "clip_r": 0.0, "clip_c": 0.0}
    seen["infeasible_below_1"] = 0.0  # official clip(., 0, cost_ub): unsafe actions fade to 0
    for step in range(DECAY + 1):  # the last actor step runs at learning rate 0
        batch = random_batch(gen)
        torch.manual_seed(100 + step)
        rng_state = torch.get_rng_state()
        got = algo.update(batch)
        want = ref.step(batch, rng_state)
        for key in ("actor_loss", "value_loss", "critic_loss"):
            assert float(got[key]) == approx(want[key]), key
        assert got["weight_mean"] == approx(want["weight"].mean())
        assert got["feasible_frac"] == approx(want["feasible"].mean())
        assert got["v_h"] == approx(want["v_h_before"].mean())
        assert_grads(ref.actor.grads(), want["actor_grads"], what="actor")
        assert_grads(ref.value.grads(), want["value_grads"], what="value")
        assert_grads(ref.critic.grads(), want["critic_grads"], what="critic")
        w, feas = want["weight"], want["feasible"] > 0
        seen["feasible"] += float(feas.sum())
        seen["infeasible"] += float((~feas).sum())
        seen["qh_veto"] += float((feas & (w == 0)).sum())
        seen["clip_r"] += float((feas & (w == algo.config.reward_weight_clip)).sum())
        seen["clip_c"] += float((~feas & (w == algo.config.cost_weight_clip)).sum())
        seen["infeasible_below_1"] += float((~feas & (w < 1)).sum())
    # every branch of the weight was exercised on these batches
    assert all(n > 0 for n in seen.values()), seen
    for name in ("actor", "actor_t", "critic", "target", "value"):
        snap = getattr(ref, name)
        assert_values(snap.values(), snap.leaves, what=name)

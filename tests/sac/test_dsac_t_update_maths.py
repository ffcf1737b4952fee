"""DSAC-T's update (critic, delayed actor and temperature) equals the equations (float64).

Duan et al. 2025 (arXiv 2310.05858) and the official DSAC-v2 code: Gaussian return
distributions N(mean_i, std_i^2), std = softplus(raw); next action from the target actor;
the next distribution from the critic with the smaller next mean (refinement 2), with the
return sample mean' + clip(eps, -3, 3) std'; expected target y = r + gamma (1 - d)
(mean' - alpha log pi') (refinement 1), sampled target y_s likewise, bounded to
mean +- 3 sigma_bar with sigma_bar the tau_b-average of the batch-mean std (refinement 3);
critic loss per critic E[w (huber(mean, y) + std (std_d^2 - huber(mean_d, y_bound)) /
(std_d + 0.1))], w = clip(sigma_bar^2 / (std_d^2 + 0.1), 0.1, 10), Huber delta 50; every
`delay_update`-th call the actor loss E[alpha log pi - min_i mean_i(s, a)], the temperature
loss -log_alpha E[log pi + target_entropy], and Polyak updates of target critics and actor.
All gradients from the pre-step networks; Adam. Shares the initial weights and the noise.
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
    ensemble_ops,
    forward,
    polyak,
    seq_ops,
    tanh_gaussian,
)

from roborl.core.interfaces import Batch
from roborl.plugins.sac.dsac_t import DSACT, DSACTConfig

OBS, ACT, B = 4, 2, 16
ACT_LOW, ACT_HIGH = np.array([-1.0, -2.0]), np.array([1.0, 2.0])
LRS = {"actor": 1e-3, "critic": 2e-3, "alpha": 3e-3}
TAU_B = 0.3


def make(activation: str) -> DSACT:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(ACT_LOW.astype(np.float32), ACT_HIGH.astype(np.float32))
    cfg = DSACTConfig(hidden_sizes=[16, 16], activation=activation, tau_b=TAU_B,
                      actor_lr=LRS["actor"], critic_lr=LRS["critic"], alpha_lr=LRS["alpha"])  # fmt: skip
    return DSACT(obs_space, act_space, cfg)


def random_batch(gen: torch.Generator) -> Batch:
    low, high = torch.tensor(ACT_LOW).float(), torch.tensor(ACT_HIGH).float()
    rewards = torch.randn(B, generator=gen)
    rewards[:2] = torch.tensor([120.0, -90.0])  # beyond the Huber threshold 50
    return Batch(
        obs=torch.randn(B, OBS, generator=gen),
        actions=low + (high - low) * torch.rand(B, ACT, generator=gen),
        rewards=rewards,
        next_obs=torch.randn(B, OBS, generator=gen),
        terminated=(torch.rand(B, generator=gen) < 0.25).float(),
    )


def huber(x: torch.Tensor, y: torch.Tensor, delta: float = 50.0) -> torch.Tensor:
    u = (x - y).abs()
    return torch.where(u < delta, 0.5 * u**2, delta * (u - 0.5 * delta))


class Reference:
    def __init__(self, algo: DSACT) -> None:
        self.cfg = cfg = algo.config
        self.actor, self.actor_t, self.critic, self.target = (Snap() for _ in range(4))
        self.actor_ops = seq_ops(self.actor, [*algo.actor.net, algo.actor.head])
        self.actor_t_ops = seq_ops(self.actor_t, [*algo.actor_target.net, algo.actor_target.head])
        self.q_ops = ensemble_ops(self.critic, algo.critic, cfg.activation)
        self.qt_ops = ensemble_ops(self.target, algo.critic_target, cfg.activation)
        self.log_alpha = algo.log_alpha.detach().double().clone().requires_grad_(True)
        self.sigma_bar: torch.Tensor | None = None
        self.adam = Adam()
        self.calls = 0

    @staticmethod
    def pi(ops, s, eps):
        mean, log_std = forward(s, ops).chunk(2, -1)
        return tanh_gaussian(mean, log_std.clamp(-20.0, 0.5), eps.double())

    @staticmethod
    def dist(members, s, a, detach: bool = False):
        out = torch.stack([forward(torch.cat([s, a], -1), m, detach) for m in members])
        return out[..., 0], torch.nn.functional.softplus(out[..., 1])

    def step(self, batch: Batch, noise: torch.Tensor, q_noise: torch.Tensor) -> dict:
        cfg = self.cfg
        self.calls += 1
        with_actor = self.calls % cfg.delay_update == 0
        s, s2 = batch.obs.double(), batch.next_obs.double()
        center = torch.tensor((ACT_HIGH + ACT_LOW) / 2)
        a = (batch.actions.double() - center) / torch.tensor((ACT_HIGH - ACT_LOW) / 2)
        r, d = batch.rewards.double(), batch.terminated.double()
        noise, q_noise = noise.double(), q_noise.double()
        alpha = self.log_alpha.detach().exp()

        mean, std = self.dist(self.q_ops, s, a)
        with torch.no_grad():
            batch_std = std.mean(-1)
            sb = batch_std if self.sigma_bar is None else self.sigma_bar
            self.sigma_bar = sb = (1 - TAU_B) * sb + TAU_B * batch_std
            a2, logp2 = self.pi(self.actor_t_ops, s2, noise[B:])
            m2, s2d = self.dist(self.qt_ops, s2, a2)
            j = (m2[1] < m2[0]).long()  # the critic with the smaller next mean
            rows = torch.arange(B)
            q_next = m2[j, rows]
            q_sample = (m2 + q_noise.clamp(-3, 3) * s2d)[j, rows]
            y = r + cfg.gamma * (1 - d) * (q_next - alpha * logp2)
            y_s = r + cfg.gamma * (1 - d) * (q_sample - alpha * logp2)
            bound = 3 * sb[:, None]
            y_bound = mean + torch.maximum(torch.minimum(y_s - mean, bound), -bound)
            std_d = std.detach()
            w = (sb[:, None] ** 2 / (std_d**2 + 0.1)).clamp(0.1, 10.0)
        per = w * (
            huber(mean, y) + std * (std_d**2 - huber(mean.detach(), y_bound)) / (std_d + 0.1)
        )
        critic_loss = per.mean(-1).sum()
        loss, out = critic_loss, {"critic_loss": critic_loss, "with_actor": with_actor}
        if with_actor:
            a_pi, logp = self.pi(self.actor_ops, s, noise[:B])
            actor_loss = (
                alpha * logp - self.dist(self.q_ops, s, a_pi, True)[0].min(0).values
            ).mean()
            loss = loss + actor_loss - self.log_alpha * (logp.detach() - ACT).mean()
            out["actor_loss"] = actor_loss
        groups = {
            "critic": self.critic.leaves,
            "actor": self.actor.leaves,
            "alpha": [self.log_alpha],
        }
        flat = [p for ps in groups.values() for p in ps]
        grads = list(torch.autograd.grad(loss, flat, allow_unused=True))
        for name, ps in groups.items():
            out[name], grads = grads[: len(ps)], grads[len(ps) :]
            self.adam.step(ps, out[name], LRS[name])
        if with_actor:
            polyak(self.target, self.critic, cfg.tau)
            polyak(self.actor_t, self.actor, cfg.tau)
        return out


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_dsac_t_update_equals_the_equations(activation: str) -> None:
    algo = make(activation)
    ref = Reference(algo)
    gen = torch.Generator().manual_seed(1)
    for step in range(4):
        batch = random_batch(gen)
        batch.discount = torch.full((B,), algo.config.gamma)  # as the loop's sampler sets it
        torch.manual_seed(100 + step)
        noise, q_noise = torch.randn(2 * B, ACT), torch.randn(2, B)  # the update's draws
        torch.manual_seed(100 + step)
        got = algo.update(batch)
        want = ref.step(batch, noise, q_noise)
        assert float(got["critic_loss"]) == approx(want["critic_loss"])
        assert float(got["sigma_bar"]) == approx(ref.sigma_bar.mean())
        assert_grads(ref.critic.grads(), want["critic"], what="critic")
        if want["with_actor"]:
            assert float(got["actor_loss"]) == approx(want["actor_loss"])
            assert_grads(ref.actor.grads(), want["actor"], what="actor")
            assert float(algo.log_alpha.grad) == approx(want["alpha"][0], rel=1e-4)
        else:
            assert "actor_loss" not in got and algo.log_alpha.grad is None
    for name in ("actor", "actor_t", "critic", "target"):
        snap = getattr(ref, name)
        assert_values(snap.values(), snap.leaves, what=name)
    assert float(algo.log_alpha.detach()) == approx(ref.log_alpha, abs_=5e-6)

"""DrQ's, RLPD's and SERL's pixel SAC update equals the papers' equations (float64 reference).

DrQ (Kostrikov et al. 2021, Algorithm 1, eqs. 3-4): features f(s) of the randomly shifted
image (obs and next obs shifted independently); y = r + gamma (1 - d) (min_j Q'_j(f'(s'), a')
- alpha log pi(a'|f(s'))), a' ~ pi(f(s')), where f' is the Polyak target encoder; critic
loss mean_j (Q_j(f(s), a) - y)^2, whose gradient trains the encoder too; actor
E[alpha log pi(a|f) - min_j Q_j(f, a)] on detached features; temperature
-alpha (log pi + target entropy); Adam; Polyak on critics (tau) and encoder (encoder_tau).
RLPD (Ball et al. 2023, Sec. 3; its pixel config): LayerNorm critics, an ensemble of 10 with
the target from one random critic (SERL: min over a random 2), the ensemble mean in the actor
loss, temperature towards -|A|/2, `critic_steps`
critic steps on minibatches split from the batch (demo and online rows evenly), then one actor
and temperature step on the last minibatch's features (computed before its critic step).
SERL's preset (rail-berkeley/serl, make_drq_agent): discount 0.96, tanh and LayerNorm in
actor and critics, no entropy term in the target.

The reference reuses only the initial weights, the augmented images (recorded from the
update's own shift, whose crop is tested in test_pixel_sac.py) and the random state right
after the shift, from which it draws the same actor noise and critic subsets.
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

from roborl.core.algorithms import resolve_algorithm
from roborl.core.compose import compose_dict
from roborl.core.interfaces import Batch
from roborl.core.plugins import get_host
from roborl.plugins.pixel_sac.drq import RLPD, DrQ

H, ACT, B = 16, 2, 16
ACT_LOW, ACT_HIGH = np.array([-1.0, 0.0]), np.array([1.0, 3.0])
SMALL = {"hidden_sizes": [16, 16], "batch_size": B, "feature_dim": 8, "conv_channels": 4,
         "conv_layers": 2, "actor_lr": 1e-3, "critic_lr": 2e-3, "alpha_lr": 3e-3}  # fmt: skip


def obs_space() -> gym.spaces.Dict:
    return gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (H, H, 3), np.uint8),
            "state": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        }
    )


def make(preset: str, **kw) -> DrQ:
    algo_cfg = compose_dict(get_host(), [f"algo={preset}"], "train")["algo"]
    cls, config = resolve_algorithm(get_host(), {**algo_cfg, **SMALL, **kw})
    torch.manual_seed(0)
    act_space = gym.spaces.Box(ACT_LOW.astype(np.float32), ACT_HIGH.astype(np.float32))
    return cls(obs_space(), act_space, config)


def random_batch(gen: torch.Generator, demos: bool) -> Batch:
    def obs() -> dict[str, torch.Tensor]:
        return {
            "image": torch.randint(0, 256, (B, H, H, 3), generator=gen, dtype=torch.uint8),
            "state": torch.rand(B, 3, generator=gen) * 2 - 1,
        }

    low, high = torch.tensor(ACT_LOW).float(), torch.tensor(ACT_HIGH).float()
    extras = {}
    if demos:  # demo rows scattered, as a buffer's symmetric sampling may place them
        extras["is_demo"] = torch.randperm(B, generator=gen) < B // 2
    return Batch(
        obs=obs(),
        actions=low + (high - low) * torch.rand(B, ACT, generator=gen),
        rewards=torch.randn(B, generator=gen),
        next_obs=obs(),
        terminated=(torch.rand(B, generator=gen) < 0.25).float(),
        extras=extras,
    )


class ShiftRecorder:
    """Wraps the update's shift: keeps its outputs and the random state just after it."""

    def __init__(self, shift) -> None:
        self.shift, self.out, self.rng = shift, [], None

    def __call__(self, *args):
        y = self.shift(*args)
        self.out.append(y)
        self.rng = torch.get_rng_state()
        return y


class Reference:
    def __init__(self, algo: DrQ) -> None:
        self.cfg = cfg = algo.config
        self.enc, self.enc_t, self.actor, self.critic, self.target = (Snap() for _ in range(5))
        self.enc_ops = self.encoder(self.enc, algo.encoder)
        self.enc_t_ops = self.encoder(self.enc_t, algo.encoder_target)
        self.actor_ops = seq_ops(self.actor, [*algo.actor.net, algo.actor.head])
        self.q_ops = ensemble_ops(self.critic, algo.critic, cfg.activation)
        self.qt_ops = ensemble_ops(self.target, algo.critic_target, cfg.activation)
        self.log_alpha = algo.log_alpha.detach().double().clone().requires_grad_(True)
        # SAC's/DrQ's -|A|; RLPD's and SERL's code: -|A|/2.
        self.target_entropy = -ACT / 2 if isinstance(algo, RLPD) else -ACT
        self.adam = Adam()

    @staticmethod
    def encoder(snap: Snap, enc) -> tuple:
        return seq_ops(snap, list(enc.convs["image"])), seq_ops(snap, list(enc.trunks["image"]))

    @staticmethod
    def features(ops, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """conv -> Linear/LayerNorm/tanh trunk on image / 255 - 0.5, state appended."""
        conv, trunk = ops
        return torch.cat([forward(forward(image / 255.0 - 0.5, conv), trunk), state], -1)

    def pi(self, f: torch.Tensor, eps: torch.Tensor):
        mean, log_std = forward(f, self.actor_ops).chunk(2, -1)
        lo, hi = self.cfg.log_std_min, self.cfg.log_std_max
        return tanh_gaussian(mean, log_std.clamp(lo, hi), eps.double())

    def minibatches(self, batch: Batch) -> list[torch.Tensor]:
        k = self.cfg.critic_steps
        if "is_demo" not in batch.extras:
            return list(torch.arange(B).chunk(k))
        demo = batch.extras["is_demo"].nonzero().squeeze(-1).tensor_split(k)
        online = (~batch.extras["is_demo"]).nonzero().squeeze(-1).tensor_split(k)
        return [torch.cat([d, o]) for d, o in zip(demo, online, strict=True)]

    def update(self, batch: Batch, img: torch.Tensor, next_img: torch.Tensor, rng) -> dict:
        cfg = self.cfg
        torch.set_rng_state(rng)
        img, next_img = img.double(), next_img.double()
        st, st2 = batch.obs["state"].double(), batch.next_obs["state"].double()
        center = torch.tensor((ACT_HIGH + ACT_LOW) / 2)
        a = (batch.actions.double() - center) / torch.tensor((ACT_HIGH - ACT_LOW) / 2)
        r, d = batch.rewards.double(), batch.terminated.double()
        alpha = self.log_alpha.detach().exp()
        losses = []
        for idx in self.minibatches(batch):
            eps = torch.randn(len(idx), ACT)
            with torch.no_grad():
                a2, logp2 = self.pi(self.features(self.enc_ops, next_img[idx], st2[idx]), eps)
                f2_t = self.features(self.enc_t_ops, next_img[idx], st2[idx])
                q2 = ensemble_forward(torch.cat([f2_t, a2], -1), self.qt_ops)
                if cfg.critic_subsample is not None and cfg.critic_subsample < cfg.num_critics:
                    q2 = q2[torch.randperm(cfg.num_critics)[: cfg.critic_subsample]]
                v2 = q2.min(0).values - (alpha * logp2 if cfg.backup_entropy else 0.0)
                y = r[idx] + cfg.gamma * (1 - d[idx]) * v2
            feat = self.features(self.enc_ops, img[idx], st[idx])
            q = ensemble_forward(torch.cat([feat, a[idx]], -1), self.q_ops)
            loss = ((q - y) ** 2).mean()
            params = self.enc.leaves + self.critic.leaves
            critic_grads = torch.autograd.grad(loss, params)
            self.adam.step(params, critic_grads, cfg.critic_lr)
            polyak(self.target, self.critic, cfg.tau)
            polyak(self.enc_t, self.enc, cfg.encoder_tau)
            losses.append(loss.detach())

        feat = feat.detach()  # the last minibatch's features, from before its critic step
        a_pi, logp = self.pi(feat, torch.randn(len(feat), ACT))
        q_pi = ensemble_forward(torch.cat([feat, a_pi], -1), self.q_ops, detach=True)
        q_pi = q_pi.min(0).values if cfg.actor_q == "min" else q_pi.mean(0)
        actor_loss = (alpha * logp - q_pi).mean()
        actor_grads = torch.autograd.grad(actor_loss, self.actor.leaves)
        self.adam.step(self.actor.leaves, actor_grads, cfg.actor_lr)
        alpha_loss = -(self.log_alpha.exp() * (logp.detach() + self.target_entropy)).mean()
        alpha_grad = torch.autograd.grad(alpha_loss, [self.log_alpha])
        self.adam.step([self.log_alpha], alpha_grad, cfg.alpha_lr)
        return {
            "critic_loss": torch.stack(losses).mean(),
            "actor_loss": actor_loss,
            "q_mean": q.mean(),
            "alpha": alpha,
            "critic_grads": critic_grads,
            "actor_grads": actor_grads,
            "alpha_grad": alpha_grad[0],
        }


@pytest.mark.parametrize(
    ("preset", "kw", "demos"),
    [
        ("drq", {}, False),
        ("drq", {"critic_steps": 2, "shift_next_obs": "same"}, False),
        ("rlpd", {}, True),
        ("rlpd", {"critic_steps": 1}, False),
        ("serl", {}, True),
    ],
    ids=["drq", "drq_two_critic_steps", "rlpd", "rlpd_one_step", "serl"],
)
def test_pixel_sac_update_equals_the_equations(preset: str, kw: dict, demos: bool) -> None:
    algo = make(preset, **kw)
    assert isinstance(algo, RLPD) is (preset != "drq")
    if preset == "serl":
        assert (algo.config.activation, algo.config.backup_entropy) == ("tanh", False)
    ref = Reference(algo)
    gen = torch.Generator().manual_seed(1)
    for step in range(3):
        batch = random_batch(gen, demos)
        batch.discount = torch.full((B,), algo.config.gamma)  # as the loop's sampler sets it
        rec = algo.shift = ShiftRecorder(algo.shift)
        torch.manual_seed(100 + step)
        got = algo.update(batch)
        if algo.config.shift_next_obs == "same":
            (img, next_img), = rec.out  # fmt: skip
        else:
            img, next_img = rec.out
        want = ref.update(batch, img, next_img, rec.rng)
        algo.shift = rec.shift
        for key in ("critic_loss", "actor_loss", "q_mean", "alpha"):
            assert float(got[key]) == approx(want[key]), key
        assert_grads(ref.enc.grads() + ref.critic.grads(), want["critic_grads"], what="critic")
        assert_grads(ref.actor.grads(), want["actor_grads"], what="actor")
        assert float(algo.log_alpha.grad) == approx(want["alpha_grad"], rel=1e-4)
    for name in ("enc", "enc_t", "actor", "critic", "target"):
        snap = getattr(ref, name)
        assert_values(snap.values(), snap.leaves, what=name)
    assert float(algo.log_alpha.detach()) == approx(ref.log_alpha, abs_=5e-6)

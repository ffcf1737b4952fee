"""SAC's update (the hand-derived fast path and the autograd path) equals a plain reference.

The reference below is written straight from Haarnoja et al. 2018 ("Soft Actor-Critic
Algorithms and Applications", eqs. 3, 5, 7, 18 and Appendix C) in float64 with autograd:
twin-Q min in the target, entropy term, tanh-Gaussian log-likelihood, automatic temperature,
Adam, Polyak-averaged targets. It shares nothing with roborl's code but the initial weights
and the Gaussian noise (drawn from the same seed).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.interfaces import Batch
from roborl.plugins.sac.sac import SAC, SACConfig

OBS, ACT, B = 5, 3, 32
GAMMA, TAU, TARGET_ENTROPY = 0.99, 0.005, -float(ACT)
LRS = {"actor": 1e-3, "critic": 3e-4, "alpha": 2e-3}
ACT_LOW, ACT_HIGH = np.array([-2.0, -1.0, 0.0]), np.array([2.0, 3.0, 1.0])


def mlp(x, layers):
    """layers: [(W (in, out), b (out,))]; ReLU between them."""
    for i, (w, b) in enumerate(layers):
        x = x @ w + b
        if i < len(layers) - 1:
            x = torch.relu(x)
    return x


def actor_sample(x, layers, eps):
    """Reparameterised tanh-Gaussian sample and log pi (Appendix C, eq. 21)."""
    mean, log_std = mlp(x, layers).chunk(2, -1)
    log_std = log_std.clamp(-20.0, 2.0)  # the first SAC release's bounds
    u = mean + log_std.exp() * eps
    gauss = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(
        -1
    )
    a = torch.tanh(u)
    return a, gauss - torch.log(1 - a**2).sum(-1)


def q_values(s, a, critics):
    return torch.stack([mlp(torch.cat([s, a], -1), layers).squeeze(-1) for layers in critics])


def snapshot(sac: SAC) -> dict:
    """The algorithm's weights as float64 leaf tensors in the reference's layout."""

    def leaf(t):
        return t.detach().double().clone().requires_grad_(True)

    lin = [m for m in sac.actor.net if isinstance(m, torch.nn.Linear)] + [sac.actor.head]
    actor = [(leaf(m.weight.t()), leaf(m.bias)) for m in lin]

    def critics(net):
        layers = [*net.linears, net.head]
        return [
            [(leaf(m.weight[i]), leaf(m.bias[i, 0])) for m in layers] for i in range(net.ensemble)
        ]

    return {
        "actor": actor,
        "critic": critics(sac.critic),
        "target": critics(sac.critic_target),
        "log_alpha": leaf(sac.log_alpha),
    }


def flat(layers):
    return [t for pair in layers for t in pair]


def reference_step(ref: dict, adam: dict, batch: Batch, eps: torch.Tensor) -> dict:
    """One SAC gradient step from the equations; returns losses and gradients."""
    s, s2 = batch.obs.double(), batch.next_obs.double()
    center, scale = (ACT_HIGH + ACT_LOW) / 2, (ACT_HIGH - ACT_LOW) / 2
    a = (batch.actions.double() - torch.tensor(center)) / torch.tensor(scale)
    r, d = batch.rewards.double(), batch.terminated.double()
    eps = eps.double()
    alpha = ref["log_alpha"].exp()

    with torch.no_grad():  # eq. 3: soft target with the min of the two target critics
        a2, logp2 = actor_sample(s2, ref["actor"], eps[B:])
        y = r + GAMMA * (1 - d) * (q_values(s2, a2, ref["target"]).min(0).values - alpha * logp2)
    q = q_values(s, a, ref["critic"])
    j_q = sum(0.5 * ((q[i] - y) ** 2).mean() for i in range(len(q)))  # eq. 5 per critic

    a_pi, logp = actor_sample(s, ref["actor"], eps[:B])
    frozen = [[(w.detach(), b.detach()) for w, b in layers] for layers in ref["critic"]]
    j_pi = (alpha.detach() * logp - q_values(s, a_pi, frozen).min(0).values).mean()  # eq. 7
    j_alpha = (-alpha * (logp.detach() + TARGET_ENTROPY)).mean()  # eq. 18

    groups = {
        "critic": [t for layers in ref["critic"] for t in flat(layers)],
        "actor": flat(ref["actor"]),
        "alpha": [ref["log_alpha"]],
    }
    grads = {
        "critic": torch.autograd.grad(j_q, groups["critic"]),
        "actor": torch.autograd.grad(j_pi, groups["actor"]),
        "alpha": torch.autograd.grad(j_alpha, groups["alpha"]),
    }
    with torch.no_grad():  # Adam (Kingma & Ba 2015, Algorithm 1), then Polyak targets
        for name, params in groups.items():
            for p, g in zip(params, grads[name], strict=True):
                st = adam.setdefault(
                    id(p), {"m": torch.zeros_like(p), "v": torch.zeros_like(p), "t": 0}
                )
                st["t"] += 1
                st["m"] = 0.9 * st["m"] + 0.1 * g
                st["v"] = 0.999 * st["v"] + 0.001 * g * g
                m_hat, v_hat = st["m"] / (1 - 0.9 ** st["t"]), st["v"] / (1 - 0.999 ** st["t"])
                p -= LRS[name] * m_hat / (v_hat.sqrt() + 1e-8)
        for tl, cl in zip(ref["target"], ref["critic"], strict=True):
            for t, c in zip(flat(tl), flat(cl), strict=True):
                t.copy_((1 - TAU) * t + TAU * c)
    return {"critic_loss": j_q, "actor_loss": j_pi, "alpha_loss": j_alpha, "grads": grads}


def make_sac(fast: bool, hidden: list[int], critics: int) -> SAC:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(ACT_LOW.astype(np.float32), ACT_HIGH.astype(np.float32))
    cfg = SACConfig(
        hidden_sizes=hidden, num_critics=critics, gamma=GAMMA, tau=TAU, fast_update=fast,
        actor_lr=LRS["actor"], critic_lr=LRS["critic"], alpha_lr=LRS["alpha"],
    )  # fmt: skip
    return SAC(obs_space, act_space, cfg)


def random_batch(gen: torch.Generator) -> Batch:
    low, high = torch.tensor(ACT_LOW).float(), torch.tensor(ACT_HIGH).float()
    return Batch(
        obs=torch.randn(B, OBS, generator=gen),
        actions=low + (high - low) * torch.rand(B, ACT, generator=gen),
        rewards=torch.randn(B, generator=gen),
        next_obs=torch.randn(B, OBS, generator=gen),
        terminated=(torch.rand(B, generator=gen) < 0.25).float(),
        discount=torch.full((B,), GAMMA),  # what the loop's sampler sets from algo.gamma
    )


def sac_grads(sac: SAC) -> dict:
    """The algorithm's gradients after an update, in the reference's layout and order."""
    lin = [m for m in sac.actor.net if isinstance(m, torch.nn.Linear)] + [sac.actor.head]
    layers = [*sac.critic.linears, sac.critic.head]
    return {
        "critic": [
            g
            for i in range(sac.critic.ensemble)
            for m in layers
            for g in (m.weight.grad[i], m.bias.grad[i, 0])
        ],
        "actor": [g for m in lin for g in (m.weight.grad.t(), m.bias.grad)],
        "alpha": [sac.log_alpha.grad],
    }


@pytest.mark.parametrize("fast", [True, False], ids=["fast_path", "autograd"])
@pytest.mark.parametrize(("hidden", "critics"), [([64, 64], 2), ([16, 24, 32], 3)])
def test_sac_update_equals_the_equations(fast: bool, hidden: list[int], critics: int) -> None:
    sac = make_sac(fast, hidden, critics)
    assert sac.fast_path is fast
    ref, adam = snapshot(sac), {}
    gen = torch.Generator().manual_seed(1)
    for step in range(3):  # step 1 initialises Adam's state; later steps take the direct kernel
        batch = random_batch(gen)
        torch.manual_seed(100 + step)
        eps = torch.randn(2 * B, ACT)  # the update's noise: obs rows, then next_obs rows
        torch.manual_seed(100 + step)
        metrics = sac.update(batch)
        alpha_used = float(ref["log_alpha"].detach().exp())
        want = reference_step(ref, adam, batch, eps)

        for key in ("critic_loss", "actor_loss"):
            assert float(metrics[key]) == pytest.approx(want[key].item(), rel=1e-5, abs=1e-6)
        assert float(metrics["alpha"]) == pytest.approx(alpha_used, rel=1e-6)
        got = sac_grads(sac)
        for name, grads in want["grads"].items():
            for g_ref, g in zip(grads, got[name], strict=True):
                scale = g_ref.abs().max().item() + 1e-12
                assert (g.double() - g_ref).abs().max().item() <= 2e-5 * scale, name
        # J(alpha) = -alpha E[log pi + target_entropy] is linear in alpha = exp(log_alpha),
        # so its gradient in log_alpha equals its value: this pins the temperature loss.
        assert float(sac.log_alpha.grad) == pytest.approx(want["alpha_loss"].item(), rel=1e-4)

    now = snapshot(sac)
    for key in ("actor", "critic", "target"):
        for want_t, got_t in zip(
            flat(ref[key]) if key == "actor" else [t for ls in ref[key] for t in flat(ls)],
            flat(now[key]) if key == "actor" else [t for ls in now[key] for t in flat(ls)],
            strict=True,
        ):
            torch.testing.assert_close(got_t, want_t, rtol=0, atol=5e-6)
    torch.testing.assert_close(now["log_alpha"], ref["log_alpha"], rtol=0, atol=5e-6)


def test_fast_path_applies_only_where_its_backward_is_valid() -> None:
    """Other activations and compiled losses keep the autograd update, by name."""
    from roborl.plugins.sac.fast_update import fast_path_reason

    assert make_sac(True, [8], 2).fast_path
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)
    tanh = SAC(obs_space, act_space, SACConfig(hidden_sizes=[8], activation="tanh"))
    assert not tanh.fast_path and "activation=tanh" in fast_path_reason(tanh)


def _no_fallback(*args, **kwargs):
    raise AssertionError("fused_adam_step fell back to Optimizer.step")


def test_direct_fused_adam_step_is_bitwise_adam_and_skips_missing_grads() -> None:
    """`fused_adam_step` (the SAC and DSAC-T step) equals `Adam(fused=True).step()` exactly,
    including steps where some parameters have no gradient (DSAC-T's critic-only steps)."""
    from roborl.core.compile import fused_adam_kwargs, fused_adam_step

    gen = torch.Generator().manual_seed(0)
    shapes = [(4, 3), (3,), (2, 5)]
    init = [torch.randn(s, generator=gen) for s in shapes]
    pairs = []
    for _ in range(2):
        params = [t.clone().requires_grad_(True) for t in init]
        groups = [{"params": params[:2], "lr": 1e-2}, {"params": params[2:], "lr": 3e-3}]
        pairs.append((params, torch.optim.Adam(groups, **fused_adam_kwargs("cpu"))))
    for step in range(4):
        grads = [torch.randn(s, generator=gen) for s in shapes]
        for i, (params, opt) in enumerate(pairs):
            for j, (p, g) in enumerate(zip(params, grads, strict=True)):
                p.grad = None if (step == 2 and j == 2) else g.clone()
            opt.step() if i == 0 else fused_adam_step(opt)
        if step == 0:  # state exists now: the direct kernel must not fall back to step()
            pairs[1][1].step = _no_fallback
    for a, b in zip(pairs[0][0], pairs[1][0], strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(pairs[0][0][0], init[0])

"""Tests of DSAC-T (roborl/plugins/sac/dsac_t.py) written against the mutants that `make
mutants` found alive there (tests/mutants-report.md): the target and loss functions on hand
values (tie-breaking between the two critics, the +-3 sigma clip of the return noise and of
the sampled target, the 0.1..10 weight clip, every returned entry), the metrics an update
returns, the network layout and learning rates, the update counter, and the compile/capture
settings reaching their wrappers. The update's maths is tests/sac/test_dsac_t_update_maths.py.
"""

from __future__ import annotations

import copy
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from compile_retry import assert_failed_compile_retries_cleanly
from random_batch import random_batch

from roborl.core.interfaces import Batch
from roborl.plugins.sac.dsac_t import (
    ACTOR_LOG_STD_BOUNDS,
    BIAS,
    DSACT,
    TD_BOUND,
    DSACTConfig,
    dsac_t_critic_loss,
    dsac_t_targets,
)

OBS, ACT, B = 4, 2, 16
F64 = torch.float64


def t(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def test_targets_on_hand_values() -> None:
    """Ties go to critic 0 (its sample, its std); the return noise is clipped to +-3; the
    sampled target is clipped to mean +- 3 sigma_bar; every entry is returned."""
    rewards, terminated = t(1.0, 2.0, 0.5), t(0.0, 0.0, 1.0)
    next_mean = t([1.0, 2.0, 5.0], [1.0, 1.0, 7.0])  # column 0: a tie
    next_std = t([1.0, 0.5, 2.0], [3.0, 1.0, 4.0])
    next_logp = t(0.5, -1.0, 0.0)
    mean = t([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    sigma_bar = t(0.1, 10.0)
    noise = t([5.0, -6.0, 0.5], [-7.0, -6.0, 2.0])  # +-5, -6, -7: beyond TD_BOUND
    out = dsac_t_targets(
        rewards, terminated, 0.9, next_mean, next_std, next_logp, 0.2, mean, sigma_bar, noise
    )
    assert set(out) == {"target", "target_sample", "target_bound", "q_next"}
    q_next = t(1.0, 1.0, 5.0)  # the lower mean, critic 0 on the tie
    torch.testing.assert_close(out["q_next"], q_next)
    cont = t(0.9, 0.9, 0.0)
    torch.testing.assert_close(out["target"], rewards + cont * (q_next - 0.2 * next_logp))
    # the chosen critic's sample, its noise clipped to +-TD_BOUND
    sample = t(1.0 + TD_BOUND * 1.0, 1.0 - TD_BOUND * 1.0, 5.0 + 0.5 * 2.0)
    target_sample = rewards + cont * (sample - 0.2 * next_logp)
    torch.testing.assert_close(out["target_sample"], target_sample)
    bound = TD_BOUND * sigma_bar[:, None]
    want = mean + torch.maximum(torch.minimum(target_sample - mean, bound), -bound)
    torch.testing.assert_close(out["target_bound"], want)
    torch.testing.assert_close(out["target_bound"][0], t(1.3, 0.7, 0.7))  # clipped both ways


def test_critic_loss_weight_is_clipped_to_its_bounds() -> None:
    mean = t([0.0, 1.0, 2.0], [0.5, 0.5, 0.5])
    std = t([0.01, 1.0, 100.0], [1.0, 2.0, 3.0])
    sigma_bar = t(2.0, 2.0)
    target, target_bound = t(0.0, 1.0, 2.0), t([0.0, 1.0, 2.0], [0.5, 0.5, 0.5])
    loss, ratio = dsac_t_critic_loss(mean, std, sigma_bar, target, target_bound)
    raw = sigma_bar[:, None] ** 2 / (std**2 + BIAS)
    torch.testing.assert_close(ratio, raw.clamp(0.1, 10.0))
    assert ratio[0, 0] == 10.0 and ratio[0, 2] == pytest.approx(0.1)
    assert ratio.min() == pytest.approx(0.1) and ratio.max() == 10.0
    assert loss.shape == ()


def make(**overrides) -> DSACT:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(-np.ones(ACT, np.float32), np.ones(ACT, np.float32))
    return DSACT(obs_space, act_space, DSACTConfig(**{"hidden_sizes": [16, 16], **overrides}))


def batch(seed: int, discount: bool = True) -> Batch:
    return random_batch(seed, B, OBS, ACT, discount=0.99 if discount else None)


def test_layout_learning_rates_and_frozen_actor_target() -> None:
    algo = make(actor_lr=1e-2, critic_lr=2e-3, alpha_lr=5e-4)
    assert [g["lr"] for g in algo.optimizer.param_groups] == [2e-3, 1e-2, 5e-4]
    out = algo.critic(torch.zeros(3, OBS + ACT))
    assert out.shape == (2, 3, 2)  # two critics, each a mean and a raw std
    assert not any(p.requires_grad for p in algo.actor_target.parameters())
    with torch.no_grad():
        algo.actor.head.weight.zero_()
        algo.actor.head.bias.fill_(50.0)
    _, log_std = algo.actor(torch.zeros(1, OBS))
    assert float(log_std.detach().max()) == ACTOR_LOG_STD_BOUNDS[1]


def test_update_metrics_and_counter() -> None:
    algo = make(delay_update=1)
    data = batch(1)
    with torch.no_grad():
        mean, std = algo.distribution(data.obs, data.actions)
        torch.manual_seed(3)
        noise = torch.randn(2 * B, ACT)
        _, logp = algo.actor.sample(data.obs, noise[:B])
    sigma_bar = std.mean(-1)  # the first update starts the average at the batch's
    ratio = (sigma_bar[:, None] ** 2 / (std**2 + BIAS)).clamp(0.1, 10.0)
    torch.manual_seed(3)
    m = algo.update(data)
    assert set(m) == {
        "critic_loss", "q_mean", "q_std", "sigma_bar", "weight_mean", "alpha", "actor_loss",
        "entropy",
    }  # fmt: skip
    assert float(m["q_mean"]) == pytest.approx(float(mean.mean()), rel=1e-5, abs=1e-7)
    assert float(m["q_std"]) == pytest.approx(float(std.mean()), rel=1e-5)
    assert float(m["weight_mean"]) == pytest.approx(float(ratio.mean()), rel=1e-5)
    assert float(m["alpha"]) == pytest.approx(algo.config.init_alpha, rel=1e-6)
    assert float(m["entropy"]) == pytest.approx(float(-logp.mean()), rel=1e-5)
    for n in range(2, 4):
        algo.update(batch(n))
        assert algo.updates == n


def test_checkpoint_round_trip_and_old_checkpoints() -> None:
    a = make()
    a.update(batch(0))
    state = copy.deepcopy(a.state_dict())
    assert state["critic_std"] == "softplus" and state["optimizer"]["state"]
    b = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a current checkpoint loads silently
        b.load_state_dict(state)
    assert b.updates == 1
    torch.testing.assert_close(b.sigma_bar, a.sigma_bar)
    for sa, sb in zip(
        a.optimizer.state_dict()["state"].values(),
        b.optimizer.state_dict()["state"].values(),
        strict=True,
    ):
        assert torch.equal(sa["exp_avg"], sb["exp_avg"])

    old = {k: v for k, v in state.items() if k not in ("critic_std", "optimizer", "updates")}
    c = make()
    with pytest.warns(UserWarning) as record:
        c.load_state_dict(old)
    assert str(record[0].message) == (
        "this DSAC-T checkpoint predates the softplus critic std (its critics output a clamped "
        "log-std): the actor acts as before, but resumed training starts from a differently "
        "scaled std head."
    )
    assert c.updates == 0 and c.optimizer.state_dict()["state"] == {}


def test_missing_discount_names_the_algorithm() -> None:
    with pytest.raises(ValueError, match="algo=dsac_t "):
        make().update(batch(0, discount=False))


def test_compile_and_capture_settings_reach_their_wrappers() -> None:
    with pytest.warns(RuntimeWarning, match=r"roborl: dsac_t: torch\.compile failed"):
        algo = make(compile=True, compile_mode="no-such-mode")
    assert not algo._loss_call.is_compiled
    with pytest.warns(RuntimeWarning, match="roborl: dsac_t: cudagraphs needs a CUDA device"):
        make(cudagraphs=True)
    with pytest.warns(RuntimeWarning, match="roborl: dsac_t: capture=true but CUDA graphs"):
        algo = make(capture=True)
    assert algo._capture.enabled and not algo._capture.active
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make()


def test_failed_compiled_first_call_retries_with_clean_gradients() -> None:
    assert_failed_compile_retries_cleanly(make(), make(), batch(2))

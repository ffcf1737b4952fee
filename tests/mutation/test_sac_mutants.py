"""Tests of SAC's wiring and bookkeeping (roborl/plugins/sac/sac.py), written against the
mutants that `make mutants` found alive there (tests/mutants-report.md): the delayed Polyak
update and its counter, the checkpoint round trip, the metrics the autograd path returns, the
per-network learning rates, the critic count, and the compile/capture settings reaching
their wrappers (their warnings name the algorithm and the reason). The update's maths is
tests/plugins/test_sac_update_maths.py."""

from __future__ import annotations

import copy
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from compile_retry import assert_failed_compile_retries_cleanly

from roborl.core.interfaces import Batch
from roborl.plugins.sac.sac import SAC, SACConfig

OBS, ACT, B = 4, 2, 16


def make_sac(**overrides) -> SAC:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
    cfg = SACConfig(**{"hidden_sizes": [16, 16], **overrides})
    return SAC(obs_space, act_space, cfg)


def batch(seed: int, discount: bool = True) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    return Batch(
        obs=torch.randn(B, OBS, generator=gen),
        actions=torch.rand(B, ACT, generator=gen) * torch.tensor([4.0, 1.0])
        - torch.tensor([2.0, 0.0]),
        rewards=torch.randn(B, generator=gen),
        next_obs=torch.randn(B, OBS, generator=gen),
        terminated=(torch.rand(B, generator=gen) < 0.3).float(),
        discount=torch.full((B,), 0.99) if discount else None,
    )


def params(ts) -> list[torch.Tensor]:
    return [t.detach().clone() for t in ts]


def test_target_update_every_waits_and_counts() -> None:
    """With target_update_every=2 the targets move on updates 2 and 4 only, by Polyak with
    tau, and `updates` counts every gradient step."""
    sac = make_sac(target_update_every=2, tau=0.25)
    assert sac.updates == 0
    for n in range(1, 5):
        before = params(sac._target_params)
        torch.manual_seed(n)
        sac.update(batch(n))
        assert sac.updates == n
        after = params(sac._target_params)
        online = params(sac._params)
        if n % 2:
            for a, b in zip(after, before, strict=True):
                assert torch.equal(a, b)
        else:
            for a, b, c in zip(after, before, online, strict=True):
                torch.testing.assert_close(a, 0.75 * b + 0.25 * c)
                assert not torch.equal(a, b)


def test_checkpoint_round_trip_restores_optimizer_and_counter() -> None:
    a = make_sac(fast_update=False)
    for n in range(2):
        torch.manual_seed(n)
        a.update(batch(n))
    state = copy.deepcopy(a.state_dict())  # as a saved checkpoint: no tensor shared with `a`
    assert state["updates"] == 2
    assert state["optimizer"]["state"]  # Adam's moments are in the checkpoint

    b = make_sac(fast_update=False)
    b.load_state_dict(state)
    assert b.updates == 2
    for sa, sb in zip(
        a.optimizer.state_dict()["state"].values(),
        b.optimizer.state_dict()["state"].values(),
        strict=True,
    ):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sa[key], sb[key])
    torch.manual_seed(7)
    a.update(batch(7))
    torch.manual_seed(7)
    b.update(batch(7))  # the same next step: same Adam state, same weights
    for pa, pb in zip(a.actor.parameters(), b.actor.parameters(), strict=True):
        assert torch.equal(pa, pb)

    # Older checkpoints: no counter means 0; no optimiser state leaves Adam's as it was.
    c = make_sac(fast_update=False)
    c.load_state_dict({k: v for k, v in state.items() if k not in ("updates", "optimizer")})
    assert c.updates == 0
    assert c.optimizer.state_dict()["state"] == {}


@pytest.mark.parametrize("fast", [True, False], ids=["fast_path", "autograd"])
def test_update_metrics_are_the_batch_entropy_and_q_mean(fast: bool) -> None:
    sac = make_sac(fast_update=fast)
    data = batch(3)
    unit = sac.scaler.to_unit(data.actions)
    with torch.no_grad():
        q_mean = float(sac.q_values(data.obs, unit).mean())
        torch.manual_seed(5)
        noise = torch.randn(2 * B, ACT)
        _, logp = sac.actor.sample(data.obs, noise[:B])
    torch.manual_seed(5)
    metrics = sac.update(data)
    assert set(metrics) == {"critic_loss", "actor_loss", "alpha", "entropy", "q_mean"}
    assert float(metrics["entropy"]) == pytest.approx(float(-logp.mean()), rel=1e-5)
    assert float(metrics["q_mean"]) == pytest.approx(q_mean, rel=1e-5, abs=1e-7)


def test_learning_rates_and_critic_count_reach_the_networks() -> None:
    sac = make_sac(actor_lr=1e-2, critic_lr=2e-3, alpha_lr=5e-4, num_critics=3)
    lrs = [g["lr"] for g in sac.optimizer.param_groups]
    assert lrs == [1e-2, 2e-3, 5e-4]
    assert sac.q_values(torch.zeros(5, OBS), torch.zeros(5, ACT)).shape == (3, 5)
    # Adam's first step moves every parameter with a gradient by about its group's lr.
    before = params(sac.actor.parameters())
    torch.manual_seed(1)
    sac.update(batch(1))
    moved = max(
        float((p.detach() - q).abs().max())
        for p, q in zip(sac.actor.parameters(), before, strict=True)
    )
    assert moved == pytest.approx(1e-2, rel=1e-3)


def test_missing_discount_names_the_algorithm() -> None:
    with pytest.raises(ValueError, match="algo=sac "):
        make_sac().update(batch(0, discount=False))


def test_compile_settings_reach_the_compiled_call() -> None:
    """A bad inductor mode makes torch.compile refuse at once: the warning proves `compile`
    and `compile_mode` reach the wrapper, under SAC's name; cudagraphs on a CPU warn too."""
    with pytest.warns(RuntimeWarning, match=r"roborl: sac: torch\.compile failed"):
        sac = make_sac(compile=True, compile_mode="no-such-mode", fast_update=False)
    assert not sac._loss_call.is_compiled
    with pytest.warns(RuntimeWarning, match="roborl: sac: cudagraphs needs a CUDA device"):
        make_sac(cudagraphs=True, fast_update=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_sac()  # nothing asked, nothing said


def test_capture_on_cpu_warns_under_the_algorithm_name() -> None:
    with pytest.warns(RuntimeWarning, match="roborl: sac: capture=true but CUDA graphs need"):
        sac = make_sac(capture=True)
    assert sac._capture.enabled and not sac._capture.active


def test_failed_compiled_first_call_retries_with_clean_gradients() -> None:
    assert_failed_compile_retries_cleanly(
        make_sac(fast_update=False), make_sac(fast_update=False), batch(2)
    )

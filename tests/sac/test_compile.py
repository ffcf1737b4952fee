"""`algo.compile`: compiled and eager updates agree, and a run that cannot compile falls back
to eager with one warning instead of failing."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.compile import CompiledCall
from roborl.plugins.sac.dsac_t import DSACT, DSACTConfig
from roborl.plugins.sac.sac import SAC, SACConfig

OBS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


def _batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(64, (5,), (2,))
    n = 64
    buf.add(
        rng.normal(size=(n, 5)), rng.uniform(-2, 2, (n, 2)), rng.normal(size=n),
        rng.normal(size=(n, 5)), (rng.uniform(size=n) < 0.1).astype(np.float32),
    )  # fmt: skip
    return buf.sample_nstep(32, 1, 0.99, torch.Generator().manual_seed(seed))  # with discount


def _updates(algo, steps: int = 3) -> list[dict[str, float]]:
    torch.manual_seed(123)  # same actor/return noise for both runs
    return [{k: float(v) for k, v in algo.update(_batch(i)).items()} for i in range(steps)]


def _fresh(cls, cfg_cls, **kw):
    torch.manual_seed(0)
    return cls(OBS, ACT, cfg_cls(hidden_sizes=[16, 16], batch_size=32, **kw))


@pytest.mark.parametrize("cls,cfg_cls", [(SAC, SACConfig), (DSACT, DSACTConfig)])
def test_failed_compilation_falls_back_to_eager_with_one_warning(
    cls, cfg_cls, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real lazy failure: inductor cannot find its C++ compiler at the first call."""
    torch.set_num_threads(1)
    import torch._inductor.config as inductor_config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # no cached .so
    torch._dynamo.reset()
    eager = _updates(_fresh(cls, cfg_cls))
    algo = _fresh(cls, cfg_cls, compile=True)
    assert algo._loss_call.is_compiled
    no_cxx = {"fx_graph_cache": False, "cpp.cxx": (str(tmp_path / "no-such-c++"),)}
    with inductor_config.patch(no_cxx), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fell_back = _updates(algo)
    ours = [w for w in caught if "torch.compile failed" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "\n" not in str(ours[0].message)
    assert not algo._loss_call.is_compiled
    reason = algo._loss_call.fallback_reason
    print(reason)
    assert "no-such-c++" in reason or "compiler" in reason.lower(), reason
    # the failed attempt left no trace: the same updates as a never-compiled run
    for a, b in zip(eager, fell_back):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    torch._dynamo.reset()


def test_bad_mode_and_cudagraphs_on_cpu_warn_and_run_eagerly() -> None:
    with pytest.warns(RuntimeWarning, match="torch.compile failed"):
        call = CompiledCall(torch.sin, enabled=True, mode="no-such-mode")
    assert not call.is_compiled
    assert float(call(torch.tensor(0.0))) == 0.0
    with pytest.warns(RuntimeWarning, match="cudagraphs needs a CUDA device"):
        call = CompiledCall(torch.sin, cudagraphs=True, device="cpu")
    assert not call.is_compiled


def test_compiled_sac_update_matches_eager() -> None:
    torch.set_num_threads(1)
    torch._dynamo.reset()
    eager = _updates(_fresh(SAC, SACConfig))
    algo = _fresh(SAC, SACConfig, compile=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback allowed here
        compiled = _updates(algo)
    assert algo._loss_call.is_compiled
    for a, b in zip(eager, compiled):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-5)
    torch._dynamo.reset()

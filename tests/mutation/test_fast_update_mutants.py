"""Tests of SAC's hand-derived update (roborl/plugins/sac/fast_update.py) written against the
mutants that `make mutants` found alive there (tests/mutants-report.md): why the fast path is
refused (each reason), the buffer workspace (reuse, reallocation on a new shape or dtype,
fresh buffers without reuse), gradients allocated once, and an update whose every layer has
its own width that raises no warning (a wrongly shaped `out=` buffer makes torch resize it,
with a warning). That the fast path equals autograd is tests/plugins/test_sac_update_maths.py.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import torch
from random_batch import random_batch

from roborl.core.interfaces import Batch
from roborl.plugins.sac.fast_update import Workspace, fast_path_reason
from roborl.plugins.sac.sac import SAC, SACConfig

OBS, ACT, B = 5, 3, 7


def make(**overrides) -> SAC:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(-np.ones(ACT, np.float32), np.ones(ACT, np.float32))
    return SAC(obs_space, act_space, SACConfig(**{"hidden_sizes": [16, 24, 11], **overrides}))


def batch(seed: int) -> Batch:
    return random_batch(seed, B, OBS, ACT, discount=0.99)


def test_each_refusal_has_its_reason() -> None:
    assert fast_path_reason(make()) is None
    assert fast_path_reason(make(fast_update=False)) == "fast_update=false"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cudagraphs on a CPU: warned and dropped
        for opt in ({"compile": True, "compile_mode": "no-such-mode"}, {"cudagraphs": True}):
            algo = make(**opt)
            assert fast_path_reason(algo) == "compile/cudagraphs compile the autograd loss"
    assert fast_path_reason(make(activation="tanh")).startswith("activation=tanh")
    algo = make()
    algo.actor = torch.nn.Linear(OBS, 2 * ACT)  # a plugin's own actor, the critic stock
    assert fast_path_reason(algo) == "custom networks"
    algo = make()
    algo.actor.net.append(torch.nn.Tanh())
    assert fast_path_reason(algo) == "actor with layers other than Linear and ReLU"
    algo = make()
    algo.critic.out_dim = 2  # no LayerNorm, two outputs
    assert fast_path_reason(algo) == "critic with LayerNorm or more than one output"


def test_workspace_reuses_and_reallocates() -> None:
    like = torch.zeros(1, dtype=torch.float64)
    ws = Workspace()
    a = ws("a", (2, 3), like)
    assert a.shape == (2, 3) and a.dtype == torch.float64
    assert ws("a", (2, 3), like) is a  # reused
    b = ws("a", (4, 5), like)
    assert b.shape == (4, 5)  # a new shape, a new buffer
    assert ws("b", (2, 3), like) is not b
    fresh = Workspace(reuse=False)
    assert fresh("a", (2, 3), like) is not fresh("a", (2, 3), like)
    assert Workspace().reuse is True


def test_update_with_distinct_widths_warns_nothing_and_keeps_its_gradients() -> None:
    algo = make()
    assert algo.fast_path
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "An output with one or more elements was resized"
        algo.update(batch(0))
        grads = [p.grad for p in algo.critic.parameters()]
        algo.update(batch(1))
    for p, g in zip(algo.critic.parameters(), grads, strict=True):
        assert p.grad is g  # allocated once, overwritten by every update


def test_equal_widths_match_autograd() -> None:
    """Three hidden layers of one width: every backward buffer has the same shape, so a buffer
    shared between layers would be written while it is read."""
    fast, slow = make(hidden_sizes=[8, 8, 8]), make(hidden_sizes=[8, 8, 8], fast_update=False)
    assert fast.fast_path and not slow.fast_path
    for algo in (fast, slow):
        torch.manual_seed(3)
        algo.update(batch(0))
    for pf, ps in zip(fast.critic.parameters(), slow.critic.parameters(), strict=True):
        torch.testing.assert_close(pf.grad, ps.grad, rtol=1e-4, atol=1e-6)

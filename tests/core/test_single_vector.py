"""`SingleEnvVector` must return exactly what gymnasium's `SyncVectorEnv` returns for one env.

The single-env fast path (issue 23) builds observations and same-step-autoreset infos by hand;
any drift in dtype, shape, final observation or `_key` mask would silently change what the
replay buffer stores, so every step of several episodes is compared field by field.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.single_vector import SingleEnvVector


def _assert_same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {set(a)} vs {set(b)}"
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert b.dtype == object and a.shape == b.shape, where
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y, where + "[]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), where
        assert a.dtype == b.dtype and a.shape == b.shape, (
            f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        )
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def _cheetah() -> gym.Env:
    return gym.wrappers.RecordEpisodeStatistics(gym.make("HalfCheetah-v5", max_episode_steps=7))


def _pendulum() -> gym.Env:  # terminates early under random actions
    return gym.wrappers.RecordEpisodeStatistics(gym.make("InvertedPendulum-v5"))


def _tabletop() -> gym.Env:
    from roborl.sim.tabletop.env import TabletopEnv

    env = TabletopEnv(obs_mode="pixels_state", tasks=[0], image_size=16, max_episode_steps=5)
    return gym.wrappers.RecordEpisodeStatistics(gym.wrappers.TimeLimit(env, 5))


@pytest.mark.parametrize("make", [_cheetah, _pendulum, _tabletop], ids=["box", "early", "dict"])
def test_single_env_vector_matches_sync_vector_env_step_by_step(make) -> None:
    ours = SingleEnvVector(make)
    ref = gym.vector.SyncVectorEnv([make], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    assert ours.single_observation_space == ref.single_observation_space
    _assert_same(ours.reset(seed=3), ref.reset(seed=3), "reset")
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(40):
        action = rng.uniform(-1, 1, (1, *ours.single_action_space.shape)).astype(np.float32)
        got, want = ours.step(action), ref.step(action)
        for name, a, b in zip(("obs", "reward", "terminated", "truncated"), got, want):
            _assert_same(a, b, f"step {t} {name}")
        # RecordEpisodeStatistics puts wall-clock time in episode["t"]: compare the rest.
        for infos in (got[4], want[4]):
            infos.get("final_info", {}).get("episode", {}).pop("t", None)
        _assert_same(got[4], want[4], f"step {t} infos")
        ends += int(got[2][0] or got[3][0])
    assert ends >= 2  # the autoreset path was compared, not only plain steps
    # The returned arrays are fresh: stepping again must not change what was handed out.
    first = ours.step(np.zeros((1, *ours.single_action_space.shape), np.float32))[0]
    kept = {k: v.copy() for k, v in first.items()} if isinstance(first, dict) else first.copy()
    ours.step(np.ones((1, *ours.single_action_space.shape), np.float32))
    _assert_same(first, kept, "obs after the next step")


def test_info_keys_trim_ordinary_steps_only() -> None:
    """`info_keys` (the collector's lean path) keeps only the named keys on a step that ends no
    episode, and every key on the step that ends one (its `final_info` feeds episode records)."""
    env = SingleEnvVector(_cheetah)
    env.reset(seed=0)
    action = np.zeros((1, *env.single_action_space.shape), np.float32)
    for t in range(1, 8):
        infos = env.step(action, info_keys={"x_velocity", "cost"})[4]
        if t < 7:
            assert set(infos) == {"x_velocity", "_x_velocity"}
        else:  # max_episode_steps=7: the autoreset step
            assert {"reward_forward", "x_position"} <= set(infos["final_info"])
            assert "episode" in infos["final_info"]

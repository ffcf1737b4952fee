"""Tests of the learned-reward wrapper and relabelling (roborl/core/rewards.py) written
against the mutants that `make mutants` found alive there (tests/mutants-report.md), with a
scripted env and a model that reads its verdict off the observation (no trained classifier,
so they are fast): the `reward` section's parsing and its refusals, the options the factory
gets, the wrapper's defaults and each option reaching it, `consecutive`, the fired-frame
directory, `relabel`, and `LearnedReward.step` (reward, terminated/truncated, info, fired
frames, the streak across resets, the one warning, close)."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.errors import ConfigError
from roborl.core.fired_frames import FiredFrames
from roborl.core.rewards import (
    LearnedReward,
    build_reward_model,
    consecutive_frames,
    relabel,
    reward_options,
    with_fired_frames_dir,
    with_learned_reward,
)


class Model:
    """obs = [verdict, reward]: success when verdict > 0.5, reward the second entry."""

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        self.checked = None

    def check_space(self, space) -> None:
        self.checked = space

    def __call__(self, obs):
        obs = np.asarray(obs)
        return np.float32(obs[1]), np.bool_(obs[0] > 0.5)


class Scripted(gym.Env):
    """Steps through `script`: (obs, env_reward, terminated, truncated, info)."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, script) -> None:
        self.script, self.i, self.closed = list(script), 0, False

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        obs, r, term, trunc, info = self.script[self.i]
        self.i += 1
        return np.asarray(obs, np.float32), r, term, trunc, dict(info)

    def close(self) -> None:
        self.closed = True


class Registry:
    def __init__(self, factory=Model) -> None:
        self.factory, self.asked = factory, None

    def get(self, kind, name):
        self.asked = (kind, name)
        return self.factory


class Fired:
    def __init__(self) -> None:
        self.added, self.flushed = [], 0

    def add(self, obs, env_success) -> None:
        self.added.append((np.asarray(obs).tolist(), env_success))

    def flush(self) -> None:
        self.flushed += 1


# -- options -------------------------------------------------------------------------------


def test_reward_section_forms_and_refusals() -> None:
    assert reward_options({}) is None and reward_options({"reward": None}) is None
    assert reward_options({"reward": "clf"}) == {"name": "clf"}
    assert reward_options({"reward": {"name": "clf", "path": "D"}}) == {"name": "clf", "path": "D"}
    with pytest.raises(ConfigError, match=r"^reward=3 must be a reward model's name or a "
                       r"mapping with name=, e\.g\. reward=classifier reward\.path=DIR\.$"):  # fmt: skip
        reward_options({"reward": 3})
    with pytest.raises(ConfigError, match=r"^reward\.\* options were given without reward\."
                       r"name: pass reward=<name>, e\.g\. reward=classifier reward\.path=DIR\.$"):  # fmt: skip
        reward_options({"reward": {"path": "D"}})


def test_factory_gets_only_its_own_options() -> None:
    reg = Registry()
    options = {"name": "clf", "path": "D", "threshold": 0.7, "consecutive": 2, "save_fired": None}
    model = build_reward_model(reg, options)
    assert reg.asked == ("rewards", "clf")
    assert model.kwargs == {"path": "D", "threshold": 0.7}

    def strict(path):
        return Model()

    with pytest.raises(ConfigError, match=r"^reward=clf rejected its options \['path', 'x'\]: "):
        build_reward_model(Registry(strict), {"name": "clf", "path": "D", "x": 1})


def test_consecutive_refusals() -> None:
    assert consecutive_frames({}) == 1 and consecutive_frames({"consecutive": 3}) == 3
    for bad in (True, 2.0, "2", 0, -1):
        with pytest.raises(ConfigError, match=r"must be a whole number of frames, at least 1 "
                           r"\(the model must say success on that many frames in a row\)\.$"):  # fmt: skip
            consecutive_frames({"consecutive": bad})


def test_fired_frames_dir_default() -> None:
    assert with_fired_frames_dir({}, "RUN") == {}
    cfg = {"reward": "clf", "seed": 1}
    assert with_fired_frames_dir(cfg, "RUN") == {
        "reward": {"name": "clf", "save_fired": "RUN/reward_fired"}, "seed": 1,
    }  # fmt: skip
    off = {"reward": {"name": "clf", "save_fired": None}}
    assert with_fired_frames_dir(off, "RUN") is off


def test_with_learned_reward_builds_the_wrapper(tmp_path) -> None:
    def maker():
        return Scripted([])

    assert with_learned_reward(Registry(), {}, maker) is maker
    env = with_learned_reward(Registry(), {"reward": "clf"}, maker)()
    assert isinstance(env, LearnedReward)
    assert env.terminate_on_success is True and env.keep_env_termination is False
    assert env.consecutive == 1 and env.fired is None
    assert env.model.checked is env.env.observation_space
    cfg = {
        "reward": {
            "name": "clf", "terminate_on_success": False, "keep_env_termination": True,
            "consecutive": 3, "save_fired": str(tmp_path),
        }
    }  # fmt: skip
    env = with_learned_reward(Registry(), cfg, maker)()
    assert env.terminate_on_success is False and env.keep_env_termination is True
    assert env.consecutive == 3 and isinstance(env.fired, FiredFrames)
    assert env.fired.directory == tmp_path
    for key in ("terminate_on_success", "keep_env_termination"):
        with pytest.raises(ConfigError, match=rf"^reward\.{key}='yes' must be true or false\.$"):
            with_learned_reward(Registry(), {"reward": {"name": "clf", key: "yes"}}, maker)
        with_learned_reward(Registry(), {"reward": {"name": "clf", key: False}}, maker)


# -- relabel -------------------------------------------------------------------------------

# next observations [verdict, reward]: successes at rows 1, 2, 3 and 5; an episode ends after 2
NEXT = np.array([[0, 5], [1, 6], [1, 7], [1, 8], [0, 9], [1, 10]], np.float32)
ENV_TERMINALS = np.array([0, 0, 1, 0, 0, 0], bool)


def test_relabel_defaults() -> None:
    rewards, terminals, n = relabel(Model(), NEXT, ENV_TERMINALS, {})
    np.testing.assert_array_equal(rewards, [5, 6, 7, 8, 9, 10])
    np.testing.assert_array_equal(terminals, [0, 1, 1, 1, 0, 1])
    assert n == 4
    assert rewards.dtype == np.float32 and terminals.dtype == bool


def test_relabel_consecutive_keep_env_termination_and_episode_ends() -> None:
    opts = {"consecutive": 2, "keep_env_termination": True, "terminate_on_success": True}
    rewards, terminals, n = relabel(Model(), NEXT, ENV_TERMINALS, opts)
    # streaks: row 2 confirms (rows 1-2); the episode ends after row 2, so row 3 starts over
    np.testing.assert_array_equal(rewards, [0, 0, 7, 0, 0, 0])
    np.testing.assert_array_equal(terminals, [0, 0, 1, 0, 0, 0])
    assert n == 1
    ends = np.array([0, 0, 0, 0, 0, 0], bool)  # one long episode: row 3 confirms too
    rewards, terminals, n = relabel(
        Model(), NEXT, ENV_TERMINALS, {"consecutive": 2, "terminate_on_success": False}, ends
    )
    np.testing.assert_array_equal(rewards, [0, 0, 7, 8, 0, 0])
    np.testing.assert_array_equal(terminals, [0, 0, 0, 0, 0, 0])
    assert n == 2


def test_relabel_keeps_env_terminals_of_any_dtype() -> None:
    """keep_env_termination without terminate_on_success: exactly the env's terminals, given
    as 0/1 floats as a dataset may store them."""
    opts = {"keep_env_termination": True, "terminate_on_success": False}
    _, terminals, _ = relabel(Model(), NEXT, ENV_TERMINALS.astype(np.float32), opts)
    np.testing.assert_array_equal(terminals, ENV_TERMINALS)
    _, terminals, _ = relabel(Model(), NEXT, ENV_TERMINALS.astype(np.float32), {})
    np.testing.assert_array_equal(terminals, [0, 1, 1, 1, 0, 1])


def test_relabel_streak_starts_at_zero() -> None:
    nxt = np.array([[1, 5], [1, 6], [0, 7]], np.float32)
    rewards, _, n = relabel(Model(), nxt, np.zeros(3, bool), {"consecutive": 2})
    np.testing.assert_array_equal(rewards, [0, 6, 0])
    assert n == 1


def test_relabel_dict_observations() -> None:
    class DictModel(Model):
        def __call__(self, obs):
            return super().__call__(np.concatenate([obs["a"], obs["b"]]))

    nxt = {"a": NEXT[:, :1], "b": NEXT[:, 1:]}
    rewards, _, _ = relabel(DictModel(), nxt, ENV_TERMINALS, {})
    np.testing.assert_array_equal(rewards, [5, 6, 7, 8, 9, 10])


# -- the wrapper ---------------------------------------------------------------------------


def step_all(env: LearnedReward, n: int) -> list:
    return [env.step(0) for _ in range(n)]


def test_step_labels_reward_termination_and_info(caplog) -> None:
    script = [
        ([0, 1], -1.0, False, False, {"success": False}),
        ([1, 2], -2.0, False, False, {"success": True}),
        ([0, 3], -3.0, True, False, {"success": True}),  # the env ends it: a truncation
    ]
    fired = Fired()
    env = LearnedReward(Scripted(script), Model(), fired=fired)
    env.reset()
    (_, r1, t1, tr1, i1), (_, r2, t2, tr2, i2), (_, r3, t3, tr3, i3) = step_all(env, 3)
    assert (r1, t1, tr1) == (1.0, False, False)
    assert i1 == {"success": False, "env_reward": -1.0, "learned_success": False}
    assert (r2, t2, tr2) == (2.0, True, False) and i2["learned_success"] is True
    assert (r3, t3, tr3) == (3.0, False, True) and i3["env_reward"] == -3.0
    assert isinstance(r1, float) and isinstance(tr1, bool)
    assert fired.added == [([1.0, 2.0], True)]  # only the fired frame, with the env's success
    assert not caplog.records  # consecutive=1: nothing to confirm, nothing to warn about
    env.close()
    assert fired.flushed == 1 and env.env.closed


def test_step_keep_env_termination_and_no_terminate_on_success() -> None:
    script = [([1, 1], 0.0, False, False, {}), ([0, 1], 0.0, True, False, {})]
    env = LearnedReward(Scripted(script), Model(), terminate_on_success=False,
                        keep_env_termination=True)  # fmt: skip
    env.reset()
    (_, _, t1, tr1, i1), (_, _, t2, tr2, _) = step_all(env, 2)
    assert (t1, tr1, i1["learned_success"]) == (False, False, True)
    assert (t2, tr2) == (True, False)


def test_step_consecutive_streak_reset_and_one_warning(caplog) -> None:
    script = [
        ([1, 4], 0.0, False, False, {}),
        ([1, 5], 0.0, False, False, {}),  # confirmed: pays 5 and ends
        ([1, 6], 0.0, True, False, {"success": True}),  # after reset: one frame, env ends it
        ([1, 7], 0.0, True, False, {"success": True}),
    ]
    env = LearnedReward(Scripted(script), Model(), consecutive=2)
    env.reset()
    (_, r1, t1, _, i1), (_, r2, t2, _, i2) = step_all(env, 2)
    assert (r1, t1, i1["learned_success"]) == (0.0, False, False)
    assert (r2, t2, i2["learned_success"]) == (5.0, True, True)
    assert not caplog.records  # confirmed, or not ended by the env: no warning
    with caplog.at_level(logging.WARNING, logger="roborl.rewards"):
        env.reset()
        _, r3, t3, tr3, i3 = env.step(0)
        env.reset()
        env.step(0)
    assert (r3, t3, tr3, i3["learned_success"]) == (0.0, False, True, False)
    warnings = [r for r in caplog.records if "reward.consecutive=2 frames" in r.getMessage()]
    assert len(warnings) == 1


def test_close_without_fired_frames() -> None:
    env = LearnedReward(Scripted([]), Model())
    env.close()
    assert env.env.closed

"""`reward.consecutive=k`, the fired frames a run saves, and retraining with them as hard
negatives (`roborl reward relabel`, SERL's remedy for a policy exploiting false positives)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_runner import roborl

from roborl.core.envs import make_env
from roborl.core.errors import ConfigError, DatasetError
from roborl.core.plugins import PluginHost
from roborl.core.rewards import LearnedReward, relabel, with_fired_frames_dir
from roborl.plugins.rewards.hard_negatives import (
    false_positive_rate,
    hard_negatives,
    retrain_with_hard_negatives,
)
from roborl.plugins.rewards.train import train_classifier
from roborl.sim.tabletop.env import TabletopEnv


class Verdicts:
    """A reward model that says success on the frames where a script says so, in order."""

    def __init__(self, script: list[int]) -> None:
        self.script = iter(script)

    def __call__(self, obs: object) -> tuple[float, bool]:
        fired = bool(next(self.script))
        return float(fired), fired


def _steps(env: LearnedReward, n: int) -> list[tuple[float, bool]]:
    out = []
    for _ in range(n):
        _, r, term, _, info = env.step(env.action_space.sample())
        assert info["learned_success"] == term  # terminate_on_success: success ends it
        out.append((r, term))
    return out


def test_consecutive_frames_must_agree_before_success(tabletop_pixels: dict) -> None:
    """k=3: a success only on the third fired frame in a row; a miss or a reset restarts the
    count. k=1 pays every fired frame (what SERL does)."""
    script = [1, 1, 0, 1, 1, 1, 1, 1, 1]  # episode 1: six steps; episode 2: three
    env = LearnedReward(TabletopEnv(**tabletop_pixels), Verdicts(script), consecutive=3)
    env.reset(seed=0)
    first = _steps(env, 6)
    assert first == [(0.0, False)] * 5 + [(1.0, True)]
    env.reset(seed=1)
    assert _steps(env, 3) == [(0.0, False), (0.0, False), (1.0, True)]
    env.close()
    once = LearnedReward(TabletopEnv(**tabletop_pixels), Verdicts([0, 1]), consecutive=1)
    once.reset(seed=0)
    assert _steps(once, 2) == [(0.0, False), (1.0, True)]
    once.close()


def test_consecutive_relabelling_of_stored_rows_restarts_at_episode_ends() -> None:
    def model(obs: np.ndarray) -> tuple[float, bool]:
        return float(obs[0] > 0.5), bool(obs[0] > 0.5)

    fired = np.array([[1], [1], [1], [1], [1], [0], [1]], np.float32)
    terminals = np.zeros(7, bool)
    ends = np.array([0, 1, 0, 0, 0, 0, 0], bool)  # episode 1: rows 0-1; episode 2: rows 2-6
    options = {"consecutive": 3, "terminate_on_success": True}
    rewards, terms, n = relabel(model, fired, terminals, options, episode_ends=ends)
    np.testing.assert_array_equal(terms, [0, 0, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(rewards, terms.astype(np.float32))
    assert n == 1
    _, terms, _ = relabel(model, fired, terminals, options)  # one episode: rows 2, 3, 4
    np.testing.assert_array_equal(terms, [0, 0, 1, 1, 1, 0, 0])


class EndsOnFirstSuccess(TabletopEnv):
    """A sim task that ends on its own first success frame (step 2 here)."""

    def step(self, action):  # type: ignore[no-untyped-def]
        obs, reward, _, truncated, info = super().step(action)
        self._n = getattr(self, "_n", 0) + 1
        return obs, reward, self._n == 2, truncated, {**info, "success": self._n == 2}


def test_an_env_ending_on_success_before_consecutive_confirms_is_named_once(
    tabletop_pixels: dict, caplog: pytest.LogCaptureFixture
) -> None:
    """k=2 and an env that ends on its first success frame: that success can never be paid,
    and the wrapper says so (once) instead of silently training on a reward that never fires."""
    env = LearnedReward(
        EndsOnFirstSuccess(**tabletop_pixels), Verdicts([0, 1, 0, 1]), consecutive=2
    )
    with caplog.at_level("WARNING", logger="roborl.rewards"):
        for _ in range(2):
            env.reset(seed=0)
            env.unwrapped._n = 0
            assert _steps_until_end(env) == [(0.0, False), (0.0, False)]
    env.close()
    warnings = [r for r in caplog.records if "end_on_success=false" in r.getMessage()]
    assert len(warnings) == 1 and "consecutive=2" in warnings[0].getMessage()


def _steps_until_end(env: LearnedReward) -> list[tuple[float, bool]]:
    out = []
    while True:
        _, r, term, trunc, _ = env.step(env.action_space.sample())
        out.append((r, term))
        if term or trunc:
            return out


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "3"])
def test_consecutive_must_be_a_whole_number_of_frames(bad: object, tabletop_pixels: dict) -> None:
    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "env": {"id": "RoborlTabletop-v0", "kwargs": tabletop_pixels},
        "reward": {"name": "classifier", "path": "unused", "consecutive": bad},
    }
    with pytest.raises(ConfigError, match=r"reward\.consecutive=.*at least 1"):
        make_env(host.registry, cfg)


def test_a_run_saves_fired_frames_under_its_run_dir_unless_told_otherwise(tmp_path) -> None:
    cfg = {"reward": "classifier"}
    assert (
        with_fired_frames_dir(cfg, tmp_path)["reward"]["save_fired"] == f"{tmp_path}/reward_fired"
    )
    off = {"reward": {"name": "classifier", "save_fired": None}}
    assert with_fired_frames_dir(off, tmp_path) is off
    assert with_fired_frames_dir({"reward": None}, tmp_path) == {"reward": None}


def test_a_config_from_hydra_with_a_reward_gives_checkpoints_that_load_weights_only(
    tmp_path,
) -> None:
    """`{**DictConfig}` keeps OmegaConf lists inside the run config; they reached checkpoints,
    which `torch.load(weights_only=True)` refused (every CLI run with reward= was affected)."""
    from omegaconf import OmegaConf

    from roborl.core.algorithms import split_config

    hydra_cfg = OmegaConf.create(
        {"algo": {"name": "drq", "hidden_sizes": [8, 8]}, "reward": "classifier", "seed": 0}
    )
    _, cfg = split_config(with_fired_frames_dir(hydra_cfg, tmp_path))
    path = tmp_path / "cfg.pt"
    torch.save({"config": cfg}, path)
    loaded = torch.load(path, weights_only=True)["config"]
    assert loaded["algo"]["hidden_sizes"] == [8, 8]
    assert loaded["reward"]["save_fired"] == f"{tmp_path}/reward_fired"


def test_hard_negatives_lower_the_false_positive_rate_on_the_saved_frames(
    demos, tabletop_pixels: dict, tmp_path
) -> None:
    """A weak classifier (30 steps) drives the reward while a noisy expert acts; the frames it
    fired on are saved with the env's success. Retraining with the false ones as negatives
    (`roborl reward relabel`) must call fewer of them success than the same training without
    them (same steps, same seed): the control. Over three seeds: the frames are near misses,
    so one seed's 24 of them differ by a frame or two between machines. Measured at the 200
    steps it trains: 4/24 against 5/24 in the closest seed, 11 of 72 against 30 of 72 in all
    (at 600 steps, three times the time: 3/24 against 4/24, 5 of 72 against 13 of 72)."""
    weak = tmp_path / "weak"
    train_classifier(str(demos), str(weak), steps=30, seed=0, log=lambda m: None)
    host = PluginHost()
    host.load_entry_points()
    fired_dir = tmp_path / "run" / "reward_fired"
    cfg = {
        "env": {"id": "RoborlTabletop-v0", "kwargs": tabletop_pixels},
        "reward": {
            "name": "classifier", "path": str(weak), "terminate_on_success": False,
            "save_fired": str(fired_dir),
        },
    }  # fmt: skip
    env = make_env(host.registry, cfg, seed=0)
    for seed in range(10):
        env.reset(seed=100 + seed)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(env.unwrapped.expert_action(noise=0.6))
            done = term or trunc
    env.close()
    negatives, true_fired = hard_negatives(fired_dir)
    n = len(negatives["image"])
    assert n >= 5, "the weak classifier should fire on frames that are not successes"
    assert negatives["image"].shape[1:] == (64, 64, 3) and negatives["image"].dtype == np.uint8

    control = tmp_path / "control"
    # Nothing held out (val_fraction=0), so every saved frame is trained on in the retraining.
    options = ["steps=200", "seed=1", "val_fraction=0"]
    train_classifier(str(demos), str(control), steps=200, seed=1, val_fraction=0, log=print)
    out = tmp_path / "retrained"
    proc = roborl(
        "reward", "relabel", f"data={demos}", f"fired={fired_dir}", f"out={out}",
        f"model={weak}", *options, cwd=tmp_path,
    )  # fmt: skip
    report = json.loads(proc.stdout.split("hard negatives: ", 1)[1].splitlines()[0])
    assert report["count"] == n and report["true_successes_fired"] == true_fired
    assert report["fp_rate_before"] == 1.0  # every saved frame was one it fired on
    assert report["threshold"] == 0.5  # measured at the threshold the retraining was given
    control_fp = false_positive_rate(control, negatives)
    assert report["fp_rate_after"] == false_positive_rate(out, negatives)
    after, without = [report["fp_rate_after"]], [control_fp]
    for seed in (2, 3):
        same = {"steps": 200, "seed": seed, "val_fraction": 0, "log": lambda m: None}
        config = retrain_with_hard_negatives(
            str(demos), str(fired_dir), str(tmp_path / f"retrained{seed}"), **same
        )
        after.append(config["hard_negatives"]["fp_rate_after"])
        train_classifier(str(demos), str(tmp_path / f"control{seed}"), **same)
        without.append(false_positive_rate(tmp_path / f"control{seed}", negatives))
    assert np.mean(after) < np.mean(without), (after, without)


def test_relabel_names_what_is_missing(tmp_path) -> None:
    with pytest.raises(DatasetError, match=r"no fired-\*\.npz parts"):
        hard_negatives(tmp_path)
    np.savez(tmp_path / "fired-1-0-00000.npz", **{"frames/image": np.zeros((2, 8, 8, 3), np.uint8),
             "env_success": np.array([-1, 0], np.int8)})  # fmt: skip
    with pytest.raises(DatasetError, match="1 of 2 fired frames have no env success"):
        hard_negatives(tmp_path)
    frames, _ = hard_negatives(tmp_path, "negative")
    assert len(frames["image"]) == 2
    with pytest.raises(DatasetError, match="fired_labels='maybe'"):
        hard_negatives(tmp_path, "maybe")

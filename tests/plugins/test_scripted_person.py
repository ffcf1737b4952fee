"""`scripted_person=`: HIL-SERL's person in-process, through the teleop channel's own code
(issue 33). It takes over when the policy stalls, the executed command is the expert's as
decoded from a Joy message, the loop stores that command flagged as intervened and copies it
to the demo buffer, and evaluation runs the policy alone."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import roborl

from roborl.core.checkpoint import load_checkpoint
from roborl.core.compose import compose_dict
from roborl.core.envs import make_env, make_vec_env
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host
from roborl.sim.scripted_person import ScriptedPerson, ScriptedPersonConfig
from roborl.sim.tabletop.env import TabletopEnv

SMALL = {"obs_mode": "pixels_state", "tasks": [0], "image_size": 16, "max_episode_steps": 50}


def episode(env, act, seed: int) -> tuple[bool, list[bool], list[tuple[np.ndarray, np.ndarray]]]:
    """(success, intervened per step, (expert action before the step, executed) pairs)."""
    env.reset(seed=seed)
    flags, pairs = [], []
    while True:
        expert = env.unwrapped.expert_action()
        _, _, terminated, truncated, info = env.step(act())
        flags.append(bool(info.get("intervened", False)))
        pairs.append((expert, info.get("executed_action")))
        if terminated or truncated:
            return bool(info["success"]), flags, pairs


def test_person_takes_over_a_stalled_policy_and_executes_the_experts_command() -> None:
    stall = lambda: np.zeros(2, np.float32)  # noqa: E731
    alone = TabletopEnv(**SMALL)
    assert not any(episode(alone, stall, seed)[0] for seed in range(3))
    person = ScriptedPerson(TabletopEnv(**SMALL), ScriptedPersonConfig(window_s=0.3))
    for seed in range(3):
        success, flags, pairs = episode(person, stall, seed)
        assert success and any(flags) and not flags[0]  # the person needs a window to judge
        for took_over, (expert, executed) in zip(flags, pairs):
            expected = np.clip(expert, -1, 1) if took_over else np.zeros(2)
            np.testing.assert_allclose(executed, expected, atol=1e-6)


def test_person_leaves_a_policy_that_makes_progress_alone() -> None:
    person = ScriptedPerson(TabletopEnv(**SMALL), ScriptedPersonConfig(window_s=0.3))
    success, flags, _ = episode(person, lambda: person.unwrapped.expert_action(), 0)
    assert success and not any(flags)


def test_config_is_checked_and_evaluation_runs_without_the_person() -> None:
    host = get_host()
    cfg = compose_dict(host, ["env=tabletop_reach_pixels_state"], "train")
    with pytest.raises(ConfigError, match="windw_s"):
        make_vec_env(host.registry, {**cfg, "scripted_person": {"windw_s": 1.0}}, 1)
    with pytest.raises(ConfigError, match="window_s"):
        make_vec_env(host.registry, {**cfg, "scripted_person": {"window_s": -1.0}}, 1)
    with pytest.raises(ConfigError, match="robot"):
        from roborl.sim.scripted_person import with_scripted_person

        with_scripted_person({"robot": {"name": "ros2"}, "scripted_person": {}}, lambda: None)
    with_person = {**cfg, "scripted_person": True}
    train_env = make_vec_env(host.registry, with_person, 1)
    assert any(isinstance(e, ScriptedPerson) for e in _chain(train_env.envs[0]))
    eval_env = make_env(host.registry, with_person)
    assert not any(isinstance(e, ScriptedPerson) for e in _chain(eval_env))
    train_env.close()
    eval_env.close()


def _chain(env):
    while True:
        yield env
        if not hasattr(env, "env"):
            return
        env = env.env


def test_train_stores_the_persons_actions_flagged_and_in_the_demo_buffer(
    tmp_path: Path, demos: Path
) -> None:
    """A pixel_bc run on RoborlTabletop: the run logs the intervention rate, and the
    checkpoint's demo buffer holds the demos plus every intervened step, each flagged."""
    run = tmp_path / "run"
    roborl(
        "train", "algo=pixel_bc", "algo.batch_size=32", "algo.conv_channels=8",
        "env=tabletop_reach_pixels", "env.kwargs.tasks=[0]", "env.kwargs.max_episode_steps=50",
        f"demos={demos}", "demo_fraction=1.0", "scripted_person={window_s:0.3}",
        "total_steps=200", "learning_starts=100", "eval_every=200", "eval_episodes=2",
        "checkpoint_every=200", "log_every=100", "seed=0", f"hydra.run.dir={run}",
        cwd=tmp_path,
    )  # fmt: skip
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [r["train/intervention_rate"] for r in rows if "train/intervention_rate" in r]
    assert rates and max(rates) > 0.0
    ckpt = load_checkpoint(sorted(glob.glob(str(run / "checkpoints" / "*.pt")))[-1])
    buf = ckpt["demo_buffer"]
    with np.load(demos) as z:
        n_demos = int(z["rewards"].shape[0])
    flags = buf["extras"]["intervened"][: buf["size"]].numpy()
    assert flags.sum() > 0 and buf["size"] == n_demos + flags.sum()

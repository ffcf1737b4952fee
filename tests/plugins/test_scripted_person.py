"""`scripted_person=`: HIL-SERL's person in-process (issue 33), a `Teleoperator` calling the
task's expert (issue 49). It takes over when the policy stalls, the executed command is the
expert's, the loop stores that command flagged as intervened and copies it to the demo
buffer, and evaluation runs the policy alone."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from cli_runner import roborl

from roborl.core.checkpoint import load_checkpoint
from roborl.core.compose import compose_dict
from roborl.core.envs import make_env, make_vec_env
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host
from roborl.hil.scripted_person import ScriptedPerson, ScriptedPersonConfig, with_scripted_person
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


class Line(gym.Env):
    """A 1-D task for the person: move x from 3 to within 0.25 of 0 in 40 steps (0.5 a step);
    `progress` is |x|, the expert moves straight to 0."""

    dt = 0.1
    observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t = 3.0, 0
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.x = float(np.clip(self.x + 0.5 * float(np.asarray(action).reshape(-1)[0]), -9, 9))
        self.t += 1
        success = abs(self.x) < 0.25
        obs = np.array([self.x], np.float32)
        return obs, float(success), False, self.t >= 40, {"success": success}

    def progress(self) -> float:
        return abs(self.x)

    def expert_action(self) -> np.ndarray:
        return np.array([np.clip(-self.x / 0.5, -1.0, 1.0)], np.float32)


def intervention_rates(policy: str, taper_episodes: int, episodes: int = 24) -> list[float]:
    """Per episode, the share of steps the person drove. `late`: stalls 15 steps (the drift
    rule fires, as on a push's approach behind the block), then solves the task; `away`:
    pushes x away from the goal (fails whenever the person lets go)."""
    config = ScriptedPersonConfig(window_s=0.4, taper_episodes=taper_episodes, taper_floor=0.1)
    env = ScriptedPerson(Line(), config)
    rates = []
    for ep in range(episodes):
        env.reset(seed=ep)
        flags = []
        while True:
            inner = env.unwrapped
            if policy == "late":
                act = np.zeros(1) if inner.t < 15 else inner.expert_action()
            else:
                act = np.sign([inner.x or 1.0])
            _, _, terminated, truncated, info = env.step(np.asarray(act, np.float32))
            flags.append(info["intervened"])
            if terminated or truncated:
                break
        rates.append(float(np.mean(flags)))
    return rates


def test_a_fading_person_steps_in_less_on_a_policy_that_succeeds() -> None:
    """`taper_episodes` (issue 48): the drift rule alone keeps taking over from a policy that
    stalls before it succeeds; the fading person steps back as episodes succeed, keeps
    stepping in on one that fails, and the draws repeat with the seeds."""
    plain = intervention_rates("late", taper_episodes=0)
    faded = intervention_rates("late", taper_episodes=4)
    failing = intervention_rates("away", taper_episodes=4)
    assert np.mean(plain[:4]) > 0 and np.mean(plain[-8:]) == pytest.approx(np.mean(plain[:4]))
    assert np.mean(faded[-8:]) < 0.5 * np.mean(plain[-8:])
    assert np.mean(faded[-8:]) < 0.5 * np.mean(failing[-8:])
    assert np.mean(failing[-8:]) > 0.5 * np.mean(failing[:4])  # a failing policy keeps it
    assert faded == intervention_rates("late", taper_episodes=4)


def test_fading_person_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="taper_floor"):
        with_scripted_person({"scripted_person": {"taper_floor": 1.5}}, Line)
    with pytest.raises(ConfigError, match="taper_episodes"):
        with_scripted_person({"scripted_person": {"taper_episodes": -1}}, Line)

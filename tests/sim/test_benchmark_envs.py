"""Every named benchmark env (roborl/sim/benchmarks: Gymnasium-Robotics Fetch, dm_control through
Shimmy) builds from its preset, resets and steps on the pinned MuJoCo with observations inside
the declared space, as a vector (env.concat_obs, the presets' default) and as the raw Dict;
and SAC trains on Fetch's goal Dict through `roborl train env=fetch_reach`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from cli_runner import roborl

from roborl.core.compose import compose_dict
from roborl.core.envs import env_factory
from roborl.core.errors import ConfigError
from roborl.core.plugins import PluginHost, get_host
from roborl.sim import benchmarks
from roborl.sim.benchmarks import DMC_TASKS, FETCH_TASKS, PIXEL_TASKS

ROOT = Path(__file__).resolve().parents[2]
PIXEL_PRESETS = sorted(f"fetch_{task}_pixels" for task in PIXEL_TASKS)
PRESETS = sorted(
    p.stem
    for p in (ROOT / "roborl/sim/benchmarks/configs/env").glob("*.yaml")
    if p.stem not in PIXEL_PRESETS  # camera Dicts, tested in tests/sim/test_fetch_pixels.py
)


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return get_host()


def test_every_named_task_has_a_preset_and_a_registered_name(host: PluginHost) -> None:
    assert sorted([*FETCH_TASKS, *DMC_TASKS]) == PRESETS
    for name in PIXEL_PRESETS:
        assert (ROOT / f"roborl/sim/benchmarks/configs/env/{name}.yaml").exists()
        assert name in host.registry.envs
    for short, gym_id in {**FETCH_TASKS, **DMC_TASKS}.items():
        assert short in host.registry.envs and gym_id in host.registry.envs


def _steps_inside_its_space(env: gym.Env, steps: int = 5) -> None:
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs), obs
    env.action_space.seed(0)
    for _ in range(steps):
        obs, reward, terminated, _, _ = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs), obs
        assert np.isfinite(reward) and not terminated


@pytest.mark.parametrize("name", PRESETS)
def test_named_benchmark_env_resets_and_steps(host: PluginHost, name: str) -> None:
    env_cfg = compose_dict(host, [f"env={name}"], "train")["env"]
    assert env_cfg["concat_obs"] is True  # the presets train vector algorithms as they are
    vector = env_factory(host.registry, env_cfg)()
    assert isinstance(vector.observation_space, gym.spaces.Box)
    _steps_inside_its_space(vector)
    vector.close()
    raw = env_factory(host.registry, {**env_cfg, "concat_obs": False})()
    assert isinstance(raw.observation_space, gym.spaces.Dict)
    assert vector.observation_space.shape == (gym.spaces.flatdim(raw.observation_space),)
    _steps_inside_its_space(raw)
    raw.close()


def test_fetch_observation_dict_and_a_64px_frame(host: PluginHost) -> None:
    env = env_factory(
        host.registry,
        {"id": "fetch_reach", "kwargs": {"render_mode": "rgb_array", "width": 64, "height": 64}},
    )()
    assert list(env.observation_space.spaces) == ["achieved_goal", "desired_goal", "observation"]
    assert env.action_space.shape == (4,)  # dx, dy, dz, gripper: HIL-SERL's action space
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8 and frame.std() > 0
    env.close()
    dense = env_factory(host.registry, {"id": "FetchReachDense-v4"})()
    dense.reset(seed=0)
    assert dense.step(dense.action_space.sample())[1] < 0.0  # minus the distance to the goal
    dense.close()


def test_dm_control_frame(host: PluginHost) -> None:
    kwargs = {"render_mode": "rgb_array", "render_kwargs": {"width": 64, "height": 64}}
    env = env_factory(host.registry, {"id": "dmc_cartpole_swingup", "kwargs": kwargs})()
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (64, 64, 3) and frame.std() > 0
    env.close()


def test_other_tasks_by_module_and_id(host: PluginHost) -> None:
    """`env.id=MODULE:ID` reaches the rest of a suite; a module that is missing is named."""
    env = env_factory(host.registry, {"id": "shimmy:dm_control/hopper-hop-v0"})()
    _steps_inside_its_space(env, steps=2)
    env.close()
    with pytest.raises(ConfigError, match="imports 'no_such_suite'"):
        env_factory(host.registry, {"id": "no_such_suite:Task-v0"})()


def test_a_missing_suite_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin loads without its packages (`roborl plugins` lists the names); building one
    of its envs says which extra to install, without a traceback."""
    monkeypatch.setitem(sys.modules, "gymnasium_robotics", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "shimmy", None)
    with pytest.raises(ConfigError, match=r"Gymnasium-Robotics.*roborl\[benchmarks\]"):
        benchmarks.make_fetch("FetchReach-v4")
    with pytest.raises(ConfigError, match=r"dm_control and Shimmy.*roborl\[benchmarks\]"):
        benchmarks.make_dmc("dm_control/walker-walk-v0")


def test_fetch_refuses_a_mujoco_it_does_not_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """MuJoCo >= 3.12 breaks Gymnasium-Robotics 1.4.2's Fetch deep in a reset (an assert on a
    joint type): say so up front, with the version to install."""
    import mujoco

    monkeypatch.setattr(mujoco, "__version__", "4.0.0")
    with pytest.raises(ConfigError, match=r"fail on MuJoCo 4\.0\.0.*mujoco==3\.3\.7"):
        benchmarks.make_fetch("FetchReach-v4")


def test_sac_trains_on_fetch_reach(tmp_path: Path) -> None:
    """`roborl train env=fetch_reach`: the goal Dict concatenated into one vector for SAC, a few
    hundred steps, a checkpoint whose observation space is that vector."""
    roborl(
        "train", "env=fetch_reach", "total_steps=300", "learning_starts=100", "eval_every=300",
        "eval_episodes=1", "checkpoint_every=300", "log_every=100", "algo.batch_size=32",
        "algo.hidden_sizes=[32,32]", "progress=false", "seed=0", "hydra.run.dir=run",
        cwd=tmp_path,
    )  # fmt: skip
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["env"] == "FetchReach-v4"
    assert summary["steps"] == 300 and -50.0 <= summary["final_eval_return"] <= 0.0
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["observation_space"]["shape"] == [16]  # achieved 3 + desired 3 + observation 10
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("train/critic_loss" in r for r in records)

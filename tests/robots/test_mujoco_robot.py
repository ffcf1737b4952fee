"""`robot=mujoco`: the in-process MuJoCo robot behind the same `Robot` seam, `RobotEnv` and
safety layer as the ROS 2 driver, with ROS made unimportable (a `rclpy` and a `cyclonedds`
that raise on import come first on the path): `roborl train robot=mujoco` learns and
`roborl deploy robot=mujoco` commands the robot, ending with the hold.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_server import run_roborl

from roborl.core.errors import ConfigError

NO_ROS = "raise ImportError('roborl test: ROS must not be imported with robot=mujoco')\n"


def no_ros_env(tmp_path: Path) -> dict[str, str]:
    """An environment in which importing rclpy or cyclonedds fails."""
    import os

    site = tmp_path / "no_ros"
    for name in ("rclpy", "cyclonedds"):
        (site / name).mkdir(parents=True, exist_ok=True)
        (site / name / "__init__.py").write_text(NO_ROS)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(site))
    env.pop("ROS_DOMAIN_ID", None)
    return env


def roborl(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_roborl(args, env=env, timeout=240)


def test_train_sac_on_the_mujoco_robot_without_ros(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train = roborl(
        ["train", "algo=sac", "robot=mujoco", "robot.rate_hz=100",
         "robot.options.sim_rate_hz=100", "robot.max_episode_steps=100", "total_steps=300",
         "learning_starts=100", "eval_every=100000", "eval_episodes=1",
         "checkpoint_every=100000", "log_every=100", "progress=false",
         "algo.hidden_sizes=[16,16]", f"hydra.run.dir={run_dir}"],
        no_ros_env(tmp_path),
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env"] == "robot:mujoco" and summary["steps"] == 300
    assert summary["updates"] > 0 and summary["episodes"] >= 2  # the pole fell: terminations
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("train/critic_loss" in r for r in rows)


def test_deploy_on_the_mujoco_robot_ends_with_the_hold(balance_checkpoint, tmp_path) -> None:
    record = tmp_path / "commands.jsonl"
    stats = tmp_path / "stats.json"
    dep = roborl(
        ["deploy", "robot=mujoco", f"checkpoint={balance_checkpoint}", "duration_s=3",
         f"stats={stats}", f"robot.options.record={record}"],
        no_ros_env(tmp_path),
    )  # fmt: skip
    assert dep.returncode == 0, dep.stderr[-3000:]
    events = [json.loads(x) for x in dep.stdout.splitlines() if x.startswith("{")]
    start = next(e for e in events if e["event"] == "deploy_start")
    assert start["command_topic"] == "mujoco:inverted_pendulum" and not start["managed"]
    done = json.loads(stats.read_text())
    cmds = [json.loads(x)["data"] for x in record.read_text().splitlines()]
    assert len(cmds) == done["commands"] > 20  # every command the robot got, counted
    assert cmds[-1] == [0.0]  # the final hold: zero on an effort interface
    assert any(c != [0.0] for c in cmds[:-1])  # the policy did command it
    assert done["interventions"] == {} and not done["estop"]


def test_mujoco_robot_refuses_what_it_cannot_do() -> None:
    from roborl.robots.config import robot_preset
    from roborl.robots.env.robot_env import RobotEnv
    from roborl.robots.mujoco.kind import open_mujoco
    from roborl.robots.robot import Robot

    cfg = robot_preset("mujoco")
    with pytest.raises(ConfigError, match="ROS arguments"):
        open_mujoco(cfg, ros_args=["-p", "rate_hz:=5"])
    with pytest.raises(ConfigError, match="actuators"):
        open_mujoco({**cfg, "command": {**cfg["command"], "joints": ["slider", "hinge"]},
                     "safety": {"low": [-1, -1], "high": [1, 1]}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"robot\.options\.sim_rate"):
        open_mujoco({**cfg, "options": {"sim_rate": 5}})  # a typo is refused
    teleop = {"topic": "/joy", "type": "joy", "axes": [0]}
    robot, resolved = open_mujoco({**cfg, "intervention": teleop})
    assert isinstance(robot, Robot)
    with pytest.raises(ConfigError, match="needs a ROS 2 robot"):
        RobotEnv(resolved, driver=robot)
    robot.close()
    robot, resolved = open_mujoco(cfg)
    env = RobotEnv(resolved, driver=robot)
    try:
        obs, _ = env.reset()
        assert obs.shape == (4,) and np.all(np.isfinite(obs))
        _, _, _, _, info = env.step(np.array([9.0], np.float32))
        assert info["executed_action"][0] == 3.0  # clamped by the safety layer
    finally:
        env.close()

"""`roborl train robot=ros2` end to end: SAC learns online from `sim-robot` over loopback, with
both transports (raw DDS, and rclpy: real ROS 2 nodes from the PyPI wheels).

The robot is a separate process (MuJoCo InvertedPendulum behind ROS 2 topics, frozen in its
terminal state until the trainer's reset routine asks for a new episode, like a real robot);
every transition the trainer stores is a JointState that arrived over DDS and every action a
Float64MultiArray the robot received.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_server import run_roborl

from roborl.core.checkpoint import load_checkpoint

START = 90.0
STEPS = 300


@pytest.mark.parametrize("transport", ["dds", "rclpy"])
def test_train_sac_against_sim_robot(transport: str, ros_env, nodes, tmp_path) -> None:
    sim = nodes(
        [
            "sim-robot",
            "env=inverted_pendulum",
            f"transport={transport}",
            "rate_hz=100",
            "on_terminate=hold",
        ],
        ros_env,
    )
    sim.wait_event("sim_robot_start", START)
    run_dir = tmp_path / "run"
    train = run_roborl(
        [
            "train",
            "algo=sac",
            "robot=ros2",
            f"robot.transport={transport}",
            "robot.rate_hz=100",
            "robot.connect_timeout_s=60",
            "robot.max_episode_steps=100",
            f"total_steps={STEPS}",
            "learning_starts=100",
            "eval_every=100000",
            "eval_episodes=1",
            "checkpoint_every=100000",
            "log_every=100",
            "progress=false",
            f"hydra.run.dir={run_dir}",
        ],
        env=ros_env,
        timeout=300,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert "sac on robot:ros2, 300 steps" in train.stdout
    sim.proc.terminate()
    stop = sim.wait_event("sim_robot_stop", 60)
    assert sim.proc.wait(timeout=60) == 0  # an orderly DDS teardown, not a hang or crash

    # The run directory contract.
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env"] == "robot:ros2" and summary["algo"] == "sac"
    assert summary["steps"] == STEPS and summary["status"] == "finished"
    assert summary["updates"] > 0 and summary["episodes"] >= 1
    assert summary["final_eval_return"] is not None
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("train/critic_loss" in r for r in rows)
    # The robot collector ran the episodes (whole episodes, updates while the robot holds).
    assert any("robot/policy_time_max_s" in r for r in rows)
    assert max(r["step"] for r in rows) == STEPS
    assert (run_dir / "config.yaml").is_file()
    ckpt = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert ckpt["config"]["robot"]["name"] == "ros2"
    assert ckpt["algo"] == "sac" and ckpt["observation_space"]["shape"] == [4]
    assert all(torch.isfinite(v).all() for v in ckpt["state"]["actor"].values())
    # A person may take over on a robot, so the buffer keeps the `intervened` flag even
    # without demos= (nobody intervened here: all false).
    assert not np.asarray(ckpt["buffer"]["extras"]["intervened"]).any()

    # The transitions came over DDS: the robot received at least one command per training
    # step, a reset request for every training episode, and fell (terminated) under the
    # random early policy -- the terminations the trainer counted.
    assert stop["commands"] >= STEPS, stop
    assert stop["reset_requests"] >= summary["episodes"], (stop, summary)
    falls = [e for e in sim.events if e.get("event") == "episode" and e["cause"] == "terminated"]
    assert len(falls) >= 1

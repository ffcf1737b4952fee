"""The pixel pipeline over ROS 2, end to end: `roborl train algo=drq robot=tabletop` learns from
the frames `sim-robot` renders and publishes (sensor_msgs/Image beside /joint_states), then
`roborl export` writes the policy and `roborl deploy model=DIR` runs it on the same robot.

Training runs over rclpy (a real ROS 2 node on Fast DDS) and deploy over the raw DDS
transport, against a sim-robot on Cyclone DDS: frames cross vendors both times. Tiny networks
and budgets: this checks the plumbing (Dict observations stored, updates made, a policy that
sees the camera commands the robot), not learning curves (benchmarks/pixels.py).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from cli_runner import roborl

from roborl.core.checkpoint import load_checkpoint
from roborl.core.plugins import get_host
from roborl.plugins.export.cli import export

START = 90.0  # process start-up on a loaded 2-core machine can take tens of seconds
STEPS = 60
SMALL = [
    "algo.batch_size=16",
    "algo.conv_channels=8",
    "algo.conv_layers=2",
    "algo.feature_dim=16",
    "algo.hidden_sizes=[32,32]",
]


def test_drq_trains_over_ros2_from_sim_robot_frames_then_deploys(
    ros_env, nodes, tmp_path: Path
) -> None:
    sim = nodes(
        [
            "sim-robot",
            "env=tabletop",
            "transport=dds",
            "cameras=[top]",
            "rate_hz=20",
            "on_terminate=hold",
        ],
        ros_env,
    )
    sim.wait_event("sim_robot_start", START)
    run_dir = tmp_path / "run"
    train = roborl(
        "train",
        "algo=drq",
        *SMALL,
        "robot=tabletop",
        "robot.transport=rclpy",
        "robot.rate_hz=20",
        "robot.max_episode_steps=20",
        "robot.connect_timeout_s=60",
        "robot.safety.max_state_age_s=2.0",
        "robot.cameras.0.max_age_s=2.0",
        f"total_steps={STEPS}",
        "learning_starts=40",
        "eval_every=0",
        "checkpoint_every=100000",
        "log_every=20",
        "progress=false",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert f"drq on robot:ros2, {STEPS} steps" in train.stdout

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == STEPS
    assert summary["updates"] > 0 and summary["episodes"] >= 1
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/critic_loss"] for r in rows if "train/critic_loss" in r]
    assert losses and all(math.isfinite(x) for x in losses)
    ckpt = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    space = ckpt["observation_space"]
    assert ckpt["algo"] == "drq" and set(space["spaces"]) == {"state", "top"}, space
    assert space["spaces"]["top"]["shape"] == [64, 64, 3]
    assert space["spaces"]["top"]["dtype"] == "uint8"

    # Every stored transition came over ROS 2: a command per step, a reset per episode.
    deadline = time.monotonic() + 30  # sim-robot reports its command count once a second
    while time.monotonic() < deadline:
        status = [e for e in sim.events if e.get("event") == "status"]
        if status and status[-1]["commands"] >= STEPS:
            break
        time.sleep(0.5)
    assert status and status[-1]["commands"] >= STEPS, status[-3:]

    model = tmp_path / "model"
    assert export(get_host(), str(run_dir / "checkpoints" / "last.pt"), model)["verified"]
    before = status[-1]["commands"]
    dep = nodes(
        [
            "deploy",
            f"model={model}",
            "robot=tabletop",
            "robot.transport=dds",
            "robot.connect_timeout_s=60",
            "robot.safety.max_state_age_s=2.0",
            "robot.cameras.0.max_age_s=2.0",
            "duration_s=4",
        ],
        ros_env,
    )
    done = dep.wait_event("done", 2 * START)
    assert done["exit_code"] == 0 and done["commands"] > 0, done
    assert done["images_received"]["top"] >= 1 and done["images_rejected"] == {"top": 0}
    assert "watchdog_camera" not in done["interventions"], done
    assert dep.proc.wait(timeout=60) == 0
    sim.proc.terminate()
    stop = sim.wait_event("sim_robot_stop", 60)
    assert stop["commands"] >= before + done["commands"] // 2, (stop, done)
    assert stop["images_published"] > STEPS // 4

"""Human in the loop end to end over ROS 2 on loopback (issue 21): `sim-robot` serves
RoborlTabletop ("reach the red block") with a camera, `scripted-human` takes the robot over on
/joy (sensor_msgs/Joy) whenever it drifts from the expert's path, and the pixel learner
(`roborl train algo=drq robot=tabletop_hil collector=actor_learner demos=...`) starts
`roborl actor` as a process of its own that drives the robot at the control rate.

Checked: the learner's buffer holds transitions flagged `intervened`, their actions are the
person's executed commands (they point the gripper at the red block, which random or
untrained-policy actions do not), and the actor's achieved control rate stays within 5% of its
target while the learner trains. Marked serial: it asserts a rate.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from robot_helpers import jsonl_rows, pid_alive, training_windows

from roborl.core.checkpoint import load_checkpoint
from roborl.core.datasets import OfflineDataset
from roborl.robots.nodes.processes import free_port_pair

pytestmark = pytest.mark.serial

RATE_HZ = 10  # RoborlTabletop's real time (dt = 0.1 s)
PX = 32
START = 90.0  # process start-up on a loaded 2-core machine takes tens of seconds
JOINTS = "[gx,gy,red_x,red_y]"  # the buffer's states show where the block is


def _demos(path: Path, n: int = 32) -> Path:
    """A few demo rows in the robot's spaces (state: 4 positions + 4 velocities, a 32x32
    frame). Their content does not matter here: `demos=` makes both buffers keep the
    `intervened` flag, as in HIL-SERL's training with demonstrations."""
    rng = np.random.default_rng(0)
    obs = {
        "state": rng.uniform(-0.2, 0.2, (n + 1, 8)),
        "top": rng.integers(0, 255, (n + 1, PX, PX, 3), dtype=np.uint8),
    }
    ds = OfflineDataset.from_arrays(
        {
            "observations": {k: v[:-1] for k, v in obs.items()},
            "next_observations": {k: v[1:] for k, v in obs.items()},
            "actions": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
            "rewards": np.zeros(n, np.float32),
            "terminals": np.zeros(n, bool),
            "timeouts": np.zeros(n, bool),
        },
        source="test demos",
    )
    return ds.save(path)


def _train_args(run_dir: Path, demos: Path, port: int) -> list[str]:
    args = {
        "algo": "drq",
        "algo.batch_size": "16",
        "algo.conv_channels": "8",
        "algo.conv_layers": "2",
        "algo.feature_dim": "16",
        "algo.hidden_sizes": "[32,32]",
        "robot": "tabletop_hil",
        "robot.transport": "rclpy",
        "robot.rate_hz": str(RATE_HZ),
        "robot.joints": JOINTS,
        "robot.cameras.0.width": str(PX),
        "robot.cameras.0.height": str(PX),
        "robot.cameras.0.max_age_s": "2.0",
        "robot.safety.max_state_age_s": "2.0",
        "robot.connect_timeout_s": "60",
        "robot.max_episode_steps": "40",
        "robot.reset.timeout_s": "30",
        "collector": "actor_learner",
        "actor_learner.port": str(port),
        "actor_learner.sync_every": "10",
        "actor_learner.timeout_s": "120",
        "demos": str(demos),
        "total_steps": "100000",  # the test stops the learner
        "learning_starts": "20",
        "eval_every": "0",
        "log_every": "20",
        "checkpoint_every": "40",
        "progress": "false",
        "hydra.run.dir": str(run_dir),
    }
    return [
        sys.executable,
        "-m",
        "roborl.core.cli",
        "train",
        *(f"{k}={v}" for k, v in args.items()),
    ]


def _flagged(ckpt_path: Path) -> int:
    try:
        buf = load_checkpoint(ckpt_path)["buffer"]
    except Exception:  # a checkpoint being replaced right now
        return 0
    return int(np.asarray(buf["extras"]["intervened"]).sum())


def test_scripted_human_corrections_reach_the_learner_at_the_control_rate(
    ros_env, nodes, tmp_path: Path
) -> None:
    sim = nodes(
        [
            "sim-robot",
            "env=tabletop_reach_pixels",
            "transport=rclpy",  # its ~/reset service is an rclpy service
            f"cameras=[{{name: top, width: {PX}, height: {PX}}}]",
            "rate_hz=20",
            "on_terminate=hold",
        ],
        ros_env,
    )
    human = nodes(
        ["scripted-human", "robot=tabletop_hil", "transport=rclpy", "task=0", "window_s=1.0"],
        ros_env,
    )
    sim.wait_event("sim_robot_start", START)
    human.wait_event("scripted_human_start", START)
    run_dir = tmp_path / "run"
    demos = _demos(tmp_path / "demos.npz")
    err = tmp_path / "learner.err"
    with open(err, "w") as err_file:  # a file, not a pipe nobody drains while it runs
        learner = subprocess.Popen(
            _train_args(run_dir, demos, free_port_pair()),
            env=ros_env, stdout=subprocess.DEVNULL, stderr=err_file,
        )  # fmt: skip
    received = run_dir / "actor" / "metrics.jsonl"  # the actor's statuses at the learner
    ckpt_path = run_dir / "checkpoints" / "last.pt"
    actor_pid = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and learner.poll() is None:
            rows = jsonl_rows(received)
            if (
                training_windows(rows)[0] >= 6 * RATE_HZ
                and ckpt_path.is_file()
                and _flagged(ckpt_path) >= 5
            ):
                break
            time.sleep(0.5)
        log = run_dir / "actor" / "actor.log"
        tail = err.read_text()[-3000:] + (log.read_text()[-3000:] if log.is_file() else "")
        assert learner.poll() is None, tail
        actor_pid = int((run_dir / "actor" / "actor.pid").read_text())
        assert actor_pid not in (os.getpid(), learner.pid)  # a process of its own

        # The actor's achieved control rate while the learner trained: within 5% (issue 21).
        steps, seconds = training_windows(jsonl_rows(received))
        assert steps >= 6 * RATE_HZ, (steps, seconds, tail)
        assert abs(steps / seconds / RATE_HZ - 1.0) < 0.05, (steps, seconds)

        # The learner's buffer: camera frames, and transitions the person took over, flagged.
        ckpt = load_checkpoint(ckpt_path)
        assert ckpt["runner"]["updates"] > 0
        buf, n = ckpt["buffer"], int(ckpt["buffer"]["size"])
        top = np.asarray(buf["obs"]["top"][:n])
        assert top.shape[1:] == (PX, PX, 3) and top.std() > 0  # rendered frames, not blanks
        flags = np.asarray(buf["extras"]["intervened"][:n], bool)
        assert 5 <= flags.sum() < n, (flags.sum(), n)
        # Those actions are the person's executed commands: the expert's, towards the red
        # block (state = [gx, gy, red_x, red_y, velocities...]), clamped to the safety box.
        # The policy's own (random at first, then barely trained) have no such direction.
        state = np.asarray(buf["obs"]["state"][:n])
        acts = np.asarray(buf["actions"][:n])
        to_block = state[:, 2:4] - state[:, :2]
        cos = np.sum(acts * to_block, 1) / (
            np.linalg.norm(acts, axis=1) * np.linalg.norm(to_block, axis=1) + 1e-9
        )
        assert np.abs(acts).max() <= 1.0 + 1e-6
        assert np.median(cos[flags]) > 0.5, cos[flags]
        assert np.median(np.abs(acts[flags]).max(1)) > 0.1
        assert np.median(cos[flags]) > np.median(cos[~flags]) + 0.3, (cos[flags], cos[~flags])
    finally:
        if learner.poll() is None:
            learner.send_signal(signal.SIGINT)
            try:
                learner.wait(timeout=30)
            except subprocess.TimeoutExpired:
                learner.kill()
                learner.wait()
        if actor_pid is not None and pid_alive(actor_pid):
            os.kill(actor_pid, signal.SIGKILL)

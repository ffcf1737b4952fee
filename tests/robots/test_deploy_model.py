"""`roborl deploy model=DIR`: an exported folder (safetensors + JSON, nothing unpickled) runs on
the robot exactly as its checkpoint does: the scripted balance policy keeps the sim pendulum up,
with torch or (`format=onnx`, `runtime=onnx`) with onnxruntime."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from roborl.core.plugins import get_host
from roborl.plugins.export.cli import export

START = 90.0  # process start-up on a loaded 2-core machine can take tens of seconds
ROBOT = ["robot=ros2", "robot.transport=dds", "robot.connect_timeout_s=60"]


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_deploy_model_dir_balances_the_sim_robot(
    ros_env, nodes, balance_checkpoint, tmp_path: Path, runtime: str
) -> None:
    model = tmp_path / "balance"
    fmt = "onnx" if runtime == "onnx" else "safetensors"
    assert export(get_host(), str(balance_checkpoint), model, format=fmt)["verified"] is True
    sim = nodes(["sim-robot", "env=inverted_pendulum", "transport=dds"], ros_env)
    sim.wait_event("sim_robot_start", START)
    dep = nodes(
        [
            "deploy",
            f"model={model}",
            f"runtime={runtime}",
            *ROBOT,
            "rate_hz=50",
            # The claim is the model folder, not the watchdog (test_stop_causes.py has that):
            # a loaded machine can starve the sim robot for half a second.
            "robot.safety.max_state_age_s=2.0",
        ],
        ros_env,
    )
    start = dep.wait_event("deploy_start", START)
    # 100 steps in one episode = 4 s of balancing; with zero force it falls within ~25.
    best, deadline = 0, time.monotonic() + 40
    while best < 100 and time.monotonic() < deadline:
        time.sleep(0.5)
        lengths = [
            e["current_episode_length"]
            for e in sim.events
            if e.get("event") == "status" and e["_t"] > start["_t"]
        ]
        best = max(lengths, default=0)
    assert best >= 100, (sim.events[-8:], dep.events)
    dep.proc.terminate()
    assert dep.proc.wait(timeout=60) == 0

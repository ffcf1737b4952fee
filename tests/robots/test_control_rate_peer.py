"""`roborl deploy` over rclpy keeps its control rate against an independent robot that
publishes JointState fast (issue 32).

The robot is `benchmarks/peers/joint_state_robot.py`: plain rclpy and message packages, no
roborl import, publishing JointState for slider and hinge at 500 Hz and counting the commands
it receives. Before the fix, deploy's 4-thread `MultiThreadedExecutor` took the GIL from the
control loop: at 200 Hz JointState, 50 Hz deploy achieved 5 Hz and the watchdog stopped it.

This is the one test with a timing assertion (the issue asks for it; the project's rule is
otherwise "no timing assertions in tests"). The margin is made robust to a loaded 2-core machine
(`pytest -n 2`): it counts the ticks deploy reports in its `done` statistics over its 20 s
(no clock comparison between processes), asks for 95% of them, and keeps the default
`max_policy_time_s` (0.5 s: a control loop starved of the GIL trips it) with
`on_watchdog=exit`, so any watchdog stop fails the run with exit code 3. The stale-state
watchdog is set to 1 s: it judges the robot's stream, and the peer is a Python process that
a loaded machine can stall past the default 0.25 s (seen once in a full `tests/robots` run
beside the LLM tests), which says nothing about deploy's loop.
"""

from __future__ import annotations

import sys
import textwrap
import threading
from pathlib import Path

import pytest
from cli_server import event_process

from roborl.robots.nodes.processes import EventProcess

START = 120.0
ROBOT = Path(__file__).resolve().parents[2] / "benchmarks" / "peers" / "joint_state_robot.py"


@pytest.fixture
def started():
    procs: list[EventProcess] = []
    yield procs
    for p in procs:
        p.stop()


@pytest.fixture
def peer_env(ros_env: dict[str, str]) -> dict[str, str]:
    """Own ROS_DOMAIN_ID, ROS 2 localhost-only discovery, the wheels' default RMW."""
    env = dict(ros_env, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", OMP_NUM_THREADS="1")
    env.pop("ROS_LOCALHOST_ONLY", None)
    env.pop("RMW_IMPLEMENTATION", None)
    return env


@pytest.mark.serial
def test_deploy_keeps_50hz_against_a_500hz_joint_state_robot(
    peer_env, started, balance_checkpoint
) -> None:
    pytest.importorskip("rclpy")
    robot = EventProcess([sys.executable, str(ROBOT), "--rate", "500"], peer_env)
    started.append(robot)
    robot.wait_event("ready", START)
    dep = event_process(
        [
            sys.executable,
            "-m",
            "roborl.core.cli",
            "deploy",
            f"checkpoint={balance_checkpoint}",
            "robot=ros2",
            "robot.transport=rclpy",
            "robot.connect_timeout_s=90",
            "robot.safety.max_state_age_s=1.0",
            "rate_hz=50",
            "duration_s=20",
        ],
        peer_env,
    )
    started.append(dep)
    assert dep.wait_event("deploy_start", START)["managed"] is True
    done = dep.wait_event("done", 120)
    stops = [e for e in dep.events if e.get("event") == "watchdog_stop"]
    assert not stops, (stops, done)
    watchdog = {k: v for k, v in done["interventions"].items() if "watchdog" in k}
    assert not watchdog, done
    assert dep.proc.wait(timeout=60) == 0, dep.stderr()[-3000:]
    # 20 s at 50 Hz is 1000 ticks; 95% of them, each a command the robot was sent.
    assert done["ticks"] >= 950, done
    assert done["commands"] >= 950, done
    # The robot heard them: every command is counted on its side too.
    robot.proc.terminate()
    summary = robot.wait_event("summary", 60)
    assert summary["commands"] >= 950, summary
    assert len(done["warmup_ms"]) == 1, done  # the policy ran once before the first tick


# A robot whose world clock the test controls, for the train driver under use_sim_time:
# JointState at 50 Hz, /clock frozen at 100 s, then running in real time, then frozen again,
# and the trajectory commands it receives with their header stamps. Plain rclpy only.
CLOCK_ROBOT = textwrap.dedent(
    """
    import json, threading, time
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory

    def out(**kw):
        print(json.dumps(kw), flush=True)

    rclpy.init()
    node = rclpy.create_node("clock_robot")
    commands = []  # (phase, header stamp in s, positions)
    sim = {"t": 100.0, "running": False, "phase": "start"}

    def on_traj(m):
        stamp = m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
        commands.append((sim["phase"], stamp, list(m.points[0].positions)))

    node.create_subscription(JointTrajectory, "/arm_controller/joint_trajectory", on_traj, 10)
    states = node.create_publisher(JointState, "/joint_states", 10)
    clock = node.create_publisher(Clock, "/clock", 10)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()

    def world():
        last = time.monotonic()
        while True:
            now = time.monotonic()
            if sim["running"]:
                sim["t"] += now - last
            last = now
            msg = Clock()
            msg.clock.sec = int(sim["t"])
            msg.clock.nanosec = int((sim["t"] % 1.0) * 1e9)
            clock.publish(msg)
            states.publish(JointState(name=["slider", "hinge"], position=[0.0, 0.0],
                                      velocity=[0.0, 0.0]))
            time.sleep(0.02)

    threading.Thread(target=world, daemon=True).start()
    out(event="ready")
    end = time.monotonic() + 180
    while not commands and time.monotonic() < end:  # the driver's first command (a hold)
        time.sleep(0.05)
    time.sleep(1.0)
    sim["phase"] = "frozen"
    time.sleep(3.0)
    sim["phase"], sim["running"] = "running", True
    time.sleep(3.0)
    sim["phase"], sim["running"] = "settle", False
    time.sleep(1.0)
    sim["phase"] = "frozen_again"
    time.sleep(2.0)
    moves = {p: sum(1 for q, _, pos in commands if q == p and pos != [0.0, 0.0])
             for p in ("frozen", "running", "frozen_again")}
    stamps = [s for q, s, pos in commands if q == "running" and pos != [0.0, 0.0]]
    out(event="phases", moves=moves, stamps=stamps[:50], sim_t=sim["t"])
    """
)


def test_train_driver_ticks_on_clock_and_stamps_trajectories(peer_env, started) -> None:
    """`train robot=...` with `-p use_sim_time:=true` (robot.ros_args) steps at rate_hz per
    sim second: no step while /clock stands still, steps while it runs; each JointTrajectory
    carries the node clock's time (sim time here) in its header stamp."""
    pytest.importorskip("rclpy")
    from omegaconf import OmegaConf

    from roborl.core.envs import robot_factory
    from roborl.core.plugins import get_host
    from roborl.robots.config import robot_preset

    robot = EventProcess([sys.executable, "-c", CLOCK_ROBOT], peer_env)
    started.append(robot)
    robot.wait_event("ready", START)
    cfg = OmegaConf.create(robot_preset("ros2"))
    for key, value in {
        "transport": "rclpy",
        "rate_hz": 10.0,
        "connect_timeout_s": 90.0,
        "command": {"interface": "trajectory", "controller": "arm_controller"},
        "safety": {"low": [-1.0, -1.0], "high": [1.0, 1.0], "max_state_age_s": 5.0},
        "reset": {"mode": "wait", "wait_s": 0.0},
        "terminate": {},
        "max_episode_steps": 10**6,
        "ros_args": ["-p", "use_sim_time:=true"],
    }.items():
        OmegaConf.update(cfg, key, value, merge=False)
    env = robot_factory(get_host().registry, OmegaConf.to_container(cfg))()
    stop = threading.Event()
    errors: list[BaseException] = []

    def steps() -> None:
        try:
            env.reset()
            while not stop.is_set():
                env.step([0.25, -0.5])
        except BaseException as exc:  # an e-stop at close ends the loop
            if not stop.is_set():
                errors.append(exc)

    try:
        assert env.unwrapped.sim_time
        thread = threading.Thread(target=steps, daemon=True)
        thread.start()
        phases = robot.wait_event("phases", START)
    finally:
        stop.set()
        env.unwrapped.safety.trigger_estop("test over")  # unblocks a step waiting on /clock
        thread.join(10)
        env.close()
    assert not errors, errors
    moves = phases["moves"]
    assert moves["frozen"] <= 1, phases  # at most the step due when the clock stopped
    assert moves["running"] >= 10, phases  # 3 s of sim time at 10 Hz
    assert moves["frozen_again"] <= 1, phases
    # Stamped with sim time (the frozen clock began at 100 s), never left at zero.
    stamps = phases["stamps"]
    assert stamps and all(100.0 <= s <= phases["sim_t"] + 1.0 for s in stamps), phases

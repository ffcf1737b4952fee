"""roborl's ROS 2 nodes as separate processes on loopback: over rclpy (the default transport,
real ROS 2 nodes) and over raw Cyclone DDS. Plain-rclpy peers are in test_ros_native.py."""

from __future__ import annotations

import threading
import time

import pytest

from roborl.robots.transport import msgs
from roborl.robots.transport.dds import DDSTransport

START = 90.0  # process start-up on a loaded 2-core machine can take tens of seconds
ROBOT = ["robot=ros2", "robot.transport=dds", "robot.connect_timeout_s=60"]


def _localhost(ros_env: dict[str, str]) -> dict[str, str]:
    """ROS 2's own localhost-only discovery, for the rclpy nodes (Cyclone uses CYCLONEDDS_URI)."""
    env = dict(ros_env, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    env.pop("ROS_LOCALHOST_ONLY", None)
    return env


@pytest.mark.parametrize("transport", ["auto", "dds"])
def test_policy_balances_sim_robot_then_watchdog_stop_when_robot_dies(
    transport, ros_env, nodes, balance_checkpoint
) -> None:
    """deploy keeps the pendulum up (zero force drops it in ~1 s); SIGKILLed robot -> hold.

    `auto` is rclpy here (the wheels are installed), so both nodes are real ROS 2 nodes."""
    ros_env = _localhost(ros_env)
    robot = ["robot=ros2", f"robot.transport={transport}", "robot.connect_timeout_s=60"]
    sim = nodes(["sim-robot", "env=inverted_pendulum", f"transport={transport}"], ros_env)
    sim.wait_event("sim_robot_start", START)
    # Without a policy the pendulum falls within about a second (25 steps).
    sim.wait_event("episode", START)
    dep = nodes(
        [
            "deploy",
            f"checkpoint={balance_checkpoint}",
            *robot,
            "rate_hz=50",
            "robot.safety.max_state_age_s=0.5",
        ],
        ros_env,
    )
    start = dep.wait_event("deploy_start", START)
    assert start["managed"] is (transport == "auto")  # a lifecycle node only over rclpy
    # 100 steps in one episode = 4 s of balancing at 25 steps/s; zero force falls in ~25.
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
    assert not [e for e in sim.events if e.get("event") == "episode" and e["_t"] > start["_t"] + 2]
    sim.proc.kill()
    # The behaviour, not its speed: a watchdog stop for stale state, then a clean exit 3.
    stop = dep.wait_event("watchdog_stop", 60)
    assert "old" in stop["cause"]
    assert dep.proc.wait(timeout=60) == 3, dep.finish()[-3000:]
    done = next(e for e in dep.events if e.get("event") == "done")
    assert done["interventions"].get("watchdog_state", 0) >= 1


def test_estop_stops_commands_and_stays_latched(ros_env, nodes, balance_checkpoint) -> None:
    sim = nodes(["sim-robot", "env=inverted_pendulum", "transport=dds"], ros_env)
    dep = nodes(
        ["deploy", f"checkpoint={balance_checkpoint}", *ROBOT, "rate_hz=50", "duration_s=120"],
        ros_env,
    )
    sim.wait_event("sim_robot_start", START)
    dep.wait_event("deploy_start", START)
    t = DDSTransport("operator")
    seen: list[float] = []
    lock = threading.Lock()

    def on_cmd(msg: msgs.Float64MultiArray) -> None:
        with lock:
            seen.append(list(msg.data))

    t.subscribe("/forward_command_controller/commands", msgs.Float64MultiArray, on_cmd)
    estop = t.publisher("/estop", msgs.Bool)
    deadline = time.monotonic() + 60
    while len(seen) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(seen) >= 20, "no commands before the e-stop"
    estop(msgs.Bool(True))
    ev = dep.wait_event("estop", 60)
    assert "e-stop message" in ev["cause"]
    estop(msgs.Bool(False))  # releasing the button does not un-latch
    with lock:
        n = len(seen)
    deadline = time.monotonic() + 60  # the hold is re-sent every period while latched
    while len(seen) < n + 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dep.proc.poll() is None  # the node is alive and latched, not crashed
    dep.proc.terminate()
    done = dep.wait_event("done", 60)
    assert done["estop"] and done["commands"] > ev["commands_at_estop"], (ev, done)
    with lock:  # since the latch was reported: nothing but the hold (zero on effort), ever
        after = seen[n:]
    assert len(after) >= 20 and all(c == [0.0] for c in after), after[:5]
    assert dep.proc.wait(timeout=60) == 0
    t.close()


def test_malformed_joint_states_never_command(ros_env, nodes, balance_checkpoint) -> None:
    """Only malformed JointStates on the wire: deploy refuses with a clear error, no command."""
    t = DDSTransport("bad_robot")
    pub = t.publisher("/joint_states", msgs.JointState)
    seen: list = []
    t.subscribe("/forward_command_controller/commands", msgs.Float64MultiArray, seen.append)
    bad = [
        msgs.JointState(name=["slider"], position=[0.0], velocity=[0.0]),
        msgs.JointState(name=["slider", "elbow"], position=[0.0, 0.0], velocity=[0.0, 0.0]),
        msgs.JointState(name=["slider", "hinge"], position=[0.0], velocity=[0.0, 0.0]),
        msgs.JointState(
            name=["slider", "hinge"], position=[0.0, float("nan")], velocity=[0.0, 0.0]
        ),
    ]
    stop = [False]

    def spam() -> None:
        i = 0
        while not stop[0]:
            pub(bad[i % len(bad)])
            i += 1
            time.sleep(0.01)

    th = threading.Thread(target=spam, daemon=True)
    th.start()
    try:
        dep = nodes(
            [
                "deploy",
                f"checkpoint={balance_checkpoint}",
                "robot=ros2",
                "robot.transport=dds",
                "robot.connect_timeout_s=8",
            ],
            ros_env,
        )
        assert dep.proc.wait(timeout=START + 30) == 2
        err = dep.finish()
        assert "no valid sensor_msgs/JointState" in err
        assert "Last rejected message" in err
        assert any(w in err for w in ("lacks joints", "values for", "non-finite")), err
        assert seen == []
    finally:
        stop[0] = True
        th.join()
        t.close()

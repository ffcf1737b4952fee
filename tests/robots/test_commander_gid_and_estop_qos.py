"""Who else commands the robot is decided by DDS participant (GUID), not node name, on both
transports; and the e-stop topic hears every publisher, whatever its QoS.

The other side is always independent: a plain rclpy node (no roborl import) in its own
process, named like roborl's own deploy node for the commander check, and
`benchmarks/peers/estop_peer.py` for the e-stop (plain rclpy, a chosen QoS). roborl's side
is a `Ros2Driver` in this process over `rclpy` or `dds` (Cyclone). Every wait is on an event
(a peer's line, a match count, the e-stop callback), never a sleep.
"""

from __future__ import annotations

import logging
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from roborl.core.errors import RobotError
from roborl.robots.config import robot_preset
from roborl.robots.env.driver import Ros2Driver
from roborl.robots.transport import msgs
from roborl.robots.transport.common import make_transport

ROOT = Path(__file__).resolve().parents[2]
STOP_ROBOT = ROOT / "benchmarks" / "peers" / "stop_robot.py"
ESTOP_PEER = ROOT / "benchmarks" / "peers" / "estop_peer.py"
COMMAND_TOPIC = "/forward_command_controller/commands"
START = 90.0  # generous: two processes start on a shared 2-core machine

# A second commander in another process whose node has roborl deploy's own name.
SAME_NAME_COMMANDER = textwrap.dedent(
    f"""
    import sys, rclpy
    from std_msgs.msg import Float64MultiArray
    rclpy.init()
    node = rclpy.create_node("roborl_deploy")
    pub = node.create_publisher(Float64MultiArray, {COMMAND_TOPIC!r}, 10)
    print('{{"event": "ready"}}', flush=True)
    sys.stdin.read()  # until the test closes stdin
    """
)


def _driver(kind: str, **over) -> Ros2Driver:
    """roborl deploy's driver (node `roborl_deploy`) for the `ros2` preset's robot."""
    cfg = {**robot_preset("ros2"), "transport": kind, "node_name": "roborl_deploy", **over}
    return Ros2Driver(cfg, transport=make_transport(kind, "roborl_deploy"))


def _until(pred, what: str, timeout: float = START) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(what)
        time.sleep(0.02)


@pytest.mark.parametrize("kind", ["rclpy", "dds"])
def test_second_commander_with_our_node_name_is_refused(rclpy_env, procs, kind) -> None:
    """Another process running a node called `roborl_deploy` already publishes commands: a
    `roborl_deploy` driver refuses to connect, over rclpy (the graph's node names are equal,
    the GIDs are not) and over raw DDS (where there are no node names at all)."""
    robot = procs([sys.executable, str(STOP_ROBOT), "--rate", "100"], rclpy_env, roborl=False)
    other = procs([sys.executable, "-c", SAME_NAME_COMMANDER], rclpy_env, roborl=False)
    robot.wait_event("ready", START)
    other.wait_event("ready", START)
    driver = _driver(kind)
    try:
        # Our participant has discovered the other commander's writer before connect: a
        # reader of ours on the command topic is matched with it (the robot only reads it).
        probe = driver.transport.subscribe(COMMAND_TOPIC, msgs.Float64MultiArray, lambda m: None)
        _until(lambda: driver.transport.matched(probe) >= 1, "other commander not discovered")
        if kind == "rclpy":  # and the ROS graph names its node: ours
            node = driver.transport.node
            _until(
                lambda: (
                    [i.node_name for i in node.get_publishers_info_by_topic(COMMAND_TOPIC)]
                    == ["roborl_deploy"]
                ),
                "the other commander's node name not discovered",
            )
        with pytest.raises(RobotError, match="another node already commands this robot") as err:
            driver.connect(timeout_s=START)
        # Named by the writer's GID, as `ros2 topic info --verbose` prints it (over rclpy
        # also by node name once discovery has it).
        assert "(publisher GID 01.0f." in str(err.value)
        assert "allow_other_commanders" in str(err.value)
    finally:
        driver.close()


@pytest.mark.parametrize("kind", ["rclpy", "dds"])
def test_own_commands_alone_pass_and_a_same_name_commander_is_listed(ros_env, kind) -> None:
    """Two transports with one node name in one process are two participants: each lists
    the other's command publisher and never its own."""
    a, b = make_transport(kind, "roborl_deploy"), make_transport(kind, "roborl_deploy")
    try:
        a.publisher(COMMAND_TOPIC, msgs.Float64MultiArray)
        assert a.other_publishers(COMMAND_TOPIC) == []
        b.publisher(COMMAND_TOPIC, msgs.Float64MultiArray)
        _until(lambda: a.other_publishers(COMMAND_TOPIC), "b's publisher not listed by a")
        _until(lambda: b.other_publishers(COMMAND_TOPIC), "a's publisher not listed by b")
        assert len(a.other_publishers(COMMAND_TOPIC)) == 1
        assert a.other_publishers(COMMAND_TOPIC) != b.other_publishers(COMMAND_TOPIC)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", ["rclpy", "dds"])
def test_best_effort_estop_publisher_latches(rclpy_env, procs, kind) -> None:
    """A best-effort e-stop publisher (e.g. a joystick node's) matches the driver's e-stop
    subscription and its `true` latches."""
    peer = procs([sys.executable, str(ESTOP_PEER), "--reliability", "best_effort"], rclpy_env,
                 roborl=False)  # fmt: skip
    peer.wait_event("ready", START)
    driver = _driver(kind)
    latched = threading.Event()
    causes: list[str] = []
    driver.on_estop(lambda cause: (causes.append(cause), latched.set()))
    try:
        driver.connect(timeout_s=START)
        peer.wait_event("matched", START)  # never, while the e-stop reader is reliable only
        peer.send("estop")
        assert latched.wait(START), "a best-effort e-stop did not latch"
        assert causes[0] == "e-stop message on /estop"
        assert driver.estop_publishers() == 1
    finally:
        driver.close()


@pytest.mark.parametrize("kind", ["rclpy", "dds"])
def test_latched_estop_published_before_connect_latches(rclpy_env, procs, kind) -> None:
    """A transient-local e-stop publisher sent `true` before roborl started: the driver still
    gets it, and hands it to a callback registered after connect."""
    peer = procs([sys.executable, str(ESTOP_PEER), "--durability", "transient_local",
                  "--latched"], rclpy_env, roborl=False)  # fmt: skip
    peer.wait_event("estop_sent", START)
    peer.wait_event("ready", START)
    driver = _driver(kind)
    latched = threading.Event()
    try:
        driver.connect(timeout_s=START)
        driver.on_estop(lambda cause: latched.set())
        assert latched.wait(START), "the latched e-stop sent before connect was missed"
    finally:
        driver.close()


def test_no_estop_publisher_is_warned_in_log_and_diagnostics(ros_env, caplog) -> None:
    """With nobody publishing on the e-stop topic a while after connect, the node says so (a
    warning and /diagnostics `estop_publishers`, level WARN); once a publisher connects the
    value counts it and the level is OK again."""
    from roborl.robots.env.safety import SafetyConfig, SafetyLayer

    robot = make_transport("dds", "fake_robot")
    states = robot.publisher("/joint_states", msgs.JointState)
    stop = threading.Event()

    def stream() -> None:
        while not stop.wait(0.01):
            states(msgs.JointState(name=["slider", "hinge"], position=[0.0, 0.0],
                                   velocity=[0.0, 0.0]))  # fmt: skip

    feeder = threading.Thread(target=stream, daemon=True)
    feeder.start()
    driver = _driver("dds", diagnostics_period_s=0.05)
    driver.estop_grace_s = 0.5
    caplog.set_level(logging.INFO, logger="roborl.robots.node")
    try:
        driver.connect(timeout_s=START)
        safety = SafetyLayer(SafetyConfig(low=[-3.0], high=[3.0], max_state_age_s=5.0))
        driver.serve_safety(safety, clear=safety.reset_estop)
        _until(lambda: "no e-stop publisher is connected" in caplog.text, "no warning logged")
        level, message, values = driver.status()
        assert values["estop_publishers"] == 0
        assert level == 1 and "no e-stop publisher on '/estop'" in message
        robot.publisher("/estop", msgs.Bool)
        _until(lambda: "e-stop publisher connected" in caplog.text, "no reconnect logged")
        level, message, values = driver.status()
        assert values["estop_publishers"] == 1 and level == 0, (level, message)
    finally:
        stop.set()
        feeder.join()
        driver.close()
        robot.close()

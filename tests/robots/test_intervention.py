"""The intervention channel: a person's teleop topic overrides the policy through the safety
layer, and the robot collector stores what was executed with the `intervened` flag.

Everything runs over real ROS 2 traffic on loopback: an in-process robot node publishes
JointState and records the commands it receives, a teleop node publishes sensor_msgs/Joy or
geometry_msgs/Twist, and the robot env is the one `train robot=ros2` uses. Each test waits
for the teleop's first message (discovery) before it steps.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from robot_helpers import wait_until

from roborl.core.envs import SharedEnv
from roborl.core.errors import ConfigError
from roborl.robots.env.intervention import InterventionConfig
from roborl.robots.env.robot_env import RobotEnv
from roborl.robots.training.collector import RobotCollector
from roborl.robots.transport import msgs
from roborl.robots.transport.common import make_transport

MAX_DELTA = 0.3


class Robot:
    """Publishes JointState (joints a, b) at 200 Hz and records the commands it receives."""

    def __init__(self, kind: str) -> None:
        self.t = make_transport(kind, "test_robot")
        self.commands: list[list[float]] = []
        self._pub = self.t.publisher("/joint_states", msgs.JointState)
        self.t.subscribe("/ctl/commands", msgs.Float64MultiArray, self._on_command)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_command(self, msg: msgs.Float64MultiArray) -> None:
        self.commands.append(list(msg.data))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._pub(msgs.JointState(name=["a", "b"], position=[0.0, 0.0], velocity=[0.0, 0.0]))
            time.sleep(0.005)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.t.close()


class Teleop:
    """Publishes `message()` at 50 Hz while `on` is set: a gamepad or a teleop node."""

    def __init__(self, kind: str, topic: str, msg_type: type) -> None:
        self.t = make_transport(kind, "test_teleop")
        self.message: Any = msg_type()
        self.on = threading.Event()
        self.on.set()
        self._pub = self.t.publisher(topic, msg_type)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.on.is_set():
                self._pub(self.message)
            time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.t.close()


def _cfg(kind: str, intervention: dict, **extra: Any) -> dict:
    return {
        "transport": kind,
        "joints": ["a", "b"],
        "fields": ["position", "velocity"],
        "command": {"controller": "ctl", "joints": ["a", "b"], "interface_name": "velocity"},
        "rate_hz": 50.0,
        "connect_timeout_s": 60.0,
        "max_episode_steps": 1000,
        "safety": {
            "low": [-1.0, -1.0],
            "high": [1.0, 1.0],
            "max_delta": MAX_DELTA,
            "max_policy_time_s": 60.0,  # the test waits on ROS traffic between steps
        },
        "reset": {"mode": "wait", "wait_s": 0.0},
        "intervention": intervention,
        **extra,
    }


def _expect_rate_limited(last: np.ndarray, target: np.ndarray) -> np.ndarray:
    clamped = np.clip(target, -1.0, 1.0)
    return np.clip(clamped, last - MAX_DELTA, last + MAX_DELTA)


def test_joy_button_forwards_the_human_command_clamped_and_rate_limited(ros_env) -> None:
    robot = Robot("rclpy")
    joy = Teleop("rclpy", "/joy", msgs.Joy)
    # Axis 3 drives action 0, axis 1 (inverted) action 1; button 2 is the dead-man switch.
    joy.message = msgs.Joy(axes=[0.0, -2.5, 0.0, 0.5], buttons=[0, 0, 1])
    intervention = {"topic": "/joy", "type": "joy", "axes": [3, 1], "scale": [1.0, -1.0]}
    env = RobotEnv(_cfg("rclpy", {**intervention, "button": 2, "timeout_s": 0.5}))
    try:
        wait_until(lambda: env.teleop.received > 0, 60.0, "ROS 2 traffic")
        env.reset()
        policy = np.array([-0.9, -0.9], np.float32)
        human = np.array([0.5, 2.5])  # axis 3, then -axis 1: beyond the limit on action 1
        last = np.zeros(2)
        for _ in range(5):
            _, _, _, _, info = env.step(policy)
            expected = _expect_rate_limited(last, human)
            assert info["intervened"] is True
            np.testing.assert_allclose(info["executed_action"], expected, atol=1e-6)
            last = expected
        np.testing.assert_allclose(last, [0.5, 1.0])  # clamped to the joint limit
        assert env.safety.interventions["human"] == 5
        # The robot received exactly those commands.
        wait_until(lambda: len(robot.commands) >= 5, 60.0, "ROS 2 traffic")
        np.testing.assert_allclose(robot.commands[-1], [0.5, 1.0])
        assert all(np.all(np.abs(c) <= 1.0) for c in robot.commands)

        # Button released: the policy drives again, from where the person left the robot.
        joy.message = msgs.Joy(axes=[0.0, -2.5, 0.0, 0.5], buttons=[0, 0, 0])
        wait_until(lambda: env.teleop.command() is None, 60.0, "ROS 2 traffic")
        _, _, _, _, info = env.step(policy)
        assert info["intervened"] is False
        np.testing.assert_allclose(info["executed_action"], _expect_rate_limited(last, policy))

        # A teleop that falls silent stops intervening after timeout_s, even mid-press.
        joy.message = msgs.Joy(axes=[0.0, 0.0, 0.0, 0.5], buttons=[0, 0, 1])
        wait_until(lambda: env.teleop.command() is not None, 60.0, "ROS 2 traffic")
        joy.on.clear()
        wait_until(lambda: env.teleop.command() is None, 60.0, "ROS 2 traffic")
        _, _, _, _, info = env.step(policy)
        assert info["intervened"] is False
    finally:
        env.close()
        joy.close()
        robot.close()


def test_twist_any_nonzero_input_intervenes(ros_env) -> None:
    robot = Robot("dds")
    twist = Teleop("dds", "/teleop/cmd_vel", msgs.Twist)
    intervention = {
        "topic": "/teleop/cmd_vel",
        "type": "twist",
        "axes": ["linear.x", "angular.z"],
        "scale": 2.0,
        "deadzone": 0.05,
    }
    env = RobotEnv(_cfg("dds", intervention))
    try:
        wait_until(
            lambda: env.teleop.received > 0, 60.0, "ROS 2 traffic"
        )  # a zero Twist: present, not intervening
        env.reset()
        policy = np.array([0.2, -0.2], np.float32)
        _, _, _, _, info = env.step(policy)
        assert info["intervened"] is False
        np.testing.assert_allclose(info["executed_action"], policy, atol=1e-6)
        # Inside the deadzone (stick noise) is still not an intervention.
        twist.message = msgs.Twist(linear=msgs.Vector3(x=0.01), angular=msgs.Vector3(z=-0.01))
        wait_until(
            lambda: env.teleop.received > 5 and env.teleop._command[0] != 0.0, 60.0, "ROS 2 traffic"
        )
        _, _, _, _, info = env.step(policy)
        assert info["intervened"] is False
        twist.message = msgs.Twist(linear=msgs.Vector3(x=0.1), angular=msgs.Vector3(z=-0.15))
        wait_until(lambda: env.teleop.command() is not None, 60.0, "ROS 2 traffic")
        _, _, _, _, info = env.step(policy)
        assert info["intervened"] is True
        np.testing.assert_allclose(info["executed_action"], [0.2, -0.3], atol=1e-6)
    finally:
        env.close()
        twist.close()
        robot.close()


def test_robot_collector_stores_the_executed_action_and_the_flag(ros_env) -> None:
    robot = Robot("dds")
    joy = Teleop("dds", "/joy", msgs.Joy)
    joy.message = msgs.Joy(axes=[0.7, -0.4], buttons=[1])
    intervention = {"topic": "/joy", "axes": [0, 1], "button": 0, "timeout_s": 0.3}
    cfg = _cfg("dds", intervention, max_episode_steps=6)
    cfg["safety"]["max_delta"] = None  # executed == proposed, unless a person intervenes
    env = SharedEnv(RobotEnv(cfg))
    ctx = SimpleNamespace(
        robot_env=env,
        run=SimpleNamespace(seed=3, total_steps=1000),
        step=0,
        np_rng=np.random.default_rng(3),
    )
    collector = RobotCollector(ctx)  # type: ignore[arg-type]
    try:
        wait_until(lambda: env.unwrapped.teleop.received > 0, 60.0, "ROS 2 traffic")
        collector.start(None)  # type: ignore[arg-type]
        taken_over = collector.collect(None, random=True)  # type: ignore[arg-type]
        assert len(taken_over) == 6
        assert taken_over.extras["intervened"].dtype == bool
        assert taken_over.extras["intervened"].all()
        np.testing.assert_allclose(taken_over.actions, np.tile([0.7, -0.4], (6, 1)), atol=1e-6)

        joy.on.clear()
        wait_until(lambda: env.unwrapped.teleop.command() is None, 60.0, "ROS 2 traffic")
        own = collector.collect(None, random=True)  # type: ignore[arg-type]
        assert not own.extras["intervened"].any()
        # Uniform random proposals, executed as proposed: not the person's last command.
        assert np.unique(own.actions, axis=0).shape[0] == 6
        assert np.all(np.abs(own.actions) <= 1.0)
        metrics = collector.metrics()
        assert metrics["robot/intervention_rate"] == pytest.approx(0.5)
        assert metrics["robot/intervened_steps"] == 6.0
    finally:
        collector.close()
        env.release()
        joy.close()
        robot.close()


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ({"type": "keyboard"}, "accepted are joy, twist"),
        ({"axes": [0]}, "maps 1 inputs, the robot has 2"),
        ({"type": "twist", "axes": ["linear.x", "linear.w"]}, "Twist fields are"),
        ({"type": "twist", "button": 1}, "Twist has no buttons"),
        ({"scale": [1.0, 2.0, 3.0]}, "one finite number, or 2"),
        ({"topic": "/joy", "deadman": 4}, "unknown keys \\['deadman'\\]"),
    ],
)
def test_bad_intervention_config_names_the_key(raw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        InterventionConfig.parse(raw, 2)


def test_twist_stamped_teleop_reads_the_twist_inside() -> None:
    """teleop_twist_keyboard (stamped:=true) and teleop_twist_joy send TwistStamped: read like
    a Twist from its `twist` field, header unused; scripted-human writes it back the same."""
    from roborl.robots.env.intervention import Teleop
    from roborl.robots.nodes.scripted_human import TeleopWriter

    config = InterventionConfig.parse(
        {"type": "twist_stamped", "axes": ["linear.x", "angular.z"], "scale": [2.0, -1.0]}, 2
    )
    teleop = Teleop(config)
    assert teleop.msg_type is msgs.TwistStamped and config.topic == "/teleop/cmd_vel"
    header = msgs.Header(stamp=msgs.Time(5, 0), frame_id="odom")
    still = msgs.TwistStamped(header=header, twist=msgs.Twist(linear=msgs.Vector3(x=0.01)))
    assert teleop.decode(still)[1] is False  # inside the deadzone
    moving = msgs.TwistStamped(
        header=header,
        twist=msgs.Twist(linear=msgs.Vector3(x=0.1), angular=msgs.Vector3(z=0.3)),
    )
    command, intervening = teleop.decode(moving)
    assert intervening and np.allclose(command, [0.2, -0.3])
    written = TeleopWriter(config).message(np.array([0.2, -0.3]), True, now=12.5)
    assert isinstance(written, msgs.TwistStamped)
    assert written.header.stamp == msgs.Time(12, 500_000_000)
    assert np.allclose(teleop.decode(written)[0], [0.2, -0.3])
    with pytest.raises(ConfigError, match="Twist has no buttons"):
        InterventionConfig.parse({"type": "twist_stamped", "button": 0}, 2)


def test_deploy_forwards_a_takeover_through_its_safety_layer(
    ros_env, nodes, balance_checkpoint
) -> None:
    """`roborl deploy` reads the same channel: a person can take over a deployed policy."""
    nodes(["sim-robot", "env=inverted_pendulum", "transport=dds"], ros_env)
    joy = Teleop("dds", "/joy", msgs.Joy)
    joy.message = msgs.Joy(axes=[0.5], buttons=[1])
    try:
        dep = nodes(
            [
                "deploy",
                f"checkpoint={balance_checkpoint}",
                "robot=ros2",
                "robot.transport=dds",
                "robot.connect_timeout_s=60",
                "robot.safety.max_state_age_s=0.5",
                "+robot.intervention={topic:/joy,axes:[0],button:0,scale:4.0}",
                "rate_hz=50",
                "duration_s=3",
            ],
            ros_env,
        )
        done = dep.wait_event("done", 180)
    finally:
        joy.close()
    assert done["exit_code"] == 0, done
    # Every forwarded takeover was counted; 0.5 * 4.0 = 2.0 lies inside the [-3, 3] limits.
    assert done["interventions"].get("human", 0) > 0, done

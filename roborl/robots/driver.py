"""`Ros2Driver`: a ros2_control robot as a `RobotDriver`, over rclpy or plain DDS.

State comes from sensor_msgs/JointState on the state topic, matched by joint *name* (the order
on the wire is the publisher's, not ours). Commands go to the configured ros2_control
interface: forward_command_controller (`/<controller>/commands`, std_msgs/Float64MultiArray
in the controller's joint order), joint_trajectory_controller
(`/<controller>/joint_trajectory`, trajectory_msgs/JointTrajectory) or a mobile base
(geometry_msgs/Twist on `cmd_vel`). A malformed JointState is rejected with the reason kept
in `last_error`; it never updates the observation, so the watchdog holds the robot.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from roborl.core.errors import ConfigError, RobotError
from roborl.core.interfaces import RobotDriver
from roborl.robots import msgs
from roborl.robots.transport import make_transport

log = logging.getLogger("roborl.robots.driver")

FIELDS = ("position", "velocity", "effort")
INTERFACES = ("forward", "trajectory", "twist")


def parse_joint_state(
    msg: msgs.JointState, joints: Sequence[str], fields: Sequence[str]
) -> np.ndarray:
    """Observation vector [field0 of joints..., field1 of joints...]; RobotError if malformed."""
    names = list(msg.name)
    if len(set(names)) != len(names):
        raise RobotError(f"JointState has duplicate joint names {names}.")
    index = {n: i for i, n in enumerate(names)}
    missing = [j for j in joints if j not in index]
    if missing:
        raise RobotError(
            f"JointState lacks joints {missing}; it names {names}, the robot config expects "
            f"{list(joints)}."
        )
    out = []
    for f in fields:
        values = list(getattr(msg, f))
        if len(values) != len(names):
            raise RobotError(
                f"JointState.{f} has {len(values)} values for {len(names)} names; "
                f"ROS 2 requires one per name."
            )
        picked = [values[index[j]] for j in joints]
        if not all(math.isfinite(v) for v in picked):
            raise RobotError(f"JointState.{f} has non-finite values {picked} for {list(joints)}.")
        out.extend(picked)
    return np.asarray(out, dtype=np.float64)


class Ros2Driver(RobotDriver):
    """See module docstring; `cfg` is the `robot` config group (roborl/robots/configs)."""

    def __init__(self, cfg: Mapping[str, Any], transport: Any | None = None) -> None:
        self.joints = list(cfg.get("joints") or [])
        if not self.joints:
            raise ConfigError(
                "robot.joints is empty: list the joint names to observe, e.g. "
                "robot.joints=[slider,hinge] (names as published on /joint_states)."
            )
        self.fields = list(cfg.get("fields") or ["position", "velocity"])
        bad = [f for f in self.fields if f not in FIELDS]
        if bad:
            raise ConfigError(f"robot.fields {bad} unknown: accepted are {list(FIELDS)}.")
        command = dict(cfg.get("command") or {})
        self.interface = command.get("interface", "forward")
        if self.interface not in INTERFACES:
            raise ConfigError(
                f"robot.command.interface={self.interface!r}: accepted are {list(INTERFACES)}."
            )
        self.controller = command.get("controller", "forward_command_controller")
        self.command_joints = list(command.get("joints") or self.joints)
        self.state_topic = cfg.get("state_topic", "/joint_states")
        self.estop_topic = cfg.get("estop_topic", "/estop")
        self.node_name = cfg.get("node_name", "roborl_driver")
        self._transport_kind = cfg.get("transport", "auto")
        self._transport = transport
        self._lock = threading.Lock()
        self._obs: np.ndarray | None = None
        self._stamp = -math.inf
        self.last_error: str | None = None
        self.rejected = 0
        self._logged: set[str] = set()
        self.received = 0
        self._estop_cb: Any = None
        self._publish: Any = None
        self.sent = 0

    # -- RobotDriver ------------------------------------------------------------------------
    def connect(self, timeout_s: float) -> None:
        if self._transport is None:
            self._transport = make_transport(self._transport_kind, self.node_name)
        t = self._transport
        if self.interface == "forward":
            self.command_topic = f"/{self.controller}/commands"
            self._publish = t.publisher(self.command_topic, msgs.Float64MultiArray)
        elif self.interface == "trajectory":
            self.command_topic = f"/{self.controller}/joint_trajectory"
            self._publish = t.publisher(self.command_topic, msgs.JointTrajectory)
        else:
            self.command_topic = "/cmd_vel"
            self._publish = t.publisher(self.command_topic, msgs.Twist)
        self._reader = t.subscribe(self.state_topic, msgs.JointState, self._on_state)
        self._estop_reader = t.subscribe(self.estop_topic, msgs.Bool, self._on_estop)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._obs is not None:
                    return
            time.sleep(0.005)
        why = f" Last rejected message: {self.last_error}" if self.last_error else ""
        raise RobotError(
            f"no valid sensor_msgs/JointState with joints {self.joints} on "
            f"{self.state_topic!r} within {timeout_s}s (ROS_DOMAIN_ID and localhost-only "
            f"settings must match the robot's).{why}"
        )

    def observation(self) -> tuple[np.ndarray, float]:
        with self._lock:
            if self._obs is None:
                raise RobotError("observation() before any valid JointState: call connect().")
            return self._obs.copy(), time.monotonic() - self._stamp

    def command(self, action: np.ndarray) -> None:
        a = [float(x) for x in np.asarray(action, dtype=np.float64).reshape(-1)]
        if self.interface == "forward":
            if len(a) != len(self.command_joints):
                raise RobotError(
                    f"command has {len(a)} values, controller {self.controller!r} drives "
                    f"{len(self.command_joints)} joints {self.command_joints}."
                )
            msg: Any = msgs.Float64MultiArray(data=a)
        elif self.interface == "trajectory":
            point = msgs.JointTrajectoryPoint(positions=a, time_from_start=msgs.Duration(0, 0))
            msg = msgs.JointTrajectory(joint_names=self.command_joints, points=[point])
        else:
            v = (a + [0.0] * 6)[:6]
            msg = msgs.Twist(linear=msgs.Vector3(*v[:3]), angular=msgs.Vector3(*v[3:]))
        self._publish(msg)
        self.sent += 1

    def stop(self, hold: np.ndarray | None = None) -> None:
        """Send the stop command: `hold` (the safety layer's hold, e.g. the last position for
        position control) or zeros (effort/velocity control)."""
        if self._publish is None:
            return
        try:
            self.command(np.zeros(len(self.command_joints)) if hold is None else hold)
        except Exception as exc:
            log.error("final stop command failed: %s", exc)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
            self._publish = None

    # -- callbacks -----------------------------------------------------------------------------
    def on_estop(self, callback: Any) -> None:
        """Register `callback(cause)` for a True on the e-stop topic (the safety layer latches)."""
        self._estop_cb = callback

    def _on_estop(self, msg: msgs.Bool) -> None:
        if msg.data and self._estop_cb is not None:
            self._estop_cb(f"e-stop message on {self.estop_topic}")

    def _on_state(self, msg: msgs.JointState) -> None:
        now = time.monotonic()
        try:
            obs = parse_joint_state(msg, self.joints, self.fields)
        except RobotError as exc:
            self.rejected += 1
            if str(exc) not in self._logged and len(self._logged) < 100:
                self._logged.add(str(exc))  # log each distinct cause once, not at topic rate
                log.error("rejected JointState: %s", exc)
            self.last_error = str(exc)
            return
        with self._lock:
            self._obs = obs
            self._stamp = now
            self.received += 1

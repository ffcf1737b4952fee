"""`Ros2Driver`: a ros2_control robot as a `RobotDriver`, over rclpy or plain DDS.

State comes from sensor_msgs/JointState on the state topic, matched by joint *name* (the order
on the wire is the publisher's, not ours). Commands go to the configured ros2_control
interface: forward_command_controller (`/<controller>/commands`, std_msgs/Float64MultiArray
in the controller's joint order), joint_trajectory_controller
(`/<controller>/joint_trajectory`, trajectory_msgs/JointTrajectory) or a mobile base on
`cmd_vel`: geometry_msgs/Twist (`twist`) or geometry_msgs/TwistStamped (`twist_stamped`, what
diff_drive_controller, Nav2 and MoveIt Servo take; stamped with the node's clock, its
`header.frame_id` from `robot.command.frame_id`). A malformed JointState is rejected with the
reason kept in `last_error`; it never updates the observation, so the watchdog holds the robot.

Over rclpy the driver is a ROS 2 node (`roborl_driver` for `train robot=`, `roborl_deploy` for
`deploy`): the robot config's rate, joints, limits and topics are declared as ROS parameters
(`robot_parameters`; the config values are their defaults, `--ros-args -p` and params files
override them), each topic's QoS comes from `robot.qos`, and once a safety layer is attached
(`serve_safety`) it offers `~/estop` (std_srvs/SetBool: true latches, false is the only way to
clear a latched e-stop remotely) and publishes the safety layer's state on /diagnostics.

The e-stop topic is read with readers that match every publisher, reliable or best effort,
and receive a latched (transient-local) `true` sent before the driver started
(`Transport.subscribe_any_qos`). At most one commander: another publisher on the command
topic, told apart by DDS participant GUID rather than node name, is refused at connect and
e-stops the robot when it appears later (`other_commanders`), over either transport.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from roborl.core.errors import ConfigError, RobotError
from roborl.core.interfaces import RobotDriver
from roborl.robots.config import ResetConfig, RobotConfig, parse_robot_config
from roborl.robots.env.cameras import CameraFeed, parse_cameras
from roborl.robots.env.driver_safety import SafetyServices
from roborl.robots.env.joint_state import parse_joint_state
from roborl.robots.transport import msgs
from roborl.robots.transport.common import make_transport, qos_spec
from roborl.robots.transport.protocol import Transport

log = logging.getLogger("roborl.robots.driver")

QOS_TOPICS = ("state", "command", "estop", "diagnostics")


class Ros2Driver(SafetyServices, RobotDriver):
    """See module docstring; `cfg` is the `robot` config group (roborl/robots/configs)."""

    def __init__(
        self,
        cfg: RobotConfig | Mapping[str, Any],
        transport: Transport | None = None,
        node_name: str | None = None,
    ) -> None:
        cfg = parse_robot_config(cfg)  # a composed section is validated here, a config passes
        command = cfg.command
        self.joints = list(cfg.joints)
        self.fields = list(cfg.fields)
        self.interface = command.interface
        self.estop_clear = cfg.estop.clear
        self.security = cfg.security
        self.allow_other_commanders = cfg.allow_other_commanders
        self.controller = command.controller
        self.command_joints = cfg.commanded_joints
        self.frame_id = command.frame_id
        self.command_topic = (
            command.topic
            or {
                "forward": f"/{self.controller}/commands",
                "trajectory": f"/{self.controller}/joint_trajectory",
                "twist": "/cmd_vel",
                "twist_stamped": "/cmd_vel",
            }[self.interface]
        )
        # ros2_controllers read time_from_start as "reach this point by then": 0 is a jump
        # (both are > 0: checked by RobotConfig).
        tfs = command.time_from_start_s
        self.time_from_start_s = float(tfs) if tfs else 1.0 / cfg.rate_hz
        self.state_topic = cfg.state_topic
        self.reset_mode, self.reset_topic = cfg.reset.mode, cfg.reset.topic
        self.estop_topic = cfg.estop_topic
        bad_qos = [k for k in cfg.qos if k not in QOS_TOPICS]
        if bad_qos:
            raise ConfigError(f"robot.qos has unknown topics {bad_qos}: accepted are {QOS_TOPICS}.")
        self.qos = {k: qos_spec(cfg.qos.get(k), f"robot.qos.{k}") for k in QOS_TOPICS}
        self.cameras = parse_cameras(cfg.cameras)
        self.feeds = {c.name: CameraFeed(c) for c in self.cameras}
        self.diagnostics_period_s = cfg.diagnostics_period_s
        self.name = cfg.name or "robot"
        self.node_name = node_name or cfg.node_name
        self._transport_kind = cfg.transport
        self._transport = transport
        self._diag_stop = threading.Event()
        self._diag_thread: threading.Thread | None = None
        self._diag_pub: Any = None
        self._safety: Any = None
        self._status_extra: Callable[[], dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._obs: np.ndarray | None = None
        self._stamp = -math.inf
        self.last_error: str | None = None
        self.rejected = 0
        self._logged: set[str] = set()
        self.received = 0
        self._estop_cb: Any = None
        self._estop_lock = threading.Lock()
        self._estop_pending: str | None = None
        #: When `connect()` returned (monotonic), None before.
        self.connected_at: float | None = None
        self._take: Callable[[], tuple[Any, float, int]] | None = None
        self._take_lock = threading.Lock()
        self._publish: Any = None
        self._reset_pub: Any = None
        self.sent = 0

    @classmethod
    def open(
        cls, cfg: RobotConfig | Mapping[str, Any], node_name: str | None = None, **ros: Any
    ) -> tuple[Ros2Driver, RobotConfig]:
        """Start the node, declare the robot config as ROS parameters and build the driver
        from the values in force (`ros2_kind.open_ros2`, which documents `ros`)."""
        from roborl.robots.env.ros2_kind import open_ros2

        return open_ros2(cls, cfg, node_name, **ros)

    @property
    def transport(self) -> Transport | None:
        """The node (rclpy) or DDS participant the driver talks through; None until
        `connect()` opens one (when none was given) and after `close()`."""
        return self._transport

    # -- RobotDriver ------------------------------------------------------------------------
    def connect(self, timeout_s: float) -> None:
        if self._transport is None:
            self._transport = make_transport(self._transport_kind, self.node_name)
        t = self._transport
        kind = {
            "forward": msgs.Float64MultiArray,
            "trajectory": msgs.JointTrajectory,
            "twist": msgs.Twist,
            "twist_stamped": msgs.TwistStamped,
        }[self.interface]
        if self._publish is None:
            self._publish = t.publisher(self.command_topic, kind, self.qos["command"])
            # rclpy: the state is taken where it is read (`_take_state`), newest only; no
            # executor work per message, however fast the robot publishes. None: no such
            # reader on this transport (DDS), the state comes through a callback.
            reader = t.subscribe_newest(self.state_topic, msgs.JointState, self.qos["state"])
            if reader is not None:
                self._reader = reader
                self._take = lambda: t.take_newest(reader, msgs.JointState)
            else:
                self._reader = t.subscribe(
                    self.state_topic, msgs.JointState, self._on_state, self.qos["state"]
                )
            # Every e-stop publisher matches (reliable or best effort), and a latched
            # (transient-local) True sent before we started arrives; robot.qos.estop set to
            # anything but default narrows this to the one reader it describes.
            if self.qos["estop"] == "default":
                self._estop_reader = t.subscribe_any_qos(
                    self.estop_topic, msgs.Bool, self._on_estop
                )
            else:
                self._estop_reader = t.subscribe(
                    self.estop_topic, msgs.Bool, self._on_estop, self.qos["estop"]
                )
            self._camera_readers = [
                t.subscribe(c.topic, msgs.Image, self.feeds[c.name].on_message, c.qos)
                for c in self.cameras
            ]
            if self.reset_mode == "topic":  # discovered by the robot before the first reset
                self._reset_pub = t.publisher(self.reset_topic, msgs.Bool)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._take_state()
            with self._lock:
                ready = self._obs is not None
            if ready and all(f.latest()[0] is not None for f in self.feeds.values()):
                self._refuse_other_commanders()
                self.connected_at = time.monotonic()
                return
            time.sleep(0.005)
        if not ready:
            why = f" Last rejected message: {self.last_error}" if self.last_error else ""
            raise RobotError(
                f"no valid sensor_msgs/JointState with joints {self.joints} on "
                f"{self.state_topic!r} within {timeout_s}s (ROS_DOMAIN_ID and localhost-only "
                f"settings must match the robot's).{why}"
            )
        feed = next(f for f in self.feeds.values() if f.latest()[0] is None)
        why = f" Last rejected image: {feed.last_error}" if feed.last_error else ""
        raise RobotError(
            f"no valid sensor_msgs/Image from camera {feed.spec.name!r} on {feed.spec.topic!r} "
            f"within {timeout_s}s ({feed.spec.encoding}, {feed.spec.width}x{feed.spec.height} "
            f"expected; a best-effort camera publisher needs the camera's qos: sensor_data).{why}"
        )

    def other_commanders(self) -> list[str]:
        """Other publishers on the command topic: every writer that does not belong to this
        driver's own DDS participant, told apart by GUID, never by node name (a second
        `roborl deploy` or actor on the robot runs a node with our name). Empty also when
        the transport cannot tell (`_refuse_other_commanders` has said so loudly)."""
        t = self._transport
        found = t.other_publishers(self.command_topic) if t is not None else None
        return found or []

    def _refuse_other_commanders(self, discovery_s: float = 2.0) -> None:
        """One commander per robot: another publisher on the command topic (a second
        deploy, an actor, a teleop tool), whatever its node name and on either transport,
        is refused at connect unless explicitly allowed. Discovery of the other endpoints
        can trail the robot's first JointState, so the graph is read for `discovery_s` more;
        the diagnostics loop keeps checking afterwards. A transport that cannot list the
        publishers is named in a warning: the check is then off, not silently passed."""
        t = self._transport
        if t is None or self.allow_other_commanders:
            return
        if t.other_publishers(self.command_topic) is None:
            t.log(
                logging.WARNING,
                f"the one-commander check is OFF: transport {t.name!r} cannot list who else "
                f"publishes on {self.command_topic!r}, so a second commander would go "
                "unnoticed. Make sure nothing else commands this robot.",
            )
            return
        # First the robot's own command subscriber (its endpoints are then discovered, and
        # those of nodes that started before us usually too), then `discovery_s` more.
        end = time.monotonic() + discovery_s
        while t.count_subscribers(self.command_topic) == 0 and time.monotonic() < end:
            time.sleep(0.02)
        end = time.monotonic() + discovery_s
        others = self.other_commanders()
        while not others and time.monotonic() < end:
            time.sleep(0.05)
            others = self.other_commanders()
        if others:
            raise RobotError(
                f"another node already commands this robot: {', '.join(others)} publishes on "
                f"{self.command_topic!r}. Two commanders on one robot fight each other; stop "
                "it, or set robot.allow_other_commanders=true knowingly."
            )

    def estop_publishers(self) -> int | None:
        """How many publishers the e-stop subscription is matched with (None before
        `connect()` or where the transport cannot count them)."""
        t, reader = self._transport, getattr(self, "_estop_reader", None)
        if t is None or reader is None:
            return None
        try:
            n = t.matched(reader)
        except Exception:  # a transport without match counts, or one closing
            return None
        return n if isinstance(n, int) else None

    def observation(self) -> tuple[np.ndarray, float]:
        self._take_state()
        with self._lock:
            if self._obs is None:
                raise RobotError("observation() before any valid JointState: call connect().")
            return self._obs.copy(), time.monotonic() - self._stamp

    def frames(self) -> dict[str, tuple[np.ndarray, float]]:
        """Per camera: (newest frame, seconds since it arrived); empty without cameras."""
        out = {}
        for name, feed in self.feeds.items():
            frame, age = feed.latest()
            if frame is None:
                raise RobotError(
                    f"frames() before any valid image from camera {name!r}: connect()."
                )
            out[name] = (frame, age)
        return out

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
            sec = int(self.time_from_start_s)
            tfs = msgs.Duration(sec, round((self.time_from_start_s - sec) * 1e9))
            point = msgs.JointTrajectoryPoint(positions=a, time_from_start=tfs)
            # Stamped with the node's clock (sim time with use_sim_time): the trajectory
            # starts when it was commanded, and the controller can tell how old it is.
            header = msgs.Header(stamp=msgs.stamp_now(self.node_now()))
            msg = msgs.JointTrajectory(
                header=header, joint_names=self.command_joints, points=[point]
            )
        else:  # twist, twist_stamped: [linear.x, .y, .z, angular.x, .y, .z], the rest zero
            v = (a + [0.0] * 6)[:6]
            msg = msgs.Twist(linear=msgs.Vector3(*v[:3]), angular=msgs.Vector3(*v[3:]))
            if self.interface == "twist_stamped":
                # Stamped with the node's clock (sim time with use_sim_time), like a
                # trajectory: a controller with a command timeout can tell a late one.
                header = msgs.Header(stamp=msgs.stamp_now(self.node_now()), frame_id=self.frame_id)
                msg = msgs.TwistStamped(header=header, twist=msg)
        self._publish(msg)
        self.sent += 1

    def node_now(self) -> float:
        """The node's clock (wall time once the transport is closed)."""
        return self._transport.now() if self._transport is not None else time.time()

    # -- the rest of the `Robot` protocol ------------------------------------------------
    now = node_now

    @property
    def use_sim_time(self) -> bool:
        """The node's `use_sim_time` parameter: steps tick on /clock."""
        return bool(self._transport is not None and self._transport.use_sim_time)

    @property
    def endpoint(self) -> str:
        return self.command_topic

    def log(self, level: int, message: str) -> None:
        if self._transport is not None:
            self._transport.log(level, message)
        else:
            log.log(level, message)

    def request_reset(self, reset: ResetConfig) -> None:
        """`reset.mode` topic (a std_msgs/Bool True, e.g. sim-robot's /sim_robot/reset) or
        service (a std_srvs/Trigger call, answered once the new episode started)."""
        from roborl.robots.env.episode import call_trigger

        t = self._transport
        if t is None:
            raise RobotError("request_reset() before connect().")
        if reset.mode == "topic":
            if self._reset_pub is None:
                self._reset_pub = t.publisher(reset.topic, msgs.Bool)
            self._reset_pub(msgs.Bool(data=True))
        elif reset.mode == "service":
            call_trigger(t, reset.service, reset.timeout_s)

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
        self._diag_stop.set()
        if self._diag_thread is not None:
            self._diag_thread.join(5.0)
            self._diag_thread = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None
            self._publish = None
            self._reset_pub = None
            self._take = None

    # -- callbacks -----------------------------------------------------------------------------
    def on_estop(self, callback: Any) -> None:
        """Register `callback(cause)` for a True on the e-stop topic (the safety layer latches).
        A True that arrived before (a latched e-stop) is handed to it at once."""
        with self._estop_lock:
            self._estop_cb = callback
            pending, self._estop_pending = self._estop_pending, None
        if pending is not None and callback is not None:
            callback(pending)

    def _on_estop(self, msg: msgs.Bool) -> None:
        if not msg.data:
            return
        cause = f"e-stop message on {self.estop_topic}"
        with self._estop_lock:
            callback = self._estop_cb
            if callback is None:  # kept for the callback registered later
                self._estop_pending = cause
        if callback is not None:
            callback(cause)

    def _take_state(self) -> None:
        """Over rclpy, take the JointStates that arrived since the last read and parse the
        newest (the one read now): `received` counts them all when it is valid, `rejected`
        counts it when not (older ones are skipped unparsed). Its arrival time is the
        middleware's reception timestamp, so the state age is the same as with a callback."""
        take = self._take
        if take is None:
            return
        with self._take_lock:  # one taker at a time: an older message never overwrites a newer
            msg, age, count = take()
            if msg is not None:
                self._on_state(msg, time.monotonic() - age, count)

    def _on_state(self, msg: msgs.JointState, arrived: float | None = None, count: int = 1) -> None:
        now = time.monotonic() if arrived is None else arrived
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
            self.received += count

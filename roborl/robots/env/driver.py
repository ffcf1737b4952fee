"""`Ros2Driver`: a ros2_control robot as a `RobotDriver`, over rclpy or plain DDS.

State comes from sensor_msgs/JointState on the state topic, matched by joint *name* (the order
on the wire is the publisher's, not ours). Commands go to the configured ros2_control
interface: forward_command_controller (`/<controller>/commands`, std_msgs/Float64MultiArray
in the controller's joint order), joint_trajectory_controller
(`/<controller>/joint_trajectory`, trajectory_msgs/JointTrajectory) or a mobile base
(geometry_msgs/Twist on `cmd_vel`). A malformed JointState is rejected with the reason kept
in `last_error`; it never updates the observation, so the watchdog holds the robot.

Over rclpy the driver is a ROS 2 node (`roborl_driver` for `train robot=`, `roborl_deploy` for
`deploy`): the robot config's rate, joints, limits and topics are declared as ROS parameters
(`robot_parameters`; the config values are their defaults, `--ros-args -p` and params files
override them), each topic's QoS comes from `robot.qos`, and once a safety layer is attached
(`serve_safety`) it offers `~/estop` (std_srvs/SetBool: true latches, false is the only way to
clear a latched e-stop remotely) and publishes the safety layer's state on /diagnostics.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from roborl.core.errors import ConfigError, RobotError
from roborl.core.interfaces import RobotDriver
from roborl.robots.config import robot_config_dict
from roborl.robots.env.cameras import CameraFeed, parse_cameras
from roborl.robots.transport import msgs
from roborl.robots.transport.common import (
    Param,
    add_service,
    declare_parameters,
    make_transport,
    node_log,
    publisher,
    qos_spec,
    subscribe,
)

log = logging.getLogger("roborl.robots.driver")

QOS_TOPICS = ("state", "command", "estop", "diagnostics")
INTERVENTIONS = (
    "estop",
    "watchdog_state",
    "watchdog_camera",
    "watchdog_policy",
    "clamp",
    "rate_limit",
    "nonfinite",
    "watchdog_supervisor",
)

#: The robot config keys a ROS 2 engineer may set as parameters (dotted = nested in the config).
#: Empty strings and zeros stand for the config's null ("derive it" / "no limit").
ROBOT_PARAMS = {
    "rate_hz": "control rate in Hz",
    "joints": "observed joints, matched by name in sensor_msgs/JointState",
    "fields": "JointState fields observed per joint: position, velocity, effort",
    "state_topic": "sensor_msgs/JointState topic",
    "estop_topic": "std_msgs/Bool topic; true latches the e-stop",
    "connect_timeout_s": "seconds to wait for the first valid JointState",
    "command.interface": "forward (Float64MultiArray), trajectory or twist",
    "command.controller": "ros2_control controller that takes the commands",
    "command.joints": "commanded joints, in the controller's order",
    "command.topic": "command topic ('': derived from interface and controller)",
    "command.time_from_start_s": "JointTrajectory time_from_start (0: one control period)",
    "safety.low": "lower command limit per commanded joint",
    "safety.high": "upper command limit per commanded joint",
    "safety.max_delta": "largest command change per step (0: no rate limit)",
    "safety.max_state_age_s": "watchdog: hold when the newest JointState is older",
    "safety.max_policy_time_s": "watchdog: hold when the policy takes longer",
    "safety.hold": "hold command: zero (effort/velocity) or last (position)",
}
_NULL_AS = {"command.topic": "", "command.time_from_start_s": 0.0, "safety.max_delta": 0.0}


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = (node or {}).get(part) if isinstance(node, Mapping) else None
    return node


def robot_parameters(cfg: Mapping[str, Any]) -> dict[str, Param]:
    """The robot config as ROS parameter declarations (the config values are the defaults)."""
    out = {}
    for name, help_ in ROBOT_PARAMS.items():
        value = _get(cfg, name)
        if value is None:
            value = _NULL_AS.get(name)
        if value is None:
            continue
        if isinstance(value, tuple | list):
            value = list(value)
        out[name] = Param(value, help_)
    return out


def apply_parameters(cfg: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `cfg` with the parameter values written back (zeros/'' back to null)."""
    out = copy.deepcopy(dict(cfg))
    for name, value in values.items():
        if name in _NULL_AS and value == _NULL_AS[name]:
            value = None
        *path, last = name.split(".")
        node = out
        for part in path:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        node[last] = value
    return out


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
        cfg = robot_config_dict(cfg)  # typed and validated: unknown keys and bad values refused
        self.joints = list(cfg["joints"])
        self.fields = list(cfg["fields"])
        command = dict(cfg["command"])
        self.interface = command["interface"]
        self.estop_clear = cfg["estop"]["clear"]
        self.security = cfg["security"]
        self.allow_other_commanders = bool(cfg["allow_other_commanders"])
        self.controller = command["controller"]
        self.command_joints = list(command.get("joints") or self.joints)
        self.command_topic = (
            command.get("topic")
            or {
                "forward": f"/{self.controller}/commands",
                "trajectory": f"/{self.controller}/joint_trajectory",
                "twist": "/cmd_vel",
            }[self.interface]
        )
        rate = float(cfg["rate_hz"])
        tfs = command.get("time_from_start_s")
        # ros2_controllers read time_from_start as "reach this point by then": 0 is a jump.
        self.time_from_start_s = float(tfs) if tfs else 1.0 / rate
        if self.time_from_start_s <= 0:
            raise ConfigError(
                f"robot.command.time_from_start_s={tfs!r} must be > 0 (null: one control period)."
            )
        self.state_topic = cfg["state_topic"]
        self.estop_topic = cfg["estop_topic"]
        qos = dict(cfg.get("qos") or {})
        bad_qos = [k for k in qos if k not in QOS_TOPICS]
        if bad_qos:
            raise ConfigError(f"robot.qos has unknown topics {bad_qos}: accepted are {QOS_TOPICS}.")
        self.qos = {k: qos_spec(qos.get(k), f"robot.qos.{k}") for k in QOS_TOPICS}
        self.cameras = parse_cameras(cfg.get("cameras"))
        self.feeds = {c.name: CameraFeed(c) for c in self.cameras}
        self.diagnostics_period_s = float(cfg["diagnostics_period_s"])
        self.name = str(cfg.get("name") or "robot")
        self.node_name = cfg["node_name"]
        self._transport_kind = cfg["transport"]
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
        self._take: Callable[[], tuple[Any, float, int]] | None = None
        self._take_lock = threading.Lock()
        self._publish: Any = None
        self.sent = 0

    @classmethod
    def open(
        cls,
        cfg: Mapping[str, Any],
        node_name: str | None = None,
        *,
        namespace: str | None = None,
        ros_args: Sequence[str] | None = None,
        lifecycle: Mapping[str, Callable[[], bool]] | None = None,
        extra_params: Mapping[str, Param] | None = None,
    ) -> tuple[Ros2Driver, dict[str, Any]]:
        """Start the node, declare the robot config as ROS parameters and build the driver
        from the values in force. Returns the driver (not yet connected) and the resolved
        config (what the safety layer and the env must use), plus `extra_params`' values
        under their own names in the config's top level.

        `ros_args` default to the config's `ros_args` list, with `params_file` appended as
        `--params-file` (how `train robot=...` takes them)."""
        if ros_args is None:
            ros_args = [str(a) for a in cfg.get("ros_args") or []]
            if cfg.get("params_file"):
                ros_args += ["--params-file", str(cfg["params_file"])]
        name = node_name or cfg.get("node_name") or "roborl_driver"
        checked = cls(cfg)  # the config's own checks first, before any ROS traffic
        from roborl.robots.transport.common import rclpy_available
        from roborl.robots.transport.security import apply_security

        kind = cfg.get("transport", "auto")
        kind = ("rclpy" if rclpy_available() else "dds") if kind == "auto" else kind
        ros_args = [*ros_args, *apply_security(checked.security, kind)]
        transport = make_transport(
            cfg.get("transport", "auto"),
            name,
            namespace=namespace if namespace is not None else str(cfg.get("namespace") or ""),
            ros_args=ros_args,
            lifecycle=lifecycle,
        )
        try:
            params = {**robot_parameters(cfg), **dict(extra_params or {})}
            resolved = apply_parameters(cfg, declare_parameters(transport, params))
            extras = {k: resolved.pop(k) for k in dict(extra_params or {}) if k in resolved}
            # ROS parameters are checked like the config they override (-p safety.max_delta:=-1).
            resolved = robot_config_dict(resolved)
            driver = cls({**resolved, "node_name": name}, transport=transport)
            resolved.update(extras)
        except BaseException:
            transport.close()
            raise
        return driver, resolved

    @property
    def transport(self) -> Any:
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
        }[self.interface]
        if self._publish is None:
            self._publish = publisher(t, self.command_topic, kind, self.qos["command"])
            if hasattr(t, "subscribe_newest"):
                # rclpy: the state is taken where it is read (`_take_state`), newest only; no
                # executor work per message, however fast the robot publishes.
                reader = t.subscribe_newest(self.state_topic, msgs.JointState, self.qos["state"])
                self._reader = reader
                self._take = lambda: t.take_newest(reader, msgs.JointState)
            else:
                self._reader = subscribe(
                    t, self.state_topic, msgs.JointState, self._on_state, self.qos["state"]
                )
            self._estop_reader = subscribe(
                t, self.estop_topic, msgs.Bool, self._on_estop, self.qos["estop"]
            )
            self._camera_readers = [
                subscribe(t, c.topic, msgs.Image, self.feeds[c.name].on_message, c.qos)
                for c in self.cameras
            ]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._take_state()
            with self._lock:
                ready = self._obs is not None
            if ready and all(f.latest()[0] is not None for f in self.feeds.values()):
                self._refuse_other_commanders()
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
        """Other nodes publishing on the command topic (over rclpy, whose graph lists them)."""
        node = getattr(self._transport, "node", None)
        if node is None:
            return []
        return sorted(
            {
                "a node discovery has not named yet"
                if info.node_name == "_NODE_NAME_UNKNOWN_"
                else info.node_namespace.rstrip("/") + "/" + info.node_name
                for info in node.get_publishers_info_by_topic(self.command_topic)
                if info.node_name != node.get_name() or info.node_namespace != node.get_namespace()
            }
        )

    def _refuse_other_commanders(self, discovery_s: float = 1.0) -> None:
        """One commander per robot: another node publishing on the command topic (a second
        deploy, an actor, a teleop tool) is refused at connect unless explicitly allowed.
        Discovery of the other endpoints can trail the robot's first JointState, so the graph
        is read for `discovery_s` more; the diagnostics loop keeps checking afterwards."""
        node = getattr(self._transport, "node", None)
        if node is None or self.allow_other_commanders:
            return
        # First the robot's own command subscriber (its endpoints are then discovered, and
        # those of nodes that started before us usually too), then `discovery_s` more.
        end = time.monotonic() + discovery_s
        while node.count_subscribers(self.command_topic) == 0 and time.monotonic() < end:
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
            from roborl.robots.transport.common import now

            header = msgs.Header(stamp=msgs.stamp_now(now(self._transport)))
            msg = msgs.JointTrajectory(
                header=header, joint_names=self.command_joints, points=[point]
            )
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
        self._diag_stop.set()
        if self._diag_thread is not None:
            self._diag_thread.join(5.0)
            self._diag_thread = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None
            self._publish = None
            self._take = None

    # -- the ROS 2 face of the safety layer ----------------------------------------------------
    def serve_safety(
        self,
        safety: Any,
        clear: Callable[[], None],
        extra: Callable[[], dict[str, Any]] | None = None,
        activate: Callable[[], None] | None = None,
    ) -> None:
        """Offer `~/estop` (std_srvs/SetBool) and publish `safety`'s state on /diagnostics.

        SetBool true latches like a True on the e-stop topic (the hold goes out at once);
        SetBool false calls `clear`, which only clears: motion needs an explicit activate
        (`~/activate`, std_srvs/Trigger, offered when `activate` is given; a lifecycle node
        uses its activate transition instead). `extra()` adds node-specific values (e.g. the
        deploy node's lifecycle state)."""
        if self._transport is None:
            raise RobotError("serve_safety() needs an open transport: call connect() first.")
        self._safety = safety
        self._status_extra = extra
        service = "~/estop"
        if add_service(
            self._transport, service, "set_bool", lambda data: self._set_estop(clear, data)
        ):
            node_log(self._transport, logging.INFO, f"e-stop service {service} (std_srvs/SetBool)")
        if activate is not None:
            add_service(
                self._transport, "~/activate", "trigger", lambda _: self._activate(activate)
            )
        self._diag_pub = publisher(
            self._transport, "/diagnostics", msgs.DiagnosticArray, self.qos["diagnostics"]
        )
        self._diag_thread = threading.Thread(
            target=self._diagnostics_loop, name="roborl-diagnostics", daemon=True
        )
        self._diag_thread.start()

    def _set_estop(self, clear: Callable[[], None], data: bool | None) -> tuple[bool, str]:
        safety = self._safety
        if data:
            if self._estop_cb is not None:
                self._estop_cb("e-stop set by the ~/estop service")
            else:
                safety.trigger_estop("e-stop set by the ~/estop service")
            self.publish_diagnostics()
            return True, f"e-stop latched ({safety.estop_cause})"
        if not safety.estopped:
            return True, "e-stop was not latched"
        if self.estop_clear == "none":
            return False, (
                f"e-stop stays latched ({safety.estop_cause}): robot.estop.clear=none allows no "
                "remote clear; restart the node once the robot is safe"
            )
        was = safety.estop_cause
        clear()
        node_log(self._transport, logging.WARNING, f"e-stop cleared by ~/estop (was: {was})")
        self.publish_diagnostics()
        return True, f"e-stop cleared (was: {was})"

    def _activate(self, activate: Callable[[], None]) -> tuple[bool, str]:
        if self._safety.estopped:
            return False, f"e-stop latched ({self._safety.estop_cause}): clear it first"
        activate()
        node_log(self._transport, logging.WARNING, "commanding activated by ~/activate")
        return True, "activated"

    def status(self) -> tuple[int, str, dict[str, Any]]:
        """(level, message, values) of the safety layer for /diagnostics (0 OK, 1 WARN, 2 ERROR)."""
        self._take_state()
        safety = self._safety
        counts = dict(safety.interventions) if safety is not None else {}
        values: dict[str, Any] = {
            "estopped": bool(safety is not None and safety.estopped),
            "enabled": bool(safety is not None and safety.enabled),
            "holds_sent": safety.holds_sent if safety is not None else 0,
            "estop_cause": (safety.estop_cause if safety is not None else None) or "",
            "commands_sent": self.sent,
            "states_received": self.received,
            "states_rejected": self.rejected,
            "last_state_error": self.last_error or "",
        }
        for kind in sorted({*INTERVENTIONS, *counts}):
            values[f"interventions.{kind}"] = int(counts.get(kind, 0))
        for name, feed in self.feeds.items():
            values[f"camera.{name}.frames_received"] = feed.received
            values[f"camera.{name}.frames_rejected"] = feed.rejected
            values[f"camera.{name}.last_error"] = feed.last_error or ""
        if self._status_extra is not None:
            values.update(self._status_extra())
        if values["estopped"]:
            return 2, f"e-stop latched: {values['estop_cause']}", values
        with self._lock:
            age = time.monotonic() - self._stamp
        max_age = safety.config.max_state_age_s if safety is not None else math.inf
        if age > max_age:
            return 1, f"state is stale ({age:.2f}s > {max_age}s): commands hold", values
        for name, feed in self.feeds.items():
            cam_age = feed.latest()[1]
            if cam_age > feed.spec.max_age_s:
                return (
                    1,
                    f"camera {name!r} is stale ({cam_age:.2f}s > {feed.spec.max_age_s}s): "
                    "commands hold",
                    values,
                )
        return 0, "ok", values

    def publish_diagnostics(self) -> None:
        if self._diag_pub is None or self._transport is None:
            return
        level, message, values = self.status()
        node = getattr(self._transport, "fully_qualified_name", self.node_name)
        status = msgs.DiagnosticStatus(
            level=level,
            name=f"{node.lstrip('/')}: safety",
            message=message,
            hardware_id=self.name,
            values=[
                msgs.KeyValue(k, str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in values.items()
            ],
        )
        from roborl.robots.transport.common import now

        header = msgs.Header(stamp=msgs.stamp_now(now(self._transport)))
        try:
            self._diag_pub(msgs.DiagnosticArray(header=header, status=[status]))
        except Exception as exc:  # diagnostics must never take the control loop down
            log.debug("diagnostics publish failed: %s", exc)

    def _diagnostics_loop(self) -> None:
        while not self._diag_stop.wait(self.diagnostics_period_s):
            if not self.allow_other_commanders and self._estop_cb is not None:
                others = self.other_commanders()
                if others:  # a second commander appeared while running: stop, do not fight
                    self._estop_cb(f"another node commands this robot: {', '.join(others)}")
            self.publish_diagnostics()

    # -- callbacks -----------------------------------------------------------------------------
    def on_estop(self, callback: Any) -> None:
        """Register `callback(cause)` for a True on the e-stop topic (the safety layer latches)."""
        self._estop_cb = callback

    def _on_estop(self, msg: msgs.Bool) -> None:
        if msg.data and self._estop_cb is not None:
            self._estop_cb(f"e-stop message on {self.estop_topic}")

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

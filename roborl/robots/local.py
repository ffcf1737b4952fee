"""`LocalRobot`: the base for a robot without ROS (a USB arm's SDK, a motor bus, a simulator
in this process), so that implementing the `Robot` seam is three methods.

A subclass opens its hardware in `connect`, reports each measured state with `set_state`
(the joint vector in the config's layout: field by field, joint by joint), sends a command in
`write`, and releases the hardware in `close`. The base class keeps the newest state and its
age (what the watchdog reads), counts commands and states, forwards an e-stop the hardware
raises (`estop`) to the safety layer, and refuses the ROS-only extras (a teleop topic, a
success or reset service) with a clear error. Cameras are not supported here yet.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from roborl.core.errors import ConfigError, RobotError
from roborl.robots.config import ResetConfig, RobotConfig, parse_robot_config

if TYPE_CHECKING:
    from roborl.robots.env.cameras import CameraFeed, CameraSpec

log = logging.getLogger("roborl.robots.local")


class LocalRobot(abc.ABC):
    """A `roborl.robots.robot.Robot` without ROS; see module docstring."""

    transport = None  # no ROS: a teleop topic or a success service is refused clearly
    use_sim_time = False

    def __init__(self, cfg: RobotConfig | Mapping[str, Any]) -> None:
        cfg = parse_robot_config(cfg)  # a composed section is validated here, a config passes
        if cfg.cameras:
            raise ConfigError(f"robot={cfg.name} has no cameras yet: set robot.cameras=[].")
        self.joints = list(cfg.joints)
        self.fields = list(cfg.fields)
        self.command_joints = cfg.commanded_joints
        self.cameras: list[CameraSpec] = []
        self.feeds: dict[str, CameraFeed] = {}
        self.endpoint = cfg.name
        self.sent = self.received = self.rejected = 0
        self.last_error: str | None = None
        self._state_lock = threading.Lock()
        self._obs: np.ndarray | None = None
        self._stamp = -np.inf
        self._estop_cb: Callable[[str], None] | None = None
        self._estop_pending: str | None = None

    # -- what a subclass implements ------------------------------------------------------------
    @abc.abstractmethod
    def connect(self, timeout_s: float) -> None:
        """Open the hardware; return once `set_state` has been called (RobotError if not)."""

    @abc.abstractmethod
    def write(self, command: np.ndarray) -> None:
        """Send one command (one value per commanded joint, already through the safety layer)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the hardware (the final hold has been sent before)."""

    # -- what a subclass calls ----------------------------------------------------------------
    def set_state(self, state: np.ndarray) -> None:
        """A measured state: [field0 of joints..., field1 of joints...], stamped now."""
        obs = np.asarray(state, np.float64).reshape(-1)
        if obs.shape != (len(self.joints) * len(self.fields),) or not np.all(np.isfinite(obs)):
            self.rejected += 1  # never an observation: the state watchdog holds the robot
            self.last_error = f"state of shape {obs.shape} or non-finite: {obs.tolist()}"
            return
        with self._state_lock:
            self._obs, self._stamp = obs, time.monotonic()
            self.received += 1

    def estop(self, cause: str) -> None:
        """The hardware's own e-stop fired (a button, a fault): the safety layer latches."""
        with self._state_lock:
            callback = self._estop_cb
            if callback is None:
                self._estop_pending = cause
        if callback is not None:
            callback(cause)

    # -- the rest of `Robot` ---------------------------------------------------------------
    def observation(self) -> tuple[np.ndarray, float]:
        with self._state_lock:
            if self._obs is None:
                raise RobotError(f"{self.endpoint}: observation() before any state: connect().")
            return self._obs.copy(), time.monotonic() - self._stamp

    def frames(self) -> dict[str, tuple[np.ndarray, float]]:
        return {}

    def command(self, action: np.ndarray) -> None:
        a = np.asarray(action, np.float64).reshape(-1)
        if a.shape != (len(self.command_joints),):
            raise RobotError(
                f"command has {a.size} values for {len(self.command_joints)} commanded joints "
                f"{self.command_joints}."
            )
        self.write(a)
        self.sent += 1

    def stop(self, hold: np.ndarray | None = None) -> None:
        self.command(np.zeros(len(self.command_joints)) if hold is None else hold)

    def now(self) -> float:
        return time.monotonic()

    def on_estop(self, callback: Callable[[str], None] | None) -> None:
        with self._state_lock:
            self._estop_cb = callback
            pending, self._estop_pending = self._estop_pending, None
        if pending is not None and callback is not None:
            callback(pending)

    def request_reset(self, reset: ResetConfig) -> None:
        raise ConfigError(
            f"robot.reset.mode={reset.mode} asks the robot to reset itself, which "
            f"{self.endpoint} cannot: use wait, operator or home."
        )

    def serve_safety(  # noqa: B027 - nothing to serve without ROS
        self,
        safety: Any,
        clear: Callable[[], None],
        extra: Callable[[], dict[str, Any]] | None = None,
        activate: Callable[[], None] | None = None,
    ) -> None:
        """No remote operator without ROS: Ctrl-C, signals and the watchdogs stop it."""

    def publish_diagnostics(self) -> None:  # noqa: B027 - no /diagnostics without ROS
        """No /diagnostics without ROS (deploy's events and stats carry the same counts)."""

    def log(self, level: int, message: str) -> None:
        log.log(level, message)


def open_local(
    robot_cls: Callable[[RobotConfig], LocalRobot],
    cfg: RobotConfig | Mapping[str, Any],
    node_name: str | None = None,
    *,
    ros_args: Sequence[str] | None = None,
    extra_params: Mapping[str, Any] | None = None,
    **_ros: Any,
) -> tuple[LocalRobot, RobotConfig]:
    """`RobotKind.open` for a robot without ROS: the robot (not yet connected) and its
    validated config, with the defaults of deploy's extra parameters in its `node_params`
    (there are no ROS parameters to override them, so ROS arguments are refused)."""
    from roborl.robots.robot import extra_defaults

    resolved = parse_robot_config(cfg)
    if ros_args:
        raise ConfigError(
            f"robot={resolved.name} runs without ROS, so it takes no ROS arguments "
            f"({list(ros_args)}): set the robot config's keys instead (robot.rate_hz=..., "
            "robot.options.*)."
        )
    robot = robot_cls(resolved)
    resolved.node_params = extra_defaults(extra_params)
    return robot, resolved

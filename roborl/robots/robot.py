"""`Robot`: the seam between a robot and everything above it (`RobotEnv`, the safety layer,
`roborl deploy`, the actor).

Like ros2_control's hardware interface or LeRobot's `Robot`, it is a small typed contract:
connect, observe (joint vector and camera frames, with their ages), command, stop with a hold,
close; its layout (observed joints and fields, commanded joints, cameras); its clock; counters
for statistics; and the operator face (e-stop callback, safety services and diagnostics, which
a robot without ROS may leave empty). Nothing above the seam imports a ROS type: the ROS 2
driver (`env.driver.Ros2Driver`) is one implementation, the in-process MuJoCo robot
(`mujoco.robot.MujocoRobot`) another, and a third-party robot a plugin (`RobotKind`);
`local.LocalRobot` implements everything but connect/write/close for robots without ROS.

A robot never decides safety: every command it gets has passed the safety layer, and `stop`
sends the hold it is given (zero when none is).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from roborl.core.errors import ConfigError

if TYPE_CHECKING:
    import gymnasium as gym

    from roborl.robots.config import ResetConfig, RobotConfig
    from roborl.robots.env.cameras import CameraFeed, CameraSpec
    from roborl.robots.local import LocalRobot
    from roborl.robots.transport.common import Param
    from roborl.robots.transport.protocol import Transport


class RobotLayout(Protocol):
    """What the observation and action spaces follow from (a robot, or a parsed config)."""

    joints: list[str]
    fields: list[str]
    command_joints: list[str]
    cameras: list[CameraSpec]


@runtime_checkable
class Robot(Protocol):
    """A robot as `RobotEnv`, the safety layer and `deploy` see it (see module docstring)."""

    joints: list[str]
    """Observed joints; the observation is [field0 of joints..., field1 of joints...]."""
    fields: list[str]
    """Observed fields per joint: position, velocity, effort."""
    command_joints: list[str]
    """Commanded joints, in the controller's order (one command value each)."""
    cameras: list[CameraSpec]
    sent: int
    """Commands sent so far (holds included)."""
    received: int
    rejected: int
    last_error: str | None
    """Why the newest rejected state was rejected (None: none was)."""

    @property
    def feeds(self) -> Mapping[str, CameraFeed]:
        """Per camera: the newest frame and its counters (empty without cameras)."""

    @property
    def endpoint(self) -> str:
        """Where commands go, for events and errors (a topic, a simulator's name)."""

    @property
    def transport(self) -> Transport | None:
        """The ROS 2 node or DDS participant for ROS-only extras (a teleop topic, a success
        service); None for a robot without ROS, which then refuses those extras clearly."""

    @property
    def use_sim_time(self) -> bool:
        """Whether `now()` is a simulated clock that the control loop must tick on."""

    def connect(self, timeout_s: float) -> None:
        """Open the connection; return once a valid state (and every camera frame) arrived."""

    def observation(self) -> tuple[np.ndarray, float]:
        """The newest joint vector and its age in seconds."""

    def frames(self) -> dict[str, tuple[np.ndarray, float]]:
        """Per camera: the newest frame and seconds since it arrived."""

    def command(self, action: np.ndarray) -> None:
        """Send one command in `command_joints` order (already through the safety layer)."""

    def stop(self, hold: np.ndarray | None = None) -> None:
        """Send `hold` (zero when None) as the last command; safe to call repeatedly."""

    def close(self) -> None:
        """Release the connection (the safety layer has sent the final hold before)."""

    def now(self) -> float:
        """The robot's clock in seconds (sim time where `use_sim_time`)."""

    def on_estop(self, callback: Callable[[str], None] | None) -> None:
        """Call `callback(cause)` when the robot's own e-stop source fires (a pending one at
        once)."""

    def request_reset(self, reset: ResetConfig) -> None:
        """Start a new episode as `robot.reset` says (modes `topic` and `service` ask the
        robot); a ConfigError for a mode this robot cannot serve."""

    def serve_safety(
        self,
        safety: Any,
        clear: Callable[[], None],
        extra: Callable[[], dict[str, Any]] | None = None,
        activate: Callable[[], None] | None = None,
    ) -> None:
        """Offer the operator remote e-stop/clear/activate and the safety state, where the
        robot has a way to (ROS: `~/estop`, `~/activate`, /diagnostics)."""

    def publish_diagnostics(self) -> None:
        """Publish the safety state now (where the robot has diagnostics)."""

    def log(self, level: int, message: str) -> None:
        """A log line where the robot's operators read them (ROS: /rosout)."""


@dataclass(frozen=True)
class ConfigLayout:
    """A robot config's layout without opening the robot (the learner's spaces)."""

    joints: list[str]
    fields: list[str]
    command_joints: list[str]
    cameras: list[CameraSpec]

    @classmethod
    def of(cls, cfg: RobotConfig) -> ConfigLayout:
        from roborl.robots.env.cameras import parse_cameras

        return cls(
            joints=list(cfg.joints),
            fields=list(cfg.fields),
            command_joints=cfg.commanded_joints,
            cameras=parse_cameras(cfg.cameras),
        )


OpenRobot = Callable[..., tuple[Robot, "RobotConfig | Mapping[str, Any]"]]


class RobotKind:
    """What a robot plugin registers under the `roborl_robots` hook: how to open its `Robot`.

    Calling it builds the env for `roborl train robot=NAME` (the robot behind `RobotEnv` and
    its safety layer); `roborl deploy robot=NAME` calls `open` itself. `open(cfg, **ros)`
    validates the composed section once and returns the robot (not yet connected) and the
    resolved `RobotConfig` the safety layer uses; `ros` carries the deploy node's ROS
    settings (node_name, namespace, ros_args, lifecycle, extra_params), which a robot without
    ROS ignores, except `extra_params`, whose defaults it returns in the config's
    `node_params` (an `open` that returns a mapping puts them in its top level instead:
    `resolved_config`). `Config` is the typed config `robot=NAME` composes.
    """

    def __init__(
        self,
        open: OpenRobot,
        config: type | None = None,
        lifecycle: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> None:
        from roborl.robots.config import RobotConfig

        self.open = open
        self.Config = config or RobotConfig
        self._lifecycle = lifecycle

    @classmethod
    def local(cls, robot_cls: Callable[[RobotConfig], LocalRobot], config: type) -> RobotKind:
        """The kind of a robot without ROS: `robot_cls(cfg)` builds it (a `LocalRobot`)."""
        from functools import partial

        from roborl.robots.local import open_local

        return cls(partial(open_local, robot_cls), config)

    def lifecycle(self, cfg: Mapping[str, Any]) -> bool:
        """Whether `deploy` runs as a managed ROS 2 lifecycle node on this robot."""
        return bool(self._lifecycle and self._lifecycle(cfg))

    def __call__(self, robot_cfg: Mapping[str, Any]) -> gym.Env:
        from roborl.robots.env.robot_env import make_robot_env

        robot, cfg = self.open(robot_cfg)
        try:
            env = make_robot_env(cfg, robot=robot)
        except BaseException:
            robot.close()
            raise
        robot.serve_safety(env.safety, clear=env.reset_estop, activate=env.activate)
        return env


def resolved_config(
    resolved: RobotConfig | Mapping[str, Any], node_params: Iterable[str] = ()
) -> RobotConfig:
    """What a kind's `open` returned, as the typed config: a `RobotConfig` as it is; a mapping
    (a plugin's `open`) validated once, the values of `node_params` moved from its top level
    into `node_params`."""
    from roborl.robots.config import RobotConfig, parse_robot_config

    if isinstance(resolved, RobotConfig):
        return resolved
    section = dict(resolved)
    params = {k: section.pop(k) for k in node_params if k in section}
    config = parse_robot_config(section)
    config.node_params = params
    return config


def robot_kind(registry: Any, section: Mapping[str, Any], command: str) -> RobotKind:
    """The `RobotKind` registered as `robot.name` in the composed `robot` section; a
    ConfigError for a plain env factory."""
    name = str(section.get("name") or "ros2")
    kind = registry.get("robots", name)
    if not isinstance(kind, RobotKind):
        raise ConfigError(
            f"roborl {command} robot={name}: this robot plugin registers an env factory, not a "
            "roborl.robots.robot.RobotKind, so it cannot be opened as a Robot. Register "
            "RobotKind(open=...) in roborl_robots (docs/robots.md, 'Add a robot')."
        )
    return kind


def extra_defaults(extra_params: Mapping[str, Param] | None) -> dict[str, Any]:
    """The defaults of a deploy node's extra parameters, for a robot without ROS parameters."""
    return {k: p.value for k, p in dict(extra_params or {}).items()}


def require_transport(robot: Robot, what: str) -> Transport:
    """`robot.transport`, or a ConfigError naming the ROS-only feature `what`."""
    t = robot.transport
    if t is None:
        raise ConfigError(
            f"{what} needs a ROS 2 robot (a node to subscribe or serve on); this robot "
            f"({robot.endpoint}) has no ROS transport: remove it from the robot config."
        )
    return t

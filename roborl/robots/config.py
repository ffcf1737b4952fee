"""The typed robot config (`robot=`): the only home of its defaults, validated before any ROS
traffic.

A robot config decides what a real machine is allowed to do, so nothing in it may be silently
wrong: unknown keys are refused with a did-you-mean (a `max_detla` is an error, not an ignored
key), limits must be finite with `low < high` per commanded joint, the rate limit must be
positive, ages, rates and timeouts positive, joint names unique and the commanded joints among
the observed ones. YAML files under `configs/robot/` list only what differs from these
dataclasses; ROS parameters (`env.driver_params.robot_parameters`) are derived from the
validated object.

`parse_robot_config` validates a composed `robot` section once; the `RobotConfig` it returns is
what the robot kinds, the driver, the env, the deploy node and the learner take (attribute
access, typed sections). A dict exists only where one is the wire format (a composed or saved
section, ROS parameters written back): `robot_config_dict` is that one conversion.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError

FIELDS = ("position", "velocity", "effort")
INTERFACES = ("forward", "trajectory", "twist", "twist_stamped")
#: Interfaces that command a base's velocity (geometry_msgs/Twist or TwistStamped on cmd_vel):
#: no joints are commanded, and a stop sends zero.
TWIST_INTERFACES = ("twist", "twist_stamped")
#: ros2_control command interfaces a forward_command_controller drives (its `interface_name`).
COMMAND_INTERFACES = ("position", "velocity", "effort")
TERMINATE_KEYS = ("joint", "abs_above")
RESET_MODES = ("wait", "topic", "operator", "home", "service")


@dataclass
class CommandConfig:
    """Where commands go: a ros2_control controller (forward or trajectory) or a base (twist:
    geometry_msgs/Twist; twist_stamped: geometry_msgs/TwistStamped, which diff_drive_controller
    (its only input from Jazzy on), Nav2 and MoveIt Servo expect)."""

    interface: str = field(
        default="forward",
        metadata={
            "choices": list(INTERFACES),
            "help": "forward | trajectory | twist | twist_stamped",
        },
    )
    controller: str = field(
        default="forward_command_controller", metadata={"help": "ros2_control controller"}
    )
    joints: list[str] | None = field(
        default=None, metadata={"help": "commanded joints in the controller's order (null: joints)"}
    )
    interface_name: str | None = field(
        default=None,
        metadata={
            "choices": [None, *COMMAND_INTERFACES],
            "help": "interface=forward only: the controller's interface_name (position | "
            "velocity | effort), which decides what a stop sends",
        },
    )
    topic: str | None = field(
        default=None, metadata={"help": "null: derived from interface and controller"}
    )
    time_from_start_s: float | None = field(
        default=None, metadata=rng(0.0, None, "JointTrajectory point time (null: one period)")
    )
    frame_id: str = field(
        default="base_link",
        metadata={
            "help": "interface=twist_stamped only: the TwistStamped header.frame_id (the frame "
            "the velocity is expressed in; a tf2 frame name, no leading '/')"
        },
    )

    def __post_init__(self) -> None:
        # Also a ROS parameter (`-p command.frame_id:=...`), so checked on every build.
        frame = self.frame_id
        if (
            not isinstance(frame, str)
            or not frame
            or frame.startswith("/")
            or any(c.isspace() for c in frame)
        ):
            raise ConfigError(
                f"robot.command.frame_id={frame!r} must be a non-empty frame name (the "
                "TwistStamped header.frame_id, the frame the velocity is expressed in), e.g. "
                "base_link: no whitespace and no leading '/' (tf2 refuses frame ids that "
                "start with '/')."
            )


@dataclass
class RobotSafetyConfig:
    """The safety layer's limits and watchdogs (see `roborl.robots.env.safety`)."""

    low: list[float] | None = field(
        default=None, metadata={"help": "lower command limit per commanded joint (null: -1)"}
    )
    high: list[float] | None = field(
        default=None, metadata={"help": "upper command limit per commanded joint (null: 1)"}
    )
    max_delta: float | None = field(
        default=None, metadata=rng(0.0, None, "largest command change per step (null: none)")
    )
    max_state_age_s: float = field(
        default=0.25, metadata=rng(0.0, None, "hold when the newest JointState is older")
    )
    max_policy_time_s: float = field(
        default=0.5,
        metadata=rng(0.0, None, "hold when no command went out for this long (policy watchdog)"),
    )
    hold: str | None = field(
        default=None,
        metadata={
            "choices": [None, "zero", "position", "last"],
            "help": "null: from the command interface (zero on velocity/effort, position "
            "where the arm stands on position); a value must agree with the interface",
        },
    )


@dataclass
class EstopConfig:
    """Who may clear a latched e-stop. Clearing never restarts motion either way: after a
    clear the robot holds until an explicit activate."""

    clear: str = field(
        default="service",
        metadata={
            "choices": ["service", "none"],
            "help": "service: SetBool(false) on ~/estop clears the latch; none: only a restart",
        },
    )


@dataclass
class SecurityConfig:
    """SROS2 (see `roborl.robots.transport.security`): require it, and where its keys are."""

    require: bool = field(
        default=False,
        metadata={"help": "start only inside an SROS2 enclave (Enforce); refuse without one"},
    )
    keystore: str | None = field(default=None, metadata={"help": "ROS_SECURITY_KEYSTORE"})
    enclave: str | None = field(default=None, metadata={"help": "the node's enclave path"})


@dataclass
class ResetConfig:
    """Between episodes: how the robot gets back to a start state. `home` moves the robot, so
    its keys are validated here like the safety limits (the pose itself against the limits
    when the env starts)."""

    mode: str = field(
        default="wait",
        metadata={
            "choices": list(RESET_MODES),
            "help": "wait | topic (publish Bool on `topic`) | operator (Enter on stdin) | "
            "home (move to `home`) | service (std_srvs/Trigger `service`)",
        },
    )
    topic: str = field(default="/sim_robot/reset", metadata={"help": "mode=topic"})
    service: str = field(default="/sim_robot/reset", metadata={"help": "mode=service"})
    wait_s: float = field(default=0.0, metadata=rng(0.0, None, "pause after the reset"))
    timeout_s: float = field(
        default=10.0, metadata=rng(0.0, None, "service answer / reaching home, at most")
    )
    home: list[float] | None = field(
        default=None, metadata={"help": "mode=home: one position per commanded joint"}
    )
    duration_s: float = field(
        default=2.0, metadata=rng(0.0, None, "mode=home: the interpolated move's length")
    )
    tolerance: float = field(
        default=0.05, metadata=rng(0.0, None, "mode=home: how close counts as home")
    )

    def __post_init__(self) -> None:
        for key in ("timeout_s", "duration_s", "tolerance"):
            _positive(getattr(self, key), f"robot.reset.{key}")
        if not math.isfinite(self.wait_s):
            raise ConfigError(f"robot.reset.wait_s={self.wait_s!r} must be a finite number.")
        if self.mode == "home" and self.home is None:
            raise ConfigError(
                "robot.reset.mode=home needs robot.reset.home: one position per commanded "
                "joint, inside robot.safety.low/high."
            )


@dataclass
class RobotConfig:
    """`robot=ros2` and its presets. See configs/robot/ros2.yaml for the sim-robot pendulum."""

    name: str = field(default="ros2", metadata={"help": "the robot kind (roborl_robots)"})
    transport: str = field(
        default="auto", metadata={"choices": ["auto", "rclpy", "dds"], "help": "ROS 2 transport"}
    )
    node_name: str = field(default="roborl_driver", metadata={"help": "ROS 2 node name"})
    namespace: str = field(default="", metadata={"help": "ROS 2 namespace of the node"})
    ros_args: list[str] = field(default_factory=list, metadata={"help": "ROS arguments"})
    params_file: str | None = field(default=None, metadata={"help": "a ROS 2 params YAML"})
    joints: list[str] = field(
        default_factory=list, metadata={"help": "observed joints, matched by name"}
    )
    fields: list[str] = field(
        default_factory=lambda: ["position", "velocity"],
        metadata={"help": "JointState fields per joint: position, velocity, effort"},
    )
    state_topic: str = field(default="/joint_states", metadata={"help": "JointState topic"})
    estop_topic: str = field(default="/estop", metadata={"help": "std_msgs/Bool; true latches"})
    command: CommandConfig = field(default_factory=CommandConfig)
    rate_hz: float = field(default=50.0, metadata=rng(0.0, None, "control rate in Hz"))
    connect_timeout_s: float = field(
        default=10.0, metadata=rng(0.0, None, "seconds to wait for the first valid JointState")
    )
    max_episode_steps: int = field(default=1000, metadata=rng(1, None, "steps per episode"))
    diagnostics_period_s: float = field(
        default=1.0, metadata=rng(0.0, None, "/diagnostics publish period")
    )
    qos: dict[str, Any] = field(default_factory=dict, metadata={"help": "per-topic QoS"})
    safety: RobotSafetyConfig = field(default_factory=RobotSafetyConfig)
    estop: EstopConfig = field(default_factory=EstopConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    allow_other_commanders: bool = field(
        default=False,
        metadata={
            "help": "start even when another node already publishes on the command topic "
            "(two commanders on one robot fight; opt out of the check knowingly)"
        },
    )
    terminate: dict[str, Any] | None = field(
        default=None, metadata={"help": "{joint, abs_above}: end the episode past a bound"}
    )
    reset: ResetConfig = field(default_factory=ResetConfig)
    cameras: list[Any] = field(default_factory=list, metadata={"help": "sensor_msgs/Image"})
    intervention: dict[str, Any] | None = field(
        default=None, metadata={"help": "a person's teleop topic (roborl.robots.env.intervention)"}
    )
    episode: dict[str, Any] | None = field(
        default=None,
        metadata={"help": "success signals and time limit (roborl.robots.env.episode)"},
    )
    options: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "the robot kind's own options, typed and checked by it (mujoco: env, ...)"
        },
    )

    def __post_init__(self) -> None:
        _positive(self.rate_hz, "robot.rate_hz")
        _positive(self.connect_timeout_s, "robot.connect_timeout_s")
        _positive(self.diagnostics_period_s, "robot.diagnostics_period_s")
        if not self.joints:
            raise ConfigError(
                "robot.joints is empty: list the joint names to observe, e.g. "
                "robot.joints=[slider,hinge] (names as published on /joint_states)."
            )
        _unique(self.joints, "robot.joints")
        bad = [f for f in self.fields if f not in FIELDS]
        if bad or not self.fields:
            raise ConfigError(
                f"robot.fields={self.fields}: each must be one of {list(FIELDS)} (at least one)."
            )
        commanded = self.commanded_joints
        _unique(commanded, "robot.command.joints")
        if self.command.interface not in TWIST_INTERFACES:
            unknown = [j for j in commanded if j not in self.joints]
            if unknown:
                raise ConfigError(
                    f"robot.command.joints has {unknown}, which robot.joints={self.joints} does "
                    "not observe: a commanded joint must be observed (the watchdog and the "
                    "position hold read it)."
                )
        if self.command.time_from_start_s is not None:
            _positive(self.command.time_from_start_s, "robot.command.time_from_start_s")
        self._check_safety(len(commanded))
        hold_for(self)  # the interface decides the hold: refuse a conflict
        if self.terminate is not None:
            _known_keys(self.terminate, TERMINATE_KEYS, "robot.terminate")
        #: The values in force of a deploy node's own ROS parameters (autostart, on_watchdog),
        #: filled by the robot kind's `open`: node settings, so not config keys (not fields).
        self.node_params: dict[str, Any] = {}

    @property
    def commanded_joints(self) -> list[str]:
        """The commanded joints in the controller's order (`command.joints`, else `joints`)."""
        return list(self.command.joints) if self.command.joints is not None else list(self.joints)

    @property
    def hold(self) -> str:
        """What a stop sends: "zero" or "position" (`hold_for`; checked at construction)."""
        return hold_for(self)

    @property
    def limits(self) -> tuple[list[float], list[float]]:
        """(low, high) per commanded joint, filled and checked at construction."""
        assert self.safety.low is not None and self.safety.high is not None
        return list(self.safety.low), list(self.safety.high)

    def _check_safety(self, n: int) -> None:
        s = self.safety
        low = s.low if s.low is not None else [-1.0] * n
        high = s.high if s.high is not None else [1.0] * n
        if len(low) != n or len(high) != n:
            raise ConfigError(
                f"robot.safety.low={low} and robot.safety.high={high} need one value per "
                f"commanded joint ({n}: {self.commanded_joints})."
            )
        for key, values in (("low", low), ("high", high)):
            if not all(math.isfinite(v) for v in values):
                raise ConfigError(
                    f"robot.safety.{key}={values} must be finite: an infinite limit disables "
                    "clamping and NaN lets NaN commands through."
                )
        if any(lo >= hi for lo, hi in zip(low, high, strict=True)):
            raise ConfigError(
                f"robot.safety.low={low} must be below robot.safety.high={high} for every joint."
            )
        if s.max_delta is not None:
            _positive(s.max_delta, "robot.safety.max_delta", "or null for no rate limit")
        _positive(s.max_state_age_s, "robot.safety.max_state_age_s")
        _positive(s.max_policy_time_s, "robot.safety.max_policy_time_s")
        s.low, s.high = [float(v) for v in low], [float(v) for v in high]


def hold_for(cfg: RobotConfig) -> str:
    """What a stop sends on this robot's command interface: "zero" (velocity and effort
    interfaces: a mobile base's Twist, a velocity or effort forward_command_controller) or
    "position" (hold where the arm stands: joint_trajectory_controller, a position
    forward_command_controller). `robot.safety.hold` may only say the same."""
    interface, name = cfg.command.interface, cfg.command.interface_name
    if interface == "trajectory":
        kind, why = "position", "JointTrajectory carries positions"
    elif interface in TWIST_INTERFACES:
        kind, why = "zero", "a Twist is a velocity"
    elif name is None:
        raise ConfigError(
            "robot.command.interface=forward needs robot.command.interface_name: position, "
            "velocity or effort, the interface_name of your forward_command_controller. "
            "roborl does not guess it, because a stop sends zero to velocity and effort "
            "interfaces but the measured position to a position interface, and zero sent to "
            "a position controller is a move to zero, not a stop."
        )
    else:
        kind = "position" if name == "position" else "zero"
        why = f"interface_name={name}"
    given = "position" if cfg.safety.hold == "last" else cfg.safety.hold
    if given is not None and given != kind:
        raise ConfigError(
            f"robot.safety.hold={cfg.safety.hold!r} conflicts with the command interface "
            f"(robot.command.interface={interface}, {why}): a stop there must send "
            f"{'the measured position' if kind == 'position' else 'zero'}. "
            + (
                "Zero sent to a position interface commands a move to zero, which on an arm "
                "standing elsewhere is a collision caused by the stop itself. "
                if kind == "position"
                else "Repeating a position on a velocity or effort interface keeps it moving. "
            )
            + f"Leave robot.safety.hold unset (null) or set it to {kind}."
        )
    return kind


def _positive(value: float, key: str, extra: str = "") -> None:
    if not (math.isfinite(value) and value > 0):
        tail = f" ({extra})" if extra else ""
        raise ConfigError(f"{key}={value!r} must be a finite number > 0{tail}.")


def _unique(names: list[str], key: str) -> None:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{key}={names} names {dupes} more than once: names must be unique.")


def _known_keys(section: Mapping[str, Any], known: tuple[str, ...], key: str) -> None:
    from roborl.core.errors import did_you_mean

    if not isinstance(section, Mapping):
        raise ConfigError(f"{key}={section!r} must be a mapping.")
    for k in section:
        if k not in known:
            raise ConfigError(
                f"unknown config key '{key}.{k}'.{did_you_mean(str(k), known)} Accepted keys: "
                f"{', '.join(known)}."
            )


NESTED = {
    "command": CommandConfig,
    "safety": RobotSafetyConfig,
    "estop": EstopConfig,
    "security": SecurityConfig,
    "reset": ResetConfig,
}


def _plain(value: Any) -> Any:
    """Plain dicts and lists all the way down (a read-only view or an OmegaConf node in)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or type(value).__name__ == "ListConfig":
        return [_plain(v) for v in value]
    return value


def parse_robot_config(values: RobotConfig | Mapping[str, Any] | None) -> RobotConfig:
    """Validate a `robot` config section once; a ConfigError names the bad key and value.
    A `RobotConfig` is returned as it is: it was validated when it was built."""
    if isinstance(values, RobotConfig):
        return values
    section = _plain(dict(values or {}))
    for key, cls in NESTED.items():
        value = section.get(key)
        if value is not None and not isinstance(value, Mapping | cls):
            raise ConfigError(f"robot.{key}={value!r} must be a mapping.")
        if isinstance(value, Mapping):
            section[key] = build_config(cls, value, f"robot.{key}.")
    return build_config(RobotConfig, section, "robot.")


def robot_config_dict(values: RobotConfig | Mapping[str, Any] | None) -> dict[str, Any]:
    """The validated config as a plain dict, every default filled in: the one conversion to
    the wire form (a composed or saved `robot` section, ROS parameters written back)."""
    return dataclasses.asdict(parse_robot_config(values))


def robot_preset(name: str) -> dict[str, Any]:
    """The `robot` section that `robot=NAME` composes (its YAML preset over the dataclass
    defaults), validated: for scripts and tests that build a robot without the CLI."""
    from roborl.core.compose import compose_dict
    from roborl.core.plugins import get_host

    return robot_config_dict(compose_dict(get_host(), [f"robot={name}"], "train")["robot"])

"""The typed topic mapping of `roborl dataset convert in=BAG`: which topic becomes which part of
a transition, and at what control rate.

Why a dataclass validated once: a bag holds whatever a robot published, so a mistyped topic or
joint would otherwise turn into silently empty or misaligned data. Every key is typed and
range-checked here (unknown keys refused with a did-you-mean), and what can only be checked
against the bag (a topic that is missing or has another message type, a joint the
JointState never names) is checked by `read.py` before any message is decoded, naming the
topic or joint. The keys are flat so that they are `key=value` arguments as they stand
(`joy_topic=/joy`), and the same keys fill a `mapping=FILE.yaml`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError

FIELDS = ("position", "velocity", "effort")
EPISODE_ENDS = ("timeout", "terminal")


@dataclass
class BagMapping:
    """Topics -> transition fields (defaults: what `roborl sim-robot` and roborl's robot
    bridge publish with `robot.command.interface=forward`)."""

    rate_hz: float | None = field(
        default=None, metadata=rng(1e-3, None, "control rate the bag is resampled to (required)")
    )
    state_topic: str = field(
        default="/joint_states", metadata={"help": "sensor_msgs/JointState -> the state vector"}
    )
    joints: list[str] | None = field(
        default=None, metadata={"help": "joints of the state, by name (null: the first message's)"}
    )
    fields: list[str] = field(
        default_factory=lambda: ["position", "velocity"],
        metadata={"help": "JointState fields, field-major as robot.fields lays them out"},
    )
    command_topic: str = field(
        default="/forward_command_controller/commands",
        metadata={
            "help": "the action: Float64MultiArray, JointTrajectory (first point), Twist(Stamped)"
        },
    )
    command_joints: list[str] | None = field(
        default=None,
        metadata={"help": "JointTrajectory: these joints, in this order (null: the message's)"},
    )
    action_dim: int | None = field(
        default=None,
        metadata=rng(1, None, "Twist: the first N of linear.xyz, angular.xyz (null: 6)"),
    )
    cameras: dict[str, str] = field(
        default_factory=dict,
        metadata={"help": "observation key -> sensor_msgs/Image topic (or cameras.KEY=TOPIC)"},
    )
    state_key: str = field(
        default="state", metadata={"help": "with cameras: the state vector's observation key"}
    )
    joy_topic: str | None = field(
        default=None, metadata={"help": "sensor_msgs/Joy teleop: marks intervened steps"}
    )
    joy_button: int | None = field(
        default=0, metadata=rng(0, None, "dead-man button (null: a mapped axis past deadzone)")
    )
    joy_axes: list[int] | None = field(
        default=None, metadata={"help": "Joy axis per action dimension (joy_action, button=null)"}
    )
    joy_scale: float = field(default=1.0, metadata=rng(None, None, "joy_action: axis * scale"))
    joy_deadzone: float = field(default=0.05, metadata=rng(0.0, 1.0, "axis magnitude ignored"))
    joy_timeout_s: float = field(
        default=0.5, metadata=rng(0.0, None, "a Joy message older than this intervenes no more")
    )
    joy_action: bool = field(
        default=False,
        metadata={"help": "intervened steps take joy_axes * joy_scale as their action"},
    )
    reset_topic: str | None = field(
        default=None, metadata={"help": "std_msgs/Bool true starts a new episode (null: none)"}
    )
    max_age_s: float = field(
        default=0.5,
        metadata=rng(
            0.0, None, "a step whose newest state/command/frame is older ends the episode"
        ),
    )
    reward: float = field(default=0.0, metadata=rng(None, None, "reward of every step"))
    episode_end: str = field(
        default="timeout",
        metadata={"choices": list(EPISODE_ENDS), "help": "how an episode's last step is flagged"},
    )

    def __post_init__(self) -> None:
        if self.rate_hz is None:
            raise ConfigError(
                "rate_hz= is required: the control rate (Hz) the bag is resampled to, e.g. "
                "rate_hz=10 for robot=tabletop (robot.rate_hz of the run that recorded it)."
            )
        bad = [f for f in self.fields if f not in FIELDS]
        if bad or not self.fields or len(set(self.fields)) != len(self.fields):
            raise ConfigError(
                f"fields={self.fields}: each must be one of {list(FIELDS)}, at least one, "
                "none twice."
            )
        for key in ("joints", "command_joints"):
            names = getattr(self, key)
            if names is not None and (not names or len(set(names)) != len(names)):
                raise ConfigError(f"{key}={names}: give distinct joint names (or null).")
        topics = {"state_topic": self.state_topic, "command_topic": self.command_topic}
        topics.update({f"cameras.{k}": v for k, v in self.cameras.items()})
        topics.update({k: getattr(self, k) for k in ("joy_topic", "reset_topic")})
        for key, topic in topics.items():
            if topic is not None and (not isinstance(topic, str) or not topic.startswith("/")):
                raise ConfigError(f"{key}={topic!r} must be a topic name starting with '/'.")
        for key in self.cameras:
            if key == self.state_key:
                raise ConfigError(
                    f"cameras.{key} has the name of the state's observation key "
                    f"(state_key={self.state_key!r}); rename one."
                )
        if self.joy_action and (self.joy_topic is None or not self.joy_axes):
            raise ConfigError(
                "joy_action=true takes the action from the Joy axes: set joy_topic= and "
                "joy_axes=[...] (one axis per action dimension)."
            )
        if self.joy_topic is not None and self.joy_button is None and not self.joy_axes:
            raise ConfigError(
                "joy_button=null marks a step intervened when a mapped axis moves: set "
                "joy_axes=[...] (or a dead-man joy_button)."
            )
        if not math.isfinite(self.reward) or not math.isfinite(self.joy_scale):
            raise ConfigError("reward= and joy_scale= must be finite numbers.")

    @property
    def period_ns(self) -> int:
        """One control period in nanoseconds (bag time)."""
        return round(1e9 / float(self.rate_hz or 1.0))


def mapping_from(values: Mapping[str, Any], file: str | None = None) -> BagMapping:
    """The mapping from a YAML file's keys (`file`) overridden by `values` (the command line),
    validated once; errors name the key (and the file)."""
    merged: dict[str, Any] = {}
    if file:
        merged.update(_read_file(file))
    merged.update(values)
    try:
        return build_config(BagMapping, merged)
    except ConfigError as exc:
        where = f" (mapping={file})" if file else ""
        raise ConfigError(f"roborl dataset convert: {exc}{where}") from None


def _read_file(file: str) -> dict[str, Any]:
    import yaml

    path = Path(file)
    if not path.is_file():
        raise ConfigError(f"roborl dataset convert: mapping={file!r} is not a file.")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"roborl dataset convert: mapping={file!r} is not YAML ({exc})."
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"roborl dataset convert: mapping={file!r} must hold key: value pairs (the keys of "
            "`roborl dataset --help`, convert from a rosbag2), not a "
            f"{type(data).__name__}."
        )
    return data

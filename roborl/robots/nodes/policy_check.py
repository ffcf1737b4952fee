"""`roborl deploy`'s check that the robot config in force is the layout a policy was trained on.

A policy sees a joint vector `[field0 of joints..., field1 of joints...]` and commands its
commanded joints in order. The shape check (`deploy_node._check_policy_space`) cannot tell a
swapped or renamed joint from the trained one, so this module compares names and order: the
observed joints, the JointState fields, the commanded joints and the cameras (names and sizes).

The record is the robot section of the config that every checkpoint (`config`) and exported
model folder (config.json's `config`) keep: `train robot=...` saves its whole config. A policy
trained without a robot (a Gymnasium env) has no joint names; deploy then goes on with the
shape check alone and says so. So does a run whose ROS parameters (`robot.params_file`,
`robot.ros_args`) may have set the joints at training, since the config does not hold them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from roborl.core.errors import ConfigError

#: Robot parameters (`Ros2Driver.open`) that change the layout; a run that set them through
#: ROS parameters observed what its config does not record.
LAYOUT_PARAMS = ("joints", "fields", "command.joints")


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a policy's observation and action vectors mean, in order."""

    joints: tuple[str, ...]
    fields: tuple[str, ...]
    command_joints: tuple[str, ...]
    cameras: tuple[tuple[str, int, int], ...]  # (name, height, width)

    def differences(self, other: Layout) -> list[tuple[str, str, str]]:
        """(config key, this value, other's value) per part that differs."""
        out = []
        for key, mine, theirs in (
            ("robot.joints", self.joints, other.joints),
            ("robot.fields", self.fields, other.fields),
            ("robot.command.joints", self.command_joints, other.command_joints),
        ):
            if mine != theirs:
                out.append((key, _names(mine), _names(theirs)))
        if sorted(self.cameras) != sorted(other.cameras):
            out.append(("robot.cameras", _cams(self.cameras), _cams(other.cameras)))
        return out


@dataclasses.dataclass(frozen=True)
class TrainedRobot:
    """The layout a checkpoint or model folder was trained on, or why it has none."""

    source: str
    layout: Layout | None
    unchecked: str = ""  # why the joint names cannot be checked (layout None)

    @classmethod
    def of(cls, meta: Mapping[str, Any] | None) -> TrainedRobot | None:
        """From a checkpoint's data or a model folder's config.json data; None without one
        (a checkpoint-free algorithm such as algo=llm has nothing trained to compare)."""
        if meta is None:
            return None
        source = str(meta.get("path") or "the checkpoint")
        config = meta.get("config")
        robot = config.get("robot") if isinstance(config, Mapping) else None
        if not isinstance(robot, Mapping) or not robot:
            env = config.get("env") if isinstance(config, Mapping) else None
            env_id = env.get("id") if isinstance(env, Mapping) else None
            where = f"on env {env_id}" if env_id else "without a robot config"
            return cls(source, None, f"{source} was trained {where}, so it names no joints")
        overridden = _ros_overrides(robot)
        if overridden:
            return cls(
                source,
                None,
                f"{source}'s run set ROS parameters ({overridden}) that may have changed its "
                "joints, which its saved config does not show",
            )
        try:
            layout = layout_of_config(robot)
        except (TypeError, ValueError, ConfigError) as exc:
            return cls(source, None, f"{source}'s robot config cannot be read ({exc})")
        n = _state_size(meta.get("observation_space"))
        if n is not None and n != len(layout.joints) * len(layout.fields):
            return cls(
                source,
                None,
                f"{source}'s robot config ({len(layout.joints)} joints x {len(layout.fields)} "
                f"fields) does not describe its {n}-value observations",
            )
        return cls(source, layout)


def layout_of_config(robot: Mapping[str, Any]) -> Layout:
    """The layout of a saved `robot` section; keys it lacks take RobotConfig's defaults."""
    from roborl.robots.config import RobotConfig
    from roborl.robots.env.cameras import parse_cameras

    defaults = {f.name: f for f in dataclasses.fields(RobotConfig)}
    joints = _str_list(robot.get("joints"), "joints")
    fields = robot.get("fields")
    if fields is None:
        fields = defaults["fields"].default_factory()  # type: ignore[misc]
    command = robot.get("command") or {}
    if not isinstance(command, Mapping):
        raise TypeError(f"command is a {type(command).__name__}, not a mapping")
    commanded = command.get("joints")
    cameras = [(c.name, c.height, c.width) for c in parse_cameras(robot.get("cameras"))]
    return Layout(
        tuple(joints),
        tuple(_str_list(fields, "fields")),
        tuple(_str_list(commanded, "command.joints") if commanded is not None else joints),
        tuple(cameras),
    )


def layout_of_driver(driver: Any) -> Layout:
    """The layout in force: the driver's values (the robot config after ROS parameters)."""
    return Layout(
        tuple(driver.joints),
        tuple(driver.fields),
        tuple(driver.command_joints),
        tuple((c.name, int(c.height), int(c.width)) for c in driver.cameras),
    )


def check_trained_robot(trained: TrainedRobot | None, driver: Any) -> str | None:
    """Refuse (ConfigError) a robot config in force whose joint names, order, fields or
    cameras differ from the policy's training; returns why the names went unchecked (a
    sim-trained policy), or None when they were checked (or nothing was trained)."""
    if trained is None:
        return None
    if trained.layout is None:
        return (
            f"joint names could not be checked: {trained.unchecked}; only the observation "
            "shape was checked."
        )
    now = layout_of_driver(driver)
    diffs = trained.layout.differences(now)
    if not diffs:
        return None
    parts = "; ".join(f"{key} was {was} in training and is {now_} here" for key, was, now_ in diffs)
    fix = " ".join(
        "robot.cameras as trained" if key == "robot.cameras" else f"{key}={was}"
        for key, was, _ in diffs
    )
    raise ConfigError(
        f"the policy in {trained.source} was trained on another robot layout than the robot "
        f"config in force: {parts}. Its observation and action vectors follow these names in "
        "this order, so equal shapes do not make them match. Give the trained layout (e.g. "
        f"{fix}, or the same ROS parameters), or retrain on this robot's joints if it names "
        "them differently."
    )


def _names(values: Sequence[str]) -> str:
    return "[" + ",".join(values) + "]"


def _cams(cams: Sequence[tuple[str, int, int]]) -> str:
    return "[" + ",".join(f"{n}:{h}x{w}" for n, h, w in cams) + "]"


def _str_list(value: Any, key: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{key}={value!r} is not a list of names")
    return [str(v) for v in value]


def _ros_overrides(robot: Mapping[str, Any]) -> str:
    """The run's ROS parameter sources that may have set the layout ('' when none)."""
    found = []
    if robot.get("params_file"):
        found.append(f"robot.params_file={robot['params_file']}")
    args = [str(a) for a in robot.get("ros_args") or []]
    for i, arg in enumerate(args):
        if arg == "--params-file":
            found.append("robot.ros_args --params-file")
        elif arg in ("-p", "--param") and i + 1 < len(args):
            name = args[i + 1].split(":=", 1)[0]
            if name in LAYOUT_PARAMS:
                found.append(f"robot.ros_args -p {args[i + 1]}")
    return ", ".join(found)


def _state_size(space: Any) -> int | None:
    """Length of the joint vector in a stored observation space (Box, or Dict's `state`)."""
    if not isinstance(space, Mapping):
        return None
    if space.get("type") == "Dict":
        space = (space.get("spaces") or {}).get("state")
        if not isinstance(space, Mapping):
            return None
    shape = space.get("shape") if space.get("type") == "Box" else None
    if not shape:
        return None
    return int(shape[-1])

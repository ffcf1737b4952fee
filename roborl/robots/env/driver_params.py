"""The robot config as ROS 2 parameters: which keys a ROS 2 engineer may set, and back.

The driver node declares these (`Ros2Driver.open`) with the typed config's values as
defaults; `--ros-args -p` and params files override them, and the values in force make a new
`RobotConfig`, validated like the config they override (zeros and empty strings standing for
the config's null).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roborl.robots.config import RobotConfig, parse_robot_config, robot_config_dict
from roborl.robots.transport.common import Param

#: The robot config keys a ROS 2 engineer may set as parameters (dotted = nested in the config).
#: Empty strings and zeros stand for the config's null ("derive it" / "no limit").
ROBOT_PARAMS = {
    "rate_hz": "control rate in Hz",
    "joints": "observed joints, matched by name in sensor_msgs/JointState",
    "fields": "JointState fields observed per joint: position, velocity, effort",
    "state_topic": "sensor_msgs/JointState topic",
    "estop_topic": "std_msgs/Bool topic; true latches the e-stop",
    "connect_timeout_s": "seconds to wait for the first valid JointState",
    "command.interface": "forward (Float64MultiArray), trajectory, twist or twist_stamped",
    "command.controller": "ros2_control controller that takes the commands",
    "command.joints": "commanded joints, in the controller's order",
    "command.interface_name": "forward only: position, velocity or effort (decides the hold)",
    "command.topic": "command topic ('': derived from interface and controller)",
    "command.time_from_start_s": "JointTrajectory time_from_start (0: one control period)",
    "command.frame_id": "twist_stamped only: the TwistStamped header.frame_id",
    "safety.low": "lower command limit per commanded joint",
    "safety.high": "upper command limit per commanded joint",
    "safety.max_delta": "largest command change per step (0: no rate limit)",
    "safety.max_state_age_s": "watchdog: hold when the newest JointState is older",
    "safety.max_policy_time_s": "watchdog: hold when the policy takes longer",
    "safety.hold": "'' (from the interface), zero (effort/velocity) or position",
}
_NULL_AS = {
    "command.topic": "",
    "command.time_from_start_s": 0.0,
    "safety.max_delta": 0.0,
    "command.interface_name": "",
    "safety.hold": "",
}


def _get(cfg: RobotConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def robot_parameters(cfg: RobotConfig) -> dict[str, Param]:
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


def apply_parameters(cfg: RobotConfig, values: Mapping[str, Any]) -> RobotConfig:
    """`cfg` with the parameter values in force written back (zeros/'' back to null), as a
    new config validated like any other (`-p safety.max_delta:=-1` is refused by name).
    Parameters arrive as plain values, so they go in through the config's wire form."""
    out = robot_config_dict(cfg)
    for name, value in values.items():
        if name in _NULL_AS and value == _NULL_AS[name]:
            value = None
        *path, last = name.split(".")
        node = out
        for part in path:
            node[part] = dict(node.get(part) or {})
            node = node[part]
        node[last] = value
    return parse_robot_config(out)

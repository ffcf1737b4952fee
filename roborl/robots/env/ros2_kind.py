"""The ROS 2 robot kind (`robot=ros2` and its presets): opening a `Ros2Driver` as a ROS 2 node
whose parameters (defaults: the robot config) decide the config the safety layer uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from roborl.robots.config import robot_config_dict
from roborl.robots.env.driver_params import apply_parameters, robot_parameters
from roborl.robots.transport.common import Param, make_transport

if TYPE_CHECKING:
    from roborl.robots.env.driver import Ros2Driver


def open_ros2(
    cls: type[Ros2Driver],
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
        resolved = apply_parameters(cfg, transport.declare_parameters(params))
        extras = {k: resolved.pop(k) for k in dict(extra_params or {}) if k in resolved}
        # ROS parameters are checked like the config they override (-p safety.max_delta:=-1).
        resolved = robot_config_dict(resolved)
        driver = cls({**resolved, "node_name": name}, transport=transport)
        resolved.update(extras)
    except BaseException:
        transport.close()
        raise
    return driver, resolved


def ros2_lifecycle(cfg: Mapping[str, Any]) -> bool:
    """Deploy is a managed lifecycle node over rclpy (not over plain DDS, which has none)."""
    from roborl.robots.transport.common import rclpy_available

    kind = cfg.get("transport", "auto")
    return kind == "rclpy" or (kind == "auto" and rclpy_available())


def open_driver(cfg: Mapping[str, Any], node_name: str | None = None, **ros: Any) -> Any:
    """`RobotKind.open` for ROS 2 robots."""
    from roborl.robots.env.driver import Ros2Driver

    return open_ros2(Ros2Driver, cfg, node_name, **ros)

"""The ROS 2 robot kind (`robot=ros2` and its presets): opening a `Ros2Driver` as a ROS 2 node
whose parameters (derived from the typed robot config) decide the config the safety layer
uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from roborl.robots.config import RobotConfig, parse_robot_config
from roborl.robots.env.driver_params import apply_parameters, robot_parameters
from roborl.robots.transport.common import Param, make_transport

if TYPE_CHECKING:
    from roborl.robots.env.driver import Ros2Driver


def open_ros2(
    cls: type[Ros2Driver],
    cfg: RobotConfig | Mapping[str, Any],
    node_name: str | None = None,
    *,
    namespace: str | None = None,
    ros_args: Sequence[str] | None = None,
    lifecycle: Mapping[str, Callable[[], bool]] | None = None,
    extra_params: Mapping[str, Param] | None = None,
) -> tuple[Ros2Driver, RobotConfig]:
    """Start the node, declare the robot config as ROS parameters and build the driver
    from the values in force. Returns the driver (not yet connected) and the resolved
    config (what the safety layer and the env must use), with `extra_params`' values in
    force in its `node_params`.

    `ros_args` default to the config's `ros_args` list, with `params_file` appended as
    `--params-file` (how `train robot=...` takes them)."""
    config = parse_robot_config(cfg)  # validated once, before any ROS traffic
    if ros_args is None:
        ros_args = [str(a) for a in config.ros_args]
        if config.params_file:
            ros_args += ["--params-file", str(config.params_file)]
    name = node_name or config.node_name or "roborl_driver"
    checked = cls(config)  # the driver's own checks (QoS, cameras) first
    from roborl.robots.transport.common import rclpy_available
    from roborl.robots.transport.security import apply_security

    kind = config.transport
    kind = ("rclpy" if rclpy_available() else "dds") if kind == "auto" else kind
    ros_args = [*ros_args, *apply_security(checked.security, kind)]
    transport = make_transport(
        config.transport,
        name,
        namespace=namespace if namespace is not None else config.namespace,
        ros_args=ros_args,
        lifecycle=lifecycle,
    )
    try:
        extra = dict(extra_params or {})
        values = transport.declare_parameters({**robot_parameters(config), **extra})
        # ROS parameters are checked like the config they override (-p safety.max_delta:=-1).
        resolved = apply_parameters(config, {k: v for k, v in values.items() if k not in extra})
        driver = cls(resolved, transport=transport, node_name=name)
        resolved.node_params = {k: v for k, v in values.items() if k in extra}
    except BaseException:
        transport.close()
        raise
    return driver, resolved


def ros2_lifecycle(cfg: RobotConfig | Mapping[str, Any]) -> bool:
    """Deploy is a managed lifecycle node over rclpy (not over plain DDS, which has none)."""
    from roborl.robots.transport.common import rclpy_available

    # Asked of the composed section before `open` validates it: only its transport is read.
    kind = cfg.transport if isinstance(cfg, RobotConfig) else cfg.get("transport", "auto")
    return kind == "rclpy" or (kind == "auto" and rclpy_available())


def open_driver(
    cfg: RobotConfig | Mapping[str, Any], node_name: str | None = None, **ros: Any
) -> tuple[Ros2Driver, RobotConfig]:
    """`RobotKind.open` for ROS 2 robots."""
    from roborl.robots.env.driver import Ros2Driver

    return open_ros2(Ros2Driver, cfg, node_name, **ros)

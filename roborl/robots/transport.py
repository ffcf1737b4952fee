"""Transports for the ROS 2 bridge: rclpy where ROS 2 is installed, plain DDS elsewhere.

Both expose the same tiny surface (`publisher(topic, type)`, `subscribe(topic, type, cb)`,
`close()`) with ROS 2 names ("/joint_states") and the message dataclasses of `msgs`, so the
driver and nodes do not know which one runs. `rclpy_transport.RclpyTransport` is the real
ROS 2 node; `dds_transport.DDSTransport` speaks the wire protocol without ROS 2.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from roborl.core.errors import ConfigError


def domain_id() -> int:
    raw = os.environ.get("ROS_DOMAIN_ID", "0") or "0"
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 232:
        raise ConfigError(f"ROS_DOMAIN_ID={raw!r} is not valid: use an integer in 0..232.")
    return value


def localhost_only() -> bool:
    return (
        os.environ.get("ROS_LOCALHOST_ONLY", "0") == "1"
        or os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "").upper() == "LOCALHOST"
    )


def rclpy_available() -> bool:
    try:
        importlib.import_module("rclpy")
    except ImportError:
        return False
    return True


def make_transport(kind: str = "auto", node_name: str = "roborl") -> Any:
    """`auto` picks rclpy when importable, else DDS."""
    if kind == "auto":
        kind = "rclpy" if rclpy_available() else "dds"
    if kind == "dds":
        from roborl.robots.dds_transport import DDSTransport

        return DDSTransport(node_name)
    if kind == "rclpy":
        if not rclpy_available():
            raise ConfigError(
                "transport=rclpy but `import rclpy` fails: source your ROS 2 install "
                "(e.g. /opt/ros/jazzy/setup.bash) or use transport=dds or transport=auto."
            )
        from roborl.robots.rclpy_transport import RclpyTransport

        return RclpyTransport(node_name)
    raise ConfigError(f"unknown transport {kind!r}: accepted are auto, rclpy, dds.")


def __getattr__(name: str) -> Any:
    """`from roborl.robots.transport import DDSTransport` keeps working (lazy: no cyclonedds
    import for rclpy users)."""
    if name in ("DDSTransport", "LOOPBACK_XML"):
        from roborl.robots import dds_transport

        return getattr(dds_transport, name)
    if name == "RclpyTransport":
        from roborl.robots.rclpy_transport import RclpyTransport

        return RclpyTransport
    raise AttributeError(name)

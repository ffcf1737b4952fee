"""rclpy transport: roborl's nodes as real ROS 2 nodes (rclpy from a ROS 2 install or PyPI)."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any


class RclpyTransport:
    """rclpy on a ROS 2 install: converts the `msgs` dataclasses to and from rclpy messages."""

    name = "rclpy"

    def __init__(self, node_name: str = "roborl") -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        if not rclpy.ok():
            rclpy.init()
        self._rclpy = rclpy
        self.node = rclpy.create_node(node_name)
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._executor.spin, daemon=True)
        self._thread.start()

    @staticmethod
    def _ros_type(msg_type: type) -> type:
        pkg, _, rest = msg_type.__idl_typename__.replace("::", "/").partition("/msg/dds_/")
        return getattr(importlib.import_module(f"{pkg}.msg"), rest.rstrip("_"))

    @classmethod
    def _to_ros(cls, msg: Any) -> Any:
        ros = cls._ros_type(type(msg))()
        for key, value in vars(msg).items():
            if hasattr(value, "__idl_typename__"):
                value = cls._to_ros(value)
            elif isinstance(value, list) and value and hasattr(value[0], "__idl_typename__"):
                value = [cls._to_ros(v) for v in value]
            setattr(ros, key, value)
        return ros

    @classmethod
    def _from_ros(cls, msg_type: type, ros: Any) -> Any:
        hints = msg_type.__annotations__
        out = {}
        for key in hints:
            value = getattr(ros, key)
            default = getattr(msg_type(), key)
            if hasattr(default, "__idl_typename__"):
                value = cls._from_ros(type(default), value)
            elif not isinstance(value, (str, bool, int, float)):
                value = list(value)
            out[key] = value
        return msg_type(**out)

    def publisher(self, name: str, msg_type: type) -> Callable[[Any], None]:
        pub = self.node.create_publisher(self._ros_type(msg_type), name, 10)
        return lambda msg: pub.publish(self._to_ros(msg))

    def subscribe(self, name: str, msg_type: type, callback: Callable[[Any], None]) -> Any:
        return self.node.create_subscription(
            self._ros_type(msg_type), name, lambda m: callback(self._from_ros(msg_type, m)), 10
        )

    def matched(self, handle: Any) -> int:
        return handle.get_publisher_count() if hasattr(handle, "get_publisher_count") else 1

    def close(self) -> None:
        self._executor.shutdown()
        self.node.destroy_node()

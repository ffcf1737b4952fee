"""Transports for the ROS 2 bridge: rclpy where ROS 2 is installed, plain DDS elsewhere.

Both expose the same tiny surface (`publisher(topic, type)`, `subscribe(topic, type, cb)`,
`close()`) with ROS 2 names ("/joint_states") and the message dataclasses of `msgs`, so the
driver and nodes do not know which one runs. The DDS transport follows ROS 2's conventions:
topic "rt" + name, type `pkg::msg::dds_::Type_`, QoS reliable / keep-last 10 / volatile,
`ROS_DOMAIN_ID`, and localhost-only (`ROS_LOCALHOST_ONLY=1` or
`ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from roborl.core.errors import ConfigError, RobotError

LOOPBACK_XML = (
    '<CycloneDDS><Domain><General><Interfaces><NetworkInterface address="127.0.0.1"/>'
    "</Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery><Peers>"
    '<Peer address="127.0.0.1"/></Peers><ParticipantIndex>auto</ParticipantIndex>'
    "<MaxAutoParticipantIndex>64</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>"
)


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


class DDSTransport:
    """ROS 2 wire protocol over Cyclone DDS (pip `cyclonedds`), no ROS 2 install needed."""

    name = "dds"

    def __init__(self, node_name: str = "roborl") -> None:
        try:
            from cyclonedds.core import Policy, Qos
            from cyclonedds.domain import Domain, DomainParticipant
            from cyclonedds.util import duration
        except ImportError as exc:  # pragma: no cover - declared dependency
            raise RobotError(
                f"transport=dds needs pip `cyclonedds` ({exc}); install roborl[ros2]."
            ) from None
        self.node_name = node_name
        self._domain = None
        did = domain_id()
        if localhost_only() and not os.environ.get("CYCLONEDDS_URI"):
            self._domain = Domain(did, LOOPBACK_XML)
        self.participant = DomainParticipant(did)
        self.qos = Qos(
            Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100)),
            Policy.History.KeepLast(10),
            Policy.Durability.Volatile,
        )
        self._keep: list[Any] = []

    @staticmethod
    def dds_topic(name: str) -> str:
        return "rt/" + name.lstrip("/")

    def _topic(self, name: str, msg_type: type) -> Any:
        from cyclonedds.topic import Topic

        return Topic(self.participant, self.dds_topic(name), msg_type, qos=self.qos)

    def publisher(self, name: str, msg_type: type) -> Callable[[Any], None]:
        from cyclonedds.pub import DataWriter

        writer = DataWriter(self.participant, self._topic(name, msg_type), qos=self.qos)
        self._keep.append(writer)
        return writer.write

    def subscribe(self, name: str, msg_type: type, callback: Callable[[Any], None]) -> Any:
        from cyclonedds.core import Listener
        from cyclonedds.sub import DataReader

        def on_data(reader: Any) -> None:
            for sample in reader.take(N=32):
                if (sample is not None and getattr(sample, "sample_info", None) is None) or (
                    sample is not None and sample.sample_info.valid_data
                ):
                    callback(sample)

        reader = DataReader(
            self.participant,
            self._topic(name, msg_type),
            qos=self.qos,
            listener=Listener(on_data_available=on_data),
        )
        self._keep.append(reader)
        return reader

    def matched(self, handle: Any) -> int:
        """Number of remote endpoints matched with a reader (discovery is done when > 0)."""
        return len(handle.get_matched_publications())

    def close(self) -> None:
        self._keep.clear()
        self.participant = None
        self._domain = None


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
        import threading

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


def make_transport(kind: str = "auto", node_name: str = "roborl") -> Any:
    """`auto` picks rclpy when importable, else DDS."""
    if kind == "auto":
        kind = "rclpy" if rclpy_available() else "dds"
    if kind == "dds":
        return DDSTransport(node_name)
    if kind == "rclpy":
        if not rclpy_available():
            raise ConfigError(
                "transport=rclpy but `import rclpy` fails: source your ROS 2 install "
                "(e.g. /opt/ros/jazzy/setup.bash) or use transport=dds or transport=auto."
            )
        return RclpyTransport(node_name)
    raise ConfigError(f"unknown transport {kind!r}: accepted are auto, rclpy, dds.")

"""Choosing a transport and the settings both read: rclpy (first-class) where importable,
plain DDS elsewhere.

Both satisfy `protocol.Transport` (`publisher`, `subscribe`, `matched`, `close`, ...) with ROS 2
names ("/joint_states") and the message dataclasses of `msgs`, so the driver and nodes do not
know which one runs. `rclpy_node.RclpyTransport` is a real ROS 2 node and adds what only a node
has: parameters, services, per-topic QoS, the node clock (`use_sim_time`), `/rosout` logging
and a lifecycle. `dds.DDSTransport` speaks the wire protocol without ROS 2: the protocol's
defaults give it the same calls, with the parameter defaults as values, no services, and the
fixed QoS (reliable, keep-last 10, volatile; the e-stop's `subscribe_any_qos` readers
aside); asking it for more is a clear `ConfigError` rather than a silent downgrade. This
module also reads the environment (`ROS_DOMAIN_ID`, localhost-only), validates QoS settings
and splits `--ros-args` from roborl's overrides.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roborl.core.errors import ConfigError

if TYPE_CHECKING:
    from roborl.robots.transport.protocol import Transport

log = logging.getLogger("roborl.robots.transport")

QOS_KEYS = ("reliability", "durability", "depth", "history")
# At close, how long a transport waits for reliable subscribers to acknowledge its last
# messages (the final hold) before deleting its writers.
FLUSH_S = 2.0
QOS_CHOICES = {
    "reliability": ("reliable", "best_effort"),
    "durability": ("volatile", "transient_local"),
    "history": ("keep_last", "keep_all"),
}
#: ROS 2's default topic QoS, which is also the only one the DDS transport offers.
DEFAULT_QOS = {
    "reliability": "reliable",
    "durability": "volatile",
    "depth": 10,
    "history": "keep_last",
}


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


def split_ros_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split a command line into roborl's `key=value` overrides and ROS 2 arguments.

    ROS arguments are everything from `--ros-args` up to an optional `--` (several blocks are
    allowed, as in ROS 2); `--params-file FILE` is also accepted outside a block, as shorthand.
    The ROS part is returned without the `--ros-args` markers.
    """
    own: list[str] = []
    ros: list[str] = []
    inside = False
    items = list(argv)
    i = 0
    while i < len(items):
        arg = items[i]
        if arg == "--ros-args":
            inside = True
        elif inside and arg == "--":
            inside = False
        elif inside:
            ros.append(arg)
        elif arg == "--params-file":
            if i + 1 >= len(items):
                raise ConfigError("--params-file needs a YAML file: --params-file FILE.yaml")
            ros += [arg, items[i + 1]]
            i += 1
        else:
            own.append(arg)
        i += 1
    if "--params-file" in ros:
        for k, arg in enumerate(ros[:-1]):
            if arg == "--params-file" and not os.path.isfile(ros[k + 1]):
                raise ConfigError(f"--params-file {ros[k + 1]!r}: no such file.")
    return own, ros


def qos_spec(value: Any, where: str) -> str | dict[str, Any]:
    """Validate a QoS setting from a robot config: `default`, `sensor_data` (ROS 2's profile:
    best effort, keep-last 5, volatile) or a mapping of reliability / durability / depth /
    history. Returned normalised: the profile name or a complete mapping."""
    if value is None or value == "default":
        return "default"
    if value == "sensor_data":
        return "sensor_data"
    if isinstance(value, str) and value in QOS_CHOICES["reliability"]:
        return {**DEFAULT_QOS, "reliability": value}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{where}={value!r}: accepted are default, sensor_data, reliable, best_effort, or a "
            f"mapping with keys {', '.join(QOS_KEYS)}."
        )
    bad = [k for k in value if k not in QOS_KEYS]
    if bad:
        raise ConfigError(f"{where} has unknown keys {bad}: accepted are {', '.join(QOS_KEYS)}.")
    out = {**DEFAULT_QOS, **dict(value)}
    for key, choices in QOS_CHOICES.items():
        if out[key] not in choices:
            raise ConfigError(f"{where}.{key}={out[key]!r}: accepted are {', '.join(choices)}.")
    depth = out["depth"]
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"{where}.depth={depth!r} must be an integer >= 1.")
    return out


def is_default_qos(spec: str | Mapping[str, Any]) -> bool:
    return spec == "default" or spec == DEFAULT_QOS


#: The readers `Transport.subscribe_any_qos` opens on one topic. DDS matches a reader with a
#: writer only when the writer offers at least what the reader requests: a reliable reader
#: never matches a best-effort writer, and a transient-local reader never matches a volatile
#: one. So the first reader matches reliable transient-local ("latched") writers and gets
#: the sample they sent before we subscribed; the second matches every reliable writer and
#: receives from it reliably; the third matches every writer, best-effort ones included.
#: A sample that reaches several readers is handed on once (`FirstSeen`).
ANY_QOS_READERS = (
    {**DEFAULT_QOS, "durability": "transient_local"},
    dict(DEFAULT_QOS),
    {**DEFAULT_QOS, "reliability": "best_effort"},
)


class FirstSeen:
    """Remembers the last `keep` sample keys (writer, sequence number or source time): true
    the first time a key is offered, false for the copies other readers deliver."""

    def __init__(self, keep: int = 256) -> None:
        self._keys: dict[Any, None] = {}
        self._keep = keep
        self._lock = threading.Lock()

    def __call__(self, key: Any) -> bool:
        with self._lock:
            if key in self._keys:
                return False
            self._keys[key] = None
            if len(self._keys) > self._keep:
                del self._keys[next(iter(self._keys))]
            return True


def ros_gid(data: Sequence[int] | bytes) -> str:
    """A GID as `ros2 topic info --verbose` prints it (01.0f.78.fd...)."""
    return ".".join(format(x, "02x") for x in bytes(data))


@dataclass
class Param:
    """A ROS parameter to declare: its default (from the Hydra config) and what it does.

    roborl reads its parameters once, at start-up, so a later `ros2 param set` is refused
    instead of silently having no effect.
    """

    value: Any
    description: str


def make_transport(
    kind: str = "auto",
    node_name: str = "roborl",
    *,
    namespace: str = "",
    ros_args: Sequence[str] = (),
    lifecycle: Mapping[str, Callable[[], bool]] | None = None,
) -> Transport:
    """`auto` picks rclpy when importable, else DDS.

    `ros_args` (what followed `--ros-args`) go to `rclpy.init`; `lifecycle` maps transition
    names (configure, activate, deactivate, cleanup, shutdown) to handlers and makes the node
    a managed lifecycle node. The DDS transport has neither: it refuses ROS arguments (use
    key=value overrides) and runs a lifecycle node's work at once.
    """
    if kind == "auto":
        kind = "rclpy" if rclpy_available() else "dds"
    if kind == "dds":
        if ros_args:
            raise ConfigError(
                f"ROS arguments {' '.join(ros_args)!r} need a ROS 2 node, but transport=dds "
                "has none: give the same settings as key=value overrides (e.g. rate_hz=200), "
                "or use transport=rclpy (pip install roborl[ros2])."
            )
        from roborl.robots.transport.dds import DDSTransport

        return DDSTransport(node_name)
    if kind == "rclpy":
        if not rclpy_available():
            raise ConfigError(
                "transport=rclpy but `import rclpy` fails: install roborl[ros2] (ROS 2's rclpy "
                "wheels from PyPI) or source your ROS 2 install (e.g. /opt/ros/jazzy/setup.bash), "
                "or use transport=dds."
            )
        from roborl.robots.transport.rclpy_node import RclpyTransport

        return RclpyTransport(
            node_name, namespace=namespace, ros_args=list(ros_args), lifecycle=lifecycle
        )
    raise ConfigError(f"unknown transport {kind!r}: accepted are auto, rclpy, dds.")


def check_dds_qos(qos: Any, topic: str) -> None:
    """The dds transport offers ROS 2's default QoS only: anything else is a clear error."""
    if not is_default_qos(qos_spec(qos, f"qos of {topic}")):
        raise ConfigError(
            f"QoS {qos!r} for {topic} needs transport=rclpy: the dds transport is fixed to "
            "ROS 2's default (reliable, keep-last 10, volatile). Install roborl[ros2] or set "
            "this topic's QoS to default."
        )

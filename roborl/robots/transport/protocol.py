"""`Transport`: the one surface the driver, the env and the nodes use to reach ROS 2.

Two classes satisfy it: `rclpy_node.RclpyTransport` (a real ROS 2 node) and `dds.DDSTransport`
(ROS 2's wire protocol over plain Cyclone DDS, no node). What only a node has (parameters,
services, the node clock, `/rosout`, the graph) has a default here that says "no node", so a
transport without one (DDS, or a test's in-memory robot) inherits it by subclassing, and
callers ask the transport instead of probing it with `hasattr`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from roborl.robots.transport.common import Param


class Transport(Protocol):
    """Topics with ROS 2 names ("/joint_states") and the `msgs` dataclasses, plus a node's
    extras where there is a node. `qos` is a robot config QoS setting (`common.qos_spec`); a
    transport that cannot honour it raises `ConfigError`."""

    #: "rclpy" or "dds" (what `transport=` selects).
    name: str
    #: The rclpy node (its graph and service clients), None without one.
    node: Any = None

    def publisher(self, topic: str, msg_type: type, qos: Any = "default") -> Callable[[Any], None]:
        """A function that publishes one message on `topic`."""
        ...

    def subscribe(
        self, topic: str, msg_type: type, callback: Callable[[Any], None], qos: Any = "default"
    ) -> Any:
        """Call `callback(msg)` for each message on `topic`; returns the reader's handle."""
        ...

    def matched(self, handle: Any) -> int:
        """Number of remote publishers matched with a reader from `subscribe`."""
        ...

    def close(self) -> None:
        """Flush the last messages (the final hold) and delete every entity (idempotent)."""
        ...

    def subscribe_any_qos(self, topic: str, msg_type: type, callback: Callable[[Any], None]) -> Any:
        """Call `callback(msg)` once per message from every publisher on `topic`, whatever
        reliability and durability it offers, including what a transient-local publisher sent
        before this subscription existed and still keeps (the e-stop reads this way). Real
        transports use several readers and drop the copies; `matched(handle)` counts each
        publisher once. This default, for test doubles, is one reader with the default QoS."""
        return self.subscribe(topic, msg_type, callback)

    def other_publishers(self, topic: str) -> list[str] | None:
        """One description per publisher on `topic` that is not this transport's own: told
        apart by the DDS participant (GUID) that owns the writer, never by node name, so a
        second process with our node name is listed. None where the transport cannot tell;
        a caller must then refuse or warn, never read it as "nobody"."""
        return None

    def count_subscribers(self, topic: str) -> int | None:
        """Number of subscribers on `topic` (the robot's, on the command topic); None where
        unknown."""
        return None

    # -- what only a node has; the defaults are the node-less behaviour ---------------------
    def subscribe_newest(self, topic: str, msg_type: type, qos: Any = "default") -> Any:
        """A reader its owner takes from (`take_newest`) instead of a callback; None where
        the transport has no such reader (use `subscribe`)."""
        return None

    def take_newest(self, sub: Any, msg_type: type) -> tuple[Any, float, int]:
        """(newest message or None, its age in seconds, how many were taken) from a reader
        of `subscribe_newest`."""
        raise NotImplementedError(f"transport {self.name!r} has no take-newest readers")

    def declare_parameters(self, params: Mapping[str, Param]) -> dict[str, Any]:
        """Declare ROS parameters and return their values in force; without a node the
        defaults are the values."""
        return {name: p.value for name, p in params.items()}

    def service(
        self, name: str, kind: str, handler: Callable[[bool | None], tuple[bool, str]]
    ) -> Any:
        """Offer a `std_srvs` service (`trigger` or `set_bool`); None when the transport has
        no services."""
        return None

    def log(self, level: int, message: str) -> None:
        """Log through the node's logger (so it reaches /rosout) and roborl's Python logger."""
        logging.getLogger("roborl.robots.node").log(level, message)

    def now(self) -> float:
        """The node's clock in seconds: sim time from /clock when `use_sim_time` is set."""
        return time.time()

    @property
    def use_sim_time(self) -> bool:
        """Whether the node's clock is /clock (the ROS parameter `use_sim_time`)."""
        return False

    @property
    def fully_qualified_name(self) -> str | None:
        """The node's name with its namespace; None without a node."""
        return None

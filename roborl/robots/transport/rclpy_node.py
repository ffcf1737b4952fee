"""rclpy transport: roborl's nodes as real ROS 2 nodes (rclpy from a ROS 2 install or PyPI).

Each transport owns one rclpy `Context` (initialised with the command line's `--ros-args`, and
without rclpy's signal handlers, so roborl's own Ctrl-C handling, which latches the e-stop,
stays in charge) and one node, spun by a `SingleThreadedExecutor` on a daemon thread; the
control loops (deploy's tick, `RobotEnv.step`) run on threads of their own and only read what
the callbacks stored. rclpy's executors are Python: the 4-thread `MultiThreadedExecutor` took
the GIL from the control loop (a deploy at 50 Hz against a plain robot publishing JointState at
200 Hz achieved 5 Hz with obs->cmd p99 1.3 s). The robot's JointState does not go through
the executor at all: the driver takes the newest message itself when it reads the state
(`subscribe_newest` / `take_newest`), so a robot publishing at 1 kHz costs the executor
nothing (`benchmarks/results/control_loop_peer.md`). A lifecycle node needs no thread pool:
its transitions requested over `~/change_state` run on a worker thread that answers the
service when done (`rclpy_services.defer`, as for roborl's own services), so a transition that waits for other callbacks
(configure waits for the robot's first JointState) never blocks the executor that delivers
them. Transitions, from the service or from roborl itself (`trigger`), run one at a time.

What a ROS 2 engineer expects of a node comes from here: parameters declared with
descriptions (`-p name:=value` and `--params-file` override roborl's config values), `std_srvs`
services, per-topic QoS (plus rclpy's `qos_overrides.<topic>.<publisher|subscription>.<policy>`
parameters), the node clock (`use_sim_time`), `/rosout` logging of roborl's `roborl.robots.*`
Python loggers, and `rclpy.lifecycle` for the deploy node.
"""

from __future__ import annotations

import array
import importlib
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from roborl.core.errors import ConfigError, RobotError
from roborl.robots.transport.common import (
    ANY_QOS_READERS,
    FLUSH_S,
    FirstSeen,
    Param,
    qos_spec,
    ros_gid,
)
from roborl.robots.transport.protocol import Transport
from roborl.robots.transport.rclpy_fastdds import prompt_acks
from roborl.robots.transport.rclpy_params import check_type
from roborl.robots.transport.rclpy_services import (
    LIFECYCLE_TRANSITIONS,
    defer,
    lifecycle_node_class,
)
from roborl.robots.transport.rosout import bridge_attach, bridge_detach

log = logging.getLogger("roborl.robots.rclpy_transport")
_ACK_SLICE_S = 0.02  # close's flush: how long one wait for acknowledgements holds the GIL


class RclpyTransport(Transport):
    """A ROS 2 node that converts the `msgs` dataclasses to and from rclpy messages."""

    name = "rclpy"

    def __init__(
        self,
        node_name: str = "roborl",
        *,
        namespace: str = "",
        ros_args: list[str] | None = None,
        lifecycle: Mapping[str, Callable[[], bool]] | None = None,
    ) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        self._context = Context()
        args = ["roborl", "--ros-args", *ros_args] if ros_args else ["roborl"]
        try:
            rclpy.init(
                args=args, context=self._context, signal_handler_options=SignalHandlerOptions.NO
            )
        except Exception as exc:  # rcl's argument parser: a malformed --ros-args
            raise ConfigError(f"bad ROS arguments {' '.join(ros_args or [])!r}: {exc}") from None
        kwargs = {"namespace": namespace or None, "context": self._context}
        self._transition_lock = threading.Lock()
        try:
            if lifecycle is not None:
                cls = lifecycle_node_class()
                self.node = cls(node_name, **kwargs)
                self.node.handlers = dict(lifecycle)
                change_state = getattr(self.node, "_service_change_state", None)
                if change_state is not None:  # None: the lifecycle services are off
                    defer(change_state, self._transition_lock)
            else:
                self.node = rclpy.create_node(node_name, **kwargs)
        except Exception as exc:  # e.g. a bad node name or namespace, a malformed params file
            self._context.try_shutdown()
            raise ConfigError(
                f"cannot create ROS 2 node {node_name!r} (namespace {namespace!r}): {exc}"
            ) from None
        # One executor thread for every node, the lifecycle one included (see the module
        # docstring): rclpy's Python MultiThreadedExecutor (4 threads) held the GIL long
        # enough to stall the node's own control loop by up to ~1 s. rclpy 9.1.2's
        # `rclpy.experimental.EventsExecutor`, tried for deploy, hung at ~100% CPU before the
        # node's first event (not investigated further: one Python thread is enough here).
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(
            target=self._spin, name=f"roborl-rclpy-{node_name}", daemon=True
        )
        self._closed = False
        self._keep: list[Any] = []
        self._published: set[str] = set()  # fully qualified topics this node publishes on
        self._writers: list[Any] = []  # the publishers `publisher` made: close flushes them
        self._prefix: bytes | None = None  # participant GUID prefix (b"": not a GUID)
        self._probe_lock = threading.Lock()
        bridge_attach(self.node)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except Exception:  # the context was shut down under it by close()
            pass

    @property
    def fully_qualified_name(self) -> str:
        return self.node.get_fully_qualified_name()

    # -- messages --------------------------------------------------------------------------
    @staticmethod
    def _ros_type(msg_type: type) -> type:
        pkg, _, rest = msg_type.__idl_typename__.replace("::", "/").partition("/msg/dds_/")
        return getattr(importlib.import_module(f"{pkg}.msg"), rest.rstrip("_"))

    @classmethod
    def _to_ros(cls, msg: Any) -> Any:
        ros = cls._ros_type(type(msg))()
        kinds = ros.get_fields_and_field_types()
        for key, value in vars(msg).items():
            if hasattr(value, "__idl_typename__"):
                value = cls._to_ros(value)
            elif isinstance(value, list) and value and hasattr(value[0], "__idl_typename__"):
                value = [cls._to_ros(v) for v in value]
            elif kinds.get(key) == "octet" and isinstance(value, int):
                value = bytes([value])
            elif isinstance(value, (bytes, bytearray)):  # uint8[] (Image.data): one copy
                value = array.array("B", value)
            setattr(ros, key, value)
        return ros

    @classmethod
    def _from_ros(cls, msg_type: type, ros: Any) -> Any:
        out = {}
        for key in msg_type.__annotations__:
            value = getattr(ros, key)
            default = getattr(msg_type(), key)
            if hasattr(default, "__idl_typename__"):
                value = cls._from_ros(type(default), value)
            elif isinstance(value, bytes) and len(value) == 1:
                value = value[0]
            elif isinstance(value, array.array) and value.typecode == "B":
                value = value.tobytes()  # uint8[] (Image.data) as bytes, as msgs.Image has it
            elif not isinstance(value, (str, bool, int, float)):
                value = list(value)
            out[key] = value
        return msg_type(**out)

    def _qos(self, qos: Any, where: str) -> Any:
        from rclpy.qos import (
            DurabilityPolicy,
            HistoryPolicy,
            QoSProfile,
            ReliabilityPolicy,
            qos_profile_sensor_data,
        )

        spec = qos_spec(qos, where)
        if spec == "sensor_data":
            return qos_profile_sensor_data
        if spec == "default":
            return QoSProfile(depth=10)
        return QoSProfile(
            reliability=ReliabilityPolicy.RELIABLE
            if spec["reliability"] == "reliable"
            else ReliabilityPolicy.BEST_EFFORT,
            durability=DurabilityPolicy.VOLATILE
            if spec["durability"] == "volatile"
            else DurabilityPolicy.TRANSIENT_LOCAL,
            history=HistoryPolicy.KEEP_LAST
            if spec["history"] == "keep_last"
            else HistoryPolicy.KEEP_ALL,
            depth=int(spec["depth"]),
        )

    def publisher(self, name: str, msg_type: type, qos: Any = "default") -> Callable[[Any], None]:
        from rclpy.expand_topic_name import expand_topic_name
        from rclpy.qos_overriding_options import QoSOverridingOptions

        try:  # so that close's flush ends with the hold's acknowledgement (rclpy_fastdds)
            prompt_acks(self.node.resolve_topic_name(name))
        except Exception as exc:  # a bad name: create_publisher below says so
            log.debug("no Fast DDS profile for %s: %s", name, exc)
        pub = self.node.create_publisher(
            self._ros_type(msg_type),
            name,
            self._qos(qos, f"qos of {name}"),
            qos_overriding_options=QoSOverridingOptions.with_default_policies(),
        )
        self._writers.append(pub)
        self._published.add(
            expand_topic_name(name, self.node.get_name(), self.node.get_namespace())
        )
        return lambda msg: pub.publish(self._to_ros(msg))

    def subscribe(
        self, name: str, msg_type: type, callback: Callable[[Any], None], qos: Any = "default"
    ) -> Any:
        from rclpy.qos_overriding_options import QoSOverridingOptions

        # Each message is converted and handed on at once (about 12 us for a JointState of two
        # joints with the driver's parsing: 1.2% of a core at 1 kHz), so the callback stays
        # far shorter than any control period.
        return self.node.create_subscription(
            self._ros_type(msg_type),
            name,
            lambda m: callback(self._from_ros(msg_type, m)),
            self._qos(qos, f"qos of {name}"),
            qos_overriding_options=QoSOverridingOptions.with_default_policies(),
        )

    def subscribe_newest(self, name: str, msg_type: type, qos: Any = "default") -> Any:
        """A subscription the executor never services: its owner takes what arrived, when it
        wants it, with `take_newest` (the control tick reads the newest JointState itself).

        Through the executor every message costs a pass of rclpy's Python loop (wait set,
        task, callback) on the executor thread, which competes for the GIL with the control
        loop: at 1 kHz JointState, deploy over rclpy spent about 30% of a core more than over
        raw DDS, and the newest state's age at the tick reached p99 3.7 ms (0.9 ms over DDS)
        because the messages came through in bursts (`benchmarks/results/control_loop_peer.md`).
        Taken at the tick, they cost a raw take each (about 25 us) and only the newest is
        deserialised and converted."""
        from rclpy.callback_groups import CallbackGroup
        from rclpy.qos_overriding_options import QoSOverridingOptions

        class Untended(CallbackGroup):
            """Entities no executor waits on or runs."""

            def can_execute(self, entity: Any) -> bool:
                return False

            def beginning_execution(self, entity: Any) -> bool:
                return False

            def ending_execution(self, entity: Any) -> None:
                pass

        return self.node.create_subscription(
            self._ros_type(msg_type),
            name,
            lambda m: None,
            self._qos(qos, f"qos of {name}"),
            callback_group=Untended(),
            qos_overriding_options=QoSOverridingOptions.with_default_policies(),
            raw=True,
        )

    def take_newest(self, sub: Any, msg_type: type) -> tuple[Any, float, int]:
        """Take every message waiting on `sub` (from `subscribe_newest`): (the newest as a
        `msg_type` dataclass or None, seconds since it was received, how many were taken).
        Its age comes from the middleware's reception timestamp (the system clock)."""
        from rclpy.serialization import deserialize_message

        newest, count = None, 0
        try:
            with sub.handle:
                while True:
                    got = sub.handle.take_message(sub.msg_type, True)
                    if got is None:
                        break
                    newest, count = got, count + 1
        except Exception:  # the node is being destroyed (InvalidHandle): nothing to take
            return None, math.inf, 0
        if newest is None:
            return None, math.inf, 0
        raw, info = newest
        received = int(info.get("received_timestamp") or 0)
        age = max(0.0, time.time() - received * 1e-9) if received else 0.0
        return self._from_ros(msg_type, deserialize_message(raw, sub.msg_type)), age, count

    def matched(self, handle: Any) -> int:
        return handle.get_publisher_count() if hasattr(handle, "get_publisher_count") else 1

    def subscribe_any_qos(self, name: str, msg_type: type, callback: Callable[[Any], None]) -> Any:
        """See `Transport.subscribe_any_qos`: one subscription per `ANY_QOS_READERS` profile,
        a message handed on once (keyed by the publisher's GID and sequence number). The
        readers a publisher cannot match stay quiet here (no "incompatible QoS" warning);
        its own node may still log one for them."""
        from rclpy.event_handler import SubscriptionEventCallbacks

        first = FirstSeen()

        def on_message(ros: Any, info: Any) -> None:
            gid = (info.get("publisher_gid") or {}).get("data")
            seq = info.get("publication_sequence_number")
            key = (gid, seq) if gid is not None and seq is not None else info["source_timestamp"]
            if first(key):
                callback(self._from_ros(msg_type, ros))

        subs = [
            self.node.create_subscription(
                self._ros_type(msg_type),
                name,
                on_message,
                self._qos(qos, f"qos of {name}"),
                event_callbacks=SubscriptionEventCallbacks(incompatible_qos=lambda _: None),
            )
            for qos in ANY_QOS_READERS
        ]
        return _Readers(subs)

    def other_publishers(self, topic: str) -> list[str] | None:
        """Publishers on `topic` whose GID does not start with this node's participant GUID
        prefix (`_own_prefix`): whatever their node name, so a second process running a node
        with our name is listed. None when the middleware's GIDs are not GUIDs (then our own
        publisher on `topic` would not carry the prefix) or the node is gone."""
        from rclpy.expand_topic_name import expand_topic_name

        try:
            own = self._own_prefix()
            infos = self.node.get_publishers_info_by_topic(topic)
            fq = expand_topic_name(topic, self.node.get_name(), self.node.get_namespace())
        except Exception as exc:  # the node is being destroyed
            log.debug("cannot list the publishers of %s: %s", topic, exc)
            return None
        others, own_seen = set(), False
        for info in infos:
            gid = bytes(info.endpoint_gid)
            if own is not None and gid.startswith(own):
                own_seen = True
                continue
            who = (
                "a node discovery has not named yet"
                if info.node_name == "_NODE_NAME_UNKNOWN_"
                else info.node_namespace.rstrip("/") + "/" + info.node_name
            )
            others.add(f"{who} (publisher GID {ros_gid(gid)})")
        if own is None or (fq in self._published and not own_seen):
            return None
        return sorted(others)

    def count_subscribers(self, topic: str) -> int | None:
        try:
            return self.node.count_subscribers(topic)
        except Exception:  # the node is being destroyed
            return None

    def _own_prefix(self) -> bytes | None:
        """This node's DDS participant GUID prefix (the first 12 bytes of each of its
        endpoints' GIDs), read once from a publisher on a topic no one else uses: rclpy has
        no call for a publisher's own GID, and every other topic may carry endpoints of a
        node with our name in another process. Local endpoints enter the graph when they
        are created, so no discovery wait is needed."""
        with self._probe_lock:
            if self._prefix is None:
                from std_msgs.msg import Bool

                topic = f"/_roborl/participant_{uuid.uuid4().hex}"  # hidden: leading "_"
                pub = self.node.create_publisher(Bool, topic, 1)
                try:
                    gids = [
                        bytes(i.endpoint_gid) for i in self.node.get_publishers_info_by_topic(topic)
                    ]
                finally:
                    self.node.destroy_publisher(pub)
                self._prefix = gids[0][:12] if len(gids) == 1 and len(gids[0]) >= 16 else b""
            return self._prefix or None

    # -- what only a node has ----------------------------------------------------------------
    def service(
        self, name: str, kind: str, handler: Callable[[bool | None], tuple[bool, str]]
    ) -> Any:
        """A `std_srvs/Trigger` (`kind="trigger"`, handler gets None) or `std_srvs/SetBool`
        (`kind="set_bool"`, handler gets the request's bool) service."""
        from std_srvs.srv import SetBool, Trigger

        srv_type = {"trigger": Trigger, "set_bool": SetBool}[kind]

        def serve(request: Any, response: Any) -> Any:
            try:
                response.success, response.message = handler(getattr(request, "data", None))
            except Exception as exc:  # answer the caller rather than leave it waiting
                response.success, response.message = False, f"{type(exc).__name__}: {exc}"
            return response

        srv = self.node.create_service(srv_type, name, serve)
        defer(srv)  # a handler that waits (sim-robot's reset) must not stall the executor
        self._keep.append(srv)
        return srv

    def declare_parameters(self, params: Mapping[str, Param]) -> dict[str, Any]:
        """Declare each parameter with roborl's value as default; return the values in force
        (`--ros-args -p` and `--params-file` win), checked against the default's type."""
        from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
        from rclpy.parameter import Parameter

        out = {}
        retyped = []
        for name, p in params.items():
            # Dynamic typing so that `-p rate_hz:=200` (an integer) is accepted for a float;
            # the value is then stored back in the default's type.
            descriptor = ParameterDescriptor(description=p.description, dynamic_typing=True)
            value = self.node.declare_parameter(name, p.value, descriptor).value
            out[name] = check_type(self.node.get_fully_qualified_name(), name, value, p.value)
            if type(out[name]) is not type(value) or out[name] != value:
                retyped.append(Parameter(name, value=out[name]))
        if retyped:
            self.node.set_parameters(retyped)
        frozen = set(params)

        def refuse(changes: list[Any]) -> Any:
            """roborl reads these once, at start-up: a later change would silently do nothing."""
            late = [c.name for c in changes if c.name in frozen]
            return SetParametersResult(
                successful=not late,
                reason=f"{late} are read at start-up; restart the node with the new value"
                if late
                else "",
            )

        self.node.add_on_set_parameters_callback(refuse)
        return out

    def log(self, level: int, message: str) -> None:
        logging.getLogger("roborl.robots.node").log(level, message)

    def now(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

    @property
    def use_sim_time(self) -> bool:
        return bool(self.node.get_parameter("use_sim_time").value)

    def lifecycle_state(self) -> str:
        machine = getattr(self.node, "_state_machine", None)
        return machine.current_state[1] if machine is not None else "active"

    def trigger(self, transition: str) -> bool:
        """Run a lifecycle transition from roborl itself (auto-activation)."""
        from rclpy.lifecycle import TransitionCallbackReturn

        if transition not in LIFECYCLE_TRANSITIONS:
            raise RobotError(f"unknown lifecycle transition {transition!r}.")
        with self._transition_lock:
            result = getattr(self.node, f"trigger_{transition}")()
        return result == TransitionCallbackReturn.SUCCESS

    def close(self, flush_s: float = FLUSH_S) -> None:
        if self._closed:
            return
        self._closed = True
        self._flush(flush_s)
        bridge_detach(self.node)
        self._executor.shutdown(timeout_sec=5.0)
        self.node.destroy_node()
        self._context.try_shutdown()
        self._thread.join(5.0)

    def _flush(self, timeout_s: float) -> None:
        """Wait until every reliable subscriber acknowledged what this node published on its
        topics (`publisher`), up to `timeout_s` in all. Fast DDS sends from its own thread:
        destroying the node right after the final hold could drop it (seen when an actor
        stopped on a loaded machine), and on a controller without a command timeout the
        robot would keep the last motion command. A best-effort subscriber counts as
        acknowledged at once (it never acknowledges). rclpy's own publishers
        (/parameter_events, a lifecycle node's transition events) carry no command and are
        not waited for. The acknowledgement comes at the writer's next heartbeat
        (`rclpy_fastdds`: within HEARTBEAT_S).

        rclpy's `wait_for_all_acked` holds the GIL while it waits, so it is called in short
        slices: the node's other threads keep running, and a slice returns as soon as the
        acknowledgement arrives."""
        from rclpy.duration import Duration

        deadline = time.monotonic() + timeout_s
        pending = list(self._writers)
        while True:
            slice_s = min(_ACK_SLICE_S, max(0.0, deadline - time.monotonic()))
            pending = [p for p in pending if not p.wait_for_all_acked(Duration(seconds=slice_s))]
            if not pending or time.monotonic() >= deadline:
                break
        for pub in pending:
            log.warning("%s not acknowledged before close", pub.topic_name)


class _Readers:
    """The subscriptions of `subscribe_any_qos`, counted as one: the best-effort volatile
    one matches every publisher, so the largest count is the number of publishers."""

    def __init__(self, subs: list[Any]) -> None:
        self.subs = subs

    def get_publisher_count(self) -> int:
        return max(s.get_publisher_count() for s in self.subs)

"""ROS 2's wire protocol over plain Cyclone DDS: the light transport that needs no ROS 2 install.

It follows ROS 2's conventions so that ROS 2 nodes see roborl's topics: topic "rt" + name, type
`pkg::msg::dds_::Type_`, QoS reliable / keep-last 10 / volatile, `ROS_DOMAIN_ID`, and
localhost-only (`ROS_LOCALHOST_ONLY=1` or `ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`), and it
matches Fast DDS peers (ROS 2's default RMW) by type name, as Fast DDS itself does (see
`FASTDDS_COMPAT_XML`).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from roborl.core.errors import RobotError
from roborl.robots.transport.common import (
    ANY_QOS_READERS,
    FLUSH_S,
    FirstSeen,
    check_dds_qos,
    domain_id,
    localhost_only,
    ros_gid,
)
from roborl.robots.transport.protocol import Transport

log = logging.getLogger("roborl.robots.dds_transport")

LOOPBACK_XML = (
    '<CycloneDDS><Domain><General><Interfaces><NetworkInterface address="127.0.0.1"/>'
    "</Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery><Peers>"
    '<Peer address="127.0.0.1"/></Peers><ParticipantIndex>auto</ParticipantIndex>'
    "<MaxAutoParticipantIndex>64</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>"
)

#: Match eProsima (RTPS vendor id 1.15, i.e. Fast DDS) endpoints by type name and ignore the
#: XTypes TypeInformation they announce. Without it Cyclone exchanges no data with a Fast DDS 3
#: node (rmw_fastrtps_cpp of ROS 2 Kilted) in either direction: see DDSTransport's docstring.
FASTDDS_COMPAT_XML = (
    "<CycloneDDS><Domain><Compatibility><IgnoreTypeInformation>1.15</IgnoreTypeInformation>"
    "</Compatibility></Domain></CycloneDDS>"
)

#: RTPS vendor ids (a GUID's first two bytes), to name who owns a writer.
VENDORS = {b"\x01\x0f": "Fast DDS", b"\x01\x10": "Cyclone DDS", b"\x01\x01": "RTI Connext"}


def cyclone_config() -> str:
    """The Cyclone configuration roborl's participants use: the Fast DDS compatibility setting,
    then the user's `CYCLONEDDS_URI` (which thus overrides it), else the loopback-only config
    when ROS 2's localhost-only variables ask for it. Cyclone merges the comma-separated parts
    in order, later ones winning, exactly as it reads a `CYCLONEDDS_URI` list."""
    parts = [FASTDDS_COMPAT_XML]
    user = os.environ.get("CYCLONEDDS_URI", "").strip()
    if user:
        parts.append(user)
    elif localhost_only():
        parts.append(LOOPBACK_XML)
    return ",".join(parts)


class DDSTransport(Transport):
    """ROS 2 wire protocol over Cyclone DDS (pip `cyclonedds`), no ROS 2 install needed.

    Samples reach callbacks through one dispatcher thread per transport that waits on a
    Cyclone WaitSet (the wait releases the GIL) and then takes from the readers whose read
    condition fired. Deliberately not Cyclone listeners: a listener runs Python inside
    Cyclone's receive thread while Cyclone holds the reader's callback slot, and that has
    three ways to hang or crash a process: (1) deleting the reader (or its participant) waits
    for that slot, so a teardown started from a listener thread -- including a garbage
    collection that happens to run there -- waits for itself; (2) the binding's `write` keeps
    the GIL inside `dds_write`, so a write that delivers to a local reader waits for the slot
    while the listener that holds it waits for the GIL; (3) when the reader/listener/driver
    reference cycle is collected, the binding's `Entity.__del__` finds its weak registry entry
    already cleared and skips `dds_delete`, so the C reader outlives the freed ctypes thunk it
    calls. Here, no Python ever runs on a Cyclone thread, and `close()` tears down in order:
    stop and join the dispatcher, then delete the participant (which deletes its readers,
    writers, topics, conditions and waitset) from the calling thread. Open transports are kept
    in a module registry, so garbage collection never tears DDS entities down implicitly; an
    atexit hook closes whatever the program left open.

    Interop with Fast DDS 3 (rclpy/rclcpp on `rmw_fastrtps_cpp`, ROS 2's default RMW), and why
    the participant's domain carries `FASTDDS_COMPAT_XML`: by default the two vendors discover
    each other, yet exchange no data in either direction, because they match endpoints by
    different rules. Fast DDS ignores the XTypes TypeInformation other vendors announce and
    matches Cyclone's endpoints by type name, so the ROS graph lists roborl's topics and a
    Fast DDS writer even counts our reader as matched. Cyclone instead resolves the
    TypeInformation Fast DDS announces through XTypes type lookup, and that never completes:
    (1) Fast DDS 3's TypeObjects for ROS types leave both "try construct" bits of sequence
    elements at 0, which XTypes 1.3 calls invalid, so Cyclone 11 rejects them (logged as
    `ddsi_xt_type_add_typeobj with invalid type object`) and the remote type stays unresolved;
    (2) even with that check relaxed (`AllowInvalidTryConstruct`), Fast DDS answers a lookup
    of a MINIMAL type id with the COMPLETE TypeObject, so the minimal type stays unresolved
    (Float64MultiArray) or Cyclone's minimal type is compared with Fast DDS's complete one and
    fails on the nested final struct `std_msgs/Header` (JointState: "wr type not delimited").
    An endpoint whose type is unresolved or not assignable is never matched, so Cyclone
    neither sends to it nor accepts its samples. `IgnoreTypeInformation` for eProsima's vendor
    id 1.15 makes Cyclone match Fast DDS endpoints by type name too, which is the rule Fast
    DDS already applies; the types agree by construction (ROS 2's DDS names, final structs,
    plain XCDR1 CDR, byte-identical to rosbags' serialiser). Cyclone-to-Cyclone matching
    (rmw_cyclonedds_cpp peers) still uses type information.
    """

    name = "dds"

    def __init__(self, node_name: str = "roborl") -> None:
        try:
            from cyclonedds.core import Policy, Qos, WaitSet
            from cyclonedds.domain import Domain, DomainParticipant
            from cyclonedds.util import duration
        except ImportError as exc:  # pragma: no cover - declared dependency
            raise RobotError(
                f"transport=dds needs pip `cyclonedds` ({exc}); install roborl[ros2]."
            ) from None
        self.node_name = node_name
        self._domain_id = did = domain_id()
        _acquire_domain(did, Domain)
        try:
            self.participant = DomainParticipant(did)
        except Exception:
            _release_domain(did)
            raise
        self.qos = Qos(
            Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100)),
            Policy.History.KeepLast(10),
            Policy.Durability.Volatile,
        )
        self._topics: dict[str, Any] = {}
        self._writers: list[Any] = []
        self._subs: list[tuple[Any, Any, Callable[[Any], None]]] = []  # reader, cond, callback
        self._builtins: dict[str, tuple[Any, Any]] = {}  # DCPSPublication/-Subscription readers
        self._lock = threading.Lock()
        self._closed = False
        self._waitset = WaitSet(self.participant)
        self._thread = threading.Thread(
            target=self._dispatch, name=f"roborl-dds-{node_name}", daemon=True
        )
        _OPEN.add(self)
        self._thread.start()

    @staticmethod
    def dds_topic(name: str) -> str:
        return "rt/" + name.lstrip("/")

    def _topic(self, name: str, msg_type: type) -> Any:
        from cyclonedds.topic import Topic

        key = self.dds_topic(name)
        topic = self._topics.get(key)
        if topic is None:
            topic = self._topics[key] = Topic(self.participant, key, msg_type, qos=self.qos)
        elif topic.data_type is not msg_type:
            raise RobotError(
                f"topic {name!r} is already used with type {topic.data_type.__name__} in this "
                f"node; it cannot also carry {msg_type.__name__}."
            )
        return topic

    def _check_open(self) -> None:
        if self._closed:
            raise RobotError(f"DDS transport {self.node_name!r} is closed.")

    def publisher(self, name: str, msg_type: type, qos: Any = "default") -> Callable[[Any], None]:
        from cyclonedds.pub import DataWriter

        check_dds_qos(qos, name)
        with self._lock:
            self._check_open()
            writer = DataWriter(self.participant, self._topic(name, msg_type), qos=self.qos)
            self._writers.append(writer)
        return writer.write

    def subscribe(
        self, name: str, msg_type: type, callback: Callable[[Any], None], qos: Any = "default"
    ) -> Any:
        check_dds_qos(qos, name)
        return self._reader(name, msg_type, callback, self.qos)

    def _reader(self, name: str, msg_type: type, callback: Callable[[Any], None], qos: Any) -> Any:
        from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState
        from cyclonedds.sub import DataReader

        with self._lock:
            self._check_open()
            reader = DataReader(self.participant, self._topic(name, msg_type), qos=qos)
            cond = ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Any)
            self._subs = [*self._subs, (reader, cond, callback)]  # copy: the dispatcher iterates
            self._waitset.attach(cond)
        return reader

    def subscribe_any_qos(self, name: str, msg_type: type, callback: Callable[[Any], None]) -> Any:
        """See `Transport.subscribe_any_qos`: one reader per `ANY_QOS_READERS` profile (the
        only readers this transport opens with a QoS other than ROS 2's default), a sample
        handed on once (keyed by its writer and source timestamp)."""
        from cyclonedds.core import Policy, Qos
        from cyclonedds.util import duration

        first = FirstSeen()

        def on_sample(sample: Any) -> None:
            info = sample.sample_info
            if first((info.publication_handle, info.source_timestamp)):
                callback(sample)

        readers = []
        for spec in ANY_QOS_READERS:
            qos = Qos(
                Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100))
                if spec["reliability"] == "reliable"
                else Policy.Reliability.BestEffort,
                Policy.History.KeepLast(int(spec["depth"])),
                Policy.Durability.TransientLocal
                if spec["durability"] == "transient_local"
                else Policy.Durability.Volatile,
            )
            readers.append(self._reader(name, msg_type, on_sample, qos))
        return _Readers(readers)

    def other_publishers(self, topic: str) -> list[str] | None:
        """Writers on `topic` (DDS topic `rt/...`) that belong to another participant than
        this transport's, from Cyclone's DCPSPublication builtin topic: a ROS 2 node (any
        name, any RMW) or a DDS program, in another process or this one."""
        key = self.dds_topic(topic)
        try:
            me = self.participant.guid
            rows = self._builtin("publications")
        except Exception as exc:  # closed meanwhile
            log.debug("cannot list the publishers of %s: %s", topic, exc)
            return None
        return sorted(
            f"a {VENDORS.get(s.key.bytes[:2], 'DDS')} participant (publisher GID "
            f"{ros_gid(s.key.bytes)})"
            for s in rows
            if s.topic_name == key and s.participant_key != me
        )

    def count_subscribers(self, topic: str) -> int | None:
        key = self.dds_topic(topic)
        try:
            me = self.participant.guid
            rows = self._builtin("subscriptions")
        except Exception:
            return None
        return sum(1 for s in rows if s.topic_name == key and s.participant_key != me)

    def _builtin(self, which: str) -> list[Any]:
        """The alive endpoints Cyclone knows of (local and discovered): `publications` or
        `subscriptions`. The builtin readers are created on first use and deleted with the
        participant."""
        from cyclonedds.builtin import (
            BuiltinDataReader,
            BuiltinTopicDcpsPublication,
            BuiltinTopicDcpsSubscription,
        )
        from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState

        with self._lock:
            self._check_open()
            entry = self._builtins.get(which)
            if entry is None:
                topic = {
                    "publications": BuiltinTopicDcpsPublication,
                    "subscriptions": BuiltinTopicDcpsSubscription,
                }[which]
                reader = BuiltinDataReader(self.participant, topic)
                alive = ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Alive)
                entry = self._builtins[which] = (reader, alive)
            reader, alive = entry
            return list(reader.read(N=100_000, condition=alive))

    def _dispatch(self) -> None:
        """Wait (GIL released), then take and hand valid samples to callbacks, until close()."""
        from cyclonedds.util import duration

        timeout = duration(milliseconds=500)
        while not self._closed:
            self._waitset.wait(timeout)
            for reader, cond, callback in self._subs:
                if self._closed:
                    return
                for sample in reader.take(N=64, condition=cond):
                    if not sample.sample_info.valid_data:
                        continue  # dispose/unregister notices carry no message
                    try:
                        callback(sample)
                    except Exception:  # a bad callback must not stop the other topics
                        log.exception("callback for %s failed", reader.topic.name)

    def matched(self, handle: Any) -> int:
        """Number of remote endpoints matched with a reader (discovery is done when > 0)."""
        return len(handle.get_matched_publications())

    def _flush(self, timeout_s: float) -> None:
        """Wait until every reliable reader acknowledged what this node wrote, up to
        `timeout_s` in all, so deleting the writers cannot drop the final hold command."""
        deadline = time.monotonic() + timeout_s
        for writer in list(self._writers):
            left = deadline - time.monotonic()
            try:
                acked = left > 0 and writer.wait_for_acks(int(left * 1e9))
            except Exception:
                # cyclonedds 11.0.1 reports a timeout by raising AttributeError (it compares
                # with a name the builtin Exception lacks) after having waited: not acked.
                acked = False
            if not acked:
                log.warning("%s: a writer was not acknowledged before close", self.node_name)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the dispatcher, then delete every DDS entity of this node (idempotent)."""
        if threading.get_ident() == self._thread.ident:
            raise RobotError(
                "DDSTransport.close() was called from one of its own subscription callbacks; "
                "it would wait for itself. Close from another thread (e.g. after the loop)."
            )
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._flush(FLUSH_S)
        self._waitset.set_trigger(True)  # wake the dispatcher now rather than at its timeout
        self._thread.join(timeout_s)
        _OPEN.discard(self)
        if self._thread.is_alive():
            log.error(
                "DDS dispatcher of %r is stuck in a callback after %.0fs; its entities are "
                "left to process exit.",
                self.node_name,
                timeout_s,
            )
            return
        entities: list[Any] = [self._waitset, self.participant]
        for reader, cond, _ in self._subs:
            entities += [cond, reader]
        for reader, cond in self._builtins.values():  # with the condition the binding made
            entities += [
                c for c in (cond, getattr(reader, "_next_condition", None), reader) if c is not None
            ]
        entities += [*self._writers, *self._topics.values()]
        _delete_tree(self.participant, entities)
        _release_domain(self._domain_id)
        self._subs, self._writers, self._topics, self._builtins = [], [], {}, {}
        self.participant = None


class _Readers:
    """The readers of `subscribe_any_qos`, counted as one by `matched`: each remote writer
    once, however many of them it matches."""

    def __init__(self, readers: list[Any]) -> None:
        self.readers = readers

    def get_matched_publications(self) -> list[int]:
        return sorted({h for r in self.readers for h in r.get_matched_publications()})


# Open DDS transports (strong references: only close() or process exit tears them down).
_OPEN: set[DDSTransport] = set()

# Domain id -> [Cyclone Domain carrying cyclone_config() (None if the domain existed before
# us), number of open transports on it]. Cyclone allows one Domain per id and process, so the
# transports of a process share it; the last one to close deletes it.
_DOMAINS: dict[int, list[Any]] = {}
_DOMAINS_LOCK = threading.Lock()


def _acquire_domain(did: int, domain_cls: type) -> None:
    from cyclonedds.core import DDSException

    with _DOMAINS_LOCK:
        entry = _DOMAINS.get(did)
        if entry is None:
            config = cyclone_config()
            try:
                dom = domain_cls(did, config)
            except DDSException as exc:
                if exc.code != DDSException.DDS_RETCODE_PRECONDITION_NOT_MET:  # not "exists"
                    raise RobotError(
                        f"Cyclone DDS rejected the configuration for domain {did} ({exc}); "
                        f"check CYCLONEDDS_URI={os.environ.get('CYCLONEDDS_URI', '')!r}."
                    ) from None
                log.warning(
                    "Cyclone DDS domain %d was already created in this process by other code, "
                    "so roborl's settings (%s) do not apply to it: Fast DDS peers (ROS 2's "
                    "default RMW) may exchange no data with it.",
                    did,
                    FASTDDS_COMPAT_XML,
                )
                dom = None
            entry = _DOMAINS[did] = [dom, 0]
        entry[1] += 1


def _release_domain(did: int) -> None:
    with _DOMAINS_LOCK:
        entry = _DOMAINS.get(did)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _DOMAINS[did]
    if entry[0] is not None:
        _delete_tree(entry[0], [entry[0]])


def _delete_tree(root: Any, wrappers: list[Any]) -> None:
    """`dds_delete(root)` (Cyclone deletes children first), then retire the Python wrappers.

    The binding has no public delete; its `Entity.__del__` is `dds_delete` guarded by a weak
    registry, so dropping our wrappers from that registry makes their later finalisers no-ops
    instead of deletes of handles that no longer exist (or, worse, were reused).
    """
    from cyclonedds.core import Entity

    found: dict[int, Any] = {}
    stack = list(wrappers)
    while stack:
        ent = stack.pop()
        if id(ent) not in found:
            found[id(ent)] = ent
            stack.extend(getattr(ent, "_keepalive_entities", None) or [])
    Entity._entities.pop(root._ref, None)
    root._delete(root._ref)  # ctypes call: the GIL is released while Cyclone deletes
    for ent in found.values():
        Entity._entities.pop(getattr(ent, "_ref", None), None)


@atexit.register
def _close_open_transports() -> None:
    """Before interpreter finalisation: a thread that needs the GIL after it starts never
    gets it, so the dispatchers are stopped while they still can be."""
    for transport in list(_OPEN):
        try:
            transport.close(timeout_s=5.0)
        except Exception as exc:  # pragma: no cover - best effort at exit
            log.error("closing DDS transport at exit failed: %s", exc)

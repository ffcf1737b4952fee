"""Fast DDS writers that ask for acknowledgements promptly, so the rclpy transport's close
waits for the final hold's acknowledgement and not for a timer.

A reliable reader acknowledges only in answer to its writer's HEARTBEAT. Fast DDS adds one to
a data message only when the writer's history is full or dropped an unacknowledged sample, or
after about a send buffer's worth of bytes; otherwise it sends one every `heartbeat_period`
(3 s by default) while something is unacknowledged. Fast DDS 3.2.2, the library in PyPI's
`ros-fastdds` 3.2.3 wheel (`libfastdds.so.3.2.2`), sends no heartbeat from
`DataWriter::wait_for_acknowledgments` (rclpy's `Publisher.wait_for_all_acked`). It waits for
the periodic heartbeat, which comes up to 3 s after the final hold was written: longer than
the transport's 2 s flush (`FLUSH_S`). Close then timed out against a reader that was working
("<topic> not acknowledged before close"), or took most of 2 s. eProsima fixed this upstream
in Fast DDS 3.2.3 and 3.4.1 (eProsima/Fast-DDS#6098 and #6103: "Send heartbeat when
wait_for_all_acked is called").

rmw_fastrtps_cpp builds each writer from the Fast DDS XML `data_writer` profile named after
the ROS topic, if there is one, and then applies the ROS QoS. So before creating a publisher,
`prompt_acks` loads a profile named after the topic whose only setting is `heartbeat_period =
HEARTBEAT_S`. It goes in through Fast DDS's public
`DomainParticipantFactory::load_XML_profiles_string`, called on the library rmw already
loaded. The periodic heartbeat runs only while a reader has not acknowledged something, so a
writer sends at most 1/HEARTBEAT_S heartbeats a second, and only while it publishes. Cyclone
DDS, the other vendor roborl speaks, has the same 100 ms default (`HeartbeatInterval`).
Nothing is loaded in these cases, and close then behaves as it did before:
- another rmw is in use;
- the user configures Fast DDS through XML (`FASTDDS_DEFAULT_PROFILES_FILE`,
  `DEFAULT_FASTDDS_PROFILES.xml` in the working directory, `RMW_FASTRTPS_USE_QOS_FROM_XML`).
  A profile named after a topic would replace their default writer QoS there, and they can
  set `heartbeat_period` themselves;
- the library or its symbols cannot be found (not Linux, or a Fast DDS other than 3.x).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import quoteattr

log = logging.getLogger("roborl.robots.rclpy_transport")

HEARTBEAT_S = 0.1
_GET_INSTANCE = "_ZN8eprosima7fastdds3dds24DomainParticipantFactory12get_instanceEv"
_LOAD_STRING = "_ZN8eprosima7fastdds3dds24DomainParticipantFactory24load_XML_profiles_stringEPKcm"
_lock = threading.Lock()
_profiles: dict[str, bool] = {}  # topic -> whether its profile loaded (tried once a process)
_loader: list[Callable[[bytes], bool] | None] = []  # found on first use; None: unusable


def user_xml() -> str | None:
    """Why the user's own Fast DDS XML configuration is in force, or None."""
    for var in ("FASTDDS_DEFAULT_PROFILES_FILE", "RMW_FASTRTPS_USE_QOS_FROM_XML"):
        if os.environ.get(var, "") not in ("", "0"):
            return f"{var} is set"
    if os.environ.get("SKIP_DEFAULT_XML") != "1" and Path("DEFAULT_FASTDDS_PROFILES.xml").exists():
        return "DEFAULT_FASTDDS_PROFILES.xml is in the working directory"
    return None


def _library() -> str | None:
    """The path of the Fast DDS library this process has loaded (Linux only)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and Path(fields[5].strip()).name.startswith("libfastdds.so"):
                    return fields[5].strip()
    except OSError:
        pass
    return None


def _find_loader() -> Callable[[bytes], bool] | None:
    path = _library()
    if path is None:
        log.debug("no Fast DDS library is loaded: writers keep their heartbeat period")
        return None
    try:
        # PyDLL keeps the GIL through the call. rclpy creates entities while it holds the
        # GIL, so no other thread reads the profiles (no lock guards them) while this one
        # adds to them.
        lib = ctypes.PyDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        get_instance = getattr(lib, _GET_INSTANCE)
        load_string = getattr(lib, _LOAD_STRING)
    except (OSError, AttributeError) as exc:
        log.debug("cannot call Fast DDS in %s (%s): writers keep their heartbeat period", path, exc)
        return None
    get_instance.restype = ctypes.c_void_p
    get_instance.argtypes = []
    load_string.restype = ctypes.c_int32  # ReturnCode_t: 0 is RETCODE_OK
    load_string.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]

    def load(xml: bytes) -> bool:
        factory = get_instance()
        return bool(factory) and load_string(factory, xml, len(xml)) == 0

    return load


def profile(topic: str) -> bytes:
    """The XML of the `data_writer` profile for `topic` (its resolved ROS name)."""
    sec, nanosec = int(HEARTBEAT_S), round((HEARTBEAT_S % 1.0) * 1e9)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<dds xmlns="http://www.eprosima.com"><profiles>'
        f"<data_writer profile_name={quoteattr(topic)}><times><heartbeat_period>"
        f"<sec>{sec}</sec><nanosec>{nanosec}</nanosec>"
        "</heartbeat_period></times></data_writer></profiles></dds>"
    ).encode()


def prompt_acks(topic: str) -> bool:
    """Make the writers later created on `topic` (resolved, e.g. "/cmd_vel") in this process
    send a heartbeat every HEARTBEAT_S while a reader has not acknowledged them. Call it
    before creating the publisher, with rmw_fastrtps_cpp loaded (a node exists). Returns
    whether such a profile is in force; any failure leaves Fast DDS's default."""
    import rclpy

    with _lock:
        if topic in _profiles:
            return _profiles[topic]
        if rclpy.get_rmw_implementation_identifier() != "rmw_fastrtps_cpp":
            return False
        why = user_xml()
        if why is not None:
            log.debug("%s: roborl adds no Fast DDS profile for %s", why, topic)
            return False
        if not _loader:
            _loader.append(_find_loader())
        load = _loader[0]
        if load is None:
            return False
        # Once per topic: a second profile of the same name is an error Fast DDS logs.
        _profiles[topic] = load(profile(topic))
        if not _profiles[topic]:
            log.debug("Fast DDS did not load a profile for %s", topic)
        return _profiles[topic]

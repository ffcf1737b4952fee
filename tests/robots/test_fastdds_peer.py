"""roborl's two transports against an older ROS 2 middleware: eProsima Fast DDS 2.9 (Debian).

Raw Cyclone DDS (transport=dds) and rclpy on rmw_fastrtps_cpp / Fast DDS 3 (transport=rclpy,
the PyPI wheels) each exchange messages with the same Fast DDS 2.9 peer.

The peer (scripts/fastdds_peer, built by `make install` through scripts/build_fastdds_peer.sh
from Debian's libfastrtps-dev and `fastddsgen -typeros2`) echoes sensor_msgs/JointState and
std_msgs/Float64MultiArray back, transformed, so each message crosses vendors both ways and
the test checks every field arrived decoded. Both sides run inside a private network
namespace with multicast on `lo` (Fast DDS discovers by multicast); nothing leaves loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PEER = Path(os.environ.get("ROBORL_FASTDDS_PEER", ROOT / "build/fastdds_peer/fastdds_echo_peer"))
# Inside the namespace `lo` is the only interface; Cyclone must use it with multicast.
NETNS_CYCLONE = (
    '<CycloneDDS><Domain><General><Interfaces><NetworkInterface name="lo" multicast="true"/>'
    "</Interfaces><AllowMulticast>true</AllowMulticast></General></Domain></CycloneDDS>"
)

CHILD = textwrap.dedent(
    """
    import json, sys, threading, time
    from roborl.robots.transport import msgs
    from roborl.robots.transport.common import make_transport
    t = make_transport(sys.argv[1], "roborl_vs_fastdds")
    got = {"js": [], "fa": []}
    lock = threading.Lock()
    def keep(kind):
        def cb(msg):
            with lock:
                got[kind].append(msg)
        return cb
    t.subscribe("/fastdds_peer/joint_states_out", msgs.JointState, keep("js"))
    t.subscribe("/fastdds_peer/commands_out", msgs.Float64MultiArray, keep("fa"))
    js_pub = t.publisher("/fastdds_peer/joint_states_in", msgs.JointState)
    fa_pub = t.publisher("/fastdds_peer/commands_in", msgs.Float64MultiArray)
    js = msgs.JointState(
        header=msgs.Header(stamp=msgs.Time(1234, 567890), frame_id="base_link"),
        name=["slider", "hinge", "wrist_3"],
        position=[0.25, -1.5, 3.0],
        velocity=[0.1, 0.2, -0.3],
        effort=[],
    )
    fa = msgs.Float64MultiArray(
        layout=msgs.MultiArrayLayout(dim=[msgs.MultiArrayDimension("joints", 3, 3)],
                                     data_offset=0),
        data=[0.5, -0.75, 1.25],
    )
    # The first samples can be lost while discovery completes: resend until echoed.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with lock:
            done = got["js"] and got["fa"]
        if done:
            break
        js_pub(js)
        fa_pub(fa)
        time.sleep(0.1)
    with lock:
        r_js = got["js"][0] if got["js"] else None
        r_fa = got["fa"][0] if got["fa"] else None
    t.close()
    def js_dict(m):
        return None if m is None else dict(
            sec=m.header.stamp.sec, nanosec=m.header.stamp.nanosec,
            frame_id=m.header.frame_id, name=list(m.name), position=list(m.position),
            velocity=list(m.velocity), effort=list(m.effort))
    def fa_dict(m):
        return None if m is None else dict(
            dim=[(d.label, d.size, d.stride) for d in m.layout.dim],
            data_offset=m.layout.data_offset, data=list(m.data))
    print(json.dumps({"joint_state": js_dict(r_js), "commands": fa_dict(r_fa)}), flush=True)
    """
)


def _sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def netns():
    """A private network namespace with `lo` up and multicast routed on it."""
    name = f"roborl_fdds_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    made = _sh("ip", "netns", "add", name)
    if made.returncode != 0:
        pytest.fail(
            f"the Fast DDS peer test needs a private network namespace, and `ip netns add` "
            f"failed ({made.stderr.strip()}): run it as root (or with CAP_SYS_ADMIN and "
            "CAP_NET_ADMIN) with iproute2 installed; `make install` installs iproute2."
        )
    try:
        for cmd in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "link", "set", "lo", "multicast", "on"],
            ["ip", "route", "add", "224.0.0.0/4", "dev", "lo"],
        ):
            r = _sh("ip", "netns", "exec", name, *cmd)
            assert r.returncode == 0, f"{' '.join(cmd)} in netns {name}: {r.stderr}"
        yield name
    finally:
        _sh("ip", "netns", "delete", name)


@pytest.mark.parametrize("transport", ["dds", "rclpy"])
def test_roborl_and_fastdds_2_exchange_joint_state_and_commands(netns, transport: str) -> None:
    """transport=dds: Cyclone DDS; transport=rclpy: rclpy on rmw_fastrtps_cpp (Fast DDS 3)."""
    if not os.access(PEER, os.X_OK):
        pytest.fail(
            f"Fast DDS peer binary {PEER} is missing: run `make install` (or "
            "scripts/build_fastdds_peer.sh), which installs libfastrtps-dev and fastddsgen "
            "and builds it."
        )
    env = dict(
        os.environ,
        ROS_DOMAIN_ID="42",
        CYCLONEDDS_URI=NETNS_CYCLONE,
        RMW_IMPLEMENTATION="rmw_fastrtps_cpp",
    )
    for var in ("ROS_LOCALHOST_ONLY", "ROS_AUTOMATIC_DISCOVERY_RANGE"):
        env.pop(var, None)
    peer = subprocess.Popen(
        ["ip", "netns", "exec", netns, str(PEER), "42", "150"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert peer.stdout.readline().strip() == "ready", peer.stderr.read()
        drain = threading.Thread(target=lambda: lines.extend(peer.stdout), daemon=True)
        drain.start()
        child = subprocess.run(
            ["ip", "netns", "exec", netns, sys.executable, "-c", CHILD, transport],
            env=env,
            cwd=str(ROOT),
            capture_output=True,
            text=True,
            timeout=150,
        )
        assert child.returncode == 0, child.stderr[-3000:]
        result = json.loads(child.stdout.strip().splitlines()[-1])
    finally:
        peer.terminate()
        peer.wait(timeout=30)
    drain.join(timeout=30)
    # Cyclone -> Fast DDS -> Cyclone, every field decoded by the other vendor.
    assert result["joint_state"] == {
        "sec": 1234,
        "nanosec": 567890,
        "frame_id": "fastdds:base_link",
        "name": ["slider", "hinge", "wrist_3"],
        "position": [1.25, -0.5, 4.0],
        "velocity": [0.1, 0.2, -0.3],
        "effort": [],
    }, result
    assert result["commands"] == {
        "dim": [["joints", 3, 3]],
        "data_offset": 0,
        "data": [1.0, -1.5, 2.5],
    }, result
    assert any(ln.startswith("echo joint_states") for ln in lines)
    assert any(ln.startswith("echo commands") for ln in lines)

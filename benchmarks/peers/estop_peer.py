"""A robot's own e-stop source, written with rclpy and ROS 2 message packages only (no roborl
import), with the QoS such a node may choose: what roborl's e-stop subscription is checked
against.

It publishes sensor_msgs/JointState for `slider` and `hinge` at --rate Hz (so a driver can
connect) and std_msgs/Bool on /estop with --reliability and --durability. With --latched it
publishes `true` once at start, before it prints `ready`: a transient-local publisher keeps
that sample for subscribers that join later, as a latched e-stop must. It prints one JSON line
per event: `ready`, `matched` (its e-stop publisher is matched with a subscriber for the first
time), `estop_sent`. Lines on stdin control it: `estop` starts publishing `true` with every JointState
(a held button; a best-effort sample may be lost, so such sources repeat it), `quit` exits.

    python benchmarks/peers/estop_peer.py --reliability best_effort
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=50.0, help="JointState rate (Hz)")
    ap.add_argument("--reliability", choices=["reliable", "best_effort"], default="reliable")
    ap.add_argument("--durability", choices=["volatile", "transient_local"], default="volatile")
    ap.add_argument("--latched", action="store_true", help="publish true once before ready")
    args = ap.parse_args()

    rclpy.init()
    node = rclpy.create_node("plain_estop_peer")
    qos = QoSProfile(
        depth=1,
        reliability=ReliabilityPolicy.RELIABLE
        if args.reliability == "reliable"
        else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL
        if args.durability == "transient_local"
        else DurabilityPolicy.VOLATILE,
    )
    estop = node.create_publisher(Bool, "/estop", qos)
    states = node.create_publisher(JointState, "/joint_states", 10)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    if args.latched:
        estop.publish(Bool(data=True))
        print(json.dumps({"event": "estop_sent", "t": time.monotonic()}), flush=True)
    pressed = threading.Event()

    def publish() -> None:
        period = 1.0 / args.rate
        matched = False
        while True:
            time.sleep(period)
            states.publish(JointState(name=["slider", "hinge"], position=[0.0, 0.05],
                                      velocity=[0.0, 0.0]))  # fmt: skip
            if not matched and estop.get_subscription_count() > 0:
                matched = True
                print(json.dumps({"event": "matched", "t": time.monotonic()}), flush=True)
            if pressed.is_set():
                estop.publish(Bool(data=True))

    threading.Thread(target=publish, daemon=True).start()
    print(json.dumps({"event": "ready"}), flush=True)
    for line in sys.stdin:
        word = line.strip()
        if word == "estop":
            pressed.set()
            print(json.dumps({"event": "estop_sent", "t": time.monotonic()}), flush=True)
        elif word == "quit":
            break


if __name__ == "__main__":
    main()

"""An independent ROS 2 robot: plain rclpy and message packages only, no roborl import.

What a robot engineer's own node (or a ros2_control `joint_state_broadcaster` plus a
`forward_command_controller`) looks like from outside: it publishes sensor_msgs/JointState for
the joints `slider` and `hinge` at `--rate` Hz (header stamped with the node clock) and
records every std_msgs/Float64MultiArray it receives on `/forward_command_controller/commands`.

It prints JSON lines: `{"event": "ready"}` once publishing, then at the end (after `--seconds`,
or on SIGTERM/SIGINT) `{"event": "summary", ...}` with the JointState messages published and
their achieved rate, and the commands received: count, first/last arrival (monotonic seconds,
relative to the start), the command rate over the window in which commands arrived, the
largest gap between two commands, and the count of hold-like commands (all zeros).

    python benchmarks/peers/joint_state_robot.py --rate 500 --seconds 30

Publishing runs on its own thread with absolute deadlines (a 1 kHz rclpy timer on a Python
executor costs more than the publish); commands are taken by a single-threaded executor.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import signal
import sys
import threading
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=100.0, help="JointState rate in Hz")
    ap.add_argument("--seconds", type=float, default=math.inf, help="run time (default: forever)")
    ap.add_argument("--topic", default="/joint_states")
    ap.add_argument("--command-topic", default="/forward_command_controller/commands")
    ap.add_argument("--node-name", default="independent_robot")
    args = ap.parse_args()

    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    rclpy.init()
    node = rclpy.create_node(args.node_name)
    arrivals: list[float] = []
    holds = [0]

    def on_command(msg: Float64MultiArray) -> None:
        arrivals.append(time.monotonic())
        if not any(msg.data):
            holds[0] += 1

    node.create_subscription(Float64MultiArray, args.command_topic, on_command, 10)
    pub = node.create_publisher(JointState, args.topic, 10)
    executor = SingleThreadedExecutor()
    executor.add_node(node)

    def spin() -> None:
        try:
            executor.spin()
        except (ExternalShutdownException, Exception):
            pass

    threading.Thread(target=spin, daemon=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    period = 1.0 / args.rate
    published = [0]
    clock = node.get_clock()

    def publish() -> None:
        msg = JointState()
        msg.name = ["slider", "hinge"]
        k = 0
        t0 = time.monotonic()
        while not stop.is_set():
            t = 0.002 * k
            msg.header.stamp = clock.now().to_msg()
            msg.position = [0.1 * math.sin(t), 0.05 * math.cos(t)]
            msg.velocity = [0.1 * math.cos(t), -0.05 * math.sin(t)]
            msg.effort = [0.0, 0.0]
            pub.publish(msg)
            published[0] += 1
            k += 1
            delay = t0 + k * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -0.1:  # far behind (the machine stalled): do not burst to catch up
                t0, k = time.monotonic(), 0

    start = time.monotonic()
    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    print(json.dumps({"event": "ready", "rate_hz": args.rate}), flush=True)
    stop.wait(None if math.isinf(args.seconds) else args.seconds)
    stop.set()
    thread.join(2.0)
    elapsed = time.monotonic() - start
    got = list(arrivals)
    gaps = [b - a for a, b in itertools.pairwise(got)]
    span = got[-1] - got[0] if len(got) > 1 else 0.0
    summary = {
        "event": "summary",
        "rate_hz_target": args.rate,
        "published": published[0],
        "published_rate_hz": published[0] / elapsed,
        "elapsed_s": elapsed,
        "commands": len(got),
        "holds": holds[0],
        "first_command_s": got[0] - start if got else None,
        "last_command_s": got[-1] - start if got else None,
        "command_rate_hz": (len(got) - 1) / span if span > 0 else 0.0,
        "max_gap_ms": max(gaps) * 1e3 if gaps else None,
    }
    print(json.dumps(summary), flush=True)
    sys.stdout.flush()
    os._exit(0)  # no teardown race with the executor thread (rclpy may abort in it)


if __name__ == "__main__":
    sys.exit(main())

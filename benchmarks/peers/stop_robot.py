"""A robot written with rclpy and ROS 2 message packages only (no roborl import), as a robot
engineer's own node would be: what roborl's stop paths are measured against.

It publishes sensor_msgs/JointState for `slider` and `hinge` at --rate Hz, integrates the
velocity it receives on the command topic (std_msgs/Float64MultiArray, like
forward_command_controller, which has no command timeout: the last command runs forever)
into the slider's position, and prints one JSON line per command received: the receive time
on CLOCK_MONOTONIC (comparable across processes on one machine), the data and the slider
position. Lines on stdin control it: `mute` stops the JointState stream (a dead sensor),
`estop` publishes std_msgs/Bool true on /estop, `quit` exits. With --camera-rate it also
publishes an 8x8 rgb8 sensor_msgs/Image on /camera/image_raw, and `mute_camera` stops that
stream alone (a dead camera).

    python benchmarks/peers/stop_robot.py --rate 100
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64MultiArray


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=100.0, help="JointState rate (Hz)")
    ap.add_argument("--topic", default="/forward_command_controller/commands")
    ap.add_argument("--hinge", type=float, default=0.05, help="the pole's (fixed) angle")
    ap.add_argument("--clamp", type=float, default=3.0, help="slider travel limit")
    ap.add_argument("--camera-rate", type=float, default=0.0, help="Image rate (Hz), 0: none")
    args = ap.parse_args()

    rclpy.init()
    node = rclpy.create_node("plain_stop_robot")
    lock = threading.Lock()
    state = {"pos": 0.0, "vel": 0.0}
    muted = threading.Event()
    camera_muted = threading.Event()

    def on_command(msg: Float64MultiArray) -> None:
        now = time.monotonic()
        data = list(msg.data)
        with lock:
            state["vel"] = float(data[0]) if data else 0.0
            pos = state["pos"]
        print(json.dumps({"event": "cmd", "t": now, "data": data, "pos": pos}), flush=True)

    # A deep queue: this robot records every command it is sent (a controller would keep the
    # newest only); with depth 10 a stalled executor on a loaded machine dropped some.
    node.create_subscription(Float64MultiArray, args.topic, on_command, 1000)
    states = node.create_publisher(JointState, "/joint_states", 10)
    estop = node.create_publisher(Bool, "/estop", 10)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()

    def publish_states() -> None:
        period = 1.0 / args.rate
        next_tick = time.monotonic()
        while True:
            next_tick += period
            time.sleep(max(0.0, next_tick - time.monotonic()))
            with lock:
                pos = state["pos"] + state["vel"] * period
                state["pos"] = max(-args.clamp, min(args.clamp, pos))
                msg = JointState(
                    name=["slider", "hinge"],
                    position=[state["pos"], args.hinge],
                    velocity=[state["vel"], 0.0],
                )
            if not muted.is_set():
                states.publish(msg)

    threading.Thread(target=publish_states, daemon=True).start()

    def publish_frames() -> None:
        frames = node.create_publisher(Image, "/camera/image_raw", 10)
        while True:
            time.sleep(1.0 / args.camera_rate)
            if not camera_muted.is_set():
                msg = Image(height=8, width=8, encoding="rgb8", step=24, data=bytes(192))
                msg.header.stamp = node.get_clock().now().to_msg()
                frames.publish(msg)

    if args.camera_rate > 0:
        threading.Thread(target=publish_frames, daemon=True).start()
    print(json.dumps({"event": "ready"}), flush=True)
    for line in sys.stdin:
        word = line.strip()
        if word == "mute":
            muted.set()
            print(json.dumps({"event": "muted", "t": time.monotonic()}), flush=True)
        elif word == "mute_camera":
            camera_muted.set()
            print(json.dumps({"event": "camera_muted", "t": time.monotonic()}), flush=True)
        elif word == "estop":
            estop.publish(Bool(data=True))
            print(json.dumps({"event": "estop_sent", "t": time.monotonic()}), flush=True)
        elif word == "quit":
            break
    with lock:
        print(json.dumps({"event": "final", "pos": state["pos"]}), flush=True)


if __name__ == "__main__":
    main()

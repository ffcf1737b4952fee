"""A position-controlled arm written with rclpy and ROS 2 message packages only (no roborl
import), as a robot engineer's own node would be: what roborl's stops are measured against on
position interfaces.

It publishes sensor_msgs/JointState for `slider` and `hinge` at --rate Hz and follows every
position command it gets, on either of ros2_control's position interfaces:
- trajectory_msgs/JointTrajectory on /joint_trajectory_controller/joint_trajectory (the last
  point's positions, matched by joint name; an empty trajectory holds where the arm stands,
  as joint_trajectory_controller does);
- std_msgs/Float64MultiArray on /forward_position_controller/commands (a position
  forward_command_controller).
The slider moves toward its newest target at --speed rad/s (a controller interpolating at a
bounded speed, so the arm is still moving when a stop arrives). It starts at --start (away
from zero: a "hold" of zero would be a long move). It prints one JSON line per command
received: the receive time on CLOCK_MONOTONIC, the interface, the target and `pos`, where the
slider stood when the command arrived. Lines on stdin control it: `mute` stops the JointState
stream, `estop` publishes std_msgs/Bool true on /estop, `push X` moves the slider to X at
once (a person moving the arm by hand) and makes X its target, `quit` exits.

    python benchmarks/peers/position_arm.py --rate 200
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray
from trajectory_msgs.msg import JointTrajectory


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=200.0, help="JointState rate (Hz)")
    ap.add_argument("--start", type=float, default=-2.73, help="the slider's first position")
    ap.add_argument("--speed", type=float, default=0.1, help="largest slider speed (rad/s)")
    ap.add_argument("--hinge", type=float, default=0.05, help="the pole's (fixed) angle")
    ap.add_argument("--trajectory-topic", default="/joint_trajectory_controller/joint_trajectory")
    ap.add_argument("--forward-topic", default="/forward_position_controller/commands")
    args = ap.parse_args()

    rclpy.init()
    node = rclpy.create_node("plain_position_arm")
    lock = threading.Lock()
    arm = {"pos": args.start, "target": args.start}
    muted = threading.Event()

    def record(kind: str, target: float | None) -> None:
        now = time.monotonic()
        with lock:
            pos = arm["pos"]
            arm["target"] = pos if target is None else target
        line = {"event": "cmd", "t": now, "kind": kind, "target": target, "pos": pos}
        print(json.dumps(line), flush=True)

    def on_trajectory(msg: JointTrajectory) -> None:
        if not msg.points:  # joint_trajectory_controller: an empty trajectory holds
            record("trajectory", None)
            return
        names = list(msg.joint_names)
        positions = list(msg.points[-1].positions)
        target = positions[names.index("slider")] if "slider" in names else None
        record("trajectory", target)

    def on_forward(msg: Float64MultiArray) -> None:
        record("forward", float(msg.data[0]) if len(msg.data) else None)

    # Deep queues: this arm records every command (a controller keeps the newest only).
    node.create_subscription(JointTrajectory, args.trajectory_topic, on_trajectory, 1000)
    node.create_subscription(Float64MultiArray, args.forward_topic, on_forward, 1000)
    states = node.create_publisher(JointState, "/joint_states", 10)
    estop = node.create_publisher(Bool, "/estop", 10)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()

    def publish_states() -> None:
        period = 1.0 / args.rate
        step = args.speed * period
        next_tick = time.monotonic()
        while True:
            next_tick += period
            time.sleep(max(0.0, next_tick - time.monotonic()))
            with lock:
                error = arm["target"] - arm["pos"]
                arm["pos"] += max(-step, min(step, error))
                msg = JointState(
                    name=["slider", "hinge"],
                    position=[arm["pos"], args.hinge],
                    velocity=[0.0, 0.0],
                )
            msg.header.stamp = node.get_clock().now().to_msg()
            if not muted.is_set():
                states.publish(msg)

    threading.Thread(target=publish_states, daemon=True).start()
    print(json.dumps({"event": "ready", "pos": args.start}), flush=True)
    for line in sys.stdin:
        word, *rest = line.split() or [""]
        if word == "mute":
            muted.set()
            print(json.dumps({"event": "muted", "t": time.monotonic()}), flush=True)
        elif word == "estop":
            estop.publish(Bool(data=True))
            print(json.dumps({"event": "estop_sent", "t": time.monotonic()}), flush=True)
        elif word == "push" and rest:
            with lock:
                arm["pos"] = arm["target"] = float(rest[0])
            print(json.dumps({"event": "pushed", "pos": float(rest[0])}), flush=True)
        elif word == "quit":
            break
    with lock:
        print(json.dumps({"event": "final", "pos": arm["pos"]}), flush=True)


if __name__ == "__main__":
    main()

"""FetchPush as a robot over ROS 2 (issue 33's end-to-end path), checked from plain rclpy nodes.

`roborl sim-robot env=fetch_push_pixels cameras=[render]` must serve Gymnasium-Robotics'
FetchPush like a robot driver: JointState with the end effector, finger opening, block and
goal, the env's own camera view as sensor_msgs/Image, and Fetch's action on the command topic.
`roborl scripted-human expert=fetch_push` must play the person on such a robot: watch the
JointState of a stalled robot (here published by a plain rclpy node at 100 Hz, as a real
driver would) and take over on sensor_msgs/Joy with the push expert's action, then let go once
the block is on the goal. The peers import rclpy and message packages only.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from ros_peers import PRELUDE, peer

from roborl.sim.benchmarks.fetch_pixels import ROBOT_JOINTS, expert_move

START = 120.0  # node start-up on a loaded 2-core machine can take tens of seconds

# Reads sim-robot's JointState and camera, then commands +x (Fetch: 5 cm per unit and step).
CONTROLLER = PRELUDE + textwrap.dedent(
    """
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Float64MultiArray

    states, images = [], []
    node.create_subscription(
        JointState, "/joint_states", lambda m: states.append(dict(zip(m.name, m.position))), 10
    )
    node.create_subscription(
        Image, "/camera/render/image_raw",
        lambda m: images.append([m.width, m.height, m.encoding, len(m.data)]), 10,
    )
    out(event="ready")
    ok = wait(lambda: len(states) >= 5 and len(images) >= 5, 90)
    out(event="seen", ok=ok, names=list(states[-1]) if states else [],
        image=images[-1] if images else None, before=states[-1] if states else {})
    pub = node.create_publisher(Float64MultiArray, "/forward_command_controller/commands", 10)
    wait(lambda: pub.get_subscription_count() > 0, 60)
    for _ in range(20):
        pub.publish(Float64MultiArray(data=[1.0, 0.0, 0.0, -1.0]))
        time.sleep(0.05)
    out(event="commanded", after=states[-1])
    """
)

# A stalled Fetch: publishes one scene as JointState at 100 Hz and records /joy; on a line
# "done" from stdin it pushes the block onto the goal (no jump: that would read as a new
# episode). argv: the scene's names then positions.
STALLED_ROBOT = PRELUDE + textwrap.dedent(
    """
    from sensor_msgs.msg import Joy, JointState

    names = sys.argv[1].split(",")
    scene = [float(x) for x in sys.argv[2].split(",")]
    joys = []
    node.create_subscription(Joy, "/joy", lambda m: joys.append([list(m.axes), list(m.buttons)]), 10)
    pub = node.create_publisher(JointState, "/joint_states", 10)

    def publish():
        while True:
            pub.publish(JointState(name=names, position=scene, velocity=[0.0] * len(names)))
            time.sleep(0.01)

    threading.Thread(target=publish, daemon=True).start()
    out(event="ready")
    pressed = lambda: [j for j in joys if j[1] and j[1][0] == 1]
    out(event="takeover", ok=wait(lambda: len(pressed()) >= 3, 90), joy=(pressed() or [None])[-1])
    for line in sys.stdin:
        if line.strip() == "done":
            for step in range(1, 31):  # push the block onto the goal, 0.5 cm per 10 ms
                for axis in "xyz":
                    i, g = names.index("block_" + axis), names.index("goal_" + axis)
                    scene[i] += (scene[g] - scene[i]) / (31 - step)
                time.sleep(0.01)
            n = len(joys)
            time.sleep(0.5)
            released = lambda: [j for j in joys[n:] if j[1] and j[1][0] == 0]
            out(event="released", ok=wait(lambda: len(released()) >= 3, 60), joy=(released() or [None])[-1])
    """
)


def test_sim_robot_serves_fetch_push_with_its_camera_to_a_plain_rclpy_node(
    rclpy_env, procs
) -> None:
    sim = procs(
        [
            "sim-robot",
            "env=fetch_push_pixels",
            "env.kwargs.image_size=32",
            "cameras=[render]",
            "transport=rclpy",
            "rate_hz=25",
            "command_timeout_s=0",
        ],
        rclpy_env,
    )
    start = sim.wait_event("sim_robot_start", START)
    assert start["joints"] == list(ROBOT_JOINTS)
    assert start["cameras"] == {"render": "/camera/render/image_raw"}
    ctl = procs(peer(CONTROLLER), rclpy_env, roborl=False)
    seen = ctl.wait_event("seen", START)
    assert seen["ok"], seen
    assert seen["names"] == list(ROBOT_JOINTS)
    assert seen["image"] == [32, 32, "rgb8", 32 * 32 * 3]
    before = seen["before"]
    # The goal and the block lie on the table (Fetch's table top is at z ~ 0.42 m).
    assert 0.38 < before["goal_z"] < 0.47 and 0.38 < before["block_z"] < 0.47
    after = ctl.wait_event("commanded", 90)["after"]
    assert after["ee_x"] > before["ee_x"] + 0.03, (before, after)  # the arm moved along +x


def test_scripted_human_takes_over_a_stalled_fetch_with_the_push_expert(rclpy_env, procs) -> None:
    scene = {
        "ee_x": 1.30, "ee_y": 0.70, "ee_z": 0.55, "gripper": 0.0, "block_x": 1.30,
        "block_y": 0.75, "block_z": 0.425, "goal_x": 1.45, "goal_y": 0.80, "goal_z": 0.425,
    }  # fmt: skip
    names, values = list(scene), [scene[n] for n in scene]
    robot = procs(
        peer(STALLED_ROBOT, ",".join(names), ",".join(str(v) for v in values)),
        rclpy_env,
        roborl=False,
    )
    robot.wait_event("ready", START)
    human = procs(
        [
            "scripted-human",
            "robot=fetch_push_hil",
            "expert=fetch_push",
            "transport=rclpy",
            "window_s=0.5",
            "max_takeover_s=600",
            "tolerance=0.05",
        ],
        rclpy_env,
    )
    human.wait_event("scripted_human_start", START)
    takeover = robot.wait_event("takeover", START)
    assert takeover["ok"], (takeover, human.events[-5:])
    axes, buttons = takeover["joy"]
    grip = np.array([scene["ee_x"], scene["ee_y"], scene["ee_z"]])
    block = np.array([scene["block_x"], scene["block_y"], scene["block_z"]])
    goal = np.array([scene["goal_x"], scene["goal_y"], scene["goal_z"]])
    expected = [*expert_move(grip, block, goal), -1.0]
    assert buttons[0] == 1
    assert axes[:4] == pytest.approx(expected, abs=1e-6)
    assert np.abs(expected[:3]).max() > 0.5  # the expert does move: the check can fail
    assert human.named("takeover")[0]["cause"] == "drift"
    robot.send("done")
    released = robot.wait_event("released", START)
    assert released["ok"], (released, human.events[-5:])
    # Button up (the robot ignores the axes); the expert itself holds once the block is there.
    assert released["joy"][1][0] == 0 and released["joy"][0][:3] == pytest.approx([0.0] * 3)
    human.wait(lambda: human.named("release"), "no release event", 60)
    # Released for the task's progress, not as a new episode or at the takeover time limit.
    assert human.named("release")[0]["cause"] in ("done", "back_on_track")

"""`roborl scripted-human` takes a robot over when it drifts from the expert's path and lets go
once it is back on track, over real ROS 2 (rclpy nodes, loopback).

Three processes' worth of nodes: `sim-robot` serves RoborlTabletop ("reach the red block") and
its `~/reset` service, `scripted-human` watches /joint_states and publishes sensor_msgs/Joy on
/joy, and the robot env of `robot=tabletop_hil` (in this process) runs a policy that never
moves. The person must take over (the policy stalls), steer towards the block, and release.
"""

from __future__ import annotations

import itertools

import numpy as np

from roborl.core.compose import compose_dict
from roborl.core.plugins import get_host
from roborl.robots.env.robot_env import RobotEnv
from roborl.robots.nodes.scripted_human import SCRIPTED_HUMAN_CONFIG

START = 120.0


def _robot_cfg() -> dict:
    cfg = compose_dict(
        get_host(),
        [
            "robot=tabletop_hil",
            "robot.transport=rclpy",
            "robot.cameras=[]",
            "robot.joints=[gx,gy,red_x,red_y]",  # the test watches the red block too
            "robot.rate_hz=20",
            "robot.connect_timeout_s=60",
            "robot.max_episode_steps=1000",
            "robot.safety.max_policy_time_s=60",
        ],
        "scripted-human",
        SCRIPTED_HUMAN_CONFIG,
    )
    return cfg["robot"]


def _distance(obs: np.ndarray) -> float:
    """Gripper to red block (positions come first: gx, gy, red_x, red_y)."""
    return float(np.linalg.norm(obs[:2] - obs[2:4]))


def test_scripted_human_takes_over_on_drift_and_releases(ros_env, nodes) -> None:
    sim = nodes(
        [
            "sim-robot",
            "env=tabletop_reach_pixels",
            "env.max_episode_steps=100000",
            "env.kwargs.max_episode_steps=100000",  # episodes end by our resets only
            "transport=rclpy",
            "rate_hz=20",
            "on_terminate=hold",
        ],
        ros_env,
    )
    human = nodes(
        ["scripted-human", "robot=tabletop_hil", "transport=rclpy", "task=0", "window_s=1.0"],
        ros_env,
    )
    sim.wait_event("sim_robot_start", START)
    human.wait_event("scripted_human_start", START)
    env = RobotEnv(_robot_cfg())
    try:
        for _ in range(50):  # an episode whose gripper starts well away from the block
            obs, _ = env.reset()  # through sim-robot's ~/reset service
            if _distance(obs) > 0.15:
                break
        assert _distance(obs) > 0.15
        assert any(
            e.get("event") == "episode" and e.get("cause") == "reset_request" for e in sim.events
        )
        policy = np.zeros(2, np.float32)  # a policy that stalls: the person must step in
        flags, executed, distances = [], [], [_distance(obs)]
        released = False
        for _ in range(2000):
            obs, _, _, _, info = env.step(policy)
            flags.append(info["intervened"])
            executed.append(info["executed_action"])
            distances.append(_distance(obs))
            released = any(flags) and not flags[-1]
            if released:
                break
        assert any(flags), "the scripted human never took over"
        assert released, "the scripted human never let go"
        first = flags.index(True)
        # Before the takeover the robot executed the policy's zeros and stood still; during
        # it, the person's commands (the expert's action, decoded from Joy) moved the gripper
        # towards the block.
        np.testing.assert_allclose(np.asarray(executed[:first]), 0.0)
        taken = [np.asarray(a) for a, f in zip(executed, flags) if f]
        assert all(np.abs(a).max() > 0.1 for a in taken)
        assert distances[-1] < distances[first] - 0.03, distances
    finally:
        env.close()
    human.proc.terminate()
    human.wait_event("scripted_human_stop", 60)
    # Takeovers also happen before the robot env connects (nobody commands the stalled robot);
    # at least one must end because the person brought the gripper closer.
    flips = [e for e in human.events if e.get("event") in ("takeover", "release")]
    pairs = [
        (a, b)
        for a, b in itertools.pairwise(flips)
        if a["event"] == "takeover" and b["event"] == "release"
    ]
    assert all(a["cause"] == "drift" for a, _ in pairs)
    assert any(
        b["cause"] in ("back_on_track", "done") and b["error"] < a["error"] for a, b in pairs
    ), flips

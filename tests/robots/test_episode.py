"""Episode control on a robot: a reset service between episodes, a person's success signal
(a std_srvs/Trigger service or a key on stdin) and a wall-clock time limit.

Against `sim-robot` (InvertedPendulum, frozen in its terminal state until a reset request, as
a real robot) over real rclpy nodes on loopback; an "operator" node calls the driver's
`~/success` service as `ros2 service call` would.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from roborl.core.errors import ConfigError
from roborl.robots.env.episode import EpisodeConfig, EpisodeControl, call_trigger
from roborl.robots.env.robot_env import RobotEnv
from roborl.robots.transport.common import make_transport

START = 120.0


def _cfg(**extra: object) -> dict:
    return {
        "transport": "rclpy",
        "joints": ["slider", "hinge"],
        "fields": ["position", "velocity"],
        "command": {"joints": ["slider"], "interface_name": "effort"},
        "rate_hz": 50.0,
        "connect_timeout_s": 60.0,
        "max_episode_steps": 100000,
        "safety": {"low": [-3.0], "high": [3.0], "max_policy_time_s": 60.0},
        "reset": {"mode": "service", "service": "/sim_robot/reset", "timeout_s": 60.0},
        "episode": {"success_service": "~/success", "reward": "success"},
        **extra,
    }


def test_reset_service_success_service_and_time_limit_end_episodes(ros_env, nodes) -> None:
    sim = nodes(
        ["sim-robot", "env=inverted_pendulum", "transport=rclpy", "on_terminate=hold"], ros_env
    )
    sim.wait_event("sim_robot_start", START)
    env = RobotEnv(_cfg())
    operator = make_transport("rclpy", "test_operator")
    try:
        env.reset()
        resets = [e for e in sim.events if e.get("cause") == "reset_request"]
        assert len(resets) == 1  # the reset routine called sim-robot's ~/reset

        # Until a person signals success the episode runs on, with reward 0 (sparse).
        for _ in range(3):
            _, reward, terminated, truncated, info = env.step(np.zeros(1, np.float32))
            assert (reward, terminated, truncated, info["success"]) == (0.0, False, False, False)
        answer = call_trigger(operator, "/roborl_driver/success", 60.0)
        assert "success marked" in answer
        _, reward, terminated, truncated, info = env.step(np.zeros(1, np.float32))
        assert (reward, terminated, info["success"]) == (1.0, True, True)
        assert env.episode.successes == 1

        # A success signalled between episodes does not end the next one at its first step.
        call_trigger(operator, "/roborl_driver/success", 60.0)
        env.episode.config = dataclasses.replace(env.episode.config, time_limit_s=0.3)
        env.reset()
        assert len([e for e in sim.events if e.get("cause") == "reset_request"]) == 2
        for _ in range(100000):
            _, reward, terminated, truncated, info = env.step(np.zeros(1, np.float32))
            assert not terminated and reward == 0.0
            if truncated:
                break
        assert info["time_limit"] and not info["success"]
    finally:
        operator.close()
        env.close()


def _keys(lines: str) -> EpisodeControl:
    """An EpisodeControl that has read `lines` from its stdin (a pipe) up to the end."""
    read, write = os.pipe()
    with os.fdopen(write, "w") as keys:
        keys.write(lines)
    stream = os.fdopen(read, "r")
    control = EpisodeControl(EpisodeConfig.parse({"success_key": "s"}), None, stdin=stream)
    assert control.key_reader is not None
    control.key_reader.join(60.0)
    stream.close()
    return control


def test_success_key_on_stdin_marks_one_success() -> None:
    assert not _keys("x\nss\n\n").take_success()  # other keys and lines do nothing
    control = _keys("x\n s \n")
    assert control.take_success()
    assert not control.take_success()  # consumed by the step that ended the episode
    assert control.successes == 1


def test_a_reset_service_that_fails_is_a_robot_error(ros_env) -> None:
    from roborl.core.errors import RobotError

    server = make_transport("rclpy", "failing_reset")
    client = make_transport("rclpy", "caller")
    try:
        server.service("~/reset", "trigger", lambda _: (False, "gripper jammed"))
        with pytest.raises(RobotError, match="failing_reset/reset failed: gripper jammed"):
            call_trigger(client, "/failing_reset/reset", 60.0)
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize(
    ("episode", "match"),
    [
        ({"reward": "dense"}, "accepted are alive, success"),
        ({"time_limit_s": 0}, "must be > 0"),
        ({"succes_service": "~/success"}, "unknown keys \\['succes_service'\\]"),
    ],
)
def test_bad_episode_config_names_the_key(episode: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EpisodeConfig.parse(episode)


def test_services_need_a_ros_node(ros_env) -> None:
    dds = make_transport("dds", "no_services")
    try:
        with pytest.raises(ConfigError, match="needs a ROS 2 node"):
            EpisodeControl(EpisodeConfig.parse({"success_service": "~/success"}), dds)
        with pytest.raises(ConfigError, match="needs a ROS 2 node"):
            call_trigger(dds, "/sim_robot/reset", 1.0)
    finally:
        dds.close()
    with pytest.raises(ConfigError, match="both read stdin"):
        RobotEnv(_cfg(reset={"mode": "operator"}, episode={"success_key": "s"}))

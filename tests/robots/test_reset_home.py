"""The scripted move-home reset and position-control holds, against a position-controlled robot
served over real DDS on loopback (it reports as its position the last position commanded)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from robot_helpers import poll_until

from roborl.core.errors import ConfigError, RobotError
from roborl.robots.env.robot_env import RobotEnv
from roborl.robots.transport import msgs
from roborl.robots.transport.dds import DDSTransport

START = [0.8, -0.5]
HOME = [0.0, 0.2]
MAX_DELTA = 0.05


def _cfg(**reset) -> dict:
    return {
        "transport": "dds",
        "joints": ["shoulder", "elbow"],
        "fields": ["position", "velocity"],
        "command": {
            "controller": "pos_ctl",
            "joints": ["shoulder", "elbow"],
            "interface_name": "position",
        },
        "rate_hz": 50.0,
        "connect_timeout_s": 30.0,
        "safety": {"low": [-1.0, -1.0], "high": [1.0, 1.0], "max_delta": MAX_DELTA, "hold": "last"},
        "reset": {"mode": "home", "home": HOME, "duration_s": 0.4, "tolerance": 0.01, **reset},
    }


class PositionRobot:
    """Publishes JointState at 200 Hz; each joint goes where it was last commanded, unless stuck."""

    def __init__(self, stuck: tuple[str, ...] = ()) -> None:
        self.t = DDSTransport("position_robot")
        self.pos = {"shoulder": START[0], "elbow": START[1]}
        self.commands: list[list[float]] = []
        self.stuck = stuck
        self._pub = self.t.publisher("/joint_states", msgs.JointState)
        self.t.subscribe("/pos_ctl/commands", msgs.Float64MultiArray, self._on_command)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_command(self, msg: msgs.Float64MultiArray) -> None:
        self.commands.append(list(msg.data))
        for name, value in zip(("shoulder", "elbow"), msg.data):
            if name not in self.stuck:
                self.pos[name] = value

    def _run(self) -> None:
        while not self._stop.is_set():
            names = list(self.pos)
            self._pub(
                msgs.JointState(
                    name=names,
                    position=[self.pos[n] for n in names],
                    velocity=[0.0] * len(names),
                    effort=[],
                )
            )
            time.sleep(0.005)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.t.close()


def test_move_home_is_a_rate_limited_path_and_holds_never_command_zero(ros_env) -> None:
    robot = PositionRobot()
    env = RobotEnv(_cfg())
    try:
        # hold=last starts from the measured pose: a hold now must not move the arm. (Repeat
        # until the robot's reader has matched our writer: volatile QoS drops earlier samples.)
        np.testing.assert_allclose(env.safety.hold_command(), START)
        poll_until(lambda: env.driver.stop(env.safety.hold_command()) or robot.commands, 30.0)
        np.testing.assert_allclose(robot.commands[-1], START)
        robot.commands.clear()
        obs, _ = env.reset()
        np.testing.assert_allclose(obs[:2], HOME, atol=0.01)
        path = np.asarray(robot.commands)
        np.testing.assert_allclose(path[0], START)  # the stop before the move holds in place
        np.testing.assert_allclose(path[-1], HOME)
        steps = np.abs(np.diff(path, axis=0))
        assert steps.max() <= MAX_DELTA + 1e-9, steps.max()  # no jump anywhere on the way
        assert np.all(np.abs(path) <= 1.0)
        assert len(path) >= (0.8 / MAX_DELTA)  # 0.8 rad at 0.05 per step: at least 16 commands
        sent = len(robot.commands)
        env.close()
        poll_until(lambda: len(robot.commands) > sent, 30.0)
        np.testing.assert_allclose(robot.commands[-1], HOME)  # final stop holds, never zeros
    finally:
        env.close()
        robot.close()


def test_a_joint_that_never_arrives_is_a_clear_error(ros_env) -> None:
    robot = PositionRobot(stuck=("elbow",))
    env = RobotEnv(_cfg(timeout_s=0.5))
    try:
        with pytest.raises(RobotError, match=r"did not reach home .*shoulder', 'elbow'.*-0\.5"):
            env.reset()
    finally:
        env.close()
        robot.close()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"reset": {"mode": "home", "home": [0.0]}}, "must list 2 finite positions"),
        ({"reset": {"mode": "home", "home": [0.0, 1.5]}}, "outside the safety limits"),
        ({"reset": {"mode": "home", "home": [0.0, float("nan")]}}, r"reset\.home\[1\]=nan"),
        ({"reset": {"mode": "teleport"}}, "expected one of wait, topic, operator, home"),
        ({"fields": ["velocity"]}, "must include 'position'"),
    ],
)
def test_bad_reset_config_is_rejected_before_connecting(change: dict, match: str) -> None:
    cfg = {**_cfg(), **change}
    with pytest.raises(ConfigError, match=match):
        RobotEnv(cfg)

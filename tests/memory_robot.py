"""An in-memory robot for tests that drive the real `RobotEnv` and `Ros2Driver` without ROS
traffic: a transport that publishes JointState from a thread, records every command the driver
sends, and hands a test the callbacks of the other topics it subscribes (a teleop's Joy or
Twist, the e-stop), so the test can deliver messages itself, in order, at a chosen step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from roborl.robots.env.intervention import InterventionConfig
from roborl.robots.transport.protocol import Transport


class MemoryTransport(Transport):
    """JointState for `joints` at about 500 Hz (positions from `position`, settable), the
    commands the driver publishes in `commands` (one float64 array each), and every other
    subscription's callback in `callbacks` by topic."""

    name = "memory"

    def __init__(self, joints: list[str], position: list[float] | None = None) -> None:
        self.joints = list(joints)
        self.position = np.asarray(position or [0.0] * len(joints), dtype=np.float64)
        self.commands: list[np.ndarray] = []
        self.callbacks: dict[str, Callable[[Any], None]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def publisher(self, topic: str, msg_type: type, qos: Any = "default"):
        if topic.endswith("/commands"):
            return lambda msg: self.commands.append(np.asarray(msg.data, dtype=np.float64))
        return lambda msg: None

    def subscribe(self, topic: str, msg_type: type, callback, qos: Any = "default"):
        if topic != "/joint_states":
            self.callbacks[topic] = callback
            return None

        def feed() -> None:
            while True:
                n = len(self.joints)
                callback(
                    SimpleNamespace(
                        name=self.joints,
                        position=[float(x) for x in self.position],
                        velocity=[0.0] * n,
                    )
                )
                if self._stop.wait(0.002):
                    return

        self._thread = threading.Thread(target=feed, daemon=True)
        self._thread.start()
        return None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)


def person(config: InterventionConfig, msg: Any) -> tuple[np.ndarray, bool] | None:
    """(command, intervening) the docs promise for `msg`; None: the message is unusable
    (a Joy with fewer axes than the mapping names) and must change nothing."""
    if config.type == "joy":
        if any(a >= len(msg.axes) for a in config.axes):
            return None
        raw = np.asarray([msg.axes[a] for a in config.axes], dtype=np.float64)
    else:
        raw = np.asarray(
            [getattr(getattr(msg, f.split(".")[0]), f.split(".")[1]) for f in config.axes],
            dtype=np.float64,
        )
    if config.button is not None:
        pressed = config.button < len(msg.buttons) and bool(msg.buttons[config.button])
    else:
        pressed = bool(np.any(np.abs(raw) > config.deadzone))
    with np.errstate(invalid="ignore", over="ignore"):
        return raw * config.scale, pressed


def expected_command(
    chosen: Any, prev: np.ndarray, hold: np.ndarray, low: np.ndarray, high: np.ndarray, d: Any
) -> tuple[np.ndarray, bool]:
    """(command sent, held) for the action the step carries: refused (wrong shape, NaN, inf)
    -> the hold; else clamped to the limits, then to `max_delta` of the previous command
    sent, and held when that cannot reach the limits."""
    a = np.asarray(chosen, dtype=np.float64).reshape(-1)
    if a.shape != low.shape or not np.all(np.isfinite(a)):
        return hold, True
    command = np.clip(a, low, high)
    if d is not None:
        command = np.clip(command, prev - d, prev + d)
        if np.any(command < low) or np.any(command > high):
            return hold, True
    return command, False


@st.composite
def robot_configs(
    draw: Any, max_episode_steps: Any, intervention: Any
) -> tuple[dict[str, Any], list[float]]:
    """A ros2 robot config for 1-2 joints on any command interface (with and without
    `max_delta`; a velocity/effort range holds 0, as the config requires) and where the arm
    stands, possibly outside the limits. `max_episode_steps` and `intervention(n)` are
    strategies; no watchdog can fire, so the tests' models are exact and timing decides
    nothing."""
    n = draw(st.integers(1, 2))
    joints = ["a", "b"][:n]
    low = [draw(st.floats(-2.0, 0.5)) for _ in range(n)]
    high = [lo + draw(st.floats(0.1, 2.0)) for lo in low]
    interface_name = draw(st.sampled_from(["velocity", "effort", "position"]))
    if interface_name != "position":
        low, high = [min(lo, 0.0) for lo in low], [max(hi, 0.0) for hi in high]
    arm = [draw(st.floats(lo - 0.5, hi + 0.5)) for lo, hi in zip(low, high)]
    cfg = {
        "name": "ros2", "transport": "dds", "joints": joints,
        "command": {"controller": "ctl", "joints": joints, "interface_name": interface_name},
        "safety": {
            "low": low, "high": high,
            "max_delta": draw(st.one_of(st.none(), st.floats(0.01, 1.0))),
            "max_state_age_s": 1e6, "max_policy_time_s": 1e6,
        },
        "rate_hz": 1000.0,
        "max_episode_steps": draw(max_episode_steps),
        "connect_timeout_s": 30.0,
        "reset": {"mode": "wait", "wait_s": 0.0},
        "intervention": draw(intervention(n)),
    }  # fmt: skip
    return cfg, arm

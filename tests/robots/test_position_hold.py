"""What a stop sends, decided by the command interface, and what may follow it: in-process
against a recording sender and a scripted measurement (the arm's measured position and its
age). Each test here failed on the code before issue 47 (754e83a); waits are events with
hang guards, never timing assertions."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest
from robot_helpers import poll_until

from roborl.core.errors import ConfigError, RobotError
from roborl.robots.config import hold_for, parse_robot_config, robot_config_dict
from roborl.robots.env.safety import SafetyConfig, SafetyLayer


class Recorder:
    """The driver's command function: keeps every command sent, in order."""

    def __init__(self) -> None:
        self.sent: list[list[float]] = []
        self.hook = None  # called inside the send, after recording (a signal, an error)
        self.fail = 0  # raise on the next `fail` sends (a dead transport)

    def __call__(self, command: np.ndarray) -> None:
        if self.fail:
            self.fail -= 1
            raise OSError("transport down")
        self.sent.append([round(float(x), 9) for x in command])
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()


class Arm:
    """A measured position and its age, as the driver's newest JointState gives them."""

    def __init__(self, position: list[float], age: float = 0.0) -> None:
        self.position, self.age = np.asarray(position, dtype=np.float64), age

    def __call__(self) -> tuple[np.ndarray, float]:
        return self.position.copy(), self.age


def position_layer(
    arm: Arm, max_delta: float | None = None, low: float = -3.0, high: float = 3.0
) -> tuple[SafetyLayer, Recorder]:
    safety = SafetyLayer(SafetyConfig(low=[low], high=[high], max_delta=max_delta, hold="position"))
    safety.bind_measurement(arm)
    safety.set_last(arm()[0])  # what RobotEnv does at connect
    out = Recorder()
    safety.bind_output(out)
    safety.enable()
    return safety, out


def robot(**command) -> dict:
    return {"joints": ["slider", "hinge"], "command": {"joints": ["slider"], **command}}


# -- what a hold sends ---------------------------------------------------------------------
def test_estop_on_a_position_arm_holds_where_it_stands_never_zero() -> None:
    """The issue's report: the arm stood at -2.73 and the e-stop commanded 0.0."""
    arm = Arm([-2.73])
    safety, out = position_layer(arm)
    assert safety.emit(np.array([-2.70]))
    arm.position[:] = -2.71  # it moved toward the target
    safety.trigger_estop("test")
    assert out.sent[-1] == [-2.71]


def test_a_stale_measurement_holds_the_last_sent_target_not_zero() -> None:
    arm = Arm([-2.73])
    safety, _out = position_layer(arm)
    assert safety.emit(np.array([-2.72]))
    arm.age = 5.0  # the JointState stream died
    decision = safety.filter(np.array([1.0]), state_age_s=5.0)
    assert decision.held and decision.watchdog
    assert decision.command.tolist() == [-2.72]


def test_a_position_hold_outside_the_limits_is_not_clamped_into_them() -> None:
    """Clamping a hold to the limits is a move: the arm holds where it stands."""
    arm = Arm([1.4])
    safety, out = position_layer(arm, low=-1.0, high=1.0)
    safety.disable("test")
    assert out.sent[-1] == [1.4]


# -- the rate limit counts from what was sent ----------------------------------------------
def test_first_command_after_a_zero_hold_is_rate_limited_from_the_hold() -> None:
    safety = SafetyLayer(SafetyConfig(low=[-1.0], high=[1.0], max_delta=0.1))
    out = Recorder()
    safety.bind_output(out)
    safety.enable()
    for _ in range(15):  # ramp up to 1.0
        assert safety.emit(safety.filter(np.array([1.0]), 0.0).command)
    assert out.sent[-1] == [1.0]
    safety.disable("deactivate")  # the zero hold goes out
    safety.enable()
    assert safety.emit(safety.filter(np.array([1.0]), 0.0).command)
    assert out.sent[-2:] == [[0.0], [0.1]]  # not a jump from 0 back to 1.0


def test_activate_resyncs_the_rate_limit_to_where_the_arm_was_moved() -> None:
    """Moved by hand while stopped: the next command starts from there, not the old target."""
    arm = Arm([0.0])
    safety, out = position_layer(arm, max_delta=0.05)
    for _ in range(4):
        assert safety.emit(safety.filter(np.array([1.0]), 0.0).command)
    safety.trigger_estop("test")
    arm.position[:] = -1.0  # a person moved it
    safety.reset_estop()
    safety.enable()
    assert safety.emit(safety.filter(np.array([1.0]), 0.0).command)
    assert out.sent[-1] == [-0.95]


def test_a_command_that_cannot_reach_the_limits_in_one_step_holds() -> None:
    arm = Arm([1.5])
    safety, _out = position_layer(arm, max_delta=0.1, low=-1.0, high=1.0)
    decision = safety.filter(np.array([0.0]), 0.0)
    assert decision.held and decision.command.tolist() == [1.5]
    assert safety.interventions["outside_limits"] == 1


# -- nothing follows a hold; holds repeat; the supervisor survives ---------------------------
def test_a_stop_signal_inside_emit_sends_the_hold_after_the_interrupted_command() -> None:
    """SIGTERM arrives while the policy's command is being sent (on the same thread): the
    interrupted command completes, then the hold, and nothing after it."""
    safety = SafetyLayer(SafetyConfig(low=[-1.0], high=[1.0]))
    out = Recorder()
    safety.bind_output(out)
    safety.enable()
    safety.start_supervisor(0.01)
    previous = signal.signal(signal.SIGTERM, lambda s, f: safety.request_estop("SIGTERM"))
    try:
        out.hook = lambda: os.kill(os.getpid(), signal.SIGTERM)
        assert safety.emit(np.array([0.5]))
        assert not safety.emit(np.array([0.6]))  # the loop's next command: refused
        assert poll_until(lambda: safety.interventions["estop"] == 1, 30.0, 0.005)
        assert out.sent[0] == [0.5] and out.sent[1:] and all(c == [0.0] for c in out.sent[1:])
    finally:
        signal.signal(signal.SIGTERM, previous)
        safety.stop_supervisor()


def test_hold_is_resent_every_period_while_latched_and_retried_after_a_failure() -> None:
    safety = SafetyLayer(SafetyConfig(low=[-1.0], high=[1.0]))
    out = Recorder()
    safety.bind_output(out)
    safety.enable()
    assert safety.emit(np.array([0.5]))
    out.fail = 1  # the first hold is lost
    safety.start_supervisor(0.01)
    try:
        safety.trigger_estop("test")
        assert safety.hold_failures == 1
        assert poll_until(lambda: len(out.sent) >= 4, 30.0, 0.005)
        assert out.sent[0] == [0.5] and all(c == [0.0] for c in out.sent[1:])
    finally:
        safety.stop_supervisor()


def test_the_supervisor_survives_an_error_and_its_death_stops_commanding() -> None:
    safety = SafetyLayer(SafetyConfig(low=[-1.0], high=[1.0], max_policy_time_s=0.02))
    out = Recorder()
    safety.bind_output(out)
    safety.enable()
    calls = {"n": 0}
    real = safety._note

    def flaky(kind: str, cause: str) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a logging handler failed")
        real(kind, cause)

    safety._note = flaky  # type: ignore[method-assign]
    safety.start_supervisor(0.005)
    try:
        assert safety.emit(np.array([0.5]))
        assert poll_until(lambda: out.sent[-1] == [0.0], 30.0, 0.005)  # it carried on
        assert safety.supervisor_failed is None
    finally:
        safety.stop_supervisor()
    died = threading.Event()

    def boom() -> None:
        died.set()
        raise SystemExit  # a BaseException: the thread ends

    safety._supervise_once = boom  # type: ignore[method-assign]
    safety.start_supervisor(0.005)
    assert died.wait(30.0)
    assert poll_until(lambda: safety.supervisor_failed is not None, 30.0, 0.005)
    assert not safety.emit(np.array([0.5]))
    with pytest.raises(RobotError, match="supervisor died"):
        safety.enable()


# -- the config decides the hold ------------------------------------------------------------
def test_hold_zero_with_a_position_interface_is_refused() -> None:
    cfg = robot(interface="trajectory")
    cfg["safety"] = {"hold": "zero"}
    with pytest.raises(ConfigError, match="Zero sent to a position interface"):
        robot_config_dict(cfg)


def test_forward_needs_its_interface_name_and_each_interface_has_its_hold() -> None:
    with pytest.raises(ConfigError, match="interface_name"):
        robot_config_dict(robot())
    assert hold_for(parse_robot_config(robot(interface="trajectory"))) == "position"
    assert hold_for(parse_robot_config(robot(interface_name="position"))) == "position"
    assert hold_for(parse_robot_config(robot(interface_name="velocity"))) == "zero"
    assert hold_for(parse_robot_config(robot(interface_name="effort"))) == "zero"
    assert hold_for(parse_robot_config(robot(interface="twist"))) == "zero"
    assert hold_for(parse_robot_config(robot(interface="twist_stamped"))) == "zero"
    cfg = robot(interface="twist_stamped")
    cfg["safety"] = {"hold": "position"}  # repeating a velocity keeps the base moving
    with pytest.raises(ConfigError, match="keeps it moving"):
        robot_config_dict(cfg)
    cfg = robot(interface_name="velocity")
    cfg["safety"] = {"hold": "position"}
    with pytest.raises(ConfigError, match="keeps it moving"):
        robot_config_dict(cfg)

"""The safety layer owns the output: every stop sends the hold at once, clearing never
resumes, and a supervisor thread holds the robot when the control loop goes silent.

In-process, against a recording sender; waits are events with generous hang guards, never
timing assertions."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from robot_helpers import poll_until

from roborl.core.errors import RobotError
from roborl.robots.env.safety import SafetyConfig, SafetyLayer

HOLD = [0.0, 0.0]


class Recorder:
    """Stands in for the driver's command function: keeps every command sent, in order."""

    def __init__(self) -> None:
        self.sent: list[list[float]] = []
        self.event = threading.Event()

    def __call__(self, command: np.ndarray) -> None:
        self.sent.append([float(x) for x in command])
        self.event.set()


def layer(max_policy_time_s: float = 0.5, hold: str = "zero") -> tuple[SafetyLayer, Recorder]:
    safety = SafetyLayer(
        SafetyConfig(
            low=[-1.0, -1.0], high=[1.0, 1.0], max_policy_time_s=max_policy_time_s, hold=hold
        )
    )
    out = Recorder()
    safety.bind_output(out)
    safety.enable()
    return safety, out


def test_estop_sends_the_hold_at_once_and_nothing_after() -> None:
    safety, out = layer()
    assert safety.emit(np.array([0.5, -0.5]))
    safety.trigger_estop("test")
    assert out.sent == [[0.5, -0.5], HOLD]
    assert not safety.emit(np.array([0.7, 0.7]))  # a command computed before the latch
    safety.trigger_estop("again")  # a second latch sends nothing more
    assert out.sent[-1] == HOLD and len(out.sent) == 2


def test_position_hold_without_a_measurement_repeats_the_last_command_sent() -> None:
    safety, out = layer(hold="position")
    decision = safety.filter(np.array([0.3, 0.2]), state_age_s=0.0)
    assert safety.emit(decision.command)
    safety.filter(np.array([0.9, 0.9]), state_age_s=0.0)  # computed, never sent
    safety.trigger_estop("test")
    assert out.sent[-1] == [0.3, 0.2]  # the last command *sent*, not the last filtered


def test_clearing_only_clears_and_an_explicit_enable_resumes() -> None:
    safety, out = layer()
    safety.trigger_estop("test")
    safety.reset_estop()
    assert not safety.estopped and not safety.enabled
    assert out.sent[-1] == HOLD
    assert not safety.emit(np.array([0.5, 0.5])), "a cleared e-stop must not resume motion"
    safety.enable()
    assert safety.emit(np.array([0.5, 0.5])) and out.sent[-1] == [0.5, 0.5]


def test_enable_is_refused_while_latched() -> None:
    safety, _ = layer()
    safety.trigger_estop("test")
    with pytest.raises(RobotError, match="e-stop is latched"):
        safety.enable()


def test_disable_sends_the_hold_and_stops_commands() -> None:
    safety, out = layer()
    assert safety.emit(np.array([0.9, 0.9]))
    safety.disable("lifecycle deactivate")
    assert out.sent[-1] == HOLD and not safety.emit(np.array([0.9, 0.9]))


def test_supervisor_holds_when_the_loop_goes_silent() -> None:
    """A hung policy: the loop sent one command and then nothing. The supervisor, on its own
    thread, sends the hold once the silence exceeds max_policy_time_s (one intervention per
    stall), and repeats it every period while the stall lasts."""
    safety, out = layer(max_policy_time_s=0.05)
    safety.start_supervisor(0.01)
    try:
        assert safety.emit(np.array([0.8, -0.8]))
        assert poll_until(lambda: out.sent[-1] == HOLD, 30.0, 0.005), out.sent
        assert safety.interventions["watchdog_supervisor"] == 1
        n = len(out.sent)
        # The stall goes on: the hold is re-sent every period, still one intervention.
        assert poll_until(lambda: len(out.sent) > n + 3, 30.0, 0.005)
        assert all(c == HOLD for c in out.sent[n:])
        assert safety.interventions["watchdog_supervisor"] == 1
        assert safety.emit(np.array([0.1, 0.1]))  # the loop is back: commands flow again
        assert poll_until(lambda: safety.interventions["watchdog_supervisor"] == 2, 30.0, 0.005)
    finally:
        safety.stop_supervisor()


def test_supervisor_sends_nothing_while_configured_but_never_enabled() -> None:
    safety, out = layer(max_policy_time_s=0.02)
    safety.disable("inactive", hold=False)
    safety.start_supervisor(0.005)
    try:
        assert not poll_until(lambda: out.sent, 0.3, 0.005)
    finally:
        safety.stop_supervisor()

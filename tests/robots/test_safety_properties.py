"""Property tests of the safety layer: for any valid config (with and without `max_delta`, each
hold, limits the arm may stand outside) and any sequence of policy actions (NaN, inf and huge
values included), stops, clears, enables, stale measurements and an arm moved by hand, every
command sent

- is finite;
- if it is a policy command: inside the limits, and within `max_delta` of the previous command
  sent (or, right after a position interface's activate, of where the arm stood);
- if it is a hold: zero on velocity/effort interfaces; on position interfaces where the arm
  stands, or the last command sent when the measurement is stale; never anything else;
- and after a stop nothing but holds go out until an explicit enable.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roborl.core.errors import ConfigError
from roborl.robots.env.safety import SafetyConfig, SafetyLayer

finite = st.floats(-5.0, 5.0, allow_nan=False)
wild = st.one_of(finite, st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300]))


@st.composite
def configs(draw):
    n = draw(st.integers(1, 3))
    low = [draw(st.floats(-3.0, 0.0)) for _ in range(n)]
    high = [lo + draw(st.floats(0.1, 3.0)) for lo in low]
    max_delta = draw(st.one_of(st.none(), st.floats(0.01, 1.0)))
    hold = draw(st.sampled_from(["zero", "position"]))
    if hold == "zero":  # a velocity/effort range holds 0 (SafetyConfig refuses one that does not)
        high = [max(hi, draw(st.floats(0.0, 3.0))) for hi in high]
    start = [draw(finite) for _ in range(n)]  # may stand outside the limits
    return SafetyConfig(low=low, high=high, max_delta=max_delta, hold=hold), start


def events(n: int):
    vector = st.lists(wild, min_size=n, max_size=n)
    act = st.tuples(st.just("act"), vector)
    return st.lists(
        st.one_of(
            act,
            act,
            act,  # mostly actions: runs of them are what the rate limit is about
            st.tuples(st.just("move"), st.lists(finite, min_size=n, max_size=n)),
            st.tuples(st.just("stale"), st.booleans()),
            st.sampled_from([("estop",), ("clear",), ("enable",), ("disable",)]),
        ),
        max_size=40,
    )


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_every_command_sent_is_safe(data) -> None:
    config, start = data.draw(configs())
    check_sequence(config, start, data.draw(events(len(config.low))))


ZERO = SafetyConfig(low=[-1.0], high=[1.0], max_delta=0.1, hold="zero")
POSITION = SafetyConfig(low=[-1.0], high=[1.0], max_delta=0.1, hold="position")


@pytest.mark.parametrize(
    ("config", "start", "sequence"),
    [
        (ZERO, [0.0], [("act", [5.0]), ("act", [-5.0]), ("act", [5.0])]),  # reversals
        (ZERO, [0.0], [("act", [5.0])] * 12 + [("disable",), ("enable",), ("act", [5.0])]),
        (ZERO, [0.0], [("act", [0.5]), ("estop",), ("act", [0.5]), ("clear",), ("act", [1.0])]),
        (POSITION, [0.5], [("act", [1.0]), ("move", [-0.5]), ("estop",), ("clear",),
                           ("enable",), ("act", [1.0])]),
        (POSITION, [0.5], [("act", [1.0]), ("stale", True), ("act", [1.0]), ("disable",)]),
        (POSITION, [2.0], [("act", [0.0]), ("disable",), ("enable",), ("act", [0.0])]),
        (SafetyConfig(low=[-1.0], high=[1.0]), [0.0], [("act", [5.0]), ("act", [-5.0])]),
        # moved by hand, enabled (re-sync), then stale: the hold is where it was enabled
        (SafetyConfig(low=[0.0] * 3, high=[1.0] * 3, hold="position"), [0.0] * 3,
         [("move", [0.0, 0.0, 1.0]), ("enable",), ("stale", True), ("act", [0, 0, np.nan])]),
    ],
)  # fmt: skip
def test_known_sequences_are_safe(config, start, sequence) -> None:
    """Sequences the property test must never miss (each broke an earlier version)."""
    check_sequence(config, start, sequence)


def check_sequence(config: SafetyConfig, start: list[float], sequence: list[tuple]) -> None:
    arm = {"pos": np.asarray(start, dtype=np.float64), "stale": False}
    safety = SafetyLayer(config)
    safety.bind_measurement(lambda: (arm["pos"].copy(), 9.0 if arm["stale"] else 0.0))
    if config.hold == "position":
        safety.set_last(arm["pos"])  # what RobotEnv does at connect
    sent: list[tuple[str, np.ndarray]] = []
    kind = ["hold"]
    safety.bind_output(lambda c: sent.append((kind[0], np.array(c, dtype=np.float64))))
    safety.enable()
    low, high = np.asarray(config.low), np.asarray(config.high)
    zero = np.clip(np.zeros_like(low), low, high)
    reference = arm["pos"].copy() if config.hold == "position" else zero.copy()
    stopped = False
    for event in sequence:
        before = len(sent)
        name = event[0]
        if name == "act":
            decision = safety.filter(np.asarray(event[1]), 0.0)
            if decision is not None:
                kind[0] = "hold" if decision.held else "policy"
                safety.emit(decision.command)
                kind[0] = "hold"
        elif name == "move":
            arm["pos"] = np.asarray(event[1], dtype=np.float64)
        elif name == "stale":
            arm["stale"] = event[1]
        elif name == "estop":
            safety.trigger_estop("test")
            stopped = True
        elif name == "clear":
            safety.reset_estop()
            stopped = True
        elif name == "disable":
            safety.disable("test")
            stopped = True
        elif name == "enable" and not safety.estopped:
            safety.enable()
            stopped = False
            if config.hold == "position" and not arm["stale"]:
                reference = arm["pos"].copy()  # activate re-syncs to where the arm stands
        for what, command in sent[before:]:
            assert np.all(np.isfinite(command)), (what, command)
            if what == "policy":
                assert not stopped, "a policy command followed a stop before enable"
                assert np.all(command >= low - 1e-12) and np.all(command <= high + 1e-12)
                if config.max_delta is not None:
                    assert np.all(np.abs(command - reference) <= config.max_delta + 1e-9), (
                        command,
                        reference,
                    )
            elif config.hold == "zero":
                assert np.array_equal(command, zero), command
            elif not arm["stale"]:
                assert np.array_equal(command, arm["pos"]), (command, arm["pos"])
            else:  # stale: the last command sent, or where the arm stood at connect or at
                # the last enable (the layer re-syncs there: `reference`)
                assert np.array_equal(command, reference), (command, reference)
            reference = command.copy()


@pytest.mark.parametrize(("low", "high"), [([0.2], [1.0]), ([-1.0, -2.0], [1.0, -0.5])])
def test_a_velocity_range_without_zero_is_refused(low: list[float], high: list[float]) -> None:
    """A zero hold outside the limits used to be clipped into them: a "stop" that kept a
    velocity or effort interface moving at the nearest limit."""
    with pytest.raises(ConfigError, match=r"exclude zero for joint \d.*must contain 0"):
        SafetyConfig(low=low, high=high, hold="zero")
    SafetyConfig(low=low, high=high, hold="position")  # positions need not include zero

"""Exact unit tests of `SafetyLayer.filter` and its holds, written against the mutants that
`make mutants` (mutmut) found alive in roborl/robots/env/safety.py (tests/mutants-report.md).

Each test pins one observable part of a decision: the command, `held`, `cause`, `watchdog`,
`human`, the intervention counter's key and count, the log line, and the boundaries (an age
equal to its limit is fresh). The first test is issue 51's clamp mutant: with
`clipped = np.clip(a, self.low, self.high)` replaced by `clipped = a` and no `max_delta` (the
default robot config), a command outside the joint limits would reach the robot."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from roborl.core.errors import ConfigError
from roborl.robots.env.safety import SafetyConfig, SafetyLayer

LOW, HIGH = [-1.0, -0.5, 0.0], [1.0, 0.5, 2.0]
LOGGER = "roborl.robots.safety"


def make(hold: str = "zero", **kwargs) -> SafetyLayer:
    return SafetyLayer(SafetyConfig(low=LOW, high=HIGH, hold=hold, **kwargs))


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


# -- the clamp (issue 51's named mutant) ------------------------------------------------------
@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ([3.0, -2.0, 5.0], [1.0, -0.5, 2.0]),  # every joint above/below its own limit
        ([-3.0, 2.0, -5.0], [-1.0, 0.5, 0.0]),
        ([1.5, 0.25, 1.0], [1.0, 0.25, 1.0]),  # one joint out, the others untouched
    ],
)
def test_without_max_delta_every_joint_is_clamped_to_its_own_limits(action, expected) -> None:
    safety = make()  # the default robot config: max_delta is None
    decision = safety.filter(np.array(action), state_age_s=0.0)
    assert decision is not None and not decision.held
    np.testing.assert_array_equal(decision.command, expected)
    assert decision.cause == "clamped to joint limits"
    assert safety.interventions == {"clamp": 1}


def test_an_action_inside_the_limits_passes_unchanged_and_uncounted() -> None:
    safety = make()
    action = np.array([0.9, -0.4, 1.9])
    decision = safety.filter(action, state_age_s=0.0)
    np.testing.assert_array_equal(decision.command, action)
    assert decision.cause is None and not decision.held and not decision.watchdog
    assert decision.command is not action  # a copy: the caller may reuse its buffer
    assert sum(safety.interventions.values()) == 0


def test_a_row_vector_action_is_flattened_not_refused() -> None:
    safety = make()
    decision = safety.filter(np.array([[0.5, 0.0, 3.0]]), state_age_s=0.0)
    assert not decision.held
    np.testing.assert_array_equal(decision.command, [0.5, 0.0, 2.0])
    assert decision.command.shape == (3,) and decision.command.dtype == np.float64


# -- watchdogs: exact kind, cause, flags, and the boundary ------------------------------------
def test_state_watchdog_holds_past_its_limit_with_its_cause(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    safety = make(max_state_age_s=0.25)
    decision = safety.filter(np.zeros(3), state_age_s=0.3)
    assert decision.held and decision.watchdog is True and decision.human is False
    assert decision.cause == "state is 0.300s old (> 0.25s)"
    np.testing.assert_array_equal(decision.command, [0.0, 0.0, 0.0])
    assert safety.interventions == {"watchdog_state": 1}
    assert warnings_of(caplog) == [
        "safety intervention [watchdog_state]: state is 0.300s old (> 0.25s)"
    ]


def test_an_age_equal_to_each_limit_is_still_fresh() -> None:
    safety = make(max_state_age_s=0.25, max_policy_time_s=0.5, max_camera_age_s={"wrist": 0.1})
    decision = safety.filter(
        np.zeros(3), state_age_s=0.25, policy_time_s=0.5, camera_ages_s={"wrist": 0.1}
    )
    assert not decision.held and decision.cause is None
    assert sum(safety.interventions.values()) == 0


def test_camera_watchdog_holds_only_for_a_configured_camera_past_its_limit(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    safety = make(max_camera_age_s={"wrist": 0.1})
    # A camera with no limit configured never holds, however old its frame.
    ok = safety.filter(np.zeros(3), state_age_s=0.0, camera_ages_s={"scene": 99.0})
    assert not ok.held
    decision = safety.filter(
        np.zeros(3), state_age_s=0.0, camera_ages_s={"scene": 99.0, "wrist": 0.2}
    )
    assert decision.held and decision.watchdog is True
    assert decision.cause == "camera 'wrist' frame is 0.200s old (> 0.1s)"
    assert safety.interventions == {"watchdog_camera": 1}
    assert warnings_of(caplog) == [
        "safety intervention [watchdog_camera]: camera 'wrist' frame is 0.200s old (> 0.1s)"
    ]


def test_policy_watchdog_holds_a_late_action_with_its_cause(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    safety = make(max_policy_time_s=0.5)
    decision = safety.filter(np.zeros(3), state_age_s=0.0, policy_time_s=0.75)
    assert decision.held and decision.watchdog is True
    assert decision.cause == "policy took 0.750s (> 0.5s)"
    assert safety.interventions == {"watchdog_policy": 1}
    assert warnings_of(caplog) == [
        "safety intervention [watchdog_policy]: policy took 0.750s (> 0.5s)"
    ]


# -- refusals that are not watchdogs -----------------------------------------------------------
def test_a_wrong_shape_is_held_and_is_not_a_watchdog(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    safety = make()
    decision = safety.filter(np.zeros(4), state_age_s=0.0)
    assert decision.held is True and decision.watchdog is False
    assert decision.cause == "action has shape (4,), robot expects (3,)"
    assert safety.interventions == {"bad_shape": 1}
    assert warnings_of(caplog) == [
        "safety intervention [bad_shape]: action has shape (4,), robot expects (3,)"
    ]


def test_a_non_finite_action_is_held_with_its_values(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    safety = make()
    decision = safety.filter(np.array([0.0, np.nan, np.inf]), state_age_s=0.0)
    assert decision.held is True and decision.watchdog is False
    assert decision.cause == "non-finite action [0.0, nan, inf]"
    assert safety.interventions == {"nonfinite": 1}
    assert warnings_of(caplog) == [
        "safety intervention [nonfinite]: non-finite action [0.0, nan, inf]"
    ]


# -- the intervention path ---------------------------------------------------------------------
def test_a_persons_command_replaces_the_policys_and_is_clamped_and_counted() -> None:
    safety = make()
    decision = safety.filter(
        np.array([0.1, 0.1, 0.1]), state_age_s=0.0, human=np.array([2.0, 0.2, 1.0])
    )
    assert not decision.held and decision.human is True
    np.testing.assert_array_equal(decision.command, [1.0, 0.2, 1.0])
    assert decision.cause == "clamped to joint limits"
    assert safety.interventions == {"human": 1, "clamp": 1}
    safety.filter(np.zeros(3), state_age_s=0.0, human=np.zeros(3))
    assert safety.interventions["human"] == 2


@pytest.mark.parametrize(
    ("kwargs", "kind"),
    [
        ({"state_age_s": 1.0}, "watchdog_state"),
        ({"state_age_s": 0.0, "policy_time_s": 1.0}, "watchdog_policy"),
        ({"state_age_s": 0.0, "camera_ages_s": {"wrist": 1.0}}, "watchdog_camera"),
    ],
)
def test_a_persons_command_passes_the_same_watchdogs(kwargs, kind) -> None:
    safety = make(max_camera_age_s={"wrist": 0.1})
    decision = safety.filter(np.zeros(3), human=np.array([0.5, 0.0, 0.5]), **kwargs)
    assert decision.held and decision.watchdog is True
    assert decision.human is False  # a hold is never marked as the person's command
    assert safety.interventions == {"human": 1, kind: 1}


def test_a_persons_bad_command_is_held_not_marked_human() -> None:
    safety = make()
    decision = safety.filter(np.zeros(3), state_age_s=0.0, human=np.array([np.nan, 0.0, 0.0]))
    assert decision.held and decision.human is False
    assert safety.interventions == {"human": 1, "nonfinite": 1}


# -- position holds: the measurement, its boundaries, set_last and the resync on enable --------
class Measure:
    def __init__(self, position, age: float = 0.0) -> None:
        self.position, self.age = position, age

    def __call__(self):
        if isinstance(self.position, Exception):
            raise self.position
        return self.position, self.age


def test_a_measured_position_is_flattened_and_fresh_up_to_its_age_limit() -> None:
    safety = make(hold="position", max_state_age_s=0.25)
    safety.bind_measurement(Measure(np.array([[0.1], [0.2], [0.3]], np.float32), age=0.25))
    hold = safety.hold_command()
    np.testing.assert_allclose(hold, [0.1, 0.2, 0.3], rtol=1e-6)
    assert hold.shape == (3,) and hold.dtype == np.float64


@pytest.mark.parametrize(
    "position",
    [np.array([0.1, np.nan, 0.3]), np.array([0.1, 0.2]), np.array([0.1, 0.2, 0.3, 0.4])],
)
def test_a_non_finite_or_wrong_size_measurement_falls_back_to_the_last_command(position) -> None:
    safety = make(hold="position")
    safety.set_last(np.array([0.4, 0.3, 0.2]))
    safety.bind_measurement(Measure(position))
    assert safety.measured_position() is None
    np.testing.assert_array_equal(safety.hold_command(), [0.4, 0.3, 0.2])


def test_a_failing_measurement_is_logged_and_falls_back(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    safety = make(hold="position")
    safety.set_last(np.array([0.4, 0.3, 0.2]))
    safety.bind_measurement(Measure(RuntimeError("no state yet")))
    np.testing.assert_array_equal(safety.hold_command(), [0.4, 0.3, 0.2])
    assert warnings_of(caplog) == ["no measured position for the hold: no state yet"]


def test_set_last_restarts_the_rate_limit_from_a_flattened_float_command() -> None:
    safety = make(max_delta=0.1)
    safety.set_last(np.array([[1, 0, 1]]))  # integers, a row vector
    assert safety.last_sent is not None
    assert safety.last_sent.shape == (3,) and safety.last_sent.dtype == np.float64
    np.testing.assert_array_equal(safety.last_sent, [1.0, 0.0, 1.0])
    decision = safety.filter(np.array([0.0, 0.45, 1.95]), state_age_s=0.0)
    assert decision.command.shape == (3,)
    np.testing.assert_allclose(decision.command, [0.9, 0.1, 1.1])
    assert decision.cause == "rate limited"


def test_enable_resyncs_a_position_interface_to_where_the_arm_was_moved() -> None:
    safety = make(hold="position", max_delta=0.1)
    safety.set_last(np.array([0.0, 0.0, 1.0]))
    safety.bind_output(lambda command: None)
    safety.bind_measurement(Measure(np.array([0.5, 0.2, 1.5])))  # moved by hand while stopped
    safety.enable()
    np.testing.assert_array_equal(safety.last_sent, [0.5, 0.2, 1.5])
    decision = safety.filter(np.array([0.5, 0.2, 1.5]), state_age_s=0.0)
    np.testing.assert_array_equal(decision.command, [0.5, 0.2, 1.5])
    assert decision.cause is None


def test_enable_does_not_resync_a_zero_hold_interface() -> None:
    safety = make(hold="zero", max_delta=0.1)
    safety.set_last(np.array([0.0, 0.0, 1.0]))
    safety.bind_output(lambda command: None)
    safety.bind_measurement(Measure(np.array([0.5, 0.2, 1.5])))
    safety.enable()
    np.testing.assert_array_equal(safety.last_sent, [0.0, 0.0, 1.0])


# -- the config's own checks -------------------------------------------------------------------
@pytest.mark.parametrize(("low", "high"), [([], []), ([-1.0, -1.0], [1.0]), ([-1.0], [1.0, 1.0])])
def test_limits_must_be_non_empty_and_of_equal_length(low, high) -> None:
    with pytest.raises(ConfigError) as err:
        SafetyConfig(low=low, high=high)
    assert str(err.value) == (
        f"safety limits low={low} and high={high} must be non-empty and of "
        "equal length (one per commanded joint)."
    )


def test_a_fixed_joint_with_low_equal_to_high_is_a_valid_limit() -> None:
    safety = SafetyLayer(SafetyConfig(low=[0.5, -1.0], high=[0.5, 1.0], hold="position"))
    decision = safety.filter(np.array([0.9, 0.2]), state_age_s=0.0)
    np.testing.assert_array_equal(decision.command, [0.5, 0.2])


def test_a_zero_hold_is_exactly_zero_in_float64() -> None:
    hold = make().hold_command()
    np.testing.assert_array_equal(hold, [0.0, 0.0, 0.0])
    assert hold.dtype == np.float64 and hold.shape == (3,)


# -- counters and log lines of the clamp and the rate limit ------------------------------------
def test_each_clamp_and_each_rate_limit_is_counted_and_the_clamp_logged(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    safety = make(max_delta=0.25)
    for expected in ([0.25, 0.0, 0.25], [0.5, 0.0, 0.5]):
        decision = safety.filter(np.array([3.0, 0.0, 0.5]), state_age_s=0.0)
        np.testing.assert_array_equal(decision.command, expected)
        assert decision.held is False and decision.cause == "rate limited"
        safety.last_sent = decision.command  # as if it were sent
    assert safety.interventions == {"clamp": 2, "rate_limit": 2}
    a, clipped = np.array([3.0, 0.0, 0.5]), np.array([1.0, 0.0, 0.5])
    assert warnings_of(caplog) == [f"clamped {a} to {clipped}"] * 2


def test_a_clamped_command_within_max_delta_is_clamped_not_rate_limited() -> None:
    safety = make(max_delta=0.25)
    safety.set_last(np.array([0.9, 0.0, 0.0]))
    decision = safety.filter(np.array([1.1, 0.0, 0.0]), state_age_s=0.0)
    np.testing.assert_array_equal(decision.command, [1.0, 0.0, 0.0])
    assert decision.cause == "clamped to joint limits" and decision.held is False
    assert safety.interventions == {"clamp": 1}


# -- outside the limits by more than one step: hold, from either side --------------------------
@pytest.mark.parametrize("start", [[-1.5, 0.0, 1.0], [1.5, 0.0, 1.0], [0.0, 0.0, 2.5]])
def test_a_last_command_beyond_either_limit_by_more_than_max_delta_holds(start, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    safety = make(hold="position", max_delta=0.1)
    safety.set_last(np.array(start))
    decision = safety.filter(np.zeros(3), state_age_s=0.0)
    assert decision.held is True and decision.watchdog is False
    np.testing.assert_array_equal(decision.command, start)
    cause = (
        f"the last command {[float(x) for x in start]} is more than max_delta=0.1 outside the "
        f"limits [{LOW}, {HIGH}]: holding; move the robot inside them"
    )
    assert decision.cause == cause
    assert safety.interventions["outside_limits"] == 1
    assert warnings_of(caplog)[-1] == f"safety intervention [outside_limits]: {cause}"


def test_a_command_exactly_on_the_limits_after_the_rate_limit_is_sent() -> None:
    safety = make(hold="position", max_delta=0.1)
    safety.set_last(np.array([-1.0, -0.5, 0.0]))  # standing exactly on the lower limits
    decision = safety.filter(np.array([-1.0, -0.5, 0.0]), state_age_s=0.0)
    assert decision.held is False and decision.cause is None
    np.testing.assert_array_equal(decision.command, [-1.0, -0.5, 0.0])


def test_low_above_high_and_an_unknown_hold_are_refused_by_name() -> None:
    with pytest.raises(ConfigError) as err:
        SafetyConfig(low=[-1.0, 1.0], high=[1.0, 0.5])
    assert str(err.value) == "safety limits need low <= high per joint, got [-1.0, 1.0]/[1.0, 0.5]"
    with pytest.raises(ConfigError) as err:
        SafetyConfig(low=[-1.0], high=[1.0], hold="freeze")
    assert str(err.value) == "safety.hold='freeze': accepted are zero, position."


def test_the_old_last_spelling_is_a_position_hold() -> None:
    assert SafetyConfig(low=[-1.0], high=[1.0], hold="last").hold == "position"
    assert SafetyConfig(low=[-1.0], high=[1.0], hold="position").hold == "position"


def test_integer_limits_are_held_as_floats() -> None:
    safety = SafetyLayer(SafetyConfig(low=[-1, 0], high=[1, 2], max_delta=0.5, hold="position"))
    assert safety.low.dtype == np.float64 and safety.high.dtype == np.float64
    safety.set_last(np.array([3.0, 1.0]))
    decision = safety.filter(np.zeros(2), state_age_s=0.0)
    assert decision.held and "limits [[-1.0, 0.0], [1.0, 2.0]]" in decision.cause


@pytest.mark.parametrize(
    ("low", "high", "start", "step"),
    [
        ([0.5, -1.0], [1.0, 1.0], [0.5, 0.0], [0.05, 0.05]),
        ([-2.0, -1.0], [-1.5, 1.0], [-1.5, 0.0], [-0.05, 0.05]),
    ],
)
def test_before_anything_is_sent_a_position_hold_and_the_rate_limit_start_inside_the_limits(
    low, high, start, step, caplog
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    safety = SafetyLayer(SafetyConfig(low=low, high=high, hold="position", max_delta=0.1))
    hold = safety.hold_command()  # no measurement bound, nothing sent: where zero is clamped
    np.testing.assert_array_equal(hold, start)
    assert hold.dtype == np.float64
    decision = safety.filter(np.add(start, step), state_age_s=0.0)
    assert decision.held is False and decision.cause is None  # one step from the start
    assert caplog.records == []  # no measurement bound: nothing tried, nothing logged


def test_a_zero_hold_range_may_end_at_zero_but_must_contain_it() -> None:
    SafetyConfig(low=[-1.0, 0.0], high=[0.0, 1.0])  # zero on either bound is inside
    with pytest.raises(ConfigError) as err:
        SafetyConfig(low=[-1.0, 0.25], high=[1.0, 1.0])
    assert str(err.value) == (
        "safety limits low=[-1.0, 0.25] high=[1.0, 1.0] exclude zero for joint 1 ([0.25, 1.0]) "
        "on a velocity/effort interface, whose stop sends zero: the limits would keep the robot "
        "moving while allowed to command. A velocity or effort range must contain 0."
    )

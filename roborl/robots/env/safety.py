"""The safety layer: the only path from a policy's action to a robot's command.

Clamps to per-joint limits, limits the change per step from the last command *sent* (holds
included), rejects NaN/inf (holds instead), runs a watchdog on stale state, stale camera
frames and late policy output, and keeps a latched e-stop that only an explicit
`reset_estop()` clears. Every intervention is logged with its cause and counted. Once bound to
the driver's command function it also owns the output (`safety_output.SafetyOutput`: every
stop sends the hold, nothing follows it, nothing restarts motion unasked).

What a hold sends is decided by the command interface, never by a default (see
`roborl.robots.config.hold_for`): `zero` on velocity and effort interfaces, `position` on
position interfaces, i.e. where the arm stands: the newest measured positions of the commanded
joints, or, when that measurement is missing or older than `max_state_age_s`, the last
command sent (never zero, which is a place, not a stop, for a position controller). A position
hold is not clamped to the limits: an arm that stands outside them holds there, and a policy
command that cannot reach the limits within `max_delta` holds too instead of jumping.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from roborl.robots.env.safety_output import SafetyOutput

log = logging.getLogger("roborl.robots.safety")

#: What a hold sends: `zero` (velocity, effort) or `position` (where the arm stands).
HOLDS = ("zero", "position")


@dataclass
class SafetyConfig:
    low: list[float]
    high: list[float]
    max_delta: float | None = None  # per control step, per joint; None: no rate limit
    max_state_age_s: float = 0.25  # watchdog on stale observations
    max_policy_time_s: float = 0.5  # watchdog on late policy output
    hold: str = "zero"  # "zero" (effort/velocity interfaces) or "position" (position ones)
    # Per camera name: hold when its newest frame is older (a policy that sees pixels must
    # not act on a frozen picture, as one that sees joints must not act on a stale state).
    max_camera_age_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from roborl.core.errors import ConfigError

        if len(self.low) != len(self.high) or not self.low:
            raise ConfigError(
                f"safety limits low={self.low} and high={self.high} must be non-empty and of "
                "equal length (one per commanded joint)."
            )
        if any(lo > hi for lo, hi in zip(self.low, self.high)):
            raise ConfigError(
                f"safety limits need low <= high per joint, got {self.low}/{self.high}"
            )
        if self.hold == "last":  # the old spelling of a position hold
            self.hold = "position"
        if self.hold not in HOLDS:
            raise ConfigError(f"safety.hold={self.hold!r}: accepted are {', '.join(HOLDS)}.")
        moving = [i for i, (lo, hi) in enumerate(zip(self.low, self.high)) if not lo <= 0 <= hi]
        if self.hold == "zero" and moving:
            i = moving[0]
            raise ConfigError(
                f"safety limits low={self.low} high={self.high} exclude zero for joint {i} "
                f"([{self.low[i]}, {self.high[i]}]) on a velocity/effort interface, whose stop "
                "sends zero: the limits would keep the robot moving while allowed to command. "
                "A velocity or effort range must contain 0."
            )


@dataclass
class Decision:
    """What the safety layer lets through: a command to send, or a hold and why."""

    command: np.ndarray
    held: bool
    cause: str | None = None
    watchdog: bool = False
    human: bool = False  # the command is a person's (an intervention), not the policy's


#: Reads the commanded joints' measured positions: (positions, seconds since they arrived).
Measure = Callable[[], tuple[np.ndarray, float]]


@dataclass
class SafetyLayer(SafetyOutput):
    config: SafetyConfig
    interventions: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.low = np.asarray(self.config.low, dtype=np.float64)
        self.high = np.asarray(self.config.high, dtype=np.float64)
        self._measure: Measure | None = None
        # Where the rate limit starts before anything was sent (the measured position at
        # connect for a position hold, zero otherwise).
        self._start = np.clip(np.zeros_like(self.low), self.low, self.high)
        self._init_output()

    # -- holds ----------------------------------------------------------------------------
    def bind_measurement(self, measure: Measure) -> None:
        """Where a position hold reads the arm's position from (the driver's newest state)."""
        self._measure = measure

    def measured_position(self) -> np.ndarray | None:
        """The commanded joints' newest measured positions, or None when missing, stale
        (older than `max_state_age_s`), the wrong size or not finite."""
        if self._measure is None:
            return None
        try:
            position, age = self._measure()
        except Exception as exc:  # no state yet, a closed driver: fall back, never raise
            log.debug("no measured position for the hold: %s", exc)
            return None
        position = np.asarray(position, dtype=np.float64).reshape(-1)
        fresh = age <= self.config.max_state_age_s
        if not fresh or position.shape != self.low.shape or not np.all(np.isfinite(position)):
            return None
        return position

    def hold_command(self) -> np.ndarray:
        """The command that stops the robot without moving it: zero on velocity and effort
        interfaces; on position interfaces where the arm stands (measured), else the last
        command sent, else where it stood at connect."""
        if self.config.hold == "zero":
            return np.zeros_like(self.low)  # inside the limits: SafetyConfig checks they hold 0
        measured = self.measured_position()
        if measured is not None:
            return measured
        if self.last_sent is not None:
            return self.last_sent.copy()
        return self._start.copy()

    def set_last(self, command: np.ndarray) -> None:
        """Restart the rate limit from `command` (the measured position at connect, or
        before a scripted move), as if it had been sent."""
        self._start = np.asarray(command, dtype=np.float64).reshape(-1).copy()
        self.last_sent = self._start.copy()

    def _resync(self) -> None:
        """On enable: a position interface restarts the rate limit from where the arm is
        now (it may have been moved by hand while stopped), not from a pre-stop target."""
        if self.config.hold != "position":
            return
        measured = self.measured_position()
        if measured is not None:
            self.set_last(measured)

    def _reference(self) -> np.ndarray:
        """What the rate limit measures the next command against: the last one sent."""
        return self.last_sent if self.last_sent is not None else self._start

    def _note(self, kind: str, cause: str) -> None:
        self.interventions[kind] += 1
        log.warning("safety intervention [%s]: %s", kind, cause)

    def _held(self, kind: str, cause: str, watchdog: bool = False) -> Decision:
        self._note(kind, cause)
        return Decision(self.hold_command(), True, cause, watchdog=watchdog)

    def filter(
        self,
        action: np.ndarray,
        state_age_s: float,
        policy_time_s: float = 0.0,
        camera_ages_s: Mapping[str, float] | None = None,
        human: np.ndarray | None = None,
    ) -> Decision | None:
        """Turn a policy action into a command; None means "send nothing" (e-stop latched).

        `camera_ages_s`: seconds since each camera's newest frame arrived, checked against
        `config.max_camera_age_s` like the joint state's age. `human`: a person's teleop
        command while they intervene; it replaces `action` and passes the same checks,
        clamp and rate limit (a person's gamepad is no more trusted than a policy)."""
        if self.estopped:
            return None
        if human is not None:
            self.interventions["human"] += 1
            decision = self.filter(human, state_age_s, policy_time_s, camera_ages_s)
            if decision is not None and not decision.held:
                decision.human = True
            return decision
        if state_age_s > self.config.max_state_age_s:
            cause = f"state is {state_age_s:.3f}s old (> {self.config.max_state_age_s}s)"
            return self._held("watchdog_state", cause, watchdog=True)
        for name, age in (camera_ages_s or {}).items():
            limit = self.config.max_camera_age_s.get(name)
            if limit is not None and age > limit:
                cause = f"camera {name!r} frame is {age:.3f}s old (> {limit}s)"
                return self._held("watchdog_camera", cause, watchdog=True)
        if policy_time_s > self.config.max_policy_time_s:
            cause = f"policy took {policy_time_s:.3f}s (> {self.config.max_policy_time_s}s)"
            return self._held("watchdog_policy", cause, watchdog=True)
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != self.low.shape:
            cause = f"action has shape {a.shape}, robot expects ({self.low.size},)"
            return self._held("bad_shape", cause)
        if not np.all(np.isfinite(a)):
            return self._held("nonfinite", f"non-finite action {a.tolist()}")
        cause = None
        clipped = np.clip(a, self.low, self.high)
        if not np.array_equal(clipped, a):
            self.interventions["clamp"] += 1
            log.debug("clamped %s to %s", a, clipped)
            cause = "clamped to joint limits"
        if self.config.max_delta is not None:
            d = self.config.max_delta
            ref = self._reference()
            limited = np.clip(clipped, ref - d, ref + d)
            if not np.array_equal(limited, clipped):
                self.interventions["rate_limit"] += 1
                cause = "rate limited"
            if np.any(limited < self.low) or np.any(limited > self.high):
                # The last command (a hold where the arm stands) is outside the limits by
                # more than one step: reaching them would jump, leaving them is forbidden.
                return self._held(
                    "outside_limits",
                    f"the last command {ref.tolist()} is more than max_delta={d} outside the "
                    f"limits [{self.low.tolist()}, {self.high.tolist()}]: holding; move the "
                    "robot inside them",
                )
            clipped = limited
        return Decision(clipped.copy(), False, cause)

    def stamp(self) -> float:
        return time.monotonic()

"""The safety layer: the only path from a policy's action to a robot's command.

Clamps to per-joint limits, limits the change per step, rejects NaN/inf (holds instead), runs a
watchdog on stale state, stale camera frames and late policy output, and keeps a latched e-stop
that only an explicit `reset_estop()` clears. Every intervention is logged with its cause and
counted.

Once bound to the driver's command function (`bind_output`), the layer also owns the output:
- every way commanding stops (e-stop, `disable()` for lifecycle deactivate/shutdown, errors,
  Ctrl-C) sends the hold command at once, from whichever thread stops it, under the same lock
  as the control loop's `emit()`, so no policy command can follow the hold;
- clearing the e-stop never restarts motion: the layer stays disabled until an explicit
  `enable()` (deploy's lifecycle activate, the train driver's `~/activate` service);
- a supervisor thread, independent of the control loop, sends the hold whenever no command has
  gone out for `max_policy_time_s` while enabled, so a hung policy, a GIL stall or a blocked
  loop cannot leave the last command running.
This is a software stop, not a safety-rated one: a real robot also needs a hardware e-stop and
controller-side command timeouts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger("roborl.robots.safety")


@dataclass
class SafetyConfig:
    low: list[float]
    high: list[float]
    max_delta: float | None = None  # per control step, per joint; None: no rate limit
    max_state_age_s: float = 0.25  # watchdog on stale observations
    max_policy_time_s: float = 0.5  # watchdog on late policy output
    hold: str = "zero"  # "zero" (effort/velocity control) or "last" (position control)
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
        if self.hold not in ("zero", "last"):
            raise ConfigError(f"safety.hold={self.hold!r}: accepted are 'zero' and 'last'.")


@dataclass
class Decision:
    """What the safety layer lets through: a command to send, or a hold and why."""

    command: np.ndarray
    held: bool
    cause: str | None = None
    watchdog: bool = False
    human: bool = False  # the command is a person's (an intervention), not the policy's


@dataclass
class SafetyLayer:
    config: SafetyConfig
    interventions: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.low = np.asarray(self.config.low, dtype=np.float64)
        self.high = np.asarray(self.config.high, dtype=np.float64)
        self._last = np.clip(np.zeros_like(self.low), self.low, self.high)
        self._estop = threading.Event()
        self.estop_cause: str | None = None
        # The output side (see the module docstring): one lock orders holds and commands.
        self._out_lock = threading.RLock()
        self._send: Callable[[np.ndarray], None] | None = None
        self._enabled = False
        self._holding = False
        # The supervisor's clock: the control loop's (sim time under use_sim_time, so a
        # paused simulation is not mistaken for a hung policy).
        self.clock: Callable[[], float] = time.monotonic
        self._last_sent = time.monotonic()
        self.holds_sent = 0
        self._supervisor: threading.Thread | None = None
        self._supervisor_stop = threading.Event()

    # -- output ---------------------------------------------------------------------------
    def bind_output(self, send: Callable[[np.ndarray], None]) -> None:
        """Route every command and hold through `send` (the driver's command function)."""
        self._send = send

    def emit(self, command: np.ndarray) -> bool:
        """Send a command `filter` let through; False (nothing sent) when the e-stop is
        latched or the layer is disabled, which a stop from another thread may have done
        between `filter` and here."""
        with self._out_lock:
            if self.estopped or not self._enabled or self._send is None:
                return False
            self._send(command)
            self._last_sent = self.clock()
            self._holding = False
            return True

    def send_hold(self) -> None:
        """Send the hold command now, whatever the state (holding is always allowed)."""
        with self._out_lock:
            self._holding = True
            self._last_sent = self.clock()
            if self._send is None:
                return
            try:
                self._send(self.hold_command())
                self.holds_sent += 1
            except Exception as exc:  # a dead transport must not hide the stop's cause
                log.error("hold command failed: %s", exc)

    @property
    def enabled(self) -> bool:
        return self._enabled

    def enable(self) -> None:
        """The explicit request that allows motion (start, lifecycle activate, `~/activate`)."""
        from roborl.core.errors import RobotError

        with self._out_lock:
            if self.estopped:
                raise RobotError(
                    f"cannot enable commanding: the e-stop is latched ({self.estop_cause}); "
                    "clear it first (clearing alone never restarts motion)."
                )
            self._enabled = True
            self._last_sent = self.clock()

    def disable(self, cause: str, hold: bool = True) -> None:
        """Stop commanding (lifecycle deactivate/cleanup/shutdown, an error, exit): the hold
        goes out at once and nothing more until `enable()`."""
        with self._out_lock:
            was = self._enabled
            self._enabled = False
            if hold:
                self.send_hold()
        if was:
            log.info("commanding disabled (%s); the robot holds", cause)

    # -- supervisor -----------------------------------------------------------------------
    def start_supervisor(self, period_s: float) -> None:
        """Check every `period_s` that a command went out within `max_policy_time_s`."""
        if self._supervisor is not None:
            return
        self._supervisor_stop.clear()
        self._supervisor = threading.Thread(
            target=self._supervise, args=(period_s,), name="roborl-safety-supervisor", daemon=True
        )
        self._supervisor.start()

    def stop_supervisor(self) -> None:
        self._supervisor_stop.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(2.0)
        self._supervisor = None

    def _supervise(self, period_s: float) -> None:
        limit = self.config.max_policy_time_s
        while not self._supervisor_stop.wait(period_s):
            with self._out_lock:
                if not self._enabled or self.estopped or self._holding:
                    continue
                silent = self.clock() - self._last_sent
                if silent > limit:
                    self._note("watchdog_supervisor", f"no command for {silent:.3f}s (> {limit}s)")
                    self.send_hold()

    # -- e-stop ---------------------------------------------------------------------------
    def trigger_estop(self, cause: str) -> None:
        """Latch the e-stop and send the hold at once (thread-safe; called from transport
        callbacks, services and signal handlers)."""
        with self._out_lock:
            if not self._estop.is_set():
                self.estop_cause = cause
                self._estop.set()
                self._note("estop", cause)
                self.send_hold()

    @property
    def estopped(self) -> bool:
        return self._estop.is_set()

    def reset_estop(self) -> None:
        """The explicit operator action that clears a latched e-stop. It only clears: the
        layer stays disabled (holding) until an explicit `enable()`."""
        with self._out_lock:
            log.warning(
                "e-stop reset by operator (was: %s); motion needs an explicit activate",
                self.estop_cause,
            )
            self.estop_cause = None
            self._estop.clear()
            self._enabled = False
            self.send_hold()

    # -- commands -------------------------------------------------------------------------
    def hold_command(self) -> np.ndarray:
        if self.config.hold == "last":
            return self._last.copy()
        return np.clip(np.zeros_like(self.low), self.low, self.high)

    def set_last(self, command: np.ndarray) -> None:
        """Make `command` (clipped to the limits) what a `hold=last` hold repeats, e.g. the
        measured position at connect or the home pose after a reset, never an unseen zero."""
        self._last = np.clip(np.asarray(command, dtype=np.float64), self.low, self.high)

    def _note(self, kind: str, cause: str) -> None:
        self.interventions[kind] += 1
        log.warning("safety intervention [%s]: %s", kind, cause)

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
            self._note("watchdog_state", cause)
            return Decision(self.hold_command(), True, cause, watchdog=True)
        for name, age in (camera_ages_s or {}).items():
            limit = self.config.max_camera_age_s.get(name)
            if limit is not None and age > limit:
                cause = f"camera {name!r} frame is {age:.3f}s old (> {limit}s)"
                self._note("watchdog_camera", cause)
                return Decision(self.hold_command(), True, cause, watchdog=True)
        if policy_time_s > self.config.max_policy_time_s:
            cause = f"policy took {policy_time_s:.3f}s (> {self.config.max_policy_time_s}s)"
            self._note("watchdog_policy", cause)
            return Decision(self.hold_command(), True, cause, watchdog=True)
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != self.low.shape:
            cause = f"action has shape {a.shape}, robot expects ({self.low.size},)"
            self._note("bad_shape", cause)
            return Decision(self.hold_command(), True, cause)
        if not np.all(np.isfinite(a)):
            cause = f"non-finite action {a.tolist()}"
            self._note("nonfinite", cause)
            return Decision(self.hold_command(), True, cause)
        cause = None
        clipped = np.clip(a, self.low, self.high)
        if not np.array_equal(clipped, a):
            self.interventions["clamp"] += 1
            log.debug("clamped %s to %s", a, clipped)
            cause = "clamped to joint limits"
        if self.config.max_delta is not None:
            d = self.config.max_delta
            limited = np.clip(clipped, self._last - d, self._last + d)
            if not np.array_equal(limited, clipped):
                self.interventions["rate_limit"] += 1
                cause = "rate limited"
            clipped = np.clip(limited, self.low, self.high)  # never past a limit, whatever d
        self._last = clipped
        return Decision(clipped.copy(), False, cause)

    def stamp(self) -> float:
        return time.monotonic()

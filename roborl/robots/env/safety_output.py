"""The output side of the safety layer: one lock orders every command and every hold.

Why it is its own part: which command reaches the robot last, when commanding stops, decides
whether a stop moves the robot. The rules it keeps:
- every way commanding stops (e-stop, `disable()` for lifecycle deactivate/shutdown, errors,
  exit) sends the hold at once, under the same lock as `emit()`, so no policy command can
  follow the hold of the same stop;
- a signal handler never takes that lock (it may have interrupted `emit` on the same thread,
  where a re-entrant lock would let the interrupted command go out after the hold): it calls
  `request_estop`, which only sets a flag that `emit` obeys, and the supervisor thread latches
  and sends the hold;
- while the e-stop is latched or commanding is disabled after a stop, the supervisor re-sends
  the hold every period (a lost or failed hold is retried, and a controller with a command
  timeout keeps holding);
- clearing the e-stop never restarts motion: the layer stays disabled until an explicit
  `enable()` (deploy's lifecycle activate, the train driver's `~/activate` service);
- the supervisor also sends the hold whenever no command has gone out for
  `max_policy_time_s` while enabled (a hung policy, a GIL stall, a blocked loop); it survives
  its own errors, and should it die anyway, `emit` refuses every further command.
This is a software stop, not a safety-rated one: a real robot also needs a hardware e-stop and
controller-side command timeouts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import numpy as np

log = logging.getLogger("roborl.robots.safety")


class SafetyOutput:
    """Mixed into `SafetyLayer`, which provides `hold_command()`, `config` and `_note()`."""

    def _init_output(self) -> None:
        self._estop = threading.Event()
        self.estop_cause: str | None = None
        self._requested: str | None = None  # a stop asked for by a signal handler
        self._out_lock = threading.RLock()
        self._send: Callable[[np.ndarray], None] | None = None
        self._enabled = False
        self._holding = False  # the newest output is a hold: the supervisor repeats it
        # The supervisor's clock: the control loop's (sim time under use_sim_time, so a
        # paused simulation is not mistaken for a hung policy).
        self.clock: Callable[[], float] = time.monotonic
        self._last_output_at = time.monotonic()
        self.last_sent: np.ndarray | None = None  # the newest command or hold that went out
        self.holds_sent = 0
        self.hold_failures = 0
        self.outputs = 0  # commands and holds that went out
        self.outputs_at_estop: int | None = None  # how many before the latch's hold
        self._supervisor: threading.Thread | None = None
        self._supervisor_stop = threading.Event()
        self._supervisor_wake = threading.Event()
        self.supervisor_failed: str | None = None

    # to be provided by SafetyLayer
    def hold_command(self) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def _note(self, kind: str, cause: str) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _resync(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    # -- output ---------------------------------------------------------------------------
    def bind_output(self, send: Callable[[np.ndarray], None]) -> None:
        """Route every command and hold through `send` (the driver's command function)."""
        self._send = send

    def emit(self, command: np.ndarray) -> bool:
        """Send a command `filter` let through; False (nothing sent) when the e-stop is
        latched or requested, the layer is disabled (a stop from another thread may have
        done either between `filter` and here), or the supervisor has died."""
        with self._out_lock:
            if self.estopped or not self._enabled or self._send is None:
                return False
            if self.supervisor_failed is not None:
                return False
            self._send(command)
            self.outputs += 1
            self.last_sent = np.array(command, dtype=np.float64)
            self._last_output_at = self.clock()
            self._holding = False
            return True

    def send_hold(self) -> None:
        """Send the hold command now, whatever the state (holding is always allowed). A
        failure is logged and counted; the supervisor retries every period."""
        with self._out_lock:
            self._holding = True
            self._last_output_at = self.clock()
            if self._send is None:
                return
            try:
                hold = self.hold_command()
                self._send(hold)
            except Exception as exc:  # a dead transport must not hide the stop's cause
                self.hold_failures += 1
                log.error("hold command failed (retried every period): %s", exc)
                return
            self.last_sent = np.array(hold, dtype=np.float64)
            self.holds_sent += 1
            self.outputs += 1

    @property
    def enabled(self) -> bool:
        return self._enabled

    def enable(self) -> None:
        """The explicit request that allows motion (start, lifecycle activate, `~/activate`).
        The rate limit restarts from where the robot is (position interfaces re-sync to the
        measured position), not from a target computed before the stop."""
        from roborl.core.errors import RobotError

        with self._out_lock:
            if self.estopped:
                raise RobotError(
                    f"cannot enable commanding: the e-stop is latched ({self.estop_cause}); "
                    "clear it first (clearing alone never restarts motion)."
                )
            if self.supervisor_failed is not None:
                raise RobotError(
                    f"cannot enable commanding: the safety supervisor died "
                    f"({self.supervisor_failed}); restart the node."
                )
            self._resync()
            self._enabled = True
            self._last_output_at = self.clock()

    def disable(self, cause: str, hold: bool = True) -> None:
        """Stop commanding (lifecycle deactivate/cleanup/shutdown, an error, exit): the hold
        goes out at once and nothing more until `enable()`."""
        self.apply_requested_estop()
        with self._out_lock:
            was = self._enabled
            self._enabled = False
            if hold:
                self.send_hold()
        if was:
            log.info("commanding disabled (%s); the robot holds", cause)

    # -- supervisor -----------------------------------------------------------------------
    def start_supervisor(self, period_s: float) -> None:
        """Every `period_s`: apply a requested e-stop, repeat the hold while holding, and
        hold when no command went out within `max_policy_time_s` while enabled."""
        if self._supervisor is not None:
            return
        self._supervisor_stop.clear()
        self._supervisor = threading.Thread(
            target=self._supervise, args=(period_s,), name="roborl-safety-supervisor", daemon=True
        )
        self._supervisor.start()

    def stop_supervisor(self) -> None:
        self.apply_requested_estop()
        self._supervisor_stop.set()
        self._supervisor_wake.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(2.0)
        self._supervisor = None

    def _supervise(self, period_s: float) -> None:
        try:
            while not self._supervisor_stop.is_set():
                self._supervisor_wake.wait(period_s)
                self._supervisor_wake.clear()
                if self._supervisor_stop.is_set():
                    break
                try:
                    self._supervise_once()
                except Exception as exc:  # one bad period must not end supervision
                    log.error("safety supervisor: %s (it carries on)", exc)
        except BaseException as exc:
            self.supervisor_failed = repr(exc)
            log.critical("safety supervisor died (%r): no more commands are sent", exc)
        finally:
            if not self._supervisor_stop.is_set() and self.supervisor_failed is None:
                self.supervisor_failed = "the supervisor thread ended"

    def _supervise_once(self) -> None:
        self.apply_requested_estop()
        with self._out_lock:
            if self._holding:
                self.send_hold()  # re-sent every period while latched, disabled or held
                return
            if not self._enabled or self.estopped:
                return
            limit = self.config.max_policy_time_s  # type: ignore[attr-defined]
            silent = self.clock() - self._last_output_at
            if silent > limit:
                self._note("watchdog_supervisor", f"no command for {silent:.3f}s (> {limit}s)")
                self.send_hold()

    # -- e-stop ---------------------------------------------------------------------------
    def request_estop(self, cause: str) -> None:
        """For signal handlers: from now on `emit` sends nothing, and the latch and its hold
        follow on the supervisor's thread (or a thread of their own without a supervisor),
        after any command the handler interrupted. Takes no lock the handler's own thread
        may hold."""
        if self._requested is None:
            self._requested = cause
        if self._supervisor is not None:
            self._supervisor_wake.set()
        else:
            threading.Thread(target=self.apply_requested_estop, daemon=True).start()

    def apply_requested_estop(self) -> None:
        """Latch a stop a signal handler requested, now (not from a signal handler)."""
        cause = self._requested
        if cause is not None:
            self.trigger_estop(cause)

    def trigger_estop(self, cause: str) -> None:
        """Latch the e-stop and send the hold at once (thread-safe; called from transport
        callbacks, services and the supervisor; signal handlers use `request_estop`)."""
        with self._out_lock:
            if not self._estop.is_set():
                self.estop_cause = cause
                self.outputs_at_estop = self.outputs
                self._estop.set()
                self._note("estop", cause)
                self.send_hold()
            self._requested = None

    @property
    def estopped(self) -> bool:
        return self._estop.is_set() or self._requested is not None

    def reset_estop(self) -> None:
        """The explicit operator action that clears a latched e-stop. It only clears: the
        layer stays disabled (holding) until an explicit `enable()`."""
        with self._out_lock:
            log.warning(
                "e-stop reset by operator (was: %s); motion needs an explicit activate",
                self.estop_cause,
            )
            self.estop_cause = None
            self.outputs_at_estop = None
            self._requested = None
            self._estop.clear()
            self._enabled = False
            self.send_hold()

"""The scripted person's rule: take over when the task stalls, hand back when it recovers.

HIL-SERL's operator steps in when the robot heads the wrong way and lets go once it is back
on track. On the task error (the distance still to go):

- **takeover** ("drift"): the error is above `tolerance` and has not shrunk by `min_progress`
  over the last `window_s` seconds;
- **release**: the error fell to `tolerance` ("done"), shrank by `recover` since the takeover
  ("back_on_track"), or the takeover lasted `max_takeover_s` ("max_takeover").

Time is the caller's: robot time in simulation, the node's clock on a robot.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class DriftOptions(Protocol):
    """The rule's thresholds (`scripted_person=` and `roborl scripted-human` options)."""

    tolerance: float
    window_s: float
    min_progress: float
    recover: float
    max_takeover_s: float


class DriftRule:
    """Takeover on no progress over a window, release on recovery (module docstring)."""

    def __init__(self, opts: DriftOptions) -> None:
        self.opts = opts
        self.history: deque[tuple[float, float]] = deque()
        self.intervening = False
        self.since = 0.0
        self.error_at_takeover = 0.0

    def reset(self) -> None:
        self.history.clear()
        self.intervening = False

    def update(self, now: float, error: float) -> tuple[str, str] | None:
        """Feed one observation; returns ("takeover"|"release", cause) when the state flips."""
        o = self.opts
        if self.intervening:
            cause = None
            if error <= o.tolerance:
                cause = "done"
            elif error <= self.error_at_takeover - o.recover:
                cause = "back_on_track"
            elif now - self.since >= o.max_takeover_s:
                cause = "max_takeover"
            if cause is None:
                return None
            self.reset()
            return "release", cause
        self.history.append((now, error))
        while self.history and now - self.history[0][0] > o.window_s:
            self.history.popleft()
        if error <= o.tolerance:
            self.history.clear()
            return None
        t0, e0 = self.history[0]
        if now - t0 >= 0.9 * o.window_s and e0 - error < o.min_progress:
            self.intervening, self.since, self.error_at_takeover = True, now, error
            self.history.clear()
            return "takeover", "drift"
        return None

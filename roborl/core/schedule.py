"""The run's one schedule: when a loop logs, evaluates, checkpoints and records a video.

Before it, every loop kept its own copy of the log/eval/checkpoint arithmetic. Now a loop
says what it counts (`TrainContext.begin(clock, total)`) and asks `TrainContext.due(kind)`
after each `advance`; this module holds that arithmetic, on whichever clock (env steps or
gradient updates) the current phase counts.
"""

from __future__ import annotations

import math
from typing import Literal

from roborl.core.config import RunConfig

Clock = Literal["steps", "updates"]
Scheduled = Literal["eval", "checkpoint", "log", "video"]
"""`video` is scheduled only with `video_every=N`; `evaluate` asks for it itself."""


class Schedule:
    """What the current phase counts, its budget, and the next point of each scheduled event."""

    def __init__(self, run: RunConfig) -> None:
        self._run = run
        self.clock: Clock = "steps"
        self.total = run.total_steps
        self._next: dict[str, int] = {}
        self.every = {"checkpoint": run.checkpoint_every, "log": run.log_every}
        if run.eval_every:  # eval_every=0: no evaluations at all (collection-only runs)
            self.every["eval"] = run.eval_every
        if run.video_every:  # the first evaluation at or after each multiple gets a video
            self.every["video"] = run.video_every

    def now(self, step: int, updates: int) -> int:
        """The counter the schedule reads: `step` on a steps clock, else `updates`."""
        return step if self.clock == "steps" else updates

    def begin(self, clock: Clock, total: int | None) -> None:
        """Start a phase counting `clock` up to `total` (default: the run's budget for it);
        `realign` then places its events."""
        if clock not in ("steps", "updates"):
            raise ValueError(f"clock must be 'steps' or 'updates', not {clock!r}")
        self.clock = clock
        default = self._run.total_steps if clock == "steps" else self._run.total_updates
        self.total = int(default if total is None else total)

    def realign(self, now: int) -> None:
        """Every event falls on the next multiple of its `*_every` after `now`."""
        for kind, every in self.every.items():
            self._next[kind] = (now // every + 1) * every

    def due(self, kind: Scheduled, now: int) -> bool:
        """True once each time `now` reaches the next multiple of `{kind}_every`."""
        every = self.every.get(kind)
        if not every:  # not scheduled (eval_every=0, no video_every)
            return False
        if kind not in self._next:
            self._next[kind] = (now // every + 1) * every
            return False
        if now >= self._next[kind]:
            self._next[kind] = (now // every + 1) * every
            return True
        return False

    def event_stride(self, limit: int = 256) -> int:
        """The largest n <= `limit` dividing every scheduled interval, the end of the random
        phase (`learning_starts`) and the phase's budget (1 on an updates clock)."""
        if self.clock != "steps":
            return 1
        common = math.gcd(self.total, self._run.learning_starts, *self.every.values())
        if common <= 0:
            return 1
        return max(d for d in range(1, max(1, limit) + 1) if common % d == 0)

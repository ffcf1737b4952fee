"""The run's progress bar (tqdm), counting whatever the schedule's clock counts.

Kept apart from the schedule because a bar is display only: it may be disabled
(`progress=false`) or absent, and nothing in the run reads it back.
"""

from __future__ import annotations

from typing import Any


class ProgressBar:
    """One tqdm bar at a time; every method is a no-op while none is open."""

    def __init__(self) -> None:
        self._bar: Any = None

    def open(self, total: int, initial: int, enabled: bool, unit: str, desc: str) -> None:
        """Replace the open bar (if any) by a new one."""
        from tqdm.auto import tqdm

        if self._bar is not None:
            self._bar.close()
        self._bar = tqdm(
            total=total,
            initial=initial,
            disable=not enabled,
            unit=unit,
            dynamic_ncols=True,
            desc=desc,
            mininterval=1.0,
        )

    def update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def move_to(self, n: int) -> None:
        """Show `n` as done (a resumed run starts where its checkpoint was)."""
        if self._bar is not None:
            self._bar.n = n

    def postfix(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

"""Hook plugins that tests register on the host to cut a run short or watch it."""

from __future__ import annotations

from roborl.core.hookspecs import hookimpl


class InterruptAtFirstCheckpoint:
    """Ctrl-C right after the first scheduled checkpoint, once."""

    armed = True

    @hookimpl
    def roborl_checkpoint(self, path: str, step: int) -> None:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt


class Checkpoints:
    """The env steps (or updates, offline) at which a run checkpoints."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    @hookimpl
    def roborl_checkpoint(self, path: str, step: int) -> None:
        self.steps.append(step)

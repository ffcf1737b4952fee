"""Sim plugin: roborl's image-based, language-conditioned MuJoCo tabletop tasks."""

from __future__ import annotations

from collections.abc import Callable

from roborl.core.hookspecs import hookimpl
from roborl.sim.tabletop.env import TASKS, TabletopEnv

__all__ = ["TASKS", "TabletopEnv"]


@hookimpl
def roborl_envs() -> dict[str, Callable[..., TabletopEnv]]:
    return {"RoborlTabletop-v0": TabletopEnv}

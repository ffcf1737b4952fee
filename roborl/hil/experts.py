"""The scripted experts, by name, each living beside its task (`roborl/sim/...`).

A scripted expert plays the person on a scene it only sees from outside, as
`roborl scripted-human` sees a robot's `sensor_msgs/JointState`: it reads the joints it needs,
gives the task error (`error`, the distance still to go, for the drift rule) and the action
that reduces it. In simulation the scripted person asks the live task itself (its
`expert_action()` and `progress()`) instead, so it needs no expert from here.

A task registers its expert with a ``"module:Class"`` string (`roborl/sim/registration.py`),
so the task's module loads only when the expert is built; `expert_for(name, task=...)` builds
it.
"""

from __future__ import annotations

import importlib
from typing import Protocol

import numpy as np

from roborl.core.errors import ConfigError


class JointStateExpert(Protocol):
    """A scripted expert fed joint positions by name."""

    instruction: str  # what the task asks, for logs
    n_action: int  # the action size it commands
    commands: str  # what those actions are, for error messages

    def set_state(self, names: list[str], positions: list[float]) -> np.ndarray:
        """Read the scene from a JointState; returns the part that moves only on a reset (a
        jump in it is a new episode)."""
        ...

    def action(self) -> np.ndarray:
        """The expert's action on the scene last read."""
        ...

    def error(self) -> float:
        """The task error on the scene last read (0: done)."""
        ...


_EXPERTS: dict[str, str] = {}


def register_expert(name: str, entry: str) -> None:
    """Register the expert class at ``"module:Class"`` (built as ``Class(task=TASK)``)."""
    _EXPERTS[name] = entry


def expert_names() -> tuple[str, ...]:
    return tuple(_EXPERTS)


def expert_for(name: str, task: int = 0) -> JointStateExpert:
    """The expert registered as `name`, for task index `task` (where its task has several)."""
    if name not in _EXPERTS:
        raise ConfigError(f"expert={name!r}: accepted are {', '.join(_EXPERTS)}.")
    module, cls = _EXPERTS[name].split(":")
    expert: JointStateExpert = getattr(importlib.import_module(module), cls)(task=task)
    return expert


def joint_values(
    names: list[str], positions: list[float], wanted: list[str], expert: str, env: str
) -> np.ndarray:
    """The positions of `wanted` from a JointState's names and positions; a missing joint is a
    ConfigError naming it and the sim-robot env that publishes it."""
    index = {n: i for i, n in enumerate(names)}
    missing = [j for j in wanted if j not in index]
    if missing:
        raise ConfigError(
            f"the {expert} expert needs joints {missing} on the JointState topic (it has "
            f"{names}); run `roborl sim-robot {env}` without a joints= filter."
        )
    return np.asarray([positions[index[j]] for j in wanted], dtype=np.float64)

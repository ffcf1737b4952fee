"""Human in the loop: who may take the robot over from the policy, and how.

HIL-SERL (Luo et al., 2024, Sec. III-B) has a person take over when the policy drifts; the
env executes the person's action instead of the policy's and flags it, so the learner stores
it (and copies it to the demo buffer). This package is that, independent of how the person
speaks:

- `teleoperator.py`: the `Teleoperator` protocol (the person's action when they take over,
  else None) and `Teleoperated`, the wrapper that executes it on a simulated env;
- `intervention.py`: a teleop device's inputs to an action (axis mapping, scale, dead-man
  button, deadzone), shared by the ROS gamepad (`roborl/robots/env/intervention.py`) and the
  scripted person;
- `drift.py`: the scripted person's rule (take over on no progress, hand back on recovery);
- `experts.py`: the scripted experts by name (each lives beside its task in `roborl/sim/`);
- `scripted_person.py`: `scripted_person=`, a `Teleoperator` that calls the task's expert.

It sits on the plugins' floor: it imports `roborl.core` only. Core reaches the scripted person
through the `roborl_training_wrappers` hook (this module is the ``hil`` plugin, registered by
entry point like every built-in one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from roborl.core.hookspecs import hookimpl


def _scripted_person(cfg: Mapping[str, Any], maker: Callable[[], Any]) -> Callable[[], Any]:
    from roborl.hil.scripted_person import with_scripted_person  # loaded on first use

    return with_scripted_person(cfg, maker)


@hookimpl
def roborl_training_wrappers() -> dict[str, Callable[..., Any]]:
    """`scripted_person=` wraps training envs (never eval) in the task's scripted person."""
    return {"scripted_person": _scripted_person}


@hookimpl
def roborl_config_sections() -> dict[str, str]:
    return {"scripted_person": "a scripted person who takes over training envs on drift"}

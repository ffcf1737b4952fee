"""roborl's own envs in Gymnasium's registry, under the ``roborl`` namespace.

Every env roborl ships (the camera tabletop, the safe-RL tasks, the Fetch camera tasks) has one
id per named task, i.e. per Hydra preset (``configs/env/<preset>.yaml``): the preset's name in
CamelCase, ``roborl/<Name>-v0``, built with the preset's ``kwargs``. So outside roborl's
runner the same tasks are one ``gymnasium.make`` away::

    import gymnasium as gym

    env = gym.make("roborl:roborl/TabletopReachPixels-v0")  # imports roborl, which registers

    import roborl

    gym.register_envs(roborl)  # a no-op that tells linters the import is used
    env = gym.make("roborl/SafePointGoal-v0")

How the ids get registered: Gymnasium 1.x loads no plugins. Gym 0.26 and Gymnasium 0.26-0.29
ran every ``gymnasium.envs`` entry point on ``import gymnasium``; 1.0 removed that
(``gymnasium/envs/registration.py`` has no entry-point loading), so an entry point in
pyproject.toml would do nothing. What remains is Gymnasium's own ``module:id`` syntax, which
imports the module before looking the id up, and an explicit import. `register_envs` runs on
``import roborl`` (``roborl/__init__.py``), so both work, as with ale-py's Atari ids. It costs
only Gymnasium's import (roborl's every command imports it anyway): entry points are
``"module:Class"`` strings, so MuJoCo, torch and the env modules load on the first
``gymnasium.make``.

The ids are an addition: ``env=tabletop``, ``env.id=RoborlTabletop-v0`` and the other plugin
names keep working, and ``env.id=roborl/Tabletop-v0`` works in roborl's configs too.
`tests/sim/test_gym_registration.py` checks that every preset of a roborl env has its id
here, built with the same arguments, and runs Gymnasium's ``check_env`` on each.

The time limit: each id's ``max_episode_steps`` is the env's own limit (its
``max_episode_steps`` argument, or Gymnasium's 1000 for the velocity tasks), so
``env.spec.max_episode_steps`` tells other libraries the truth. ``gymnasium.make(id,
max_episode_steps=N)`` can only shorten an episode of the tabletop, point-goal and Fetch
camera tasks; a longer one also needs their ``max_episode_steps=`` keyword argument.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec

NAMESPACE = "roborl"

_TABLETOP = "roborl.sim.tabletop.env:TabletopEnv"
_FETCH_PIXELS = "roborl.sim.benchmarks.fetch_pixels:FetchPixelEnv"
_POINT_GOAL = "roborl.sim.safety.navigation:SafePointGoalEnv"
_VELOCITY_WRAPPER = "roborl.sim.safety.velocity:VelocityCostWrapper"

_PIXELS_REACH_RED = {"tasks": [0], "image_size": 64, "max_episode_steps": 50}
_FETCH_CAMERA = {
    "image_size": 64,
    "max_episode_steps": 50,
    "end_on_success": True,
    "normalized_state": False,
    "cameras": ["front"],
}

ENVS: dict[str, dict[str, Any]] = {
    # configs/env/tabletop.yaml: image + task index, all six instructions, 40 steps.
    "Tabletop-v0": {"entry_point": _TABLETOP, "kwargs": {}, "max_episode_steps": 40},
    # configs/env/tabletop_reach_pixels(_state).yaml: "reach the red block" from the camera.
    "TabletopReachPixels-v0": {
        "entry_point": _TABLETOP,
        "kwargs": {"obs_mode": "pixels", **_PIXELS_REACH_RED, "reward_type": "sparse"},
        "max_episode_steps": 50,
    },
    "TabletopReachPixelsState-v0": {
        "entry_point": _TABLETOP,
        "kwargs": {"obs_mode": "pixels_state", **_PIXELS_REACH_RED, "reward_type": "sparse"},
        "max_episode_steps": 50,
    },
    # sim/safety/configs/env/safe_point_goal.yaml
    "SafePointGoal-v0": {"entry_point": _POINT_GOAL, "kwargs": {}, "max_episode_steps": 200},
    # sim/benchmarks/configs/env/fetch_{push,reach}_pixels.yaml (needs roborl[benchmarks])
    "FetchPushPixels-v0": {
        "entry_point": _FETCH_PIXELS,
        "kwargs": {"task": "push", **_FETCH_CAMERA, "privileged_block": False},
        "max_episode_steps": 50,
    },
    "FetchReachPixels-v0": {
        "entry_point": _FETCH_PIXELS,
        "kwargs": {"task": "reach", **_FETCH_CAMERA},
        "max_episode_steps": 50,
    },
}
"""Id (without the namespace) -> `gymnasium.register` arguments, for the tasks built by
roborl's classes."""

VELOCITY_TASKS = {
    "SafeHalfCheetahVelocity-v0": "HalfCheetah-v5",
    "SafeHopperVelocity-v0": "Hopper-v5",
    "SafeWalker2dVelocity-v0": "Walker2d-v5",
    "SafeAntVelocity-v0": "Ant-v5",
    "SafeSwimmerVelocity-v0": "Swimmer-v5",
}
"""sim/safety/configs/env/safe_*_velocity.yaml: Gymnasium's robot as Gymnasium registers it,
plus roborl's cost wrapper (``info["cost"]``) as a Gymnasium ``additional_wrappers`` entry, so
``env.unwrapped`` is Gymnasium's own MuJoCo class and ``env.spec`` rebuilds the wrapper. The
same table as `roborl.sim.safety.velocity.SAFE_VELOCITY_IDS`, which this module does not import
(its package imports MuJoCo); the test keeps the two equal."""


def _specs() -> dict[str, dict[str, Any]]:
    specs = {name: dict(spec) for name, spec in ENVS.items()}
    for name, base_id in VELOCITY_TASKS.items():
        base = gym.spec(base_id)
        specs[name] = {
            "entry_point": base.entry_point,
            "kwargs": dict(base.kwargs),
            "max_episode_steps": base.max_episode_steps,
            "additional_wrappers": (
                WrapperSpec("VelocityCostWrapper", _VELOCITY_WRAPPER, {"base_id": base_id}),
            ),
        }
    return specs


def env_ids() -> list[str]:
    """Every id this module registers, with its namespace (``roborl/Tabletop-v0``, ...)."""
    return sorted(f"{NAMESPACE}/{name}" for name in [*ENVS, *VELOCITY_TASKS])


def register_envs() -> None:
    """Register roborl's envs with Gymnasium under ``roborl/``; ids already there are kept
    (a second call, or a user's own registration of the same id, is left alone)."""
    for name, spec in _specs().items():
        env_id = f"{NAMESPACE}/{name}"
        if env_id not in gym.envs.registry:
            gym.register(id=env_id, **spec)


# The scripted experts `roborl scripted-human` plays the person with, by name (roborl.hil.experts),
# each beside its task; the module loads when the expert is built.
EXPERTS = {
    "tabletop": "roborl.sim.tabletop.expert:TabletopExpert",
    "fetch_push": "roborl.sim.benchmarks.fetch_expert:FetchPushExpert",
}


def register_experts() -> None:
    """Register roborl's scripted experts with `roborl.hil.experts` (a second call is a no-op)."""
    from roborl.hil.experts import register_expert

    for name, entry in EXPERTS.items():
        register_expert(name, entry)

"""Safe-RL sim tasks (cost in ``info["cost"]``): velocity-constrained MuJoCo locomotion and a
point-robot goal task with hazards. Registered as env ids through ``roborl_envs``."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym

from roborl.core.hookspecs import hookimpl
from roborl.sim.safety.navigation import SafePointGoalEnv
from roborl.sim.safety.velocity import SAFE_VELOCITY_IDS, VELOCITY_LIMITS, make_velocity_env

__all__ = ["SAFE_VELOCITY_IDS", "VELOCITY_LIMITS", "SafePointGoalEnv", "make_safe_env"]


def _make_point_goal(**kwargs: Any) -> gym.Env:
    return SafePointGoalEnv(**kwargs)


def safe_env_factories() -> dict[str, Callable[..., gym.Env]]:
    envs: dict[str, Callable[..., gym.Env]] = {
        sid: partial(make_velocity_env, base) for sid, base in SAFE_VELOCITY_IDS.items()
    }
    envs["SafePointGoal-v0"] = _make_point_goal
    return envs


def make_safe_env(env_id: str, **kwargs: Any) -> gym.Env:
    """Build one of this module's tasks by id (without going through the registry)."""
    return safe_env_factories()[env_id](**kwargs)


@hookimpl
def roborl_envs() -> dict[str, Callable[..., gym.Env]]:
    return safe_env_factories()


@hookimpl
def roborl_config_dirs() -> list[str]:
    return ["pkg://roborl.sim.safety.configs"]

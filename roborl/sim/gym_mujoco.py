"""Gymnasium's MuJoCo v5 tasks under short names (`env.id=halfcheetah` as well as
`env=halfcheetah` or `env.id=HalfCheetah-v5`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym

from roborl.core.hookspecs import hookimpl

MUJOCO_TASKS = {
    "halfcheetah": "HalfCheetah-v5",
    "hopper": "Hopper-v5",
    "walker2d": "Walker2d-v5",
    "ant": "Ant-v5",
    "humanoid": "Humanoid-v5",
    "inverted_pendulum": "InvertedPendulum-v5",
    "inverted_double_pendulum": "InvertedDoublePendulum-v5",
    "reacher": "Reacher-v5",
    "pusher": "Pusher-v5",
    "swimmer": "Swimmer-v5",
}


def _make(gym_id: str, **kwargs: Any) -> gym.Env:
    return gym.make(gym_id, **kwargs)


@hookimpl
def roborl_envs() -> dict[str, Callable[..., gym.Env]]:
    return {short: partial(_make, gym_id) for short, gym_id in MUJOCO_TASKS.items()}

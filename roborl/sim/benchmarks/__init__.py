"""Standard benchmarks from other packages, under roborl env names and presets.

- Gymnasium-Robotics' Fetch arm tasks (`FETCH_TASKS`): a 7-DoF arm with a 4-D end-effector
  action (dx, dy, dz, gripper), HIL-SERL's action space and the usual manipulation benchmark.
  Observations are a goal Dict (``observation``, ``achieved_goal``, ``desired_goal``).
- The same Fetch tasks from a camera plus proprioception (``fetch_push_pixels``,
  ``fetch_reach_pixels``; `fetch_pixels.py`), with a scripted expert for demos and for the
  scripted person of human-in-the-loop runs.
- DeepMind Control Suite tasks (`DMC_TASKS`) through Shimmy, Farama's maintained Gymnasium
  wrapper of dm_control. Observations are a Dict of named state readings.

Both packages are optional, ``pip install "roborl[benchmarks]"``, and imported only when one of
these envs is built, so `roborl plugins` lists the names without them. The extra and
constraints.txt pin the MuJoCo they run on (3.3.7, see docs/envs.md): Gymnasium-Robotics 1.4.2
fails on MuJoCo >= 3.12 (`MISMATCH_FROM`), and dm_control releases each require the MuJoCo
they were built with or newer (dm_control 1.0.34 for 3.3.7).

Each task is registered under a short name (``fetch_reach``) and under its own id
(``FetchReach-v4``, ``FetchReachDense-v4``, ``dm_control/cartpole-swingup-v0``), so the Hydra
presets (``env=fetch_reach``, configs/env/ beside this file) and ``env.id=`` both work.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym

from roborl.core.errors import ConfigError
from roborl.core.hookspecs import hookimpl

FETCH_TASKS = {
    "fetch_reach": "FetchReach-v4",
    "fetch_push": "FetchPush-v4",
    "fetch_slide": "FetchSlide-v4",
    "fetch_pick_and_place": "FetchPickAndPlace-v4",
}
"""Short name -> Gymnasium-Robotics id (sparse reward: -1 until the goal is reached)."""

DMC_TASKS = {
    "dmc_cartpole_swingup": "dm_control/cartpole-swingup-v0",
    "dmc_walker_walk": "dm_control/walker-walk-v0",
    "dmc_cheetah_run": "dm_control/cheetah-run-v0",
}
"""Short name -> Shimmy's id of the dm_control suite task (1000 steps, reward in [0, 1])."""

PIXEL_TASKS = ("push", "reach")
"""Fetch tasks also served from a camera plus proprioception (`fetch_push_pixels`; HIL-SERL's
setting, `fetch_pixels.py`)."""

MISMATCH_FROM = (3, 12)
"""The first MuJoCo (major, minor) on which Gymnasium-Robotics 1.4.2's Fetch fails
(`set_joint_qpos` asserts on the joint type; bisected: 3.11.0 runs, 3.12.0, 3.13.0 and
3.17.0 fail)."""

INSTALL = 'pip install "roborl[benchmarks]"'


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".")[:3] if p.isdigit())


def _import_gymnasium_robotics() -> None:
    """Import Gymnasium-Robotics (which registers its ids), or say how to install it."""
    try:
        # Its import prints a notice about Adroit envs, which roborl does not name.
        with contextlib.redirect_stderr(io.StringIO()):
            import gymnasium_robotics
    except ImportError as exc:
        raise ConfigError(
            f"the Fetch envs need Gymnasium-Robotics, which is not installed ({exc}): {INSTALL}"
        ) from None
    import mujoco

    if _version(gymnasium_robotics.__version__) <= (1, 4, 2) and (
        _version(mujoco.__version__)[:2] >= MISMATCH_FROM
    ):
        raise ConfigError(
            f"Gymnasium-Robotics {gymnasium_robotics.__version__}'s Fetch envs fail on MuJoCo "
            f"{mujoco.__version__} (they run up to 3.11; roborl pins 3.3.7): "
            f'pip install "mujoco==3.3.7" (or {INSTALL} with constraints.txt).'
        )


def _import_shimmy_dm_control() -> None:
    """Import Shimmy with dm_control (which registers the ``dm_control/...`` ids)."""
    try:
        import dm_control  # noqa: F401  (Shimmy registers nothing without it, silently)
        import shimmy  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"the dm_control envs need dm_control and Shimmy, which are not installed ({exc}): "
            f"{INSTALL}"
        ) from None


def make_fetch(gym_id: str, **kwargs: Any) -> gym.Env:
    """A Gymnasium-Robotics env by id (`kwargs` go to `gymnasium.make`, e.g. render_mode)."""
    _import_gymnasium_robotics()
    return gym.make(gym_id, **kwargs)


def make_dmc(gym_id: str, **kwargs: Any) -> gym.Env:
    """A dm_control suite task through Shimmy (`kwargs` go to `gymnasium.make`)."""
    _import_shimmy_dm_control()
    return gym.make(gym_id, **kwargs)


def benchmark_env_factories() -> dict[str, Callable[..., gym.Env]]:
    """Every name this plugin registers: short names, the tasks' ids and their dense twins."""
    envs: dict[str, Callable[..., gym.Env]] = {}
    for short, gym_id in FETCH_TASKS.items():
        dense = gym_id.replace("-v", "Dense-v")
        envs[short] = envs[gym_id] = partial(make_fetch, gym_id)
        envs[dense] = partial(make_fetch, dense)
    for short, gym_id in DMC_TASKS.items():
        envs[short] = envs[gym_id] = partial(make_dmc, gym_id)
    for task in PIXEL_TASKS:
        envs[f"fetch_{task}_pixels"] = partial(_fetch_pixels, task)
    return envs


def _fetch_pixels(task: str, **kwargs: Any) -> gym.Env:
    from roborl.sim.benchmarks.fetch_pixels import make_fetch_pixels

    return make_fetch_pixels(task, **kwargs)


@hookimpl
def roborl_envs() -> dict[str, Callable[..., gym.Env]]:
    return benchmark_env_factories()


@hookimpl
def roborl_config_dirs() -> list[str]:
    return ["pkg://roborl.sim.benchmarks.configs"]

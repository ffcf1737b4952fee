"""Where a run's experience comes from: its envs (one shared robot env), collector and dataset.

With `robot=` there is one driver, so every env the run asks for is the same `SharedEnv`
(collection, evaluation and an algorithm's own loop never open a second connection); the
collector comes from the `roborl_collectors` hook and the dataset from the first
dataset-source plugin that accepts its path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from roborl.core.config import RunConfig
from roborl.core.envs import SharedEnv, env_rng_state, make_env, make_vec_env
from roborl.core.errors import ConfigError
from roborl.core.single_vector import SingleEnvVector

if TYPE_CHECKING:
    from roborl.core.plugins import PluginHost


class RunInputs:
    """The run's envs, kept so checkpoints can save their RNG states and the robot is released."""

    def __init__(self, host: PluginHost, run: RunConfig, cfg: Mapping[str, Any]) -> None:
        self._host = host
        self._run = run
        self._cfg = cfg
        self.vector: gym.vector.VectorEnv | None = None
        self.robot: SharedEnv | None = None
        """The robot env once connected (None before its first use and without `robot=`)."""

    @property
    def robot_env(self) -> SharedEnv | None:
        """The run's one robot env (connected on first use), or None without `robot=`."""
        if not self._cfg.get("robot"):
            return None
        if self.robot is None:
            if self._run.num_envs != 1:
                raise ConfigError(
                    f"num_envs={self._run.num_envs} with a real robot: a robot is one env, use 1."
                )
            self.robot = SharedEnv(make_env(self._host.registry, self._cfg))
        return self.robot

    def make_env(self, seed: int | None = None, learned_reward: bool = True) -> gym.Env:
        """One env from the config; with `robot=` always the one `robot_env`."""
        robot = self.robot_env
        if robot is not None:
            if seed is not None:
                robot.action_space.seed(seed)
            return robot
        return make_env(self._host.registry, self._cfg, seed, learned_reward)

    def make_vec_env(self, num_envs: int | None = None) -> gym.vector.VectorEnv:
        """A vector env (same-step autoreset); with `robot=` one wrapping `robot_env`."""
        robot = self.robot_env
        if robot is not None:
            if (num_envs or 1) != 1:
                raise ConfigError(f"num_envs={num_envs} with a real robot: a robot is one env.")
            envs: gym.vector.VectorEnv = SingleEnvVector(lambda: robot)
        else:
            envs = make_vec_env(
                self._host.registry,
                self._cfg,
                num_envs or self._run.num_envs,
                self._run.vector_mode,
            )
        self.vector = envs
        return envs

    def env_rng_states(self) -> list[Any]:
        """Each sub-env's RNG as it was when its current episode began (`env_rng_state`)."""
        return [env_rng_state(sub) for sub in getattr(self.vector, "envs", None) or []]

    def release_robot(self) -> None:
        """The final stop command, then disconnect."""
        if self.robot is not None:
            with contextlib.suppress(Exception):
                self.robot.release()
            self.robot = None

    def collector_name(self) -> str:
        """`collector=` (or `distributed=`); with `robot=` the default `vector` is `robot`."""
        name = self._run.collector_name
        if name == "vector" and self._cfg.get("robot"):
            name = "robot"
        return name

    def load_dataset(self, path: str | None, algo_name: str) -> Any:
        """`dataset=` (or `path`), from the first dataset-source plugin that accepts it."""
        path = path or self._run.dataset
        if not path:
            raise ConfigError(
                f"algo={algo_name} trains from data and needs dataset=PATH (a Minari "
                "dataset directory or a D4RL-style .hdf5/.npz file)."
            )
        sources = self._host.registry.dataset_sources
        if not sources:
            raise ConfigError(
                f"dataset={path!r} given, but no dataset-source plugin is installed or enabled."
            )
        for loader in sources.values():
            accepts: Callable[[str], bool] | None = getattr(loader, "accepts", None)
            if accepts is not None and not accepts(path):
                continue
            return loader(path)
        raise ConfigError(f"no dataset source accepts {path!r} (tried {', '.join(sources)}).")

    def reward_model(self) -> Any:
        """`reward=`'s model (None without one)."""
        from roborl.core.rewards import build_reward_model, reward_options

        options = reward_options(self._cfg)
        return None if options is None else build_reward_model(self._host.registry, options)

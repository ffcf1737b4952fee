"""One env behind the vector-env interface, without the per-step cost of generic batching.

Gymnasium's `SyncVectorEnv` handles any space and any number of envs, and pays for it on every
step: a deep copy of the batched observation, `concatenate` into a space-shaped buffer and a
generic info merge. With one env (every run's default, and a robot) that was ~80 us per step on
HalfCheetah, more than the physics (issue 23: the runner kept 24% of a bare Gymnasium loop's
steps/s). `SingleEnvVector` is a `SyncVectorEnv` of one env whose `step` and `reset` return the
same values with the same dtypes and the same same-step autoreset infos (``final_obs``,
``final_info``, ``_key`` masks), built directly. Observation spaces other than a Box or a Dict
of Boxes use the generic path.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import gymnasium as gym
import numpy as np

_TRUE = np.ones(1, dtype=np.bool_)
_SCALARS = frozenset({int, float, bool, np.float64, np.float32, np.int64, np.int32, np.bool_})
"""Types whose `np.array([v])` has the dtype `SyncVectorEnv` gives them."""


def _fast_space(space: gym.Space) -> bool:
    if isinstance(space, gym.spaces.Box):
        return True
    return isinstance(space, gym.spaces.Dict) and all(
        isinstance(s, gym.spaces.Box) for s in space.spaces.values()
    )


class SingleEnvVector(gym.vector.SyncVectorEnv):
    """A same-step-autoreset `SyncVectorEnv` of exactly one env, with a lean `step`."""

    def __init__(self, env_fn: Callable[[], gym.Env]) -> None:
        super().__init__([env_fn], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self._env = self.envs[0]
        space = self.single_observation_space
        self._fast = _fast_space(space)
        self._dtypes: Any = (
            {k: s.dtype for k, s in space.spaces.items()}
            if isinstance(space, gym.spaces.Dict)
            else space.dtype
        )

    def _batch(self, obs: Any) -> Any:
        """A fresh (1, ...) array of the space's dtype (what `concatenate` + copy gives)."""
        if isinstance(self._dtypes, dict):
            return {k: np.array(obs[k], dtype=d)[None] for k, d in self._dtypes.items()}
        return np.array(obs, dtype=self._dtypes)[None]

    def _info(self, info: dict[str, Any]) -> dict[str, Any]:
        """Gymnasium's vector info layout for env 0: values in (1,) arrays, `_key` masks."""
        out: dict[str, Any] = {}
        for key, value in info.items():
            if type(value) in _SCALARS:  # the common case first: MuJoCo envs' reward terms
                out[key] = np.array([value])
            elif isinstance(value, dict):
                out[key] = self._info(value)
            elif isinstance(value, np.number):
                out[key] = np.array([value], dtype=type(value))
            elif isinstance(value, np.ndarray):
                out[key] = value[None].copy()
            else:
                array = np.empty(1, dtype=object)
                array[0] = value
                out[key] = array
            out[f"_{key}"] = _TRUE.copy()
        return out

    def step(
        self, actions: Any, info_keys: Collection[str] | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """`SyncVectorEnv.step`. `info_keys`: on a step that ends no episode, only these keys
        of the env's info are batched (a caller that reads a few keys skips batching the rest,
        e.g. HalfCheetah's four reward terms); an episode's last step keeps every key."""
        if not self._fast:
            return super().step(actions)
        env = self._env
        obs, reward, terminated, truncated, info = env.step(actions[0])
        infos: dict[str, Any] = {}
        if info_keys is not None and not (terminated or truncated):
            info = {k: info[k] for k in info_keys if k in info}
        if terminated or truncated:
            final_obs = np.empty(1, dtype=object)
            final_obs[0] = obs
            infos = {
                "final_obs": final_obs,
                "_final_obs": _TRUE.copy(),
                "final_info": self._info(info),
                "_final_info": _TRUE.copy(),
            }
            obs, info = env.reset()
        if info:
            infos.update(self._info(info))
        self._env_obs[0] = obs
        self._rewards[0], self._terminations[0], self._truncations[0] = (
            reward,
            terminated,
            truncated,
        )
        return (
            self._batch(obs),
            self._rewards.copy(),
            self._terminations.copy(),
            self._truncations.copy(),
            infos,
        )

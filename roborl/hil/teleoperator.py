"""The `Teleoperator` protocol and the wrapper that lets one take a simulated env over.

A teleoperator is whoever may override the policy: a person with a gamepad (ROS `Joy`,
`roborl/robots/env/intervention.py`), the scripted person (`scripted_person.py`), later a
keyboard or a SpaceMouse. Each step it is asked for its action; None leaves the policy's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np


@runtime_checkable
class Teleoperator(Protocol):
    """A person (or a script playing one) who may take over from the policy."""

    def reset(self, seed: int | None = None) -> None:
        """A new episode begins (`seed`: the env's reset seed, when there is one)."""
        ...

    def act(self, obs: Any, info: Mapping[str, Any]) -> np.ndarray | None:
        """The person's action for the next step while they take over, else None. `obs` and
        `info` are the latest the env returned."""
        ...

    def end_episode(self, info: Mapping[str, Any]) -> None:
        """The episode's last step's `info` (its success flag): what a person learns from."""
        ...

    def close(self) -> None:
        """Let go of the device (a subscription, a port)."""
        ...


class Teleoperated(gym.Wrapper):
    """Executes the teleoperator's action whenever it gives one, clipped to the action space.

    Each step's info carries ``executed_action`` and ``intervened``, as a robot env's does, so
    the off-policy loop stores what was executed, flags it, and copies it to the demo buffer."""

    def __init__(self, env: gym.Env, teleoperator: Teleoperator) -> None:
        super().__init__(env)
        self.teleoperator = teleoperator
        self._obs: Any = None
        self._info: Mapping[str, Any] = {}

    def reset(self, **kwargs: Any) -> Any:
        seed = kwargs.get("seed")
        self.teleoperator.reset(None if seed is None else int(seed))
        self._obs, self._info = self.env.reset(**kwargs)
        return self._obs, self._info

    def step(self, action: np.ndarray) -> Any:
        command = self.teleoperator.act(self._obs, self._info)
        space = self.action_space
        executed = np.asarray(action if command is None else command, np.float32)
        executed = np.clip(executed, space.low, space.high).astype(space.dtype)
        obs, reward, terminated, truncated, info = self.env.step(executed)
        info = {**info, "executed_action": executed, "intervened": command is not None}
        self._obs, self._info = obs, info
        if terminated or truncated:
            self.teleoperator.end_episode(info)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.teleoperator.close()
        super().close()

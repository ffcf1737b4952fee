"""A point mass on a plane that must reach a goal: small, fast, and learnable in seconds."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class PointReachEnv(gym.Env):
    """Observation: (position, goal); action: velocity in [-1, 1]^2; reward: -distance."""

    metadata = {"render_modes": []}

    def __init__(self, max_episode_steps: int = 50, speed: float = 0.1) -> None:
        self.observation_space = gym.spaces.Box(-2.0, 2.0, (4,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.max_episode_steps = max_episode_steps
        self.speed = speed
        self._pos = np.zeros(2)
        self._goal = np.zeros(2)
        self._t = 0

    def _obs(self) -> np.ndarray:
        return np.concatenate([self._pos, self._goal]).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1, 1, 2)
        self._goal = self.np_random.uniform(-1, 1, 2)
        self._t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray):
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        self._pos = np.clip(self._pos + self.speed * action, -2.0, 2.0)
        self._t += 1
        dist = float(np.linalg.norm(self._pos - self._goal))
        success = dist < 0.05
        truncated = self._t >= self.max_episode_steps
        return self._obs(), -dist, False, truncated, {"success": success}

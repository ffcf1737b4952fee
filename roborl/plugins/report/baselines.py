"""`algo=random`: uniform random actions, the floor every comparison and normalisation needs.

Why it lives with the reports: a min-max normalised score needs a random score per task
(`roborl eval algo=random env=NAME episodes=100` measures it, checkpoint-free), and
`roborl compare` needs a method that is worse than anything that learns, to check that a
comparison is sensitive at all. It never learns: training steps the env with random actions
(so `total_steps`, the schedule and the run directory mean what they mean for any online
run) and every evaluation samples fresh random actions. The "deterministic" policy is random
too, by definition of this baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.config import rng
from roborl.core.interfaces import Algorithm, Batch, Policy

if TYPE_CHECKING:
    from roborl.core.context import TrainContext


@dataclass
class RandomConfig:
    seed: int | None = field(
        default=None,
        metadata=rng(0, None, "seed of the action sampler; null: the run's seed"),
    )


class RandomPolicy(Policy):
    """Samples the action space uniformly; batched when `obs` has a leading batch axis."""

    def __init__(
        self, observation_space: gym.Space, action_space: gym.Space, generator: np.random.Generator
    ) -> None:
        self.observation_space, self.action_space = observation_space, action_space
        self._rng = generator

    def act(self, obs: np.ndarray) -> np.ndarray:
        shape = getattr(self.observation_space, "shape", None)
        batch = (
            int(np.asarray(obs).shape[0])
            if shape is not None and np.ndim(obs) > len(shape)
            else None
        )
        return _sample(self.action_space, self._rng, batch)


def _sample(space: gym.Space, generator: np.random.Generator, batch: int | None) -> np.ndarray:
    size = () if batch is None else (batch,)
    if isinstance(space, gym.spaces.Discrete):
        return generator.integers(space.start, space.start + space.n, size=size)
    if isinstance(space, gym.spaces.Box):
        low = np.where(np.isfinite(space.low), space.low, -1.0)
        high = np.where(np.isfinite(space.high), space.high, 1.0)
        out = generator.uniform(low, high, size=(*size, *space.shape))
        return out.astype(space.dtype)
    if batch is None:
        return np.asarray(space.sample())
    return np.stack([np.asarray(space.sample()) for _ in range(batch)])


class RandomAgent(Algorithm):
    """Uniform random actions (a baseline: the "random" score of min-max normalisation)."""

    name = "random"
    Config = RandomConfig
    loop = "own"
    accepts_dict_obs = True  # never looks at observations
    checkpoint_free = True  # acts the same untrained: `roborl eval algo=random` needs no run

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: RandomConfig,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, config, device)
        # The runner seeds torch's generator with the run's seed before building us.
        seed = config.seed if config.seed is not None else torch.initial_seed()
        self._rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        return self.policy().act(obs)

    def update(self, batch: Batch) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None

    def policy(self) -> Policy:
        return RandomPolicy(self.observation_space, self.action_space, self._rng)

    def train(self, ctx: TrainContext) -> None:
        """Step one env with random actions for `total_steps`, on roborl's one schedule."""
        env = ctx.make_env(seed=ctx.run.seed)
        try:
            env.action_space.seed(ctx.run.seed)
            env.reset(seed=ctx.run.seed)
            ret, length = 0.0, 0
            while not ctx.finished:
                _, reward, terminated, truncated, _ = env.step(
                    _sample(env.action_space, self._rng, None)
                )
                ret, length = ret + float(reward), length + 1
                ctx.advance(env_steps=1)
                if terminated or truncated:
                    ctx.record_episode(ret, length)
                    env.reset()
                    ret, length = 0.0, 0
                if ctx.due("eval"):
                    ctx.evaluate(self)
                if ctx.due("checkpoint"):
                    ctx.checkpoint(self)
            ctx.finish(self)
        finally:
            env.close()

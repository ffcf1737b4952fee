"""Deployable policies shared by algorithm plugins.

The `Policy` contract takes one observation or a batch with a leading axis. `BatchedPolicy`
handles that distinction once, so a plugin only writes the batched computation;
`AlgorithmPolicy` serves algorithms whose own `act(batch, deterministic=True)` already is the
deployable policy (FISOR's sample-and-select, BC, SAC-Lagrangian); `SquashedGaussianPolicy`
is the deterministic tanh(mean) of a `TanhGaussianActor` (SAC, DSAC-T, WSRL).
"""

from __future__ import annotations

import abc
from typing import Protocol

import gymnasium as gym
import numpy as np
import torch

from roborl.core.interfaces import Policy
from roborl.core.nn import ActionScaler, TanhGaussianActor, obs_tensor
from roborl.core.obs import Obs, add_batch_axis, as_numpy_obs, is_single


class BatchedPolicy(Policy):
    """A policy that computes actions for a batch; `act` also accepts one observation."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space = observation_space
        self.action_space = action_space

    @abc.abstractmethod
    def act_batch(self, obs: Obs) -> np.ndarray:
        """Deterministic actions for observations with a leading batch axis."""

    def act(self, obs: Obs) -> np.ndarray:
        """One observation (the Policy contract) or a batch with a leading axis.

        Dict observations (images beside states) arrive as dicts of arrays, each entry in its
        space's dtype (images stay uint8), with or without the batch axis on every entry.
        """
        obs = as_numpy_obs(obs, self.observation_space)
        single = is_single(obs, self.observation_space)
        actions = self.act_batch(add_batch_axis(obs) if single else obs)
        return actions[0] if single else actions


class ActsDeterministically(Protocol):
    observation_space: gym.Space
    action_space: gym.Space

    def act(self, obs: np.ndarray, deterministic: bool = ...) -> np.ndarray: ...


class AlgorithmPolicy(BatchedPolicy):
    """The deployable view of an algorithm whose `act(batch, deterministic=True)` is its policy."""

    def __init__(self, algo: ActsDeterministically) -> None:
        super().__init__(algo.observation_space, algo.action_space)
        self.algo = algo

    def act_batch(self, obs: np.ndarray) -> np.ndarray:
        return self.algo.act(obs, deterministic=True)


class SquashedGaussianPolicy(BatchedPolicy):
    """Deterministic tanh(mean) policy for evaluation and deployment (SAC, DSAC-T, WSRL)."""

    def __init__(
        self, actor: TanhGaussianActor, obs_space: gym.Space, action_space: gym.spaces.Box
    ) -> None:
        super().__init__(obs_space, action_space)
        self.actor = actor
        self.scaler = ActionScaler(action_space)
        self.device = next(actor.parameters()).device

    @torch.no_grad()
    def act_batch(self, obs: np.ndarray) -> np.ndarray:
        x = obs_tensor(obs, self.device).flatten(1)
        return self.scaler.to_env(self.actor.deterministic(x).cpu().numpy())

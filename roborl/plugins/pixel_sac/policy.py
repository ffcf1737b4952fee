"""What a trained pixel SAC deploys: the deterministic policy, and the same as one module
for `export format=onnx`.

Apart from `drq.py` (learning) because these only act: evaluation, deployment and export
use them, never an update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from roborl.core.actor_graph import ScaleToBounds
from roborl.core.interfaces import Policy
from roborl.core.nn import TanhGaussianActor
from roborl.core.obs import add_batch_axis, as_numpy_obs, is_single
from roborl.plugins.pixel_sac.encoder import ObsEncoder

if TYPE_CHECKING:
    from roborl.plugins.pixel_sac.drq import DrQ


class PixelPolicy(Policy):
    """Deterministic tanh(mean) policy on Dict observations (encoder + actor, no augmentation)."""

    def __init__(self, algo: DrQ) -> None:
        self.observation_space = algo.observation_space
        self.action_space = algo.action_space
        self.algo = algo

    def act(self, obs: Any) -> np.ndarray:
        """One observation (a dict of arrays) or a batch with a leading axis per key."""
        single = is_single(obs, self.observation_space)
        obs = as_numpy_obs(obs, self.observation_space)
        actions = self.algo.act(add_batch_axis(obs) if single else obs, deterministic=True)
        return actions[0] if single else actions


class PixelActorGraph(nn.Module):
    """Dict observation entries (in the space's order, a batch each) -> encoder features ->
    tanh(mean) -> the action bounds: `PixelPolicy` as one module for export."""

    def __init__(
        self,
        encoder: ObsEncoder,
        actor: TanhGaussianActor,
        action_space: gym.spaces.Box,
        keys: list[str],
    ) -> None:
        super().__init__()
        self.encoder, self.actor, self.keys = encoder, actor, keys
        self.to_env = ScaleToBounds(action_space)

    def forward(self, *entries: torch.Tensor) -> torch.Tensor:
        obs = dict(zip(self.keys, entries, strict=True))
        features = self.encoder(self.encoder.images(obs), obs)
        return self.to_env(self.actor.deterministic(features))

"""VLA-RL's deployable policy: greedy decoding from one {image, task} observation.

Apart from `algorithm.py` because it only acts (evaluation, deployment); `batch_obs` gives a
single observation the batch axis the model decodes over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from roborl.core.interfaces import Policy

if TYPE_CHECKING:
    from roborl.plugins.vla_rl.algorithm import VLARL


class VLAPolicy(Policy):
    """Greedy action decoding from image + task index (instruction looked up by index)."""

    def __init__(self, algo: VLARL) -> None:
        self.algo = algo
        self.observation_space = algo.observation_space
        self.action_space = algo.action_space

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        return self.algo.act(batch_obs(obs), deterministic=True)[0]


def batch_obs(obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {"image": np.asarray(obs["image"])[None], "task": np.asarray([obs["task"]])}

"""Gymnasium spaces to and from plain data, so checkpoints load with `weights_only=True`."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.errors import CheckpointError


def space_to_dict(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_dict(v) for k, v in space.spaces.items()}}
    raise TypeError(f"roborl cannot store a {type(space).__name__} space in a checkpoint")


def space_from_dict(data: dict[str, Any]) -> gym.Space:
    kind = data.get("type")
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        low = np.asarray(data["low"], dtype=dtype).reshape(data["shape"])
        high = np.asarray(data["high"], dtype=dtype).reshape(data["shape"])
        return gym.spaces.Box(low=low, high=high, dtype=dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)))
    if kind == "Dict":
        return gym.spaces.Dict({k: space_from_dict(v) for k, v in data["spaces"].items()})
    raise CheckpointError(f"checkpoint describes an unsupported space type {kind!r}")


def flat_dim(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Discrete):
        return 1
    return int(np.prod(space.shape))

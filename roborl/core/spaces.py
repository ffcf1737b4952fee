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
            "low": _bound(space.low),
            "high": _bound(space.high),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: space_to_dict(v) for k, v in space.spaces.items()}}
    raise TypeError(f"roborl cannot store a {type(space).__name__} space in a checkpoint")


def _bound(values: np.ndarray) -> Any:
    """One number when every entry is the same (an image's 0..255), else the full list: a
    64x64x3 camera would otherwise put 2 x 12288 numbers into every checkpoint and config.json."""
    flat = values.reshape(-1)
    if flat.size > 1 and np.all(flat == flat[0]):
        return flat[0].item()
    return values.tolist()


def space_from_dict(data: dict[str, Any]) -> gym.Space:
    kind = data.get("type")
    if kind == "Box":
        dtype = np.dtype(data["dtype"])
        shape = tuple(data["shape"])
        low = np.broadcast_to(np.asarray(data["low"], dtype=dtype), shape).copy()
        high = np.broadcast_to(np.asarray(data["high"], dtype=dtype), shape).copy()
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

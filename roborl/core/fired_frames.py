"""The frames a learned reward fired on during training, saved for hard-negative retraining.

A success classifier's false positives are what the policy learns to exploit (SERL, Luo et al.,
2024, Sec. IV-B: retrain with them as negatives). `LearnedReward` hands every frame the model
fired on to `FiredFrames`, which writes them as labelled-frames NPZ parts that
`roborl reward train` and `roborl reward relabel` read: ``frames/<camera>`` (N, H, W, C) uint8
and ``env_success`` (N,) int8 (1 or 0 where the env reports ``info["success"]``, as a sim
does; -1 where it does not, as on a real robot, until a person labels them). Each part is
written to a temporary name and renamed, so a crash never leaves a half-written file.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

PART_FRAMES = 256
"""Frames held in memory before a part is written."""

_INSTANCES = itertools.count()


def camera_frames(obs: Any) -> dict[str, np.ndarray]:
    """The uint8 camera entries of one observation, newest frame of a frame stack."""
    items = obs.items() if isinstance(obs, Mapping) else [("frames", obs)]
    out = {}
    for key, value in items:
        arr = np.asarray(value)
        if arr.dtype == np.uint8 and arr.ndim in (3, 4):
            out[key] = arr[-1] if arr.ndim == 4 else arr
    return out


class FiredFrames:
    """Collects fired frames of one env and writes them to `directory` in parts."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._prefix = f"fired-{os.getpid()}-{next(_INSTANCES)}"
        self._parts = itertools.count()
        self._frames: dict[str, list[np.ndarray]] = {}
        self._success: list[int] = []

    def add(self, obs: Any, env_success: Any) -> None:
        frames = camera_frames(obs)
        if not frames:
            return  # no camera in the observation: nothing a classifier could be retrained on
        if self._frames and set(frames) != set(self._frames):
            self.flush()
        for key, frame in frames.items():
            self._frames.setdefault(key, []).append(frame.copy())
        self._success.append(-1 if env_success is None else int(bool(env_success)))
        if len(self._success) >= PART_FRAMES:
            self.flush()

    def flush(self) -> None:
        """Write what is held as one part (nothing when empty)."""
        if not self._success:
            return
        arrays = {f"frames/{k}": np.stack(v) for k, v in self._frames.items()}
        arrays["env_success"] = np.asarray(self._success, np.int8)
        save_npz_atomic(self.directory / f"{self._prefix}-{next(self._parts):05d}.npz", arrays)
        self._frames, self._success = {}, []


def save_npz_atomic(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """A compressed NPZ written under a temporary name and renamed: never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    os.replace(tmp, path)
    return path

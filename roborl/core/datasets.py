"""Offline datasets: one in-memory container of transitions, validated on construction.

Why here: offline (IQL, RIQL), safe offline (FISOR) and offline-to-online (WSRL) methods all
consume the same thing, so core owns the container: its checks (`dataset_arrays.py`) and its
spaces (`dataset_spaces.py`) are core's too, and so are the plain D4RL-style NPZ/HDF5 files
(`roborl.core.dataset_files`, which `save` writes through); Minari and LeRobotDataset live in
the datasets plugin.

Layout follows D4RL: flat arrays over all transitions, `terminals` (true terminations, no
bootstrap) and `timeouts` (time-limit truncations; the episode ends but bootstrapping stays on),
`next_observations` stored explicitly. `costs` is optional (DSRL-style safe datasets). Metadata
is a JSON-able dict; `reference_returns={"random": R_r, "expert": R_e}` gives D4RL-normalised
scores, `reference_costs` the same for costs.

Observations are one array, or a dict of arrays for Dict observation spaces (camera images
beside states, demonstrations recorded on a robot). Dict entries keep uint8 images as uint8
(other entries become float32). On disk a dict observation is an HDF5 group
(``observations/image``, ``observations/state``) or NPZ entries named the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.dataset_arrays import REQUIRED_FIELDS, validate_arrays
from roborl.core.dataset_spaces import box_for, space_from_metadata
from roborl.core.interfaces import Batch
from roborl.core.obs import Obs, copy_obs, index_obs


@dataclass
class OfflineDataset:
    """Flat transition arrays plus metadata. Construct with `from_arrays` to validate."""

    observations: Obs
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: Obs
    terminals: np.ndarray
    timeouts: np.ndarray
    costs: np.ndarray | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    _tensors: dict[str, torch.Tensor] | None = field(default=None, repr=False, compare=False)

    # -- construction and validation ---------------------------------------------------------

    @classmethod
    def from_arrays(
        cls,
        data: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
        source: str = "dataset",
    ) -> OfflineDataset:
        """Validate `data` (D4RL field names) and build a dataset; `source` names it in errors.

        Two fields may be missing, as in real D4RL files, and are then derived (said once in
        the log):
        - `next_observations` (AntMaze, Adroit, Kitchen): the next row's observation, exactly
          as D4RL's `qlearning_dataset`; needs `timeouts`, see `dataset_arrays.py`;
        - `timeouts` (old D4RL files): a non-terminal row whose next observation is not the
          next row's observation ends its episode by truncation.
        Every other required field must be present.
        """
        arrays = validate_arrays(data, source)
        meta = dict(metadata or {})
        return cls(
            observations=arrays["observations"],
            actions=arrays["actions"],
            rewards=arrays["rewards"],
            next_observations=arrays["next_observations"],
            terminals=arrays["terminals"],
            timeouts=arrays["timeouts"],
            costs=arrays.get("costs"),
            metadata=meta,
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """The D4RL fields as a dict (costs only when present)."""
        out = {name: getattr(self, name) for name in REQUIRED_FIELDS}
        if self.costs is not None:
            out["costs"] = self.costs
        return out

    def replace(self, **changes: Any) -> OfflineDataset:
        """A validated copy with some fields or the metadata replaced."""
        data: dict[str, Any] = {k: copy_obs(v) for k, v in self.arrays().items()}
        meta = json.loads(json.dumps(self.metadata))
        meta.update(changes.pop("metadata", {}))
        data.update(changes)
        return OfflineDataset.from_arrays(data, meta)

    # -- sizes and spaces --------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def dict_obs(self) -> bool:
        """True when observations are a dict of arrays (images beside states)."""
        return isinstance(self.observations, Mapping)

    @property
    def obs_shape(self) -> tuple[int, ...] | dict[str, tuple[int, ...]]:
        """Per-step observation shape (a dict of shapes for dict observations)."""
        if isinstance(self.observations, Mapping):
            return {k: tuple(int(d) for d in v.shape[1:]) for k, v in self.observations.items()}
        return tuple(int(d) for d in self.observations.shape[1:])

    @property
    def obs_dim(self) -> int:
        """Flat observation size (all entries of a dict observation together)."""
        shape = self.obs_shape
        if isinstance(shape, dict):
            return int(sum(int(np.prod(s)) for s in shape.values()))
        return int(np.prod(shape))

    @property
    def action_dim(self) -> int:
        return int(self.actions.shape[1])

    @property
    def observation_space(self) -> gym.Space:
        """From metadata when recorded (`space_to_dict` form), else unbounded float32 entries
        and 0..255 uint8 images."""
        space = space_from_metadata(self.metadata.get("observation_space"))
        if space is not None:
            return space
        if isinstance(self.observations, Mapping):
            return gym.spaces.Dict({k: box_for(v) for k, v in self.observations.items()})
        shape = self.observations.shape[1:]
        return gym.spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)

    @property
    def action_space(self) -> gym.spaces.Box:
        """From metadata when recorded, else the data's range rounded out to [-1, 1] or wider."""
        space = space_from_metadata(self.metadata.get("action_space"))
        if isinstance(space, gym.spaces.Box):
            return space
        bound = max(1.0, float(np.ceil(np.abs(self.actions).max())))
        return gym.spaces.Box(-bound, bound, shape=(self.action_dim,), dtype=np.float32)

    @property
    def reference_returns(self) -> dict[str, float]:
        return dict(self.metadata.get("reference_returns") or {})

    @property
    def reference_costs(self) -> dict[str, float]:
        return dict(self.metadata.get("reference_costs") or {})

    @property
    def env_id(self) -> str | None:
        return self.metadata.get("env_id")

    # -- episodes ----------------------------------------------------------------------------

    def episode_ends(self) -> np.ndarray:
        """Index one past the last transition of each episode (terminal, timeout or end).

        Only `terminals` and `timeouts` end an episode, as in CORL's `return_reward_range`:
        a break in observation continuity does not, since corrupted observations or next
        observations (RIQL's protocol) break it on every corrupted row and would cut the data
        into thousands of two-step "episodes" (IQL's reward scale then comes out ~35x large).
        """
        done = self.terminals | self.timeouts
        ends = np.flatnonzero(done) + 1
        if len(ends) == 0 or ends[-1] != len(self):
            ends = np.append(ends, len(self))
        return ends

    def episodes(self) -> Iterator[slice]:
        """Slices of consecutive transitions, one per episode."""
        start = 0
        for end in self.episode_ends():
            yield slice(start, int(end))
            start = int(end)

    def episode_returns(self) -> np.ndarray:
        ends = self.episode_ends()
        sums = np.add.reduceat(self.rewards.astype(np.float64), np.r_[0, ends[:-1]])
        return sums

    def episode_costs(self) -> np.ndarray | None:
        if self.costs is None:
            return None
        ends = self.episode_ends()
        return np.add.reduceat(self.costs.astype(np.float64), np.r_[0, ends[:-1]])

    def episode_lengths(self) -> np.ndarray:
        return np.diff(np.r_[0, self.episode_ends()])

    # -- sampling ----------------------------------------------------------------------------

    def to(self, device: str | torch.device = "cpu") -> OfflineDataset:
        """Cache the arrays as tensors on `device` (sampling then indexes without copies;
        uint8 image entries stay uint8)."""
        t: dict[str, Any] = {
            "obs": _tensors(self.observations, device),
            "actions": torch.as_tensor(self.actions, device=device),
            "rewards": torch.as_tensor(self.rewards, device=device),
            "next_obs": _tensors(self.next_observations, device),
            "terminated": torch.as_tensor(self.terminals.astype(np.float32), device=device),
        }
        if self.costs is not None:
            t["costs"] = torch.as_tensor(self.costs, device=device)
        self._tensors = t
        return self

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        """A uniform minibatch (with replacement) as a `Batch` of tensors."""
        if self._tensors is None:
            self.to("cpu")
        t = self._tensors
        assert t is not None
        idx = torch.randint(len(self), (batch_size,), generator=generator)
        idx = idx.to(t["rewards"].device)
        return Batch(
            obs=index_obs(t["obs"], idx),
            actions=t["actions"][idx],
            rewards=t["rewards"][idx],
            next_obs=index_obs(t["next_obs"], idx),
            terminated=t["terminated"][idx],
            costs=t["costs"][idx] if "costs" in t else None,
        )

    # -- summary -----------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Sizes, fields and episode statistics (for `roborl dataset info`)."""
        rets = self.episode_returns()
        out: dict[str, Any] = {
            "transitions": len(self),
            "episodes": len(rets),
            "obs_shape": _jsonable_shape(self.obs_shape),
            "action_dim": self.action_dim,
            "fields": list(self.arrays()),
            "terminals": int(self.terminals.sum()),
            "timeouts": int(self.timeouts.sum()),
            "return_mean": float(rets.mean()),
            "return_std": float(rets.std()),
            "return_min": float(rets.min()),
            "return_max": float(rets.max()),
            "length_mean": float(self.episode_lengths().mean()),
        }
        costs = self.episode_costs()
        if costs is not None:
            out["cost_mean"] = float(costs.mean())
            out["cost_max"] = float(costs.max())
        out["metadata"] = self.metadata
        return out

    # -- files -------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write `.npz` or `.hdf5`/`.h5` atomically (temp file in the same folder + rename;
        the formats: `roborl.core.dataset_files`)."""
        from roborl.core.dataset_files import save_file

        return save_file(self, path)


def normalized_score(ret: float, reference_returns: Mapping[str, float]) -> float | None:
    """D4RL normalisation: 100 * (R - R_random) / (R_expert - R_random)."""
    lo, hi = reference_returns.get("random"), reference_returns.get("expert")
    if lo is None or hi is None or hi == lo:
        return None
    return 100.0 * (float(ret) - float(lo)) / (float(hi) - float(lo))


def _tensors(obs: Obs, device: str | torch.device) -> Any:
    if isinstance(obs, Mapping):
        return {k: torch.as_tensor(v, device=device) for k, v in obs.items()}
    return torch.as_tensor(obs, device=device)


def _jsonable_shape(shape: Any) -> Any:
    if isinstance(shape, dict):
        return {k: list(v) for k, v in shape.items()}
    return list(shape)

"""Offline datasets: one in-memory container, validated on load, D4RL-style NPZ/HDF5 on disk.

Why here: offline (IQL, RIQL), safe offline (FISOR) and offline-to-online (WSRL) methods all
consume the same thing, so core owns the container and the plain-file formats. Minari reading
and writing lives in the datasets plugin (it needs the optional `minari` package).

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

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.errors import DatasetError
from roborl.core.interfaces import Batch
from roborl.core.obs import Obs, copy_obs, index_obs
from roborl.core.spaces import space_from_dict

REQUIRED_FIELDS = (
    "observations",
    "actions",
    "rewards",
    "next_observations",
    "terminals",
    "timeouts",
)
OPTIONAL_FIELDS = ("costs",)
ALL_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS
META_KEY = "__metadata__"
# Slack for float32 round-off when comparing actions to the env's bounds.
ACTION_BOUND_TOL = 1e-5

log = logging.getLogger("roborl.datasets")


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
          as D4RL's `qlearning_dataset`; needs `timeouts`, see `_derive_next_observations`;
        - `timeouts` (old D4RL files): a non-terminal row whose next observation is not the
          next row's observation ends its episode by truncation.
        Every other required field must be present.
        """
        data = _group_obs_fields({k: v for k, v in data.items() if v is not None}, source)
        derive_next = "next_observations" not in data and "timeouts" in data
        infer_timeouts = "timeouts" not in data and "next_observations" in data
        if "timeouts" not in data and "next_observations" not in data and "terminals" in data:
            raise DatasetError(
                f"{source}: has neither 'next_observations' nor 'timeouts'; next observations "
                "can be derived from the next row only when timeouts mark where episodes were "
                "cut (as D4RL's qlearning_dataset does). Add one of the two fields."
            )
        if infer_timeouts and "terminals" in data:
            data["timeouts"] = np.zeros(np.shape(data["terminals"]), dtype=bool)
        if derive_next and "observations" in data:
            data["next_observations"] = data["observations"]  # placeholder, derived below
        for name in REQUIRED_FIELDS:
            if name not in data:
                raise DatasetError(
                    f"{source}: missing field {name!r}. A D4RL-style dataset needs "
                    f"{', '.join(REQUIRED_FIELDS)} (and optionally costs); found "
                    f"{', '.join(sorted(k for k in data if k != META_KEY)) or 'nothing'}."
                )
        arrays: dict[str, Any] = {}
        for name in ALL_FIELDS:
            if data.get(name) is None:
                continue
            if name in OBS_FIELDS and isinstance(data[name], Mapping):
                arrays[name] = {
                    k: _as_array(f"{name}/{k}", v, source) for k, v in data[name].items()
                }
            else:
                arrays[name] = _as_array(name, data[name], source)
        # dict observations are measured against the rewards, so the bad key is the one named
        ref = "rewards" if isinstance(arrays["observations"], Mapping) else "observations"
        first = _first_array(arrays[ref])
        n = first.shape[0] if first.ndim else 0
        if n == 0:
            raise DatasetError(f"{source}: field {ref!r} is empty; need >= 1 transition.")
        for name, arr in _named_arrays(arrays):
            if arr.ndim == 0 or arr.shape[0] != n:
                got = arr.shape[0] if arr.ndim else "a scalar"
                raise DatasetError(
                    f"{source}: field {name!r} has length {got} but {ref!r} has {n}; "
                    "every field needs one entry per transition."
                )
        # shapes
        for name in ("rewards", "terminals", "timeouts", "costs"):
            if name in arrays:
                arr = arrays[name]
                if arr.ndim == 2 and arr.shape[1] == 1:
                    arr = arrays[name] = arr[:, 0]
                if arr.ndim != 1:
                    raise DatasetError(
                        f"{source}: field {name!r} has shape {arr.shape}; expected ({n},)."
                    )
        _check_obs_pair(arrays["observations"], arrays["next_observations"], source)
        act = arrays["actions"]
        if act.ndim == 1:
            act = arrays["actions"] = act[:, None]
        if act.ndim != 2:
            raise DatasetError(
                f"{source}: field 'actions' has shape {act.shape}; expected (N, action_dim)."
            )
        # dtypes and finiteness
        for name in ("observations", "actions", "rewards", "next_observations", "costs"):
            if name not in arrays:
                continue
            if isinstance(arrays[name], Mapping):
                arrays[name] = {
                    k: _numeric(f"{name}/{k}", v, n, source, keep_uint8=True)
                    for k, v in arrays[name].items()
                }
            else:
                arrays[name] = _numeric(name, arrays[name], n, source)
        for name in ("terminals", "timeouts"):
            arr = arrays[name]
            if arr.dtype != bool:
                if not np.issubdtype(arr.dtype, np.number) or not np.isin(arr, (0, 1)).all():
                    raise DatasetError(
                        f"{source}: field {name!r} must hold only 0/1 or booleans; "
                        f"found values such as {np.unique(arr)[:5].tolist()}."
                    )
                arrays[name] = arr.astype(bool)
        meta = dict(metadata or {})
        if infer_timeouts:
            arrays["timeouts"] = _timeouts_from_continuity(arrays, source)
        if derive_next:
            arrays = _derive_next_observations(arrays, source)
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
        space = _space_from_metadata(self.metadata.get("observation_space"))
        if space is not None:
            return space
        if isinstance(self.observations, Mapping):
            return gym.spaces.Dict({k: _box_for(v) for k, v in self.observations.items()})
        shape = self.observations.shape[1:]
        return gym.spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)

    @property
    def action_space(self) -> gym.spaces.Box:
        """From metadata when recorded, else the data's range rounded out to [-1, 1] or wider."""
        space = _space_from_metadata(self.metadata.get("action_space"))
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
        """Write `.npz` or `.hdf5`/`.h5` atomically (temp file in the same folder + rename)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".npz", ".hdf5", ".h5"):
            raise DatasetError(
                f"cannot write dataset to {str(path)!r}: unknown extension {suffix!r}; "
                "use .npz or .hdf5 (Minari datasets: `roborl dataset collect format=minari`)."
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
        os.close(fd)
        try:
            flat = _flat_fields(self.arrays())
            if suffix == ".npz":
                with open(tmp, "wb") as f:
                    np.savez_compressed(
                        f, **flat, **{META_KEY: np.array(json.dumps(self.metadata))}
                    )
            else:
                import h5py

                with h5py.File(tmp, "w") as f:
                    for name, arr in flat.items():  # "observations/image" makes a group
                        f.create_dataset(name, data=arr, compression="gzip")
                    f.attrs["roborl_metadata"] = json.dumps(self.metadata)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return path


def _timeouts_from_continuity(arrays: dict[str, np.ndarray], source: str) -> np.ndarray:
    """Timeouts of a file that has none: a non-terminal row whose next observation differs
    from the next row's observation was cut by a time limit (the last row ends the data)."""
    obs, nxt, term = arrays["observations"], arrays["next_observations"], arrays["terminals"]
    n = len(term)
    timeouts = np.zeros(n, dtype=bool)
    if n > 1:
        gap = rows_differ(index_obs(nxt, slice(0, -1)), index_obs(obs, slice(1, None)))
        timeouts[:-1] = gap & ~term[:-1]
    if timeouts.any():
        log.warning(
            "%s: no 'timeouts' field; %d episode ends inferred where a next observation is "
            "not the next row's observation.",
            source,
            int(timeouts.sum()),
        )
    return timeouts


def _derive_next_observations(arrays: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """Next observations from the next row, exactly as D4RL's `qlearning_dataset`.

    Row i gets observations[i + 1] as its next observation. Rows flagged `timeouts` (the last
    step of a time-limited episode, whose true next observation was never recorded) are
    dropped, and so is the file's last row. A terminal row is kept with the next row's
    observation: the value is never bootstrapped from (terminal), as in D4RL. Where a dropped
    timeout row followed, the kept row before it becomes its episode's end and is flagged a
    timeout, so episode boundaries survive the drop.
    """
    term, tout = arrays["terminals"], arrays["timeouts"]
    n = len(term)
    if n < 2:
        raise DatasetError(
            f"{source}: no 'next_observations' and only {n} row; deriving them from the next "
            "row needs >= 2 rows."
        )
    keep = ~tout
    keep[-1] = False
    if not keep.any():
        raise DatasetError(
            f"{source}: no 'next_observations', and every row is a timeout or the last row; "
            "no transition is left once they are derived."
        )
    new_tout = np.zeros(n, dtype=bool)
    new_tout[:-1] = tout[1:] & ~term[:-1]
    out = {k: index_obs(v, keep) for k, v in arrays.items() if k != "next_observations"}
    out["next_observations"] = index_obs(
        index_obs(arrays["observations"], slice(1, None)), keep[:-1]
    )
    out["timeouts"] = new_tout[keep]
    log.warning(
        "%s: no 'next_observations' field; derived from the next row as D4RL's "
        "qlearning_dataset does, dropping the last step of each timed-out episode and the "
        "file's last row (%d of %d rows kept).",
        source,
        int(keep.sum()),
        n,
    )
    return out


def load_npz(path: str | Path) -> OfflineDataset:
    """Read a D4RL-style `.npz` (roborl's metadata in `__metadata__` when present)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"dataset file {str(path)!r} does not exist.")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except Exception as exc:
        raise DatasetError(f"{str(path)!r} is not a readable .npz file ({exc}).") from exc
    meta: dict[str, Any] = {}
    if META_KEY in data:
        meta = json.loads(str(data.pop(META_KEY)))
    return OfflineDataset.from_arrays(data, meta, source=str(path))


def load_hdf5(path: str | Path) -> OfflineDataset:
    """Read a D4RL-style `.hdf5` (top-level datasets named like D4RL's fields)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"dataset file {str(path)!r} does not exist.")
    try:
        import h5py
    except ImportError as exc:
        raise DatasetError(
            f"reading {str(path)!r} needs h5py: pip install 'roborl[datasets]' or h5py."
        ) from exc
    try:
        with h5py.File(path, "r") as f:
            data: dict[str, Any] = {
                k: f[k][()] for k in ALL_FIELDS if k in f and isinstance(f[k], h5py.Dataset)
            }
            for k in OBS_FIELDS:  # dict observations: one group per field
                if k in f and isinstance(f[k], h5py.Group):
                    data[k] = {sub: f[k][sub][()] for sub in f[k]}
            raw = f.attrs.get("roborl_metadata")
            meta = json.loads(raw) if raw is not None else {}
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{str(path)!r} is not a readable HDF5 file ({exc}).") from exc
    return OfflineDataset.from_arrays(data, meta, source=str(path))


def load_file(path: str | Path) -> OfflineDataset:
    """Load `.npz` or `.hdf5`/`.h5` by extension."""
    suffix = Path(path).suffix.lower()
    if suffix == ".npz":
        return load_npz(path)
    if suffix in (".hdf5", ".h5"):
        return load_hdf5(path)
    raise DatasetError(
        f"unknown dataset file type {suffix!r} for {str(path)!r}; accepted: .npz, .hdf5, .h5, "
        "or a Minari dataset directory / id."
    )


def _check_flat_obs_space(
    dataset: OfflineDataset, observation_space: gym.Space, env_name: str
) -> None:
    obs_shape = tuple(int(d) for d in dataset.observations.shape[1:])
    if isinstance(observation_space, gym.spaces.Box):
        want_obs = tuple(int(d) for d in observation_space.shape)
        ok = obs_shape == want_obs or (
            int(np.prod(obs_shape)) == int(np.prod(want_obs)) and len(want_obs) == 1
        )
    else:
        try:
            flat = int(gym.spaces.flatdim(observation_space))
        except Exception as exc:
            raise DatasetError(
                f"env {env_name!r} has observation space {observation_space}, which flat "
                "offline datasets cannot hold; use an env with a Box observation space."
            ) from exc
        want_obs, ok = (flat,), dataset.obs_dim == flat
    if not ok:
        raise DatasetError(
            f"dataset field 'observations' has per-step shape {obs_shape} but env "
            f"{env_name!r} observes shape {want_obs}; the dataset was recorded on another "
            "task (or observation wrapper). Pick the matching env= or dataset=."
        )


def _check_dict_obs_space(
    dataset: OfflineDataset, observation_space: gym.Space, env_name: str
) -> None:
    """Dict data for a Dict env: the same keys, each with the env's per-step shape."""
    if not dataset.dict_obs:
        raise DatasetError(
            f"dataset field 'observations' is one array of per-step shape "
            f"{dataset.obs_shape}, but env {env_name!r} observes a Dict "
            f"({', '.join(observation_space.spaces)}); record the dataset on this env."
        )
    if not isinstance(observation_space, gym.spaces.Dict):
        raise DatasetError(
            f"dataset field 'observations' is a dict ({', '.join(dataset.observations)}), but "
            f"env {env_name!r} observes one array of shape {observation_space.shape}; pick the "
            "env the dataset was recorded on."
        )
    have, want = set(dataset.observations), set(observation_space.spaces)
    if have != want:
        raise DatasetError(
            f"dataset field 'observations' has keys {sorted(have)} but env {env_name!r} "
            f"observes keys {sorted(want)} (missing {sorted(want - have)}, extra "
            f"{sorted(have - want)}); pick the matching env= or dataset=."
        )
    shapes = dataset.obs_shape
    assert isinstance(shapes, dict)
    for key, sub in observation_space.spaces.items():
        if shapes[key] != tuple(sub.shape):
            raise DatasetError(
                f"dataset field 'observations/{key}' has per-step shape {shapes[key]} but env "
                f"{env_name!r} observes {key!r} with shape {tuple(sub.shape)} (another image "
                "size or task?); pick the matching env= or dataset=."
            )


def check_dataset_spaces(
    dataset: OfflineDataset,
    observation_space: gym.Space,
    action_space: gym.Space,
    env_name: str,
) -> None:
    """Check a dataset against the env it will be evaluated on, before any update runs.

    Why: without it a dataset recorded on another task trains for the whole budget and then
    crashes at the first evaluation with a bare tensor-size error. A mismatch in the
    observation or action dimension raises `DatasetError` naming the field, both shapes and
    the env.

    Actions outside the env's Box bounds are accepted with one warning that gives the
    fraction of transitions out of bounds (and the largest excess). Why not refuse: RIQL's
    corruption protocol (and its official code) leaves corrupted actions unclipped, and many
    D4RL files hold actions a hair beyond +-1; the algorithms squash their own outputs into
    the bounds, so such data is usable, but a user who recorded in other units should know.
    """
    if dataset.dict_obs or isinstance(observation_space, gym.spaces.Dict):
        _check_dict_obs_space(dataset, observation_space, env_name)
    else:
        _check_flat_obs_space(dataset, observation_space, env_name)
    if isinstance(action_space, gym.spaces.Box):
        want_act = tuple(int(d) for d in action_space.shape)
        if dataset.action_dim != int(np.prod(want_act)):
            raise DatasetError(
                f"dataset field 'actions' has per-step shape ({dataset.action_dim},) but env "
                f"{env_name!r} takes actions of shape {want_act}; the dataset was recorded on "
                "another task. Pick the matching env= or dataset=."
            )
        low = np.asarray(action_space.low, np.float64).reshape(1, -1)
        high = np.asarray(action_space.high, np.float64).reshape(1, -1)
        act = dataset.actions.astype(np.float64)
        excess = np.maximum(act - high, low - act)
        outside = (excess > ACTION_BOUND_TOL).any(axis=1)
        if outside.any():
            log.warning(
                "dataset actions: %.2f%% of transitions (%d of %d) lie outside env %r's "
                "action bounds [%s, %s] (largest excess %.3g); training on them as they are "
                "(the policy's own actions stay within the bounds).",
                100.0 * outside.mean(),
                int(outside.sum()),
                len(dataset),
                env_name,
                np.array2string(low[0], precision=3),
                np.array2string(high[0], precision=3),
                float(excess.max()),
            )
    elif isinstance(action_space, gym.spaces.Discrete):
        raise DatasetError(
            f"env {env_name!r} has discrete actions ({action_space}); roborl's offline "
            "algorithms and datasets take continuous (Box) actions."
        )
    else:
        raise DatasetError(
            f"env {env_name!r} has action space {action_space}; offline datasets take Box "
            "actions only."
        )


def normalized_score(ret: float, reference_returns: Mapping[str, float]) -> float | None:
    """D4RL normalisation: 100 * (R - R_random) / (R_expert - R_random)."""
    lo, hi = reference_returns.get("random"), reference_returns.get("expert")
    if lo is None or hi is None or hi == lo:
        return None
    return 100.0 * (float(ret) - float(lo)) / (float(hi) - float(lo))


OBS_FIELDS = ("observations", "next_observations")


def _group_obs_fields(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Flat ``observations/<key>`` entries (NPZ) gathered into dicts per field."""
    out: dict[str, Any] = {}
    for name, value in data.items():
        field_name, sep, key = name.partition("/")
        if sep and field_name in OBS_FIELDS:
            group = out.setdefault(field_name, {})
            if not isinstance(group, dict):
                raise DatasetError(
                    f"{source}: has both a {field_name!r} array and {name!r}; a field is one "
                    "array or a group of per-key arrays, not both."
                )
            group[key] = value
        elif name in out and isinstance(out[name], dict):
            raise DatasetError(
                f"{source}: has both a {name!r} array and {name}/<key> entries; a field is "
                "one array or a group of per-key arrays, not both."
            )
        else:
            out[name] = value
    for name in OBS_FIELDS:
        if isinstance(out.get(name), Mapping) and not out[name]:
            raise DatasetError(f"{source}: field {name!r} is an empty group of observations.")
    return out


def _as_array(name: str, value: Any, source: str) -> np.ndarray:
    if isinstance(value, Mapping):
        raise DatasetError(
            f"{source}: field {name!r} is a dict; only observations and next_observations "
            "may be dicts (one level, arrays inside)."
        )
    try:
        return np.asarray(value)
    except Exception as exc:
        raise DatasetError(f"{source}: field {name!r} is not an array ({exc}).") from exc


def _first_array(obs: Any) -> np.ndarray:
    return next(iter(obs.values())) if isinstance(obs, Mapping) else obs


def _named_arrays(arrays: Mapping[str, Any]) -> Iterator[tuple[str, np.ndarray]]:
    for name, value in arrays.items():
        if isinstance(value, Mapping):
            for key, arr in value.items():
                yield f"{name}/{key}", arr
        else:
            yield name, value


def _check_obs_pair(obs: Any, nxt: Any, source: str) -> None:
    """observations and next_observations: both arrays or both dicts, same keys and shapes."""
    if isinstance(obs, Mapping) != isinstance(nxt, Mapping):
        kinds = {True: "a dict of arrays", False: "one array"}
        raise DatasetError(
            f"{source}: 'observations' is {kinds[isinstance(obs, Mapping)]} but "
            f"'next_observations' is {kinds[isinstance(nxt, Mapping)]}; they must match."
        )
    if isinstance(obs, Mapping):
        if set(obs) != set(nxt):
            raise DatasetError(
                f"{source}: 'observations' has keys {sorted(obs)} but 'next_observations' "
                f"has {sorted(nxt)}; they must match."
            )
        pairs = [(f"/{k}", obs[k], nxt[k]) for k in obs]
    else:
        pairs = [("", obs, nxt)]
    for suffix, o, x in pairs:
        if o.ndim < 2:
            raise DatasetError(
                f"{source}: field 'observations{suffix}' has shape {o.shape}; expected "
                "(N, obs_dim) or (N, H, W, C)."
            )
        if x.shape != o.shape:
            raise DatasetError(
                f"{source}: field 'next_observations{suffix}' has shape {x.shape} but "
                f"'observations{suffix}' has {o.shape}; they must match."
            )


def _numeric(
    name: str, arr: np.ndarray, n: int, source: str, keep_uint8: bool = False
) -> np.ndarray:
    """Real numbers, finite; float32 except uint8 images of dict observations."""
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise DatasetError(
            f"{source}: field {name!r} has dtype {arr.dtype}; expected real numbers."
        )
    if keep_uint8 and arr.dtype == np.uint8:
        return arr
    arr = arr.astype(np.float32, copy=False)
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = int(np.argwhere(bad.reshape(n, -1).any(axis=1))[0, 0])
        raise DatasetError(
            f"{source}: field {name!r} has {int(bad.sum())} non-finite values "
            f"(NaN/inf), first at transition {idx}; clean or drop those transitions."
        )
    return arr


def rows_differ(a: Obs, b: Obs) -> np.ndarray:
    """Per row: does observation batch `a` differ from `b` (any key, any element)?"""
    if isinstance(a, Mapping):
        out = np.zeros(len(next(iter(a.values()))), dtype=bool)
        for k in a:
            out |= rows_differ(a[k], b[k])
        return out
    n = len(a)
    return np.any(np.asarray(a).reshape(n, -1) != np.asarray(b).reshape(n, -1), axis=1)


def _tensors(obs: Obs, device: str | torch.device) -> Any:
    if isinstance(obs, Mapping):
        return {k: torch.as_tensor(v, device=device) for k, v in obs.items()}
    return torch.as_tensor(obs, device=device)


def _flat_fields(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Dict observations as ``observations/<key>`` entries (NPZ names, HDF5 groups)."""
    return dict(_named_arrays(arrays))


def _jsonable_shape(shape: Any) -> Any:
    if isinstance(shape, dict):
        return {k: list(v) for k, v in shape.items()}
    return list(shape)


def _box_for(values: np.ndarray) -> gym.spaces.Box:
    shape = values.shape[1:]
    if values.dtype == np.uint8:
        return gym.spaces.Box(0, 255, shape=shape, dtype=np.uint8)
    return gym.spaces.Box(-np.inf, np.inf, shape=shape, dtype=np.float32)


def _space_from_metadata(spec: Any) -> gym.Space | None:
    """A space recorded in metadata: `space_to_dict` form, or older bare low/high lists."""
    if not isinstance(spec, Mapping):
        return None
    if "type" in spec:
        return _as_float32(space_from_dict(dict(spec)))
    if "low" in spec:
        return gym.spaces.Box(
            np.asarray(spec["low"], np.float32), np.asarray(spec["high"], np.float32)
        )
    return None


def _as_float32(space: gym.Space) -> gym.Space:
    """Float Box entries as float32 (the dtype the data is stored in); uint8 images kept."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: _as_float32(v) for k, v in space.spaces.items()})
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return gym.spaces.Box(
            space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32
        )
    return space

"""Minari datasets in and out; the loader is one the runner asks in turn (`loader.accepts(path)`
then `loader(path)`), as are the file loaders of `files.py` and LeRobot's.

Minari: a dataset id (`mujoco/hopper/medium-v0`, resolved under `$MINARI_DATASETS_PATH` or
`~/.minari/datasets`) or a Minari dataset directory. roborl's own metadata (reference returns,
corruption record) sits beside Minari's in `roborl_metadata.json`; for Minari datasets that
lack it, Minari's `ref_min_score`/`ref_max_score` become the reference returns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.dataset_arrays import rows_differ
from roborl.core.datasets import OfflineDataset
from roborl.core.errors import DatasetError
from roborl.core.obs import concat_obs, index_obs

ROBORL_META = "roborl_metadata.json"


def minari_root() -> Path:
    return Path(os.environ.get("MINARI_DATASETS_PATH") or Path.home() / ".minari" / "datasets")


def _minari_dir(path: str) -> Path | None:
    p = Path(path)
    if (p / "data" / "metadata.json").is_file():
        return p
    q = minari_root() / path
    if (q / "data" / "metadata.json").is_file():
        return q
    return None


def _accepts_minari(path: str) -> bool:
    return _minari_dir(str(path)) is not None


def load_minari_source(path: str) -> OfflineDataset:
    """Flatten a Minari dataset's episodes into D4RL-style transition arrays."""
    root = _minari_dir(path)
    if root is None:
        raise DatasetError(
            f"{path!r} is not a Minari dataset directory or a dataset id under "
            f"{str(minari_root())!r} (set MINARI_DATASETS_PATH, or `minari download ID`)."
        )
    try:
        from minari.dataset.minari_dataset import MinariDataset
    except ImportError as exc:
        raise DatasetError(
            "reading Minari datasets needs `pip install 'minari[hdf5]'` (roborl[datasets])."
        ) from exc
    ds = MinariDataset(str(root / "data"))
    obs, nxt, act, rew, term, trunc, costs = [], [], [], [], [], [], []
    for ep in ds.iterate_episodes():
        o = _episode_observations(ep.observations, path, ep.id)
        obs.append(index_obs(o, slice(0, -1)))
        nxt.append(index_obs(o, slice(1, None)))
        act.append(np.asarray(ep.actions))
        rew.append(np.asarray(ep.rewards))
        term.append(np.asarray(ep.terminations))
        trunc.append(np.asarray(ep.truncations))
        infos = ep.infos or {}
        if "cost" in infos:
            costs.append(np.asarray(infos["cost"])[-len(ep.rewards) :])
    data: dict[str, Any] = {
        "observations": concat_obs(obs),
        "next_observations": concat_obs(nxt),
        "actions": np.concatenate(act),
        "rewards": np.concatenate(rew),
        "terminals": np.concatenate(term),
        "timeouts": np.concatenate(trunc),
    }
    if costs and len(costs) == len(obs):
        data["costs"] = np.concatenate(costs)
    # Every episode ends: mark the last step of truncated-but-unflagged episodes as timeout.
    meta: dict[str, Any] = {"source": "minari", "minari_id": ds.spec.dataset_id}
    side = root / ROBORL_META
    if side.is_file():
        meta.update(json.loads(side.read_text()))
    else:
        lo, hi = ds.spec.ref_min_score, ds.spec.ref_max_score
        if lo is not None and hi is not None:
            meta["reference_returns"] = {"random": float(lo), "expert": float(hi)}
        env_spec = ds.spec.env_spec
        if env_spec is not None:
            meta["env_id"] = env_spec.id
    return OfflineDataset.from_arrays(data, meta, source=str(path))


load_minari_source.accepts = _accepts_minari  # type: ignore[attr-defined]


def _episode_observations(raw: Any, path: str, episode: int) -> Any:
    """One episode's T+1 observations: an array, or a dict of arrays (Minari's Dict spaces).

    Nested dicts and tuple spaces have no place in roborl's transition layout: refused with
    the key that is wrong."""
    if isinstance(raw, dict):
        out = {}
        for key, value in raw.items():
            if isinstance(value, (dict, tuple, list)):
                raise DatasetError(
                    f"{path!r}: episode {episode} observation entry {key!r} is a nested "
                    f"{type(value).__name__}; roborl reads Dict observations of Box entries "
                    "(images, state vectors) one level deep."
                )
            out[key] = np.asarray(value)
        return out
    o = np.asarray(raw)
    if o.dtype == object:
        raise DatasetError(
            f"{path!r}: episode {episode} observations are {type(raw).__name__} of mixed "
            "objects; roborl reads Box observations or Dict observations of Box entries."
        )
    return o


def refuse_broken_continuity(dataset: OfflineDataset, target: str, layout: str) -> None:
    """Minari and LeRobotDataset store one observation sequence per episode, so s'_t must equal
    s_{t+1} inside an episode; corrupted observations or dynamics (RIQL's protocol) break that
    and would be silently rewritten. Refuse rather than lose them."""
    done = dataset.terminals | dataset.timeouts
    n = len(dataset)
    if n < 2:
        return
    nxt = index_obs(dataset.next_observations, slice(0, -1))
    gap = rows_differ(nxt, index_obs(dataset.observations, slice(1, None))) & ~done[:-1]
    if gap.any():
        raise DatasetError(
            f"cannot write {target}: at {int(gap.sum())} transitions the next observation "
            "differs from the next row's observation inside an episode (corrupted "
            f"observations or dynamics?), which {layout}'s one-sequence-per-episode layout "
            "cannot hold. Write out=*.npz or *.hdf5 instead."
        )


def save_minari(dataset: OfflineDataset, dataset_id: str, env: Any = None) -> Path:
    """Write `dataset` as a Minari dataset (`minari.create_dataset_from_buffers`)."""
    import minari
    from minari.data_collector.episode_buffer import EpisodeBuffer

    refuse_broken_continuity(dataset, f"Minari dataset {dataset_id!r}", "Minari")
    buffers = []
    for sl in dataset.episodes():
        o = index_obs(dataset.observations, sl)
        last = index_obs(dataset.next_observations, slice(sl.stop - 1, sl.stop))
        obs = concat_obs([o, last])
        ep: dict[str, Any] = {
            "observations": obs,
            "actions": dataset.actions[sl],
            "rewards": dataset.rewards[sl],
            "terminations": dataset.terminals[sl],
            "truncations": dataset.timeouts[sl].copy(),
            "infos": {},
        }
        if not (ep["terminations"][-1] or ep["truncations"][-1]):
            ep["truncations"][-1] = True
        if dataset.costs is not None:
            ep["infos"] = {"cost": np.r_[0.0, dataset.costs[sl]].astype(np.float32)}
        buffers.append(EpisodeBuffer(**ep))
    kwargs: dict[str, Any] = {}
    if env is not None:
        kwargs["env"] = env
    else:
        kwargs["observation_space"] = dataset.observation_space
        kwargs["action_space"] = dataset.action_space
    if (minari_root() / dataset_id).exists():
        raise DatasetError(
            f"Minari dataset {dataset_id!r} already exists under {str(minari_root())!r}; "
            "pick another id or delete it (`minari delete ID`)."
        )
    ds = minari.create_dataset_from_buffers(
        dataset_id=dataset_id,
        buffer=buffers,
        algorithm_name=str(dataset.metadata.get("policy", "roborl")),
        author="roborl",
        description=json.dumps(dataset.metadata)[:2000],
        **kwargs,
    )
    root = minari_root() / ds.spec.dataset_id
    tmp = root / (ROBORL_META + ".tmp")
    tmp.write_text(json.dumps(dataset.metadata))
    os.replace(tmp, root / ROBORL_META)
    return root

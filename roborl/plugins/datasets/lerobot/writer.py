"""roborl transitions -> a LeRobotDataset v3 directory (the frame rule is in `__init__`).

One data file, one episodes file and one video per camera (``chunk-000/file-000``): LeRobot
splits its own files only past 100 MB of data or 200 MB of video, and reads any split. The
directory is built beside the target and renamed into place, so a crash or Ctrl-C leaves no
half-written dataset, and an existing non-empty directory is never overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.datasets import OfflineDataset
from roborl.core.errors import DatasetError
from roborl.plugins.datasets.lerobot import schema as S
from roborl.plugins.datasets.lerobot import video
from roborl.plugins.datasets.lerobot.deps import require
from roborl.plugins.datasets.lerobot.stats import feature_stats
from roborl.plugins.datasets.sources import refuse_broken_continuity

DEFAULT_FPS = 30
DEFAULT_TASK = "roborl"
# Metadata that becomes columns or LeRobot's own fields, not the roborl sidecar.
AS_COLUMNS = ("success_rows", "intervened_rows", "tasks", "episode_task_index")


def save_lerobot(
    dataset: OfflineDataset,
    root: str | Path,
    codec: str = video.CODEC,
    crf: int = video.CRF,
) -> Path:
    """Write `dataset` as a LeRobotDataset v3 directory at `root` (which must not exist or
    be empty). The task string, frame rate and robot type come from the metadata's ``task``,
    ``fps`` and ``robot_type`` (defaults: "roborl", 30, none)."""
    require(f"writing LeRobotDataset {str(root)!r}")
    root = Path(root)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise DatasetError(
            f"{str(root)!r} already exists; a LeRobotDataset is written into a new (or empty) "
            "directory. Pick another out= or delete it."
        )
    refuse_broken_continuity(dataset, f"LeRobotDataset {str(root)!r}", "LeRobotDataset")
    meta = dataset.metadata
    fps = _fps(meta.get("fps"))
    frames = Frames(dataset)
    tasks, episode_task = _tasks(meta, frames.n_episodes)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}.tmp-"))
    try:
        _write(tmp, dataset, frames, fps, tasks, episode_task, codec, crf)
        if root.exists():
            root.rmdir()  # empty, checked above
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


class Frames:
    """Where each frame comes from: an episode of T transitions becomes T + 1 frames, frame t
    (t < T) is transition t and frame T holds the episode's final next observation."""

    def __init__(self, dataset: OfflineDataset) -> None:
        ends = dataset.episode_ends()
        starts = np.r_[0, ends[:-1]]
        lengths = ends - starts
        self.n_episodes = len(ends)
        self.lengths = lengths + 1  # frames per episode
        self.from_index = np.r_[0, np.cumsum(self.lengths)[:-1]]
        self.episode = np.repeat(np.arange(self.n_episodes), self.lengths)
        self.frame_index = np.arange(len(self.episode)) - self.from_index[self.episode]
        self.final = self.frame_index == lengths[self.episode]
        # the transition row each frame reads (the final frame: the episode's last row)
        self.row = starts[self.episode] + np.minimum(self.frame_index, lengths[self.episode] - 1)
        self.last = self.frame_index >= lengths[self.episode] - 1
        # an episode that does not end in a terminal ended by time limit (or where data stops)
        self.truncated_episode = ~dataset.terminals[ends - 1]

    def observations(self, obs: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        out = obs[self.row]
        out[self.final] = nxt[self.row[self.final]]
        return out

    def per_step(self, values: np.ndarray, final_value: Any = None) -> np.ndarray:
        """A per-transition column; the final frame copies its episode's last value (as
        LeRobot's own rollout recorder pads) unless `final_value` is given."""
        out = values[self.row]
        if final_value is not None:
            out[self.final] = final_value
        return out


def _fps(value: Any) -> int:
    if value is None:
        return DEFAULT_FPS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise DatasetError(f"fps={value!r}: LeRobotDataset needs a positive frame rate.")
    return max(1, round(float(value)))


def _tasks(meta: Mapping[str, Any], n_episodes: int) -> tuple[list[str], np.ndarray]:
    """The task strings and each episode's task index (one task unless the metadata came
    from a multi-task LeRobotDataset)."""
    tasks, per_episode = meta.get("tasks"), meta.get("episode_task_index")
    if isinstance(tasks, list) and tasks and isinstance(per_episode, list):
        idx = np.asarray(per_episode, np.int64)
        if len(idx) == n_episodes and idx.min() >= 0 and idx.max() < len(tasks):
            return [str(t) for t in tasks], idx
    return [str(meta.get("task") or DEFAULT_TASK)], np.zeros(n_episodes, np.int64)


def _observation_columns(dataset: OfflineDataset) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """LeRobot feature -> per-step observation array (obs side), and feature -> roborl key."""
    obs = dataset.observations
    if not isinstance(obs, Mapping):
        if obs.ndim != 2:
            raise DatasetError(
                f"observations of per-step shape {obs.shape[1:]} do not fit LeRobotDataset's "
                "observation.state vector; roborl writes vector observations and (H, W, 3) "
                "uint8 camera frames."
            )
        return {S.STATE: obs}, {S.STATE: ""}
    columns, keys = {}, {}
    for key, values in obs.items():
        feature = S.feature_for_key(key, values)
        if not S.is_camera(values) and values.ndim != 2:
            raise DatasetError(
                f"observation entry {key!r} has per-step shape {values.shape[1:]}; "
                "LeRobotDataset columns hold vectors, and roborl writes only (H, W, 3) uint8 "
                "camera frames as video."
            )
        if feature in columns:
            raise DatasetError(
                f"observation entries {keys[feature]!r} and {key!r} both map to {feature!r}."
            )
        columns[feature], keys[feature] = values, key
    return columns, keys


def _rows_mask(meta: Mapping[str, Any], name: str, n: int) -> np.ndarray | None:
    rows = meta.get(name)
    if rows is None:
        return None
    mask = np.zeros(n, bool)
    mask[np.asarray(rows, np.int64)] = True
    return mask


def _write(
    root: Path,
    dataset: OfflineDataset,
    frames: Frames,
    fps: int,
    tasks: list[str],
    episode_task: np.ndarray,
    codec: str,
    crf: int,
) -> None:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = dataset.metadata
    obs_columns, obs_keys = _observation_columns(dataset)
    nxt = dataset.next_observations
    n_frames = len(frames.episode)
    columns: dict[str, np.ndarray] = {}
    features: dict[str, dict[str, Any]] = {}
    cameras: dict[str, np.ndarray] = {}
    for feature, values in obs_columns.items():
        key = obs_keys[feature]
        per_frame = frames.observations(values, nxt[key] if key else nxt)
        if S.is_camera(values):
            cameras[feature] = per_frame
        else:
            columns[feature] = per_frame
            features[feature] = S.feature_spec(str(values.dtype), values.shape[1:])
    columns[S.ACTION] = frames.per_step(dataset.actions.astype(np.float32))
    features[S.ACTION] = S.feature_spec("float32", dataset.actions.shape[1:])
    scalars: dict[str, tuple[np.ndarray, str]] = {
        S.REWARD: (frames.per_step(dataset.rewards.astype(np.float32), 0.0), "float32"),
        S.DONE: (frames.last.copy(), "bool"),
        S.TRUNCATED: (frames.last & frames.truncated_episode[frames.episode], "bool"),
    }
    success = _rows_mask(meta, "success_rows", len(dataset))
    if success is not None:
        scalars[S.SUCCESS] = (frames.per_step(success), "bool")
    if dataset.costs is not None:
        scalars[S.COST] = (frames.per_step(dataset.costs.astype(np.float32), 0.0), "float32")
    intervened = _rows_mask(meta, "intervened_rows", len(dataset))
    if intervened is not None:
        scalars[S.INTERVENTION] = (frames.per_step(intervened, False), "bool")
    scalars[S.FINAL] = (frames.final.copy(), "bool")
    scalars["timestamp"] = ((frames.frame_index / fps).astype(np.float32), "float32")
    scalars["frame_index"] = (frames.frame_index.astype(np.int64), "int64")
    scalars["episode_index"] = (frames.episode.astype(np.int64), "int64")
    scalars["index"] = (np.arange(n_frames, dtype=np.int64), "int64")
    scalars["task_index"] = (episode_task[frames.episode], "int64")
    for name, (values, dtype) in scalars.items():
        columns[name] = values
        features[name] = S.feature_spec(dtype, (1,))

    # data/chunk-000/file-000.parquet
    data_path = root / S.DATA_PATH.format(chunk_index=0, file_index=0)
    data_path.parent.mkdir(parents=True)
    table = pa.table({name: _arrow(values) for name, values in columns.items()})
    pq.write_table(table, data_path, compression="snappy")

    # videos/<feature>/chunk-000/file-000.mp4: all episodes back to back
    episodes: dict[str, list[Any]] = {
        "episode_index": list(range(frames.n_episodes)),
        "tasks": [[tasks[i]] for i in episode_task],
        "length": frames.lengths.tolist(),
        "data/chunk_index": [0] * frames.n_episodes,
        "data/file_index": [0] * frames.n_episodes,
        "dataset_from_index": frames.from_index.tolist(),
        "dataset_to_index": (frames.from_index + frames.lengths).tolist(),
    }
    for feature, values in cameras.items():
        path = root / S.VIDEO_PATH.format(video_key=feature, chunk_index=0, file_index=0)
        spec = S.feature_spec("video", values.shape[1:], ["height", "width", "channels"])
        spec["info"] = video.encode(values, path, fps, codec=codec, crf=crf)
        features[feature] = spec
        episodes[f"videos/{feature}/chunk_index"] = [0] * frames.n_episodes
        episodes[f"videos/{feature}/file_index"] = [0] * frames.n_episodes
        episodes[f"videos/{feature}/from_timestamp"] = (frames.from_index / fps).tolist()
        episodes[f"videos/{feature}/to_timestamp"] = (
            (frames.from_index + frames.lengths) / fps
        ).tolist()
    episodes["meta/episodes/chunk_index"] = [0] * frames.n_episodes
    episodes["meta/episodes/file_index"] = [0] * frames.n_episodes

    # statistics: over the dataset (meta/stats.json) and per episode (meta/episodes)
    every = {**columns, **cameras}
    stats = {name: feature_stats(values, name in cameras) for name, values in every.items()}
    per_episode: dict[str, list[Any]] = {}
    for start, length in zip(frames.from_index, frames.lengths):
        part = slice(int(start), int(start + length))
        for name, values in every.items():
            for stat, value in feature_stats(values[part], name in cameras).items():
                per_episode.setdefault(f"stats/{name}/{stat}", []).append(value)
    episodes.update(per_episode)
    episodes_path = root / S.EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes_path.parent.mkdir(parents=True)
    pq.write_table(pa.table(episodes), episodes_path, compression="snappy")

    # meta/tasks.parquet: LeRobot reads it with pandas, the task strings as the index
    pd.DataFrame({"task_index": np.arange(len(tasks), dtype=np.int64)}, index=tasks).to_parquet(
        root / S.TASKS_PATH
    )
    order = [*obs_columns, S.ACTION, *(k for k in scalars if k not in S.INDEX_FEATURES)]
    order += list(S.INDEX_FEATURES)
    info = {
        "codebase_version": S.CODEBASE_VERSION,
        "robot_type": meta.get("robot_type"),
        "total_episodes": frames.n_episodes,
        "total_frames": n_frames,
        "total_tasks": len(tasks),
        "chunks_size": S.CHUNKS_SIZE,
        "data_files_size_in_mb": S.DATA_FILE_MB,
        "video_files_size_in_mb": S.VIDEO_FILE_MB,
        "fps": fps,
        "splits": {"train": f"0:{frames.n_episodes}"},
        "data_path": S.DATA_PATH,
        "video_path": S.VIDEO_PATH if cameras else None,
        "features": {name: features[name] for name in order},
    }
    _write_json(root / S.INFO_PATH, info)
    _write_json(root / S.STATS_PATH, stats)
    sidecar = {
        "flat_observation": not dataset.dict_obs,
        "observation_keys": {f: k for f, k in obs_keys.items() if k},
        "metadata": {k: v for k, v in meta.items() if k not in AS_COLUMNS},
    }
    _write_json(root / S.ROBORL_META_PATH, sidecar)


def _arrow(values: np.ndarray) -> Any:
    """A column: scalars as plain values, vectors as fixed-size lists (LeRobot's features
    of shape (1,) are scalar columns, longer vectors lists of that length)."""
    import pyarrow as pa

    if values.ndim == 1:
        return pa.array(values)
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, int(values.shape[1]))


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")

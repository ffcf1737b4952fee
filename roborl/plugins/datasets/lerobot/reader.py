"""A LeRobotDataset v3 directory -> roborl transitions (the frame rule is in `__init__`).

Every file is checked before it is trusted, and each problem is a `DatasetError` that names
the file and what is wrong: a missing `meta/info.json`, another `codebase_version`, a feature
without its column, episodes whose frame counts disagree with their metadata, a video with too
few or too many frames for an episode.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.datasets import OfflineDataset
from roborl.core.errors import DatasetError
from roborl.plugins.datasets.lerobot import schema as S
from roborl.plugins.datasets.lerobot import video
from roborl.plugins.datasets.lerobot.deps import require

log = logging.getLogger("roborl.datasets")
REQUIRED = (S.ACTION, S.REWARD)


def load_lerobot(path: str | Path) -> OfflineDataset:
    """Read the LeRobotDataset v3 directory `path` as transitions."""
    root = Path(path)
    info = read_info(root)
    require(f"reading LeRobotDataset {str(root)!r}")
    features: dict[str, dict[str, Any]] = info["features"]
    data = _read_data(root, features)
    episodes = _read_episodes(root, info, data)
    sidecar = _read_json(root / S.ROBORL_META_PATH) if (root / S.ROBORL_META_PATH).is_file() else {}
    obs = _observations(root, info, features, data, episodes)
    tasks = _read_tasks(root)
    return _transitions(root, info, data, episodes, obs, tasks, sidecar)


def read_info(root: Path) -> dict[str, Any]:
    """`meta/info.json`, checked: a v3 codebase version, the features roborl needs."""
    path = root / S.INFO_PATH
    if not root.is_dir():
        raise DatasetError(f"{str(root)!r} is not a directory; a LeRobotDataset is one.")
    if not path.is_file():
        raise DatasetError(
            f"{str(path)!r} is missing: {str(root)!r} is not a LeRobotDataset v3 directory "
            "(meta/info.json, meta/episodes/, data/chunk-XXX/file-XXX.parquet)."
        )
    info = _read_json(path)
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3."):
        raise DatasetError(
            f"{str(path)!r}: codebase_version is {version or 'absent'!r}; roborl reads "
            f"LeRobotDataset {S.CODEBASE_VERSION} (convert older datasets with LeRobot's "
            "convert_dataset_v21_to_v30 first)."
        )
    features = info.get("features")
    if not isinstance(features, Mapping):
        raise DatasetError(f"{str(path)!r} has no 'features' mapping.")
    missing = [name for name in REQUIRED if name not in features]
    if not any(S.is_observation(name) for name in features):
        missing.insert(0, "observation.* (observation.state or observation.images.<camera>)")
    if missing:
        raise DatasetError(
            f"{str(path)!r}: missing feature(s) {', '.join(missing)}; roborl reads "
            "transitions and needs observations, 'action' and 'next.reward' (found "
            f"{', '.join(sorted(features))})."
        )
    if not isinstance(info.get("fps"), (int, float)) or info["fps"] <= 0:
        raise DatasetError(f"{str(path)!r}: fps is {info.get('fps')!r}; need a positive rate.")
    return dict(info)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{str(path)!r} is not readable JSON ({exc}).") from exc
    if not isinstance(data, dict):
        raise DatasetError(f"{str(path)!r} holds {type(data).__name__}, not a JSON object.")
    return data


def _parquet_files(root: Path, folder: str) -> list[Path]:
    files = sorted((root / folder).glob("chunk-*/file-*.parquet"))
    if not files:
        raise DatasetError(
            f"{str(root / folder)!r} holds no chunk-XXX/file-XXX.parquet file; a "
            "LeRobotDataset v3 keeps its frames there."
        )
    return files


def _read_data(root: Path, features: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Every non-video feature as a numpy column, rows in `index` order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted = [name for name, spec in features.items() if spec.get("dtype") != "video"]
    parts: dict[str, list[np.ndarray]] = {name: [] for name in wanted}
    for path in _parquet_files(root, "data"):
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"{str(path)!r} is not a readable parquet file ({exc}).") from exc
        rel = path.relative_to(root)
        for name in wanted:
            if name not in table.column_names:
                raise DatasetError(
                    f"{str(path)!r}: no column {name!r}, though meta/info.json lists it as a "
                    f"feature (columns: {', '.join(table.column_names)})."
                )
            parts[name].append(_column(table.column(name), features[name], name, rel, root))
    data = {name: np.concatenate(chunks) for name, chunks in parts.items()}
    for name in ("index", "episode_index", "frame_index", "timestamp"):
        if name not in data:
            raise DatasetError(f"{str(root / S.INFO_PATH)!r}: no {name!r} feature.")
    order = np.argsort(data["index"], kind="stable")
    return {name: values[order] for name, values in data.items()}


def _column(col: Any, spec: Mapping[str, Any], name: str, rel: Path, root: Path) -> np.ndarray:
    """One parquet column as (N, *shape) numpy (shape (1,) as (N,)); nested lists of any
    depth and LeRobot's embedded PNG images both read."""
    import pyarrow as pa

    arr = col.combine_chunks()
    n = len(arr)
    shape = tuple(int(d) for d in spec.get("shape", (1,)))
    if spec.get("dtype") == "image":
        return _images(arr, name, rel, root)
    if isinstance(arr.type, pa.ExtensionType):
        arr = arr.storage
    while (
        pa.types.is_list(arr.type)
        or pa.types.is_large_list(arr.type)
        or (pa.types.is_fixed_size_list(arr.type))
    ):
        arr = arr.flatten()
    values = arr.to_numpy(zero_copy_only=False)
    size = int(np.prod(shape))
    if values.size != n * size:
        per = values.size / max(n, 1)
        raise DatasetError(
            f"{str(root / rel)!r}: column {name!r} holds {per:g} values per frame but "
            f"meta/info.json gives it shape {list(shape)}."
        )
    values = values.reshape((n, *shape))
    return values[:, 0] if shape == (1,) else values


def _images(arr: Any, name: str, rel: Path, root: Path) -> np.ndarray:
    """`image` features: PNG/JPEG bytes embedded in the parquet file, decoded to uint8 RGB."""
    from PIL import Image

    out = []
    for i, item in enumerate(arr.to_pylist()):
        data = item.get("bytes") if isinstance(item, Mapping) else None
        if not data:
            raise DatasetError(
                f"{str(root / rel)!r}: image column {name!r} has no embedded bytes at row {i}."
            )
        out.append(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
    return np.stack(out)


def _read_episodes(
    root: Path, info: Mapping[str, Any], data: Mapping[str, np.ndarray]
) -> list[dict[str, Any]]:
    """`meta/episodes` rows, checked against the frames: each episode's rows are contiguous,
    in order, and as many as its `length`."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in _parquet_files(root, S.EPISODES_DIR):
        table = pq.read_table(path)
        names = [c for c in table.column_names if not c.startswith("stats/")]
        for needed in ("episode_index", "length", "dataset_from_index", "dataset_to_index"):
            if needed not in names:
                raise DatasetError(f"{str(path)!r}: no column {needed!r}.")
        rows.extend(table.select(names).to_pylist())
    rows.sort(key=lambda r: r["episode_index"])
    ep_col, n = data["episode_index"], len(data["episode_index"])
    source = str(root / "data")
    if info.get("total_frames") not in (None, n):
        raise DatasetError(
            f"{str(root / S.INFO_PATH)!r}: total_frames is {info['total_frames']} but "
            f"{source!r} holds {n} frames."
        )
    pos = 0
    for ep in rows:
        start, stop = int(ep["dataset_from_index"]), int(ep["dataset_to_index"])
        length = int(ep["length"])
        got = int(np.count_nonzero(ep_col == ep["episode_index"]))
        if stop - start != length or got != length or start != pos:
            raise DatasetError(
                f"{str(root / S.EPISODES_DIR)!r}: episode {ep['episode_index']} says "
                f"{length} frames at [{start}, {stop}), but {source!r} holds {got} frames "
                f"of it{'' if start == pos else f' and the previous episode ends at {pos}'}."
            )
        if not (ep_col[start:stop] == ep["episode_index"]).all():
            raise DatasetError(
                f"{source!r}: the frames of episode {ep['episode_index']} are not the "
                f"consecutive rows [{start}, {stop}) in index order."
            )
        pos = stop
    if pos != n:
        raise DatasetError(f"{source!r} holds {n} frames, but meta/episodes accounts for {pos}.")
    return rows


def _observations(
    root: Path,
    info: Mapping[str, Any],
    features: Mapping[str, Mapping[str, Any]],
    data: Mapping[str, np.ndarray],
    episodes: list[dict[str, Any]],
) -> dict[str, np.ndarray]:
    """LeRobot observation feature -> per-frame array (cameras decoded from their videos)."""
    out = {name: data[name] for name in features if S.is_observation(name) and name in data}
    for name, spec in features.items():
        if spec.get("dtype") == "video":
            out[name] = _video_frames(root, info, name, spec, data, episodes)
    return out


def _video_frames(
    root: Path,
    info: Mapping[str, Any],
    name: str,
    spec: Mapping[str, Any],
    data: Mapping[str, np.ndarray],
    episodes: list[dict[str, Any]],
) -> np.ndarray:
    """Each frame's image: the video frame at ``from_timestamp + timestamp`` of its episode's
    file, as LeRobot's loader picks it. An episode whose time span holds another number of
    video frames than it has rows is refused."""
    fps = float((spec.get("info") or {}).get("video.fps") or info["fps"])
    tol = 0.25 / fps
    template = info.get("video_path") or S.VIDEO_PATH
    cache: dict[Path, tuple[np.ndarray, np.ndarray]] = {}
    shape = tuple(int(d) for d in spec.get("shape", ()))
    out: np.ndarray | None = None
    for ep in episodes:
        try:
            chunk, file = (
                int(ep[f"videos/{name}/chunk_index"]),
                int(ep[f"videos/{name}/file_index"]),
            )
            t0, t1 = (
                float(ep[f"videos/{name}/from_timestamp"]),
                float(ep[f"videos/{name}/to_timestamp"]),
            )
        except (KeyError, TypeError) as exc:
            raise DatasetError(
                f"{str(root / S.EPISODES_DIR)!r}: episode {ep['episode_index']} has no "
                f"videos/{name}/... entry ({exc}); the video feature cannot be placed."
            ) from None
        path = root / template.format(video_key=name, chunk_index=chunk, file_index=file)
        if path not in cache:
            cache[path] = video.decode(path)
        frames, times = cache[path]
        if out is None:
            out = np.empty((len(data["index"]), *frames.shape[1:]), np.uint8)
            if shape and tuple(frames.shape[1:]) != shape:
                raise DatasetError(
                    f"{str(path)!r}: frames are {list(frames.shape[1:])} but meta/info.json "
                    f"gives {name!r} shape {list(shape)}."
                )
        start, stop = int(ep["dataset_from_index"]), int(ep["dataset_to_index"])
        in_span = int(np.count_nonzero((times >= t0 - tol) & (times < t1 - tol)))
        if in_span != stop - start:
            raise DatasetError(
                f"{str(path)!r}: episode {ep['episode_index']} spans [{t0:.3f} s, {t1:.3f} s) "
                f"of the video, which holds {in_span} frames there, but the episode has "
                f"{stop - start} frames (video frame count mismatch)."
            )
        query = t0 + data["timestamp"][start:stop].astype(np.float64)
        idx = np.clip(np.searchsorted(times, query - tol), 0, len(times) - 1)
        bad = np.abs(times[idx] - query) > tol
        if bad.any():
            k = int(np.argmax(bad))
            raise DatasetError(
                f"{str(path)!r}: no video frame within {tol:.3f} s of {query[k]:.3f} s "
                f"(episode {ep['episode_index']}, frame {k})."
            )
        out[start:stop] = frames[idx]
    assert out is not None
    return out


def _read_tasks(root: Path) -> list[str]:
    """Task strings in `task_index` order (`meta/tasks.parquet`: the strings are pandas'
    index, stored as an ordinary column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / S.TASKS_PATH
    if not path.is_file():
        return []
    table = pq.read_table(path)
    if "task_index" not in table.column_names:
        raise DatasetError(f"{str(path)!r}: no 'task_index' column.")
    strings = (pa.types.is_string, pa.types.is_large_string)
    text = [
        c
        for c in table.column_names
        if c != "task_index" and any(is_str(table.schema.field(c).type) for is_str in strings)
    ]
    if not text:
        raise DatasetError(f"{str(path)!r}: no column of task strings.")
    index = table.column("task_index").to_pylist()
    strings = table.column(text[0]).to_pylist()
    tasks = [""] * (max(index) + 1 if index else 0)
    for i, s in zip(index, strings):
        tasks[int(i)] = str(s)
    return tasks


def _transitions(
    root: Path,
    info: Mapping[str, Any],
    data: Mapping[str, np.ndarray],
    episodes: list[dict[str, Any]],
    obs: dict[str, np.ndarray],
    tasks: list[str],
    sidecar: Mapping[str, Any],
) -> OfflineDataset:
    """Frames -> transitions. With roborl's final-observation column the last frame of each
    episode is its final next observation; without it (a dataset recorded elsewhere) see
    `_native_rows`."""
    n = len(data["index"])
    starts = np.asarray([e["dataset_from_index"] for e in episodes], np.int64)
    stops = np.asarray([e["dataset_to_index"] for e in episodes], np.int64)
    done = data[S.DONE].astype(bool) if S.DONE in data else np.zeros(n, bool)
    truncated = data[S.TRUNCATED].astype(bool) if S.TRUNCATED in data else np.zeros(n, bool)
    last = np.zeros(n, bool)
    last[stops - 1] = True
    early = np.flatnonzero(done & ~last)
    if S.FINAL in data:
        final = data[S.FINAL].astype(bool)
        if not np.array_equal(final, last) or (stops - starts < 2).any():
            raise DatasetError(
                f"{str(root / 'data')!r}: {S.FINAL!r} must be true on exactly the last frame "
                "of each episode (its final observation), with at least one transition before."
            )
        early = early[~np.isin(early, stops - 2)]
        rows = np.flatnonzero(~final)
        nxt = rows + 1
        ends = stops - 2
    else:
        rows, nxt, ends = _native_rows(root, starts, stops, done, truncated)
    if early.size:
        k = int(early[0])
        raise DatasetError(
            f"{str(root / 'data')!r}: next.done is true at frame {k} (episode "
            f"{int(data['episode_index'][k])}), which is not the end of its episode."
        )
    is_end = np.isin(rows, ends)
    term = is_end & done[rows] & ~truncated[rows]
    fields: dict[str, Any] = {
        "actions": data[S.ACTION][rows],
        "rewards": data[S.REWARD][rows],
        "terminals": term,
        "timeouts": is_end & ~term,
    }
    keys = dict(sidecar.get("observation_keys") or {})
    flat = bool(sidecar.get("flat_observation", len(obs) == 1 and S.STATE in obs))
    if flat:
        (values,) = obs.values()
        fields["observations"], fields["next_observations"] = values[rows], values[nxt]
    else:
        named = {keys.get(f, S.key_for_feature(f)): v for f, v in obs.items()}
        fields["observations"] = {k: v[rows] for k, v in named.items()}
        fields["next_observations"] = {k: v[nxt] for k, v in named.items()}
    if S.COST in data:
        fields["costs"] = data[S.COST][rows]
    meta = dict(sidecar.get("metadata") or {"source": "lerobot"})
    meta.setdefault("fps", info["fps"])
    if info.get("robot_type"):
        meta.setdefault("robot_type", info["robot_type"])
    if S.SUCCESS in data:
        meta["success_rows"] = np.flatnonzero(data[S.SUCCESS][rows].astype(bool)).tolist()
    if S.INTERVENTION in data:
        meta["intervened_rows"] = np.flatnonzero(data[S.INTERVENTION][rows] > 0.5).tolist()
    if tasks:
        task_of_episode = [int(data["task_index"][s]) for s in starts]
        if len(tasks) == 1:
            meta["task"] = tasks[0]
        else:
            meta["tasks"], meta["episode_task_index"] = tasks, task_of_episode
    return OfflineDataset.from_arrays(fields, meta, source=str(root))


def _native_rows(
    root: Path, starts: np.ndarray, stops: np.ndarray, done: np.ndarray, truncated: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Frames recorded as (observation, action, reward) steps, LeRobot's own convention.

    Frame t's next observation is frame t+1's. An episode's last frame has none: when
    `next.done` marks it a termination (and `next.truncated` does not), its next observation
    is never bootstrapped from, and it keeps its own (as LeRobot's RL buffer does); otherwise
    (truncated, or no `next.done`) its true next observation was never recorded, so the frame
    is dropped and the frame before it ends the episode by time limit, as D4RL's
    `qlearning_dataset` does. Returns the kept rows, their next rows and the episode ends.
    """
    rows, nxt, ends, dropped = [], [], [], 0
    for start, stop in zip(starts, stops):
        last = stop - 1
        keep_last = bool(done[last] and not truncated[last])
        end = last if keep_last else last - 1
        dropped += 0 if keep_last else 1
        if end < start:
            continue
        r = np.arange(start, end + 1)
        rows.append(r)
        nxt.append(np.minimum(r + 1, last))
        ends.append(end)
    if dropped:
        log.warning(
            "%s: %d episode(s) end without a termination; their last frame has no recorded "
            "next observation and is dropped (the frame before it ends the episode by time "
            "limit).",
            root,
            dropped,
        )
    if not rows:
        raise DatasetError(
            f"{str(root)!r}: no transition left; every episode is a single frame without a "
            "termination, whose next observation was never recorded."
        )
    return np.concatenate(rows), np.concatenate(nxt), np.asarray(ends, np.int64)

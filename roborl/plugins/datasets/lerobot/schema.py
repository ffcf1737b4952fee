"""LeRobotDataset v3 names: files, columns, and roborl observation keys <-> features.

The file layout and the standard columns are LeRobot's (``CODEBASE_VERSION = "v3.0"`` in
LeRobot's `lerobot_dataset.py`, paths and default features in its `datasets/utils.py`);
`next.truncated`, `next.success` and the ``complementary_info.*`` prefix are names LeRobot's
own recorders use. The three roborl columns are documented in docs/datasets.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
ROBORL_META_PATH = "meta/roborl_metadata.json"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = EPISODES_DIR + "/" + CHUNK_FILE + ".parquet"
# LeRobot's writer defaults (its files never grow past these; roborl writes one file of each).
CHUNKS_SIZE, DATA_FILE_MB, VIDEO_FILE_MB = 1000, 100, 200

OBS_PREFIX = "observation."
IMAGES_PREFIX = "observation.images."
STATE = "observation.state"
ACTION = "action"
REWARD = "next.reward"
DONE = "next.done"
TRUNCATED = "next.truncated"
SUCCESS = "next.success"
COST = "complementary_info.cost"
INTERVENTION = "complementary_info.is_intervention"
FINAL = "complementary_info.final_observation"
"""True on the one extra frame per episode that holds its final observation (no action)."""

INDEX_FEATURES: dict[str, str] = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}


def is_camera(values: np.ndarray) -> bool:
    """Per-step (H, W, 3) uint8 frames: the entries stored as video."""
    return values.dtype == np.uint8 and values.ndim == 4 and values.shape[-1] == 3


def feature_for_key(key: str, values: np.ndarray) -> str:
    """roborl Dict-observation key -> LeRobot feature: cameras under ``observation.images.``,
    ``state`` as ``observation.state``, any other entry as ``observation.<key>``."""
    if is_camera(values):
        return IMAGES_PREFIX + key
    return STATE if key == "state" else OBS_PREFIX + key


def key_for_feature(feature: str) -> str:
    """The inverse of `feature_for_key` (``observation.images.wrist`` -> ``wrist``)."""
    if feature.startswith(IMAGES_PREFIX):
        return feature[len(IMAGES_PREFIX) :]
    return feature[len(OBS_PREFIX) :]


def is_observation(feature: str) -> bool:
    return feature.startswith(OBS_PREFIX)


def feature_spec(dtype: str, shape: tuple[int, ...], names: Any = None) -> dict[str, Any]:
    """One `info.json` feature entry (shape as a list, as LeRobot writes it)."""
    return {"dtype": dtype, "shape": [int(d) for d in shape], "names": names}

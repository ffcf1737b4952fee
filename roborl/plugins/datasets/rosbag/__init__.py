"""rosbag2 folders (sqlite3 or MCAP) -> roborl transitions: `roborl dataset convert in=BAG`.

Robot data lives in bags recorded with `ros2 bag record`; this turns one (or a folder of them)
into an `OfflineDataset`, which every writer then stores (`out=*.npz|*.hdf5|minari:ID|
lerobot:DIR`) and `demos=` / `dataset=` read. What maps to what is a `BagMapping`
(`mapping.py`): sensor_msgs/JointState -> the state vector (joints by name, field-major as
`robot.fields` lays it out: every position, then every velocity), the command topic ->
the action (what roborl's robot bridge publishes: Float64MultiArray on
`/<controller>/commands`, JointTrajectory, Twist or TwistStamped), sensor_msgs/Image topics ->
uint8 camera entries of a Dict observation, sensor_msgs/Joy -> the intervention flag (and, with
`joy_action`, the action of intervened steps), std_msgs/Bool on a reset topic -> episode
boundaries.

Time: every message is timed by its bag timestamp, and transitions are resampled to
`rate_hz` (`resample.py`): step k of an episode is at ``metadata["episode_start_ns"][e] +
k * 1e9 / rate_hz`` (bag time), which is also the LeRobotDataset frame's ``timestamp`` (k / fps,
fps = rate_hz) after its episode's start. Rewards are `reward` per step (0 unless set): relabel
them with a learned reward (`roborl train ... reward=`) or take the demos as they are, as
RLPD/SERL do with their success-only rewards.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.datasets import OfflineDataset
from roborl.core.errors import DatasetError
from roborl.plugins.datasets.rosbag.mapping import BagMapping, mapping_from
from roborl.plugins.datasets.rosbag.read import is_bag, read_bag
from roborl.plugins.datasets.rosbag.resample import resample

__all__ = ["BagMapping", "bag_folders", "convert_bag", "is_bag", "mapping_from"]


def bag_folders(path: str) -> list[str] | None:
    """The bags at `path`: itself if it is a rosbag2 folder, else its subfolders that are
    (sorted by name, one recording each), else None (not bag input)."""
    if is_bag(path):
        return [str(path)]
    p = Path(path)
    if p.suffix in (".mcap", ".db3") and p.is_file():  # a bag's storage file: its folder
        if is_bag(str(p.parent)):
            return [str(p.parent)]
        raise DatasetError(
            f"{path!r} is a rosbag2 storage file without its folder's metadata.yaml; give "
            "the bag folder `ros2 bag record` wrote (in=FOLDER)."
        )
    if not p.is_dir():
        return None
    found = sorted(str(q) for q in p.iterdir() if is_bag(str(q)))
    return found or None


def convert_bag(paths: list[str], mapping: BagMapping, log: Any = None) -> OfflineDataset:
    """The transitions of the bags at `paths`, in order, resampled to `mapping.rate_hz`."""
    parts, starts, intervened, bags = [], [], [], []
    offset = 0
    joints: list[str] | None = None
    for path in paths:
        bag = read_bag(path, mapping)
        if joints is not None and bag.joints != joints:
            raise DatasetError(
                f"{path!r} names the joints {bag.joints}, an earlier bag {joints}: one state "
                "layout per dataset (set joints=[...])."
            )
        joints = bag.joints
        eps = resample(bag, mapping)
        n = len(eps.data["actions"])
        parts.append(eps.data)
        starts.extend(eps.starts_ns)
        intervened.append(np.flatnonzero(eps.intervened) + offset)
        offset += n
        bags.append(
            {"path": str(path), "storage": bag.storage, "episodes": len(eps.starts_ns),
             "transitions": n, "dropped_ticks": eps.dropped_ticks}
        )  # fmt: skip
        if log is not None:
            log(
                f"{path} ({bag.storage}): {n} transitions in {len(eps.starts_ns)} episodes at "
                f"{mapping.rate_hz:g} Hz, {int(eps.intervened.sum())} intervened"
                + (f", {eps.dropped_ticks} stale ticks dropped" if eps.dropped_ticks else "")
                + "".join(f"; {note}" for note in bag.notes)
            )
    meta: dict[str, Any] = {
        "source": "rosbag2",
        "bags": bags,
        "rate_hz": mapping.rate_hz,
        "fps": mapping.rate_hz,
        "episode_start_ns": starts,
        "intervened_rows": np.concatenate(intervened).tolist(),
        "state_layout": {"joints": joints, "fields": mapping.fields},
        "mapping": dataclasses.asdict(mapping),
    }
    data = {k: _cat([p[k] for p in parts]) for k in parts[0]}
    return OfflineDataset.from_arrays(data, meta, source=f"rosbag2 {paths[0]!r}")


def _cat(items: list[Any]) -> Any:
    if isinstance(items[0], dict):
        keys = items[0].keys()
        if any(it.keys() != keys for it in items):
            raise DatasetError("the bags map to different observation keys.")
        return {k: np.concatenate([it[k] for it in items]) for k in keys}
    return np.concatenate(items)

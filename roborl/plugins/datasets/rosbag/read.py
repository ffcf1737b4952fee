"""A rosbag2 folder (sqlite3 or MCAP storage) -> one time series per mapped topic.

Why `rosbags`: it reads both storage plugins and deserialises CDR without a ROS install, with
the message definitions the bag itself carries (a recent ROS 2 typestore for older bags that
lack them). Every message is timed by its bag timestamp (when the recorder received it), the
one clock all topics share: `std_msgs/Float64MultiArray` commands carry no header, and header
stamps may be sim time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.errors import DatasetError
from roborl.plugins.datasets.rosbag.mapping import BagMapping

STATE_TYPES = ("sensor_msgs/msg/JointState",)
COMMAND_TYPES = (
    "std_msgs/msg/Float64MultiArray",
    "std_msgs/msg/Float32MultiArray",
    "trajectory_msgs/msg/JointTrajectory",
    "geometry_msgs/msg/Twist",
    "geometry_msgs/msg/TwistStamped",
)
IMAGE_TYPES = ("sensor_msgs/msg/Image",)
JOY_TYPES = ("sensor_msgs/msg/Joy",)
RESET_TYPES = ("std_msgs/msg/Bool",)
ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8")


@dataclass
class Series:
    """One topic's messages in bag-time order: `times` (int64 ns) and one value per message."""

    times: np.ndarray
    values: list[Any] = field(default_factory=list)


@dataclass
class BagData:
    """What the mapping asked for, read from one bag."""

    path: str
    storage: str
    state: dict[str, Series]  # joint -> (times, [field values])
    joints: list[str]
    command: Series
    cameras: dict[str, Series]
    joy: Series | None
    resets: np.ndarray  # bag times (ns) of reset requests
    notes: list[str] = field(default_factory=list)


def is_bag(path: str) -> bool:
    """A rosbag2 folder: `metadata.yaml` beside its .db3 or .mcap files."""
    p = Path(path)
    return p.is_dir() and (p / "metadata.yaml").is_file()


def read_bag(path: str, mapping: BagMapping) -> BagData:
    """Decode the mapped topics of the bag at `path`, after checking each one is there with a
    type the mapping can use."""
    try:
        from rosbags.highlevel import AnyReader
        from rosbags.typesys import Stores, get_typestore
    except ImportError as exc:
        raise DatasetError(
            f'reading the rosbag2 {path!r} needs the rosbags package: pip install "roborl[rosbag]".'
        ) from exc
    wanted = _wanted(mapping)
    try:
        reader = AnyReader([Path(path)], default_typestore=get_typestore(Stores.LATEST))
        reader.open()
    except Exception as exc:
        raise DatasetError(f"{path!r} is not a readable rosbag2 folder ({exc}).") from exc
    try:
        types = {c.topic: c.msgtype for c in reader.connections}
        notes = []
        if mapping.reset_topic is not None and mapping.reset_topic not in types:
            # `ros2 bag record` only records a topic someone published: no reset, no topic
            wanted.pop(mapping.reset_topic)
            notes.append(f"reset_topic {mapping.reset_topic!r} is not in the bag: no resets")
        for topic, (key, accepted) in wanted.items():
            _check_topic(path, topic, key, accepted, types)
        conns = [c for c in reader.connections if c.topic in wanted]
        raw: dict[str, list[tuple[int, Any]]] = {t: [] for t in wanted}
        for conn, stamp, data in reader.messages(connections=conns):
            raw[conn.topic].append((int(stamp), reader.deserialize(data, conn.msgtype)))
        storage = _storage(path)
    finally:
        reader.close()
    for topic, items in raw.items():
        items.sort(key=lambda x: x[0])
        if not items and wanted[topic][0] != "reset_topic":
            raise DatasetError(f"{path!r}: topic {topic!r} ({wanted[topic][0]}) has no messages.")
    joints = mapping.joints or list(raw[mapping.state_topic][0][1].name)
    return BagData(
        path=str(path),
        storage=storage,
        state=_joint_series(path, mapping, raw[mapping.state_topic], joints),
        joints=joints,
        command=_series(raw[mapping.command_topic], lambda m: _command(path, mapping, m)),
        cameras={key: _frames(path, topic, raw[topic]) for key, topic in mapping.cameras.items()},
        joy=_series(raw[mapping.joy_topic], _joy) if mapping.joy_topic else None,
        resets=np.array(
            [t for t, m in raw.get(mapping.reset_topic or "", []) if bool(m.data)], np.int64
        ),
        notes=notes,
    )


def _wanted(mapping: BagMapping) -> dict[str, tuple[str, tuple[str, ...]]]:
    """topic -> (the mapping key that names it, the message types accepted there)."""
    wanted: dict[str, tuple[str, tuple[str, ...]]] = {}
    entries = [
        ("state_topic", mapping.state_topic, STATE_TYPES),
        ("command_topic", mapping.command_topic, COMMAND_TYPES),
        *((f"cameras.{k}", t, IMAGE_TYPES) for k, t in mapping.cameras.items()),
        ("joy_topic", mapping.joy_topic, JOY_TYPES),
        ("reset_topic", mapping.reset_topic, RESET_TYPES),
    ]
    for key, topic, accepted in entries:
        if topic is None:
            continue
        if topic in wanted:
            raise DatasetError(f"{key}={topic!r} is also {wanted[topic][0]}: map each topic once.")
        wanted[topic] = (key, accepted)
    return wanted


def _check_topic(
    path: str, topic: str, key: str, accepted: tuple[str, ...], types: dict[str, str]
) -> None:
    from roborl.core.errors import did_you_mean

    if topic not in types:
        listed = ", ".join(f"{t} ({m})" for t, m in sorted(types.items())) or "none"
        raise DatasetError(
            f"{key}={topic!r} is not a topic of the bag {path!r}.{did_you_mean(topic, types)} "
            f"Its topics: {listed}."
        )
    if types[topic] not in accepted:
        raise DatasetError(
            f"{key}={topic!r} carries {types[topic]} in the bag {path!r}; {key} takes "
            f"{' or '.join(accepted)}."
        )


def _storage(path: str) -> str:
    files = {p.suffix for p in Path(path).iterdir()}
    return "mcap" if ".mcap" in files else "sqlite3" if ".db3" in files else "unknown"


def _series(items: Iterable[tuple[int, Any]], decode: Any) -> Series:
    items = list(items)
    return Series(np.array([t for t, _ in items], np.int64), [decode(m) for _, m in items])


def _joint_series(
    path: str, mapping: BagMapping, items: list[tuple[int, Any]], joints: list[str]
) -> dict[str, Series]:
    """Per joint, the messages that name it (a robot may publish its joints in several
    JointState messages), each value the mapped fields of that joint."""
    times: dict[str, list[int]] = {j: [] for j in joints}
    values: dict[str, list[np.ndarray]] = {j: [] for j in joints}
    seen: set[str] = set()
    for stamp, msg in items:
        names = list(msg.name)
        seen.update(names)
        for joint in joints:
            if joint not in names:
                continue
            i = names.index(joint)
            row = []
            for f in mapping.fields:
                arr = np.asarray(getattr(msg, f), np.float64)
                if len(arr) != len(names):
                    raise DatasetError(
                        f"{path!r}: a JointState on {mapping.state_topic!r} has {len(arr)} "
                        f"{f} values for {len(names)} joints; fields={mapping.fields} needs "
                        f"every joint's {f} (drop {f!r} from fields= if the robot does not "
                        "report it)."
                    )
                row.append(arr[i])
            times[joint].append(stamp)
            values[joint].append(np.array(row))
    missing = [j for j in joints if not times[j]]
    if missing:
        raise DatasetError(
            f"joints={joints}: {missing} never appear in the JointState on "
            f"{mapping.state_topic!r} of {path!r}; its joints: {sorted(seen)}."
        )
    return {j: Series(np.array(times[j], np.int64), values[j]) for j in joints}


def _command(path: str, mapping: BagMapping, msg: Any) -> np.ndarray:
    kind = msg.__msgtype__
    if kind.endswith("MultiArray"):
        out = np.asarray(msg.data, np.float64)
    elif kind.endswith("JointTrajectory"):
        if not len(msg.points):
            raise DatasetError(
                f"{path!r}: a JointTrajectory on {mapping.command_topic!r} has no points."
            )
        positions = np.asarray(msg.points[0].positions, np.float64)
        names = list(msg.joint_names)
        order = mapping.command_joints or names
        missing = [j for j in order if j not in names]
        if missing:
            raise DatasetError(
                f"command_joints={order}: {missing} are not in a JointTrajectory on "
                f"{mapping.command_topic!r} of {path!r} (its joint_names: {names})."
            )
        out = positions[[names.index(j) for j in order]]
    else:  # Twist, TwistStamped
        twist = msg.twist if kind.endswith("TwistStamped") else msg
        lin, ang = twist.linear, twist.angular
        out = np.array([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z])[: mapping.action_dim or 6]
    if mapping.action_dim is not None and len(out) != mapping.action_dim:
        raise DatasetError(
            f"action_dim={mapping.action_dim}, but a {kind} on {mapping.command_topic!r} of "
            f"{path!r} holds {len(out)} values."
        )
    return out


def _frames(path: str, topic: str, items: list[tuple[int, Any]]) -> Series:
    """A camera's frames, all of one size (a dataset column has one shape)."""
    series = _series(items, lambda m: _image(path, topic, m))
    shapes = sorted({f.shape for f in series.values})
    if len(shapes) > 1:
        raise DatasetError(
            f"{path!r}: the Images on {topic!r} come in several sizes {shapes}; a camera's "
            "frames must all have one size."
        )
    return series


def _image(path: str, topic: str, msg: Any) -> np.ndarray:
    """An (H, W, 3) uint8 RGB frame (rows honour `step`; bgr and alpha converted)."""
    enc = str(msg.encoding).lower()
    if enc not in ENCODINGS:
        raise DatasetError(
            f"{path!r}: the Image on {topic!r} has encoding {msg.encoding!r}; roborl reads "
            f"{', '.join(ENCODINGS)} camera frames."
        )
    channels = 4 if enc.endswith("a8") else 3
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.asarray(msg.data, np.uint8)
    if step < w * channels or len(data) < h * step:
        raise DatasetError(
            f"{path!r}: an Image on {topic!r} holds {len(data)} bytes for {h}x{w} {enc} "
            f"(step {step})."
        )
    frame = data[: h * step].reshape(h, step)[:, : w * channels].reshape(h, w, channels)
    frame = frame[:, :, :3]
    return np.ascontiguousarray(frame[:, :, ::-1] if enc.startswith("bgr") else frame)


def _joy(msg: Any) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(msg.axes, np.float64), np.asarray(msg.buttons, np.int64)

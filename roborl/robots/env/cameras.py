"""Cameras over ROS 2: `sensor_msgs/Image` frames in and out of roborl.

A robot config lists its cameras (`cameras: [{name, topic, width, height, encoding,
max_age_s}]`); each becomes a uint8 (height, width, 3) entry `name` of the robot env's Dict
observation, beside `state`. `decode_image` is strict on purpose: a frame of the wrong size,
encoding, row stride or byte count is refused with a `RobotError` that names the camera and the
field, rather than reshaped into a picture the policy was never trained on. `encode_image` is
what `sim-robot` publishes (rgb8, rows packed, `step = 3 * width`).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from roborl.core.errors import ConfigError, RobotError

if TYPE_CHECKING:  # cyclonedds's IDL types: imported where a ROS image is built
    from roborl.robots.transport import msgs

log = logging.getLogger("roborl.robots.cameras")

#: Encodings a camera may publish (ROS 2's names, sensor_msgs/image_encodings.hpp); frames
#: reach the policy as RGB either way.
ENCODINGS = ("rgb8", "bgr8")
CAMERA_KEYS = ("name", "topic", "width", "height", "encoding", "max_age_s", "qos")
RESERVED = ("state",)


@dataclass(frozen=True)
class CameraSpec:
    """One camera of a robot config: observation key `name`, images from `topic`."""

    name: str
    topic: str
    width: int
    height: int
    encoding: str = "rgb8"
    max_age_s: float = 0.5  # staleness watchdog: older frames make the safety layer hold
    qos: Any = "default"

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.height, self.width, 3)


def parse_cameras(value: Any, where: str = "robot.cameras") -> list[CameraSpec]:
    """The `cameras` list of a robot config, checked (ConfigError names the bad entry)."""
    from roborl.robots.transport.common import qos_spec

    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(
            f"{where}={value!r} must be a list of cameras, e.g. [{{name: top, topic: "
            "/camera/top/image_raw, width: 64, height: 64, encoding: rgb8, max_age_s: 0.5}]."
        )
    out: list[CameraSpec] = []
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}={item!r} must be a mapping with keys {list(CAMERA_KEYS)}.")
        bad = [k for k in item if k not in CAMERA_KEYS]
        if bad:
            raise ConfigError(f"{at} has unknown keys {bad}: accepted are {list(CAMERA_KEYS)}.")
        missing = [k for k in ("name", "topic", "width", "height") if not item.get(k)]
        if missing:
            raise ConfigError(f"{at} lacks {missing} (name, topic, width and height are needed).")
        name = str(item["name"])
        if name in RESERVED or name in [c.name for c in out]:
            raise ConfigError(
                f"{at}.name={name!r} is taken: camera names must be unique and not 'state' "
                "(the joint vector's key in the observation)."
            )
        size = {}
        for key in ("width", "height"):
            v = item[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{at}.{key}={v!r} must be a positive integer (pixels).")
            size[key] = v
        encoding = str(item.get("encoding") or "rgb8")
        if encoding not in ENCODINGS:
            raise ConfigError(f"{at}.encoding={encoding!r}: accepted are {list(ENCODINGS)}.")
        max_age = float(item.get("max_age_s") if item.get("max_age_s") is not None else 0.5)
        if not max_age > 0:
            raise ConfigError(f"{at}.max_age_s={max_age} must be > 0 seconds.")
        out.append(
            CameraSpec(
                name=name,
                topic=str(item["topic"]),
                width=size["width"],
                height=size["height"],
                encoding=encoding,
                max_age_s=max_age,
                qos=qos_spec(item.get("qos"), f"{at}.qos"),
            )
        )
    return out


def encode_image(frame: np.ndarray, stamp: msgs.Time, frame_id: str = "") -> msgs.Image:
    """An (H, W, 3) uint8 RGB frame as a sensor_msgs/Image (rgb8, rows packed)."""
    from roborl.robots.transport import msgs

    frame = np.ascontiguousarray(frame)
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
        raise TypeError(f"encode_image needs uint8 (H, W, 3), got {frame.dtype} {frame.shape}")
    h, w, _ = frame.shape
    return msgs.Image(
        header=msgs.Header(stamp=stamp, frame_id=frame_id),
        height=h,
        width=w,
        encoding="rgb8",
        is_bigendian=0,
        step=3 * w,
        data=frame.tobytes(),
    )


def decode_image(msg: msgs.Image, spec: CameraSpec) -> np.ndarray:
    """The frame as uint8 (height, width, 3) RGB; RobotError naming camera and field if the
    message does not match the camera's config or is internally inconsistent."""
    where = f"camera {spec.name!r} ({spec.topic}): sensor_msgs/Image"
    if msg.encoding != spec.encoding:
        raise RobotError(
            f"{where}.encoding={msg.encoding!r}, the robot config expects {spec.encoding!r}."
        )
    if (msg.height, msg.width) != (spec.height, spec.width):
        raise RobotError(
            f"{where}.height x width = {msg.height} x {msg.width}, the robot config expects "
            f"{spec.height} x {spec.width}."
        )
    row = 3 * spec.width
    if msg.step < row:
        raise RobotError(f"{where}.step={msg.step} is less than width x 3 bytes = {row}.")
    raw = msg.data if isinstance(msg.data, (bytes, bytearray)) else bytes(bytearray(msg.data))
    if len(raw) != msg.step * msg.height:
        raise RobotError(
            f"{where}.data has {len(raw)} bytes; step x height = {msg.step} x {msg.height} = "
            f"{msg.step * msg.height}."
        )
    rows = np.frombuffer(raw, np.uint8).reshape(spec.height, msg.step)
    frame = rows[:, :row].reshape(spec.height, spec.width, 3)
    if spec.encoding == "bgr8":
        frame = frame[:, :, ::-1]
    return np.array(frame)  # own, writeable, contiguous copy


class CameraFeed:
    """The newest valid frame of one camera, its arrival time, and what was refused.

    Written by the transport's callback thread, read by the control loop."""

    def __init__(self, spec: CameraSpec) -> None:
        self.spec = spec
        self._lock = threading.Lock()
        self._frame: np.ndarray | None = None
        self._stamp = -math.inf
        self.received = 0
        self.rejected = 0
        self.last_error: str | None = None
        self._logged: set[str] = set()

    def on_message(self, msg: msgs.Image) -> None:
        now = time.monotonic()
        try:
            frame = decode_image(msg, self.spec)
        except RobotError as exc:
            self.rejected += 1
            self.last_error = str(exc)
            if str(exc) not in self._logged and len(self._logged) < 100:
                self._logged.add(str(exc))  # each distinct cause once, not at frame rate
                log.error("rejected image: %s", exc)
            return
        with self._lock:
            self._frame, self._stamp = frame, now
            self.received += 1

    def latest(self) -> tuple[np.ndarray | None, float]:
        """(frame or None before the first, seconds since it arrived)."""
        with self._lock:
            return self._frame, time.monotonic() - self._stamp

"""Camera frames <-> MP4 with PyAV, the way LeRobotDataset v3 stores them.

Why these defaults (LeRobot's own writer uses AV1, yuv420p, CRF 30, a key frame every 2
frames): AV1 encoders refuse frames below 64 px and 4:2:0 halves colour resolution, which
costs a small RL camera image much of its detail. roborl writes H.264 in 4:4:4 at CRF 10,
with LeRobot's key frame every 2 frames (LeRobot's loader seeks to random frames), which
works at any image size; LeRobot decodes it with torchcodec or PyAV as it does its own files.
The measured pixel error is in docs/datasets.md.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.errors import DatasetError

CODEC, PIX_FMT, CRF, GOP = "h264", "yuv444p", 10, 2


def encode(
    frames: np.ndarray,
    path: Path,
    fps: int,
    codec: str = CODEC,
    crf: int = CRF,
    gop: int = GOP,
    pix_fmt: str = PIX_FMT,
) -> dict[str, Any]:
    """Write (N, H, W, 3) uint8 `frames` as one MP4 at `fps`; returns LeRobot's `info` block
    for the feature (``video.height``, ``video.codec``, ...)."""
    import av

    height, width = int(frames.shape[1]), int(frames.shape[2])
    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"crf": str(crf), "g": str(gop)}
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=Fraction(int(fps), 1), options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        codec_name = stream.codec_context.codec.canonical_name
    return {
        "video.height": int(height),
        "video.width": int(width),
        "video.codec": codec_name,
        "video.pix_fmt": pix_fmt,
        "video.is_depth_map": False,
        "video.fps": int(fps),
        "video.channels": 3,
        "has_audio": False,
    }


def decode(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every frame of `path` as (N, H, W, 3) uint8 RGB, and each frame's time in seconds."""
    import av

    if not path.is_file():
        raise DatasetError(f"{str(path)!r}: video file is missing.")
    try:
        with av.open(str(path)) as container:
            frames, times = [], []
            for frame in container.decode(video=0):
                frames.append(frame.to_ndarray(format="rgb24"))
                times.append(float(frame.time if frame.time is not None else np.nan))
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{str(path)!r} is not a readable video ({exc}).") from exc
    if not frames:
        raise DatasetError(f"{str(path)!r}: the video holds no frames.")
    return np.stack(frames), np.asarray(times, np.float64)

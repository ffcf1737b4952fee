"""Episode videos: MuJoCo frames rendered offscreen, encoded to H.264 MP4.

`roborl eval ... video=true` and `roborl train ... video_every=N` record evaluation episodes
through `EpisodeRecorder`, a wrapper that streams each rendered frame straight into the encoder
(a 1000-step episode at 480x480 would be 690 MB of frames if it were held in memory).

Rendering: the env is built with ``render_mode="rgb_array"``; MuJoCo renders offscreen with
``MUJOCO_GL=egl`` (roborl sets it on headless Linux before MuJoCo is imported) or ``osmesa``.

Encoder: PyAV (`av`), FFmpeg's libraries bound in-process, with libx264 in its wheels. Chosen
over imageio-ffmpeg, which pipes raw frames to an ``ffmpeg`` executable in a subprocess: PyAV
leaves no child process behind on Ctrl-C, reports encoder errors as exceptions, and the same
package decodes the files again (tests count the frames, `count_frames`).
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.errors import ConfigError

VIDEO_DIR = "videos"
DEFAULT_FPS = 30
RENDER_HELP = (
    "MuJoCo renders offscreen with MUJOCO_GL=egl (needs libEGL, e.g. Debian's libegl1) or "
    "MUJOCO_GL=osmesa (apt-get install libosmesa6); set it before roborl starts."
)


def _import_av() -> Any:
    try:
        import av
    except ImportError:
        raise ConfigError("videos need PyAV: pip install av (or roborl[video]).") from None
    return av


class Mp4Writer:
    """Writes RGB frames to an H.264 MP4, atomically: the file appears complete or not at all.

    The stream opens on the first frame (its size decides the video's); odd widths or heights
    are padded by one edge pixel, since yuv420p needs even sizes.
    """

    def __init__(self, path: str | os.PathLike[str], fps: float = DEFAULT_FPS) -> None:
        self.path = Path(path)
        self.fps = fps
        self.frames = 0
        self._container: Any = None
        self._stream: Any = None
        self._tmp: Path | None = None
        self._size: tuple[int, int] | None = None

    def _open(self, height: int, width: int) -> None:
        av = _import_av()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.stem}.", suffix=".mp4", dir=self.path.parent
        )
        os.close(fd)
        self._tmp = Path(tmp)
        self._container = av.open(tmp, mode="w", format="mp4")
        from fractions import Fraction

        self._stream = self._container.add_stream(
            "libx264", rate=Fraction(self.fps).limit_denominator(1000)
        )
        self._stream.width, self._stream.height = width + width % 2, height + height % 2
        self._stream.pix_fmt = "yuv420p"
        self._stream.options = {"crf": "23", "preset": "veryfast"}
        self._size = (height, width)

    def write(self, frame: np.ndarray) -> None:
        """Append one (H, W, 3) uint8 RGB frame."""
        av = _import_av()
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] not in (3, 4):
            raise ConfigError(
                f"the env rendered an array of shape {frame.shape}, not an RGB image "
                "(H, W, 3); videos need render_mode='rgb_array' frames."
            )
        frame = np.ascontiguousarray(frame[..., :3], dtype=np.uint8)
        if self._container is None:
            self._open(frame.shape[0], frame.shape[1])
        if frame.shape[:2] != self._size:
            raise ConfigError(
                f"frame {self.frames} is {frame.shape[1]}x{frame.shape[0]}, but the video "
                f"started at {self._size[1]}x{self._size[0]}; an env must render one size."
            )
        if frame.shape[0] % 2 or frame.shape[1] % 2:
            frame = np.pad(
                frame, ((0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0)), "edge"
            )
        video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
        for packet in self._stream.encode(video_frame):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> Path | None:
        """Flush the encoder and move the file into place; None when no frame was written."""
        if self._container is None:
            return None
        try:
            for packet in self._stream.encode():
                self._container.mux(packet)
            self._container.close()
            assert self._tmp is not None
            self._tmp.chmod(0o644)  # mkstemp makes it private; a video is meant to be watched
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        self._container = None
        return self.path

    def abort(self) -> None:
        """Drop a half-written video (an interrupted episode leaves no torn file)."""
        if self._container is not None:
            try:
                self._container.close()
            except Exception:
                pass
            self._container = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)


class EpisodeRecorder(gym.Wrapper):
    """Streams the frames of the next `episodes` episodes to an MP4 once `start` is called.

    Not armed, it only passes calls through (no rendering cost). Armed, it renders after
    `reset` and after every `step`, so an episode of length L gives L + 1 frames, the first
    showing the initial state (as Gymnasium's RecordVideo does).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ConfigError(
                f"videos need an env built with render_mode='rgb_array', not {env.render_mode!r}."
            )
        self._writer: Mp4Writer | None = None
        self._wanted = 0
        self._recorded = 0
        self._active = False

    @property
    def fps(self) -> float:
        return float(self.env.metadata.get("render_fps") or DEFAULT_FPS)

    def start(self, path: str | os.PathLike[str], episodes: int = 1) -> None:
        """Record the next `episodes` episodes (each from its next `reset`) into `path`."""
        self.abort()
        self._writer = Mp4Writer(path, self.fps)
        self._wanted, self._recorded, self._active = episodes, 0, False

    def finish(self) -> tuple[Path, int] | None:
        """Write the video; returns (path, frames), or None when nothing was recorded."""
        writer, self._writer, self._active = self._writer, None, False
        if writer is None:
            return None
        path = writer.close()
        return None if path is None else (path, writer.frames)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()
        self._writer, self._active = None, False

    def _capture(self) -> None:
        assert self._writer is not None
        try:
            frame = self.env.render()
        except Exception as exc:
            self.abort()
            raise ConfigError(f"rendering a video frame failed ({exc}). {RENDER_HELP}") from None
        if frame is None:
            self.abort()
            raise ConfigError("the env rendered no frame (render() returned None).")
        self._writer.write(frame)

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        self._active = self._writer is not None and self._recorded < self._wanted
        if self._active:
            self._capture()
        return obs, info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._active:
            self._capture()
            if terminated or truncated:
                self._active = False
                self._recorded += 1
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.abort()
        super().close()


def render_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """`cfg` with the env asked for ``render_mode="rgb_array"`` (through `env.kwargs`)."""
    if cfg.get("robot"):
        name = (cfg.get("robot") or {}).get("name", "the robot")
        raise ConfigError(
            f"videos record simulated episodes; robot={name} has no renderer. Record a robot "
            "with its own cameras (ros2 bag), or evaluate the checkpoint in sim: "
            "roborl eval checkpoint=PATH env=NAME video=true."
        )
    out = copy.deepcopy(dict(cfg))
    env_cfg = dict(out.get("env") or {})
    kwargs = dict(env_cfg.get("kwargs") or {})
    kwargs.setdefault("render_mode", "rgb_array")
    env_cfg["kwargs"] = kwargs
    out["env"] = env_cfg
    return out


def make_recording_env(registry: Any, cfg: Mapping[str, Any], seed: int | None) -> EpisodeRecorder:
    """The config's env, rendering RGB frames, wrapped in an (unarmed) `EpisodeRecorder`;
    without `reward=`'s model, as every evaluation in simulation."""
    from roborl.core.envs import make_env

    env_id = (cfg.get("env") or {}).get("id")
    try:
        env = make_env(registry, render_config(cfg), seed, learned_reward=False)
    except TypeError as exc:  # a plugin's env factory without a render_mode argument
        raise ConfigError(
            f"env {env_id!r} cannot render video frames: its factory rejected "
            f"render_mode='rgb_array' ({exc})."
        ) from None
    if env.render_mode != "rgb_array":
        env.close()
        raise ConfigError(
            f"env {env_id!r} cannot render video frames (its render_mode is "
            f"{env.render_mode!r}, not 'rgb_array')."
        )
    return EpisodeRecorder(env)


def latest_video(run_dir: str | os.PathLike[str]) -> Path | None:
    """The most recently written MP4 under `run_dir/videos`, or None."""
    videos = [p for p in (Path(run_dir) / VIDEO_DIR).glob("*.mp4") if not p.name.startswith(".")]
    return max(videos, key=lambda p: (p.stat().st_mtime_ns, p.name), default=None)


def count_frames(path: str | os.PathLike[str]) -> int:
    """Decode every frame of a video and count them (the container's header is not trusted)."""
    av = _import_av()
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))

"""Atomic checkpoints that load with `torch.load(weights_only=True)`.

Write to a temp file in the same directory, fsync, then `os.replace`: a crash or SIGKILL at
any moment leaves either the previous checkpoint or the new one, never a torn file. `last.pt`
keeps the checkpoint it replaces as `previous.pt` (only a readable one), and there is no
moment without a `last.pt`.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roborl.core.errors import CheckpointError, DivergedError

FORMAT_VERSION = 1
REQUIRED_KEYS = (
    "format_version",
    "algo",
    "algo_config",
    "observation_space",
    "action_space",
    "state",
)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_or_copy(src: Path, dst: str) -> None:
    """Make `dst` (a new name) hold `src`'s bytes: a hard link, or an fsynced copy where the
    filesystem has no hard links."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)
        with open(dst, "rb+") as fh:
            os.fsync(fh.fileno())


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, keep_previous: str | None = None
) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never half of one.

    With `keep_previous`, the file being replaced is kept under that name in the same folder,
    so a later corruption of `path` still leaves one readable version beside it. `path` is
    never missing meanwhile: the old file is hard-linked to a temp name that replaces
    `keep_previous`, and only then does the new data replace `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    prev_tmp = tmp[: -len(".tmp")] + ".prev.tmp"  # also matches save_checkpoint's stale glob
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if keep_previous and path.exists():
            _link_or_copy(path, prev_tmp)
            os.replace(prev_tmp, path.with_name(keep_previous))
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        Path(prev_tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


PREVIOUS_NAME = "previous.pt"  # the checkpoint that last.pt replaced, kept as a fallback
UNREADABLE_SUFFIX = ".unreadable"  # last.pt.unreadable: a torn last.pt, moved aside, not rotated

# last.pt files this process wrote or read back whole, by real path -> _signature(): the
# next save rotates such a file into previous.pt without reading it again.
_known_good: dict[str, tuple[int, int, int, int]] = {}


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _remember_good(path: Path, st: os.stat_result | None = None) -> None:
    try:
        _known_good[os.path.realpath(path)] = _signature(st or path.stat())
    except OSError:
        pass


def _unreadable_reason(path: Path) -> str | None:
    """None when `path` is a checkpoint this process knows or can read whole, else why not."""
    try:
        st = path.stat()
    except OSError as exc:
        return _reason(exc)
    if _known_good.get(os.path.realpath(path)) == _signature(st):
        return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except MemoryError:
        raise
    except Exception as exc:
        return _reason(exc)
    if not isinstance(data, dict):
        return f"it holds a {type(data).__name__}, not a dict"
    _remember_good(path, st)
    return None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def first_nonfinite(obj: Any, where: str = "state") -> str | None:
    """Dotted name of the first tensor, array or float in `obj` holding NaN or inf, else None."""
    if isinstance(obj, torch.Tensor):
        if (obj.is_floating_point() or obj.is_complex()) and not bool(torch.isfinite(obj).all()):
            return where
        return None
    if isinstance(obj, float):
        return None if math.isfinite(obj) else where
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "fc" and not bool(np.isfinite(obj).all()):
            return where
        return None
    if isinstance(obj, Mapping):
        items: Any = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return None
    for key, value in items:
        bad = first_nonfinite(value, f"{where}.{key}")
        if bad is not None:
            return bad
    return None


def check_finite_state(state: Any, what: str = "checkpoint") -> None:
    """Refuse (`DivergedError`) an algorithm state with NaN/inf: it must never be saved or pushed."""
    bad = first_nonfinite(state)
    if bad is not None:
        raise DivergedError(
            f"refusing to write the {what}: the algorithm's {bad} holds NaN or infinity (the "
            "training diverged). The previous checkpoint is left as it was; lower the learning "
            "rate, clip gradients or check the rewards and observations, then resume from it."
        )


def save_checkpoint(path: str | os.PathLike[str], payload: Mapping[str, Any]) -> None:
    """Write a checkpoint atomically; `last.pt` keeps the one it replaces as `previous.pt`.

    A payload whose `state` holds NaN/inf is refused (`DivergedError`) before anything is
    touched, so a diverged run never overwrites a good `last.pt`. Temp files a killed writer
    left behind (`.last.pt.*.tmp`) are removed first: a run directory has one writer, so any
    such file is stale. A `last.pt` that cannot be read (torn, corrupted) is never rotated into
    `previous.pt`, which may be the only good checkpoint left: it is moved aside as
    `last.pt.unreadable` and `previous.pt` stays as it is. (A `last.pt` this process wrote or
    loaded is not read again.)
    """
    path = Path(path)
    check_finite_state(payload.get("state"), f"checkpoint {path.name}")
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    buf = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **payload}, buf)
    keep = PREVIOUS_NAME if path.name == "last.pt" else None
    if keep and path.exists():
        reason = _unreadable_reason(path)
        if reason is not None:
            aside = path.with_name(path.name + UNREADABLE_SUFFIX)
            os.replace(path, aside)
            warnings.warn(
                f"checkpoint {str(path)!r} could not be read ({reason}); moved it aside to "
                f"{str(aside)!r} instead of keeping it as {PREVIOUS_NAME}, which is left as "
                "it was.",
                stacklevel=2,
            )
    atomic_write_bytes(path, buf.getvalue(), keep_previous=keep)
    if keep:
        _remember_good(path)


def _check_map_location(map_location: str | torch.device) -> None:
    """A `ConfigError` naming `device=` unless `map_location` is a device this machine has.
    Checked before reading: torch.load's own error for an absent GPU reads like a bad file."""
    from roborl.core.config import check_device

    check_device("device", str(map_location))


def load_checkpoint(
    path: str | os.PathLike[str], map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """Load and sanity-check a roborl checkpoint, with errors that say what is wrong.

    A run directory or a `last.pt` that is missing or unreadable falls back, with a warning,
    to the `previous.pt` beside it. A device that does not exist here is a `ConfigError`
    before anything is read: it says nothing about the file.
    """
    _check_map_location(map_location)
    path = Path(path)
    if path.is_dir():
        for folder in (path / "checkpoints", path):
            if (folder / "last.pt").exists() or (folder / PREVIOUS_NAME).exists():
                path = folder / "last.pt"
                break
        else:
            raise CheckpointError(
                f"{str(path)!r} is a directory without checkpoints/last.pt: pass a .pt file "
                "or a run directory."
            )
    previous = path.with_name(PREVIOUS_NAME)
    if not path.exists():
        if path.name == "last.pt" and previous.exists():
            warnings.warn(
                f"checkpoint {str(path)!r} is missing (a save was interrupted); using the one "
                f"it replaced, {str(previous)!r}.",
                stacklevel=2,
            )
            return load_checkpoint(previous, map_location)
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist.")
    try:
        st = path.stat()  # taken first: a file replaced meanwhile is not remembered as read
        data = torch.load(path, map_location=map_location, weights_only=True)
    except MemoryError:
        raise
    except Exception as exc:
        reason = _reason(exc)
        if path.name == "last.pt" and previous.exists():
            warnings.warn(
                f"checkpoint {str(path)!r} could not be read ({reason}); using the one it "
                f"replaced, {str(previous)!r}.",
                stacklevel=2,
            )
            return load_checkpoint(previous, map_location)
        raise CheckpointError(
            f"checkpoint {str(path)!r} could not be read ({reason}). It is truncated, corrupted "
            "or not a roborl checkpoint, and no earlier checkpoint of the same run "
            f"({PREVIOUS_NAME}) is beside it to fall back to."
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(
            f"checkpoint {str(path)!r} holds a {type(data).__name__}, not a dict."
        )
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise CheckpointError(
            f"checkpoint {str(path)!r} is not a roborl checkpoint: missing {', '.join(missing)}."
        )
    if data["format_version"] != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {str(path)!r} has format_version {data['format_version']!r}; this "
            f"roborl reads version {FORMAT_VERSION}."
        )
    data["path"] = str(path)
    if path.name == "last.pt":
        _remember_good(path, st)
    return data

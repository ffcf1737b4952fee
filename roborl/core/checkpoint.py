"""Atomic checkpoints that load with `torch.load(weights_only=True)`.

Write to a temp file in the same directory, fsync, then `os.replace`: a crash or SIGKILL at
any moment leaves either the previous checkpoint or the new one, never a torn file.
"""

from __future__ import annotations

import io
import json
import math
import os
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


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, keep_previous: str | None = None
) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never half of one.

    With `keep_previous`, the file being replaced is kept under that name in the same folder
    (renamed only once the new data is safely on disk), so a later corruption of `path` still
    leaves one readable version beside it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if keep_previous and path.exists():
            os.replace(path, path.with_name(keep_previous))
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


PREVIOUS_NAME = "previous.pt"  # the checkpoint that last.pt replaced, kept as a fallback


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
    such file is stale.
    """
    path = Path(path)
    check_finite_state(payload.get("state"), f"checkpoint {path.name}")
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    buf = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **payload}, buf)
    keep = PREVIOUS_NAME if path.name == "last.pt" else None
    atomic_write_bytes(path, buf.getvalue(), keep_previous=keep)


def load_checkpoint(path: str | os.PathLike[str], map_location: str = "cpu") -> dict[str, Any]:
    """Load and sanity-check a roborl checkpoint, with errors that say what is wrong."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist.")
    if path.is_dir():
        for candidate in (path / "checkpoints" / "last.pt", path / "last.pt"):
            if candidate.exists():
                path = candidate
                break
        else:
            raise CheckpointError(
                f"{str(path)!r} is a directory without checkpoints/last.pt: pass a .pt file "
                "or a run directory."
            )
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        previous = path.with_name(PREVIOUS_NAME)
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
    return data

"""Atomic checkpoints that load with `torch.load(weights_only=True)`.

Write to a temp file in the same directory, fsync, then `os.replace`: a crash or SIGKILL at
any moment leaves either the previous checkpoint or the new one, never a torn file.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from roborl.core.errors import CheckpointError

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


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def save_checkpoint(path: str | os.PathLike[str], payload: Mapping[str, Any]) -> None:
    buf = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **payload}, buf)
    atomic_write_bytes(path, buf.getvalue())


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
        raise CheckpointError(
            f"checkpoint {str(path)!r} could not be read ({reason}). It is truncated, corrupted "
            "or not a roborl checkpoint; roborl writes checkpoints atomically, so the previous "
            "one in the same folder should still be intact."
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

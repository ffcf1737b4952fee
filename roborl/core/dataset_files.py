"""D4RL-style `.npz` and `.hdf5` files: reading, atomic writing, and their dataset sources.

Why in core: plain ``*.npz``/``*.hdf5`` files are core's own dataset form (`OfflineDataset.save`
writes through `save_file`, with or without the registry), and core never imports a plugin
(tests/core/test_layering.py). The formats that need optional packages (Minari,
LeRobotDataset) stay plugins, reached through `roborl.core.dataset_io`; the datasets plugin
registers the two file sources defined here.

On disk: flat arrays named like D4RL's fields; a dict observation is an HDF5 group
(``observations/image``, ``observations/state``) or NPZ entries named the same way; roborl's
metadata is the NPZ entry ``__metadata__`` or the HDF5 attribute ``roborl_metadata``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.dataset_arrays import ALL_FIELDS, META_KEY, OBS_FIELDS, named_arrays
from roborl.core.datasets import OfflineDataset
from roborl.core.errors import DatasetError


def load_npz(path: str | Path) -> OfflineDataset:
    """Read a D4RL-style `.npz` (roborl's metadata in `__metadata__` when present)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"dataset file {str(path)!r} does not exist.")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except Exception as exc:
        raise DatasetError(f"{str(path)!r} is not a readable .npz file ({exc}).") from exc
    meta: dict[str, Any] = {}
    if META_KEY in data:
        meta = json.loads(str(data.pop(META_KEY)))
    return OfflineDataset.from_arrays(data, meta, source=str(path))


def load_hdf5(path: str | Path) -> OfflineDataset:
    """Read a D4RL-style `.hdf5` (top-level datasets named like D4RL's fields)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"dataset file {str(path)!r} does not exist.")
    try:
        import h5py
    except ImportError as exc:
        raise DatasetError(
            f"reading {str(path)!r} needs h5py: pip install 'roborl[datasets]' or h5py."
        ) from exc
    try:
        with h5py.File(path, "r") as f:
            data: dict[str, Any] = {
                k: f[k][()] for k in ALL_FIELDS if k in f and isinstance(f[k], h5py.Dataset)
            }
            for k in OBS_FIELDS:  # dict observations: one group per field
                if k in f and isinstance(f[k], h5py.Group):
                    data[k] = {sub: f[k][sub][()] for sub in f[k]}
            raw = f.attrs.get("roborl_metadata")
            meta = json.loads(raw) if raw is not None else {}
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"{str(path)!r} is not a readable HDF5 file ({exc}).") from exc
    return OfflineDataset.from_arrays(data, meta, source=str(path))


def load_file(path: str | Path) -> OfflineDataset:
    """Load `.npz` or `.hdf5`/`.h5` by extension."""
    suffix = Path(path).suffix.lower()
    if suffix == ".npz":
        return load_npz(path)
    if suffix in (".hdf5", ".h5"):
        return load_hdf5(path)
    raise DatasetError(
        f"unknown dataset file type {suffix!r} for {str(path)!r}; accepted: .npz, .hdf5, .h5, "
        "or a Minari dataset directory / id."
    )


def save_file(dataset: OfflineDataset, path: str | Path) -> Path:
    """Write `.npz` or `.hdf5`/`.h5` atomically (temp file in the same folder + rename)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npz", ".hdf5", ".h5"):
        raise DatasetError(
            f"cannot write dataset to {str(path)!r}: unknown extension {suffix!r}; "
            "use .npz or .hdf5 (Minari datasets: `roborl dataset collect format=minari`)."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        flat = _flat_fields(dataset.arrays())
        if suffix == ".npz":
            with open(tmp, "wb") as f:
                np.savez_compressed(f, **flat, **{META_KEY: np.array(json.dumps(dataset.metadata))})
        else:
            import h5py

            with h5py.File(tmp, "w") as f:
                for name, arr in flat.items():  # "observations/image" makes a group
                    f.create_dataset(name, data=arr, compression="gzip")
                f.attrs["roborl_metadata"] = json.dumps(dataset.metadata)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _flat_fields(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Dict observations as ``observations/<key>`` entries (NPZ names, HDF5 groups)."""
    return dict(named_arrays(arrays))


def load_npz_source(path: str) -> OfflineDataset:
    """`dataset=*.npz` (with `accepts` for the registry)."""
    return load_npz(path)


load_npz_source.accepts = lambda p: str(p).lower().endswith(".npz")  # type: ignore[attr-defined]


def load_hdf5_source(path: str) -> OfflineDataset:
    """`dataset=*.hdf5` or `*.h5` (with `accepts` for the registry)."""
    return load_hdf5(path)


load_hdf5_source.accepts = lambda p: str(p).lower().endswith((".hdf5", ".h5"))  # type: ignore[attr-defined]

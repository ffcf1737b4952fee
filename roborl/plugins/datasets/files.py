"""The plain `.npz`/`.hdf5` dataset files, now `roborl.core.dataset_files` (core's own form:
core imports no plugin); this name stays for code written against it."""

from roborl.core.dataset_files import (
    load_file,
    load_hdf5,
    load_hdf5_source,
    load_npz,
    load_npz_source,
    save_file,
)

__all__ = ["load_file", "load_hdf5", "load_hdf5_source", "load_npz", "load_npz_source", "save_file"]

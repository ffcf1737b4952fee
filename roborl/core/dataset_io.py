"""Where an `out=` dataset goes: a plain `.npz`/`.hdf5` file (`OfflineDataset.save`), or a
plugin's ``SCHEME:TARGET``.

Why here: `roborl dataset collect|corrupt|convert` and `roborl demos record` all write datasets,
and the formats that need optional packages (Minari, LeRobotDataset) live in plugins. Both meet
through the registry's `dataset_writers` (hook `roborl_dataset_writers`), so a command reaches
``out=lerobot:DIR`` by name without importing the plugin that writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from roborl.core.errors import DatasetError

FILE_SUFFIXES = (".npz", ".hdf5", ".h5")


def split_scheme(out: str) -> tuple[str | None, str]:
    """``"lerobot:runs/demos"`` -> ``("lerobot", "runs/demos")``; a plain path -> ``(None, out)``.

    Only a scheme of two or more letters counts, so a path never loses a leading drive or
    folder name that happens to hold a colon further on."""
    scheme, sep, rest = str(out).partition(":")
    if sep and len(scheme) > 1 and scheme.isidentifier():
        return scheme, rest
    return None, str(out)


def accepted_targets(writers: Mapping[str, Any]) -> str:
    """The `out=` forms on offer, for error messages."""
    forms = ["*.npz", "*.hdf5"] + [f"{name}:TARGET" for name in sorted(writers)]
    return ", ".join(forms)


def check_target(out: str, writers: Mapping[str, Callable[..., Any]]) -> None:
    """Refuse an `out=` no writer takes before any work is done (a recording, a conversion)."""
    scheme, rest = split_scheme(out)
    if scheme is not None:
        if scheme not in writers:
            raise DatasetError(
                f"out={out!r}: no dataset writer for {scheme!r}:; accepted: "
                f"{accepted_targets(writers)}."
            )
        if not rest:
            raise DatasetError(f"out={out!r} names no target after {scheme!r}:.")
        return
    if Path(out).suffix.lower() not in FILE_SUFFIXES:
        raise DatasetError(
            f"out={out!r}: unknown dataset file type {Path(out).suffix!r}; accepted: "
            f"{accepted_targets(writers)}."
        )


def save_dataset(dataset: Any, out: str, writers: Mapping[str, Callable[..., Any]]) -> Path:
    """Write `dataset` to `out` (see `check_target`); returns where it went."""
    check_target(out, writers)
    scheme, rest = split_scheme(out)
    if scheme is None:
        return Path(dataset.save(out))
    return Path(writers[scheme](dataset, rest))

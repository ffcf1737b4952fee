"""The optional packages LeRobotDataset files need, checked before any work is done."""

from __future__ import annotations

import importlib.util

from roborl.core.errors import DatasetError

PACKAGES = {"pyarrow": "pyarrow", "av": "av (PyAV)", "pandas": "pandas"}


def require(what: str) -> None:
    """Raise a `DatasetError` naming the extra when pyarrow, PyAV or pandas is missing."""
    missing = [label for mod, label in PACKAGES.items() if importlib.util.find_spec(mod) is None]
    if missing:
        raise DatasetError(f'{what} needs {", ".join(missing)}: pip install "roborl[lerobot]".')

"""Test-wide settings: one torch thread, wandb offline, loopback-only networking, temp dirs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
ROBORL = [sys.executable, "-m", "roborl.core.cli"]


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own Minari dir and wandb dir, and runs from a temp cwd."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)


# Directories whose session fixtures are expensive enough to start once (a vLLM server and
# engine): all their tests go to one pytest-xdist worker.
_ONE_WORKER_DIRS = ("llm",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `pytest -n 2 --dist loadgroup` (`make test`), keep each module on one worker (its
    module-scoped fixtures are built once) and each `_ONE_WORKER_DIRS` directory together."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        rel = Path(str(item.path)).resolve().relative_to(ROOT / "tests")
        group = rel.parts[0] if rel.parts[0] in _ONE_WORKER_DIRS else rel.as_posix()
        item.add_marker(pytest.mark.xdist_group(group))

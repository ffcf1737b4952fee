"""Test-wide settings: one torch thread, wandb offline, loopback-only networking, temp dirs."""

from __future__ import annotations

import json
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

# Seconds each group took in a recorded run (`pytest --record-durations`): the longest groups
# start first, so the last minutes of `make test` do not run one long module on one worker
# while the other idles. A group missing from the file counts as _UNKNOWN_GROUP_S.
DURATIONS_FILE = ROOT / "tests" / "durations.json"
_UNKNOWN_GROUP_S = 10.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations", action="store_true",
        help=f"write each xdist group's seconds (setup + call + teardown) to {DURATIONS_FILE}",
    )  # fmt: skip


def _module_group(parts: tuple[str, ...]) -> str:
    """A test file's group from its path under tests/: the file, or its `_ONE_WORKER_DIRS`
    directory."""
    return parts[0] if parts[:1] and parts[0] in _ONE_WORKER_DIRS else "/".join(parts)


def _group_of(item: pytest.Item) -> str:
    return _module_group(Path(str(item.path)).resolve().relative_to(ROOT / "tests").parts)


def _recorded_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS_FILE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `pytest -n 2 --dist loadgroup --no-loadscope-reorder` (`make test`), keep each
    module on one worker (its module-scoped fixtures are built once) and each `_ONE_WORKER_DIRS`
    directory together, and hand out the groups longest first (the recorded durations)."""
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(_group_of(item)))
    seconds = _recorded_durations()

    def group(item: pytest.Item) -> str:
        mark = item.get_closest_marker("xdist_group")
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))

    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda it: (-seconds.get(group(it), _UNKNOWN_GROUP_S), order[id(it)]))


class _DurationRecorder:
    """Sums each test's phases into its group; the controller (not a worker) writes the file.
    Groups that did not run this time keep their recorded seconds."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        group = _group_of_nodeid(report.nodeid)
        self.seconds[group] = self.seconds.get(group, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput") or not self.seconds:
            return
        merged = {**_recorded_durations(), **self.seconds}
        ranked = sorted(((k, round(v, 1)) for k, v in merged.items()), key=lambda kv: -kv[1])
        DURATIONS_FILE.write_text(json.dumps(dict(ranked), indent=1) + "\n")


def _group_of_nodeid(nodeid: str) -> str:
    """The group xdist scheduled the test in (`...::test_y@group`), or without xdist
    `tests/core/test_x.py::test_y` -> `core/test_x.py` (or its `_ONE_WORKER_DIRS` dir)."""
    if "@" in nodeid.split("::", 1)[-1]:  # a group name may hold "::" itself
        return nodeid.rsplit("@", 1)[1]
    parts = Path(nodeid.split("::", 1)[0]).parts
    return _module_group(parts[1:] if parts[:1] == ("tests",) else parts)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--record-durations"):
        config.pluginmanager.register(_DurationRecorder(), "roborl-duration-recorder")

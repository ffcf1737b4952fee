"""Test-wide settings: one torch thread, wandb offline, loopback-only networking, temp dirs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

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


# How `make test` (`pytest -n 2 --dist loadgroup --no-loadscope-reorder`) hands tests to its
# two workers, in groups (`pytest_xdist_make_scheduler` below): a test module is one group, so
# its module-scoped fixtures are built once; each directory of _ONE_WORKER_DIRS is one group
# (their session fixtures, a vLLM server and engine, start once); in a module of
# _GROUP_PER_PARAMETER each parametrized case is a group of its own (the README run's two
# seeds, the wheel's twelve extras), so one long module fills both workers.
_ONE_WORKER_DIRS = ("llm",)
_GROUP_PER_PARAMETER = (
    "core/test_sac_learns.py",
    "plugins/test_pixel_bc.py",
    "packaging/test_wheel.py",
)

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


def group_of_nodeid(nodeid: str) -> str:
    """A test's group from its node id: `tests/core/test_x.py::test_y` -> `core/test_x.py`,
    `tests/llm/...` -> `llm`, `tests/core/test_sac_learns.py::test_z[1]` ->
    `core/test_sac_learns.py::1`. From the node id alone, because the controller that
    schedules sees nothing else (an `@group` suffix xdist may have added is dropped)."""
    path, _, name = nodeid.partition("::")
    name = name.rsplit("@", 1)[0] if "@" in name.rpartition("]")[2] else name
    parts = Path(path).parts
    parts = parts[1:] if parts[:1] == ("tests",) else parts
    if parts[:1] and parts[0] in _ONE_WORKER_DIRS:
        return parts[0]
    module = "/".join(parts)
    if module in _GROUP_PER_PARAMETER and name.endswith("]") and "[" in name:
        return f"{module}::{name[name.index('[') + 1 : -1]}"
    return module


@pytest.hookimpl(optionalhook=True)  # an xdist hook: `-p no:xdist` must still work
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `--dist loadgroup`, xdist's scope scheduling with our groups (`group_of_nodeid`).

    Why not xdist's own loadgroup: it groups by an `@group` suffix its workers write into each
    test's node id, and pytest 9.2's structured node ids ignore that write (pytest-xdist issue
    1386), so every test was scheduled on its own: a module's tests spread over both workers
    and its module-scoped fixtures (the vLLM engine and server, trained runs) were built on
    each. Grouping here needs no mark and no node-id rewrite."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of_nodeid(nodeid)

    return ModuleGroups(config, log)


def _recorded_durations() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS_FILE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups longest first (the recorded durations), each group's tests together and in
    their own order: xdist's scope scheduling queues the groups in the order they appear."""
    seconds = _recorded_durations()
    order = {id(item): i for i, item in enumerate(items)}

    first_of_group: dict[str, int] = {}
    for item in items:
        first_of_group.setdefault(group_of_nodeid(item.nodeid), order[id(item)])

    def key(item: pytest.Item) -> tuple[float, int, int]:
        group = group_of_nodeid(item.nodeid)
        return (-seconds.get(group, _UNKNOWN_GROUP_S), first_of_group[group], order[id(item)])

    items.sort(key=key)


class _DurationRecorder:
    """Sums each test's phases into its group; the controller (not a worker) writes the file.
    Groups that did not run this time keep their recorded seconds."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        group = group_of_nodeid(report.nodeid)
        self.seconds[group] = self.seconds.get(group, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput") or not self.seconds:
            return
        merged = {**_recorded_durations(), **self.seconds}
        ranked = sorted(((k, round(v, 1)) for k, v in merged.items()), key=lambda kv: -kv[1])
        DURATIONS_FILE.write_text(json.dumps(dict(ranked), indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--record-durations"):
        config.pluginmanager.register(_DurationRecorder(), "roborl-duration-recorder")

"""Helpers the robot tests share (tests/ is on pytest's pythonpath; a conftest cannot be
imported under `--import-mode=importlib`): polling for a condition, the JSON lines a run
writes, whether the actor process still runs, and the actor's training windows."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def poll_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.02) -> bool:
    """Call `predicate` every `interval` s until it is true or `timeout` s have passed; returns
    its last verdict (so `assert not poll_until(...)` checks that something never happens)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.02
) -> None:
    """`poll_until`, failing the test with what it waited for when `timeout` passes."""
    if not poll_until(predicate, timeout, interval):
        raise AssertionError(f"timed out waiting for {what}")


def jsonl_rows(path: Path) -> list[dict]:
    """The JSON lines of `path` so far (none if it does not exist yet)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written right now
            pass
    return rows


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (Linux /proc; a zombie counts as stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def training_windows(rows: list[dict]) -> tuple[float, float]:
    """(steps, seconds) of the actor's stepping while the learner had trained (updates > 0),
    summed over its status windows (reset routines excluded)."""
    training = [r for r in rows if r["updates"] > 0 and r.get("window_s")]
    return sum(r["window_steps"] for r in training), sum(r["window_s"] for r in training)


def install_plugin(folder: Path, module: str, source: str) -> Path:
    """`source` as module `module`, installed as a distribution with a `roborl.plugins` entry
    point in `folder`/site (put it on PYTHONPATH); returns that folder."""
    site = folder / "site"
    site.mkdir()
    (site / f"{module}.py").write_text(source)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    name = module.replace("_", "-")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[roborl.plugins]\n{module} = {module}\n")
    return site

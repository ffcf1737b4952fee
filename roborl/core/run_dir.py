"""The run directory contract: metrics.jsonl, summary.json, config.yaml, learning_curve.png."""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roborl.core.checkpoint import atomic_write_bytes, atomic_write_json
from roborl.core.errors import ConfigError

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
CURVE_FILE = "learning_curve.png"
# What a run leaves that a new run in the same directory would append to or replace.
RUN_FILES = ("checkpoints/last.pt", "checkpoints/previous.pt", METRICS_FILE, SUMMARY_FILE)


def previous_run_files(run_dir: str | os.PathLike[str]) -> list[str]:
    """The files of an earlier run in `run_dir` that got somewhere (none: a new run may start
    there). A run that failed during its setup (a typo in a key) leaves an empty metrics file
    and a summary with no step: nothing to lose, so it does not block the corrected run."""
    found = []
    for name in RUN_FILES:
        path = Path(run_dir) / name
        if not path.is_file():
            continue
        if name == METRICS_FILE and path.stat().st_size == 0:
            continue
        if name == SUMMARY_FILE and not _summary_made_progress(path):
            continue
        found.append(name)
    return found


def _summary_made_progress(path: Path) -> bool:
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return True  # unreadable: keep it rather than guess
    if not isinstance(summary, dict):
        return True
    return bool(summary.get("steps") or summary.get("updates"))


def refuse_previous_run(run_dir: str | os.PathLike[str]) -> None:
    """A ConfigError when `run_dir` already holds a run: a new run there would append its
    metrics to the old ones, replace its summary and rotate away its checkpoints."""
    found = previous_run_files(run_dir)
    if found:
        raise ConfigError(
            f"the run directory {str(run_dir)!r} already holds a previous "
            f"run ({', '.join(found)}); continue it with `roborl resume run_dir={run_dir}`, "
            "or start the new run in another directory (hydra.run.dir=NEW_DIR; a sweep: "
            "hydra.sweep.dir=NEW_DIR)."
        )


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else (1e308 if value > 0 else -1e308)
    return value


class MetricsWriter:
    """Appends one JSON object per event and flushes, so a crash loses at most one line."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - long-lived handle

    def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        record = {"step": int(step), **{k: _jsonable(v) for k, v in metrics.items()}}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        return record

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()


def read_metrics(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete records of a run's metrics.jsonl (a torn last line is skipped)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def truncate_metrics_after(
    run_dir: str | os.PathLike[str], step: int, updates: int | None = None
) -> None:
    """Drop events logged after (`step`, `updates`) (a resumed run replays them), atomically.

    Records written before `updates` was logged are judged by their step alone.
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return

    def keep(r: Mapping[str, Any]) -> bool:
        if r.get("step", 0) > step:
            return False
        return updates is None or "updates" not in r or r["updates"] <= updates

    kept = [r for r in read_metrics(run_dir) if keep(r)]
    atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in kept).encode())


def versions() -> dict[str, str]:
    import gymnasium
    import mujoco
    import numpy
    import torch

    import roborl

    # str(): torch.__version__ is a TorchVersion, which weights_only loading refuses.
    return {
        "roborl": str(roborl.__version__),
        "torch": str(torch.__version__),
        "mujoco": str(mujoco.__version__),
        "gymnasium": str(gymnasium.__version__),
        "numpy": str(numpy.__version__),
    }


def git_sha() -> str | None:
    """The commit of the working directory's repository, or of roborl's source tree."""
    import roborl

    for where in (os.getcwd(), str(Path(roborl.__file__).resolve().parent)):
        try:
            out = subprocess.run(
                ["git", "rev-parse", "HEAD"],
                cwd=where,
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return None


def write_summary(run_dir: str | os.PathLike[str], summary: Mapping[str, Any]) -> None:
    atomic_write_json(Path(run_dir) / SUMMARY_FILE, {k: _jsonable(v) for k, v in summary.items()})


def plot_learning_curve(run_dir: str | os.PathLike[str], title: str = "") -> Path | None:
    """learning_curve.png from metrics.jsonl: eval return (mean +- std) and episode returns."""
    records = read_metrics(run_dir)
    evals = [r for r in records if r.get("eval/return_mean") is not None]
    train = [r for r in records if r.get("train/episode_return") is not None]
    if not evals and not train:
        return None
    # A bare Figure (no pyplot, no backend switch): pyplot's import alone took ~0.5 s of
    # every run's exit (issue 23); a Figure saves PNGs through Agg by itself.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    if train:
        ax.plot(
            [r["step"] for r in train],
            [r["train/episode_return"] for r in train],
            color="tab:gray",
            alpha=0.5,
            lw=1,
            label="train episode return",
        )
    if evals:
        steps = [r["step"] for r in evals]
        mean = [r["eval/return_mean"] for r in evals]
        std = [r.get("eval/return_std") or 0.0 for r in evals]
        ax.plot(steps, mean, "o-", color="tab:blue", label="eval return (deterministic)")
        ax.fill_between(
            steps,
            [m - s for m, s in zip(mean, std)],
            [m + s for m, s in zip(mean, std)],
            color="tab:blue",
            alpha=0.2,
        )
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    out = Path(run_dir) / CURVE_FILE
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, out)
    return out

"""Sweeps: `roborl tune` runs a grid as Ray Tune trials; Hydra's submitit launcher runs
`roborl train -m` (submitit_local here, the same launcher as Slurm's submitit_slurm)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from roborl.plugins.ray.sweep import expand_grid, split_top_level

SMALL = [
    "total_steps=400",
    "learning_starts=200",
    "eval_every=400",
    "eval_episodes=1",
    "algo.hidden_sizes=[16,16]",
    "algo.batch_size=32",
]


def test_grid_expansion_keeps_lists_whole() -> None:
    assert split_top_level("0,1,[2,3]") == ["0", "1", "[2,3]"]
    grid = expand_grid(["seed=0,1", "algo.hidden_sizes=[8,8],[16]"])
    assert len(grid) == 4
    assert ["seed=1", "algo.hidden_sizes=[16]"] in grid


def _summaries(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("summary.json"))]


def test_ray_tune_sweep_runs_each_seed(tmp_path: Path) -> None:
    out = tmp_path / "tune"
    cmd = [sys.executable, "-m", "roborl.core.cli", "tune", "--out", str(out)]
    cmd += ["--cpus-per-trial", "1", "seed=0,1", *SMALL]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summaries = _summaries(out)
    assert sorted(s["seed"] for s in summaries) == [0, 1]
    assert all(s["status"] == "finished" and s["steps"] == 400 for s in summaries)
    assert "2/2 trials finished" in proc.stdout


def test_submitit_local_launcher_multirun(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "roborl.core.cli", "train", "-m"]
    cmd += ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"]
    cmd += [f"hydra.sweep.dir={tmp_path / 'sweep'}", "progress=false", "seed=0,1", *SMALL]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = _summaries(tmp_path / "sweep")
    assert sorted(s["seed"] for s in summaries) == [0, 1]
    assert all(s["status"] == "finished" for s in summaries)

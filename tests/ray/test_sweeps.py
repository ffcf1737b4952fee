"""Sweeps: `roborl tune` runs a grid as Ray Tune trials; Hydra's submitit launcher runs
`roborl train -m` (submitit_local here, the same launcher as Slurm's submitit_slurm)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roborl.core.errors import ConfigError
from roborl.plugins.ray.sweep import expand_grid, parse_sweep

pytestmark = pytest.mark.serial  # a local Ray cluster claims both cores


SMALL = [
    "total_steps=400",
    "learning_starts=200",
    "eval_every=400",
    "eval_episodes=1",
    "algo.hidden_sizes=[16,16]",
    "algo.batch_size=32",
]


def test_grid_expansion_keeps_lists_whole() -> None:
    grid = expand_grid(["seed=0,1", "algo.hidden_sizes=[8,8],[16]"])
    assert len(grid) == 4
    assert ["seed=1", "algo.hidden_sizes=[16]"] in grid
    assert expand_grid(["x=0,1,[2,3]"]) == [["x=0"], ["x=1"], ["x=[2,3]"]]


def test_hydra_sweep_syntax_range_glob_and_interval() -> None:
    grid = expand_grid(["seed=range(3)", "algo=glob(sb3/*c)", "total_steps=100"])
    assert ["seed=2", "algo=sb3/sac", "total_steps=100"] in grid
    assert {p[1] for p in grid} == {"algo=sb3/a2c", "algo=sb3/sac"}
    assert len(grid) == 6
    points, sampled = parse_sweep(["seed=0,1", "algo.actor_lr=tag(log,interval(1e-4,1e-2))"])
    assert points == [["seed=0"], ["seed=1"]]
    assert sampled == {"algo.actor_lr": (1e-4, 1e-2, True)}
    with pytest.raises(ConfigError, match="interval"):
        expand_grid(["algo.actor_lr=interval(0.1,0.2)"])
    with pytest.raises(ConfigError, match="cannot parse"):
        expand_grid(["seed=range(0,"])


def _summaries(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("summary.json"))]


def test_ray_tune_sweep_runs_each_seed(tmp_path: Path) -> None:
    out = tmp_path / "tune"
    cmd = [sys.executable, "-m", "roborl.core.cli", "tune", f"out={out}"]
    cmd += ["cpus_per_trial=1", "seed=0,1", *SMALL]
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

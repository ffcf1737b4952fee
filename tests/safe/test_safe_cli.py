"""End to end through the CLI: `roborl train algo=fisor dataset=... env=...` (offline, safe task)
and `roborl train algo=sac_lagrangian env=safe_point_goal` (online), tiny budgets."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import torch
from cli_server import run_roborl

from roborl.plugins.fisor.nav_data import collect_nav_dataset
from roborl.sim.safety import make_safe_env


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return run_roborl(args, timeout=170, cwd=cwd)


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_fisor_from_cli(tmp_path: Path) -> None:
    data = collect_nav_dataset(make_safe_env("SafePointGoal-v0"), episodes_per_policy=4, seed=0)
    path = data.save(tmp_path / "nav.npz")
    run_dir = tmp_path / "fisor"
    res = _cli(
        [
            "train", "algo=fisor", f"dataset={path}", "env=safe_point_goal", "total_updates=40",
            "eval_every=40", "eval_episodes=2", "checkpoint_every=40", "log_every=20",
            "algo.hidden_sizes=[32,32]", "algo.actor_width=32", "algo.actor_blocks=1",
            "algo.num_samples=4", "algo.batch_size=64", "progress=false",
            f"hydra.run.dir={run_dir}",
        ],
        tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    metrics = _metrics(run_dir)
    assert any("train/feasible_frac" in m for m in metrics)
    evals = [m for m in metrics if "eval/cost_mean" in m]  # a safe task logs its cost
    assert evals and evals[-1]["updates"] == 40 and evals[-1]["step"] == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algo"] == "fisor" and summary["env"] == "SafePointGoal-v0"
    assert summary["final_eval_cost_mean"] == evals[-1]["eval/cost_mean"]
    ckpt = run_dir / "checkpoints" / "last.pt"
    state = torch.load(ckpt, weights_only=True)
    assert state is not None


def test_train_sac_lagrangian_from_cli(tmp_path: Path) -> None:
    run_dir = tmp_path / "saclag"
    res = _cli(
        [
            "train", "algo=sac_lagrangian", "env=safe_point_goal", "algo.cost_limit=0",
            "algo.episode_length=200", "total_steps=300", "learning_starts=150",
            "eval_every=300", "eval_episodes=1", "checkpoint_every=300", "log_every=100",
            "algo.hidden_sizes=[32,32]", "algo.batch_size=64", "progress=false",
            f"hydra.run.dir={run_dir}",
        ],
        tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    lam = [
        m["train/lagrange_multiplier"]
        for m in _metrics(run_dir)
        if "train/lagrange_multiplier" in m
    ]
    assert lam, "the multiplier is logged"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["algo"] == "sac_lagrangian" and "final_eval_cost_mean" in summary

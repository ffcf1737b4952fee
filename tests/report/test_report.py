"""`roborl report` on synthetic run directories agrees with rliable computed directly."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from rliable import library as rly
from rliable import metrics

from roborl.core.errors import ConfigError
from roborl.plugins.report import aggregate

ALGOS = ("algo_a", "algo_b")
ENVS = ("Hopper-v5", "Walker2d-v5")
SEEDS = range(5)
STEPS = (1000, 2000, 3000)


def _curve(algo: str, env: str, seed: int) -> list[float]:
    """Deterministic eval returns; the last is not the best for some runs (final != best)."""
    rs = np.random.RandomState(zlib.crc32(f"{algo}/{env}/{seed}".encode()))
    base = (100.0 if algo == "algo_a" else 160.0) + (0.0 if env == ENVS[0] else 40.0)
    c = [base * 0.3 + rs.rand() * 10, base * 0.9 + rs.rand() * 30, base + rs.randn() * 25]
    return [round(float(v), 3) for v in c]


def _write_runs(root: Path) -> dict[tuple[str, str, int], list[float]]:
    truth = {}
    for algo in ALGOS:
        for env in ENVS:
            for seed in SEEDS:
                d = root / f"{algo}_{env}_s{seed}"
                d.mkdir(parents=True)
                curve = _curve(algo, env, seed)
                truth[(algo, env, seed)] = curve
                lines = [{"step": 500, "train/episode_return": 1.0}]
                for step, ret in zip(STEPS, curve):
                    rec = {"step": step, "eval/return_mean": ret, "eval/return_std": 1.0}
                    rec["eval/success_rate"] = float(ret > 150)
                    lines.append(rec)
                (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
                summary = {"algo": algo, "env": env, "seed": seed, "steps": 3000}
                summary["final_eval_return"] = curve[-1]
                (d / "summary.json").write_text(json.dumps(summary))
    return truth


def _direct(truth: dict, pick: int | str, reps: int) -> tuple[dict, dict]:
    scores = {}
    for algo in ALGOS:
        cols = []
        for env in sorted(ENVS):
            vals = [truth[(algo, env, s)] for s in SEEDS]
            cols.append([v[-1] if pick == "final" else max(v) for v in vals])
        scores[algo] = np.array(cols).T  # runs x tasks
    np.random.seed(0)  # rliable 1.2 resamples with NumPy's global generator
    return rly.get_interval_estimates(
        scores,
        lambda x: np.array([metrics.aggregate_iqm(x)]),
        reps=reps,
        random_state=np.random.RandomState(0),
    )


def test_cli_report_matches_rliable_iqm_and_ci(tmp_path: Path) -> None:
    truth = _write_runs(tmp_path / "runs")
    out = tmp_path / "report"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "roborl.core.cli",
            "report",
            str(tmp_path / "runs"),
            "--out",
            str(out),
            "--reps",
            "500",
            "--seed",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "report.json").read_text())
    assert result["metric"] == "return"
    assert len(result["runs"]) == 20
    for which in ("final", "best"):
        points, cis = _direct(truth, which, 500)
        for algo in ALGOS:
            got = result["aggregates"][which][algo]["iqm"]
            assert got["point"] == pytest.approx(points[algo][0], rel=1e-9)
            assert got["ci_low"] == pytest.approx(cis[algo][0][0], rel=1e-9)
            assert got["ci_high"] == pytest.approx(cis[algo][1][0], rel=1e-9)
            assert got["ci_low"] <= got["point"] <= got["ci_high"]
    # the best evaluation is never below the final one
    for algo in ALGOS:
        assert (
            result["aggregates"]["best"][algo]["mean"]["point"]
            >= result["aggregates"]["final"][algo]["mean"]["point"]
        )
    assert "success_rate" in result["extra"]
    md = (out / "report.md").read_text()
    assert "algo_a" in md and "IQM [95% CI]" in md
    assert "<table>" in (out / "report.html").read_text()
    for name in ("aggregates_final.png", "performance_profile.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert len(list(out.glob("learning_curve_*.png"))) == len(ENVS)


def test_python_api_and_bad_input(tmp_path: Path) -> None:
    _write_runs(tmp_path / "runs")
    res = aggregate([tmp_path / "runs"], metric="success_rate", which=["final"], reps=200)
    a, b = (res["aggregates"]["final"][x]["mean"]["point"] for x in ALGOS)
    assert 0.0 <= a < b <= 1.0
    with pytest.raises(ConfigError, match="normalized_score"):
        aggregate([tmp_path / "runs"], metric="normalized_score", reps=200)
    with pytest.raises(ConfigError, match="does not exist"):
        aggregate([tmp_path / "missing"], reps=200)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no run directories"):
        aggregate([tmp_path / "empty"], reps=200)

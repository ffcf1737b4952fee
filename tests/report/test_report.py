"""`roborl report`: agrees with rliable called directly, aggregates across tasks only on
normalised scores, compares methods on shared tasks, labels curves with the run's clock."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from cli_server import run_roborl
from rliable import library as rly
from rliable import metrics

from roborl.core.errors import ConfigError
from roborl.plugins.report import aggregate
from roborl.plugins.report.aggregate import learning_curves
from roborl.plugins.report.runs import find_run_dirs, load_run

ALGOS = ("algo_a", "algo_b")
ENVS = ("Hopper-v5", "Walker2d-v5")
SEEDS = range(5)
STEPS = (1000, 2000, 3000)
REFS = {"Hopper-v5": {"random": 10.0, "reference": 210.0}, "Walker2d-v5": {"random": -5.0, "reference": 295.0}}  # fmt: skip


def _curve(algo: str, env: str, seed: int) -> list[float]:
    """Deterministic eval returns; the last is not the best for some runs (final != best)."""
    rs = np.random.RandomState(zlib.crc32(f"{algo}/{env}/{seed}".encode()))
    base = (100.0 if algo == "algo_a" else 160.0) + (0.0 if env == ENVS[0] else 40.0)
    c = [base * 0.3 + rs.rand() * 10, base * 0.9 + rs.rand() * 30, base + rs.randn() * 25]
    return [round(float(v), 3) for v in c]


def _write_run(d: Path, algo: str, env: str, seed: int, curve: list[float], **summary) -> None:
    d.mkdir(parents=True)
    lines = [{"step": 500, "updates": 0, "train/episode_return": 1.0}]
    for step, ret in zip(STEPS, curve):
        rec = {"step": step, "updates": step, "eval/return_mean": ret, "eval/return_std": 1.0}
        rec["eval/success_rate"] = float(ret > 150)
        lines.append(rec)
    (d / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    base = {"algo": algo, "env": env, "seed": seed, "steps": 3000, "updates": 3000}
    base["final_eval_return"] = curve[-1]
    (d / "summary.json").write_text(json.dumps({**base, **summary}))


def _write_runs(root: Path) -> dict[tuple[str, str, int], list[float]]:
    truth = {}
    for algo in ALGOS:
        for env in ENVS:
            for seed in SEEDS:
                curve = _curve(algo, env, seed)
                truth[(algo, env, seed)] = curve
                _write_run(root / f"{algo}_{env}_s{seed}", algo, env, seed, curve)
    return truth


def _normalised(env: str, value: float) -> float:
    ref = REFS[env]
    return 100.0 * (value - ref["random"]) / (ref["reference"] - ref["random"])


def _direct(truth: dict, pick: str, reps: int) -> tuple[dict, dict]:
    """rliable's IQM on the min-max normalised (runs x tasks) matrices, as a user would."""
    scores = {}
    for algo in ALGOS:
        cols = []
        for env in sorted(ENVS):
            vals = [truth[(algo, env, s)] for s in SEEDS]
            cols.append([_normalised(env, v[-1] if pick == "final" else max(v)) for v in vals])
        scores[algo] = np.array(cols).T  # runs x tasks
    np.random.seed(0)  # rliable 1.2 resamples with NumPy's global generator
    return rly.get_interval_estimates(
        scores,
        lambda x: np.array([metrics.aggregate_iqm(x)]),
        reps=reps,
        random_state=np.random.RandomState(0),
    )


def test_cli_report_with_refs_matches_rliable_on_normalised_scores(tmp_path: Path) -> None:
    truth = _write_runs(tmp_path / "runs")
    refs = tmp_path / "refs.yaml"
    refs.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in REFS.items()))
    out = tmp_path / "report"
    # the older flag spellings (--out, --reps, --seed) still work for one release, each
    # with a one-line deprecation warning naming the new spelling
    proc = run_roborl(
        ["report", str(tmp_path / "runs"), "--out", str(out), "--reps", "200", "--seed", "0",
         f"refs={refs}"],
        timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "'--reps 200' is deprecated" in proc.stderr and "write 'reps=200'" in proc.stderr
    result = json.loads((out / "report.json").read_text())
    assert result["metric"] == "normalized_return" and result["cross_task"]
    assert result["normalization"]["kind"] == "refs"
    assert len(result["runs"]) == 20
    for which in ("final", "best"):
        points, cis = _direct(truth, which, 200)
        for algo in ALGOS:
            got = result["aggregates"][which][algo]["iqm"]
            assert got["point"] == pytest.approx(points[algo][0], rel=1e-9)
            assert got["ci_low"] == pytest.approx(cis[algo][0][0], rel=1e-9)
            assert got["ci_high"] == pytest.approx(cis[algo][1][0], rel=1e-9)
            assert got["ci_low"] <= got["point"] <= got["ci_high"]
    for algo in ALGOS:  # the best evaluation is never below the final one
        assert (
            result["aggregates"]["best"][algo]["mean"]["point"]
            >= result["aggregates"]["final"][algo]["mean"]["point"]
        )
    assert "success_rate" in result["extra"]  # on one scale in every task: aggregated
    md = (out / "report.md").read_text()
    assert "algo_a" in md and "IQM [95% CI]" in md and "refs.yaml" in md
    html = (out / "report.html").read_text()
    assert "<table>" in html and "How to read this" in html
    assert "src='data:image/png;base64," in html and "src='aggregates" not in html
    for name in ("aggregates_final.png", "per_task_final.png", "performance_profile.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert len(list(out.glob("learning_curve_*.png"))) == len(ENVS)


def test_raw_returns_of_different_scales_are_never_aggregated_across_tasks(
    tmp_path: Path,
) -> None:
    """Task "Big" scores in the thousands, "Small" in the tens. algo_a is ahead on Big by a
    few percent, algo_b far ahead on Small: a raw runs x tasks IQM would crown algo_a."""
    rs = np.random.RandomState(0)
    for algo, big, small in (("algo_a", 3100.0, 12.0), ("algo_b", 3000.0, 60.0)):
        for task, level in (("Big-v0", big), ("Small-v0", small)):
            for seed in range(4):
                c = [level * f + rs.rand() for f in (0.3, 0.8, 1.0)]
                _write_run(tmp_path / "runs" / f"{algo}_{task}_{seed}", algo, task, seed, c)
    res = aggregate([tmp_path / "runs"], reps=200)
    assert res["metric"] == "return" and not res["cross_task"]
    assert res["aggregates"] == {} and res["extra"].get("return") is None
    assert "No aggregate across tasks" in res["note"] and "refs=FILE" in res["note"]
    per = res["per_task_aggregates"]["final"]
    assert set(per) == {"Big-v0", "Small-v0"}
    assert per["Big-v0"]["algo_a"]["iqm"]["point"] > per["Big-v0"]["algo_b"]["iqm"]["point"]
    assert per["Small-v0"]["algo_b"]["iqm"]["point"] > 4 * per["Small-v0"]["algo_a"]["iqm"]["point"]
    # the files say the same: no cross-task table or plot, per-task ones instead
    from roborl.plugins.report.cli import write_report

    out = tmp_path / "report"
    write_report([tmp_path / "runs"], out, reps=200)
    md = (out / "report.md").read_text()
    assert "No aggregate across tasks" in md
    assert "| return | final |" not in md  # (success rate, on one scale everywhere, may be)
    assert not list(out.glob("aggregates_*.png")) and not (out / "performance_profile.png").exists()
    assert (out / "per_task_final.png").exists()
    # with declared random and reference scores the same runs are aggregated, normalised
    refs = {"Big-v0": {"random": 0.0, "reference": 3000.0}, "Small-v0": {"random": 0.0, "reference": 60.0}}  # fmt: skip
    norm = aggregate([tmp_path / "runs"], reps=200, refs=refs)
    assert norm["metric"] == "normalized_return" and norm["cross_task"]
    iqm = {a: norm["aggregates"]["final"][a]["iqm"]["point"] for a in ("algo_a", "algo_b")}
    assert iqm["algo_b"] > iqm["algo_a"]  # normalised, Small counts as much as Big


def test_methods_are_compared_on_shared_tasks_only(tmp_path: Path) -> None:
    _write_runs(tmp_path / "runs")
    for seed in range(3):  # algo_c ran Hopper only, and on a normalised scale
        _write_run(tmp_path / "runs" / f"c_{seed}", "algo_c", "Hopper-v5", seed, [10.0, 20.0, 500.0 + seed])  # fmt: skip
    res = aggregate([tmp_path / "runs"], reps=200, refs=REFS)
    assert res["shared_tasks"] == ["Hopper-v5"]
    assert res["missing"] == {"algo_c": ["Walker2d-v5"]}
    assert "algo_c lacks Walker2d-v5" in res["note"]
    assert res["tasks"] == {a: ["Hopper-v5"] for a in ("algo_a", "algo_b", "algo_c")}
    # algo_a's aggregate is over its Hopper runs only: equal to the per-task value
    assert (
        res["aggregates"]["final"]["algo_a"]["iqm"]
        == (res["per_task_aggregates"]["final"]["Hopper-v5"]["algo_a"]["iqm"])
    )
    # methods that share no task are never put side by side in one aggregate
    apart = [r for r in find_run_dirs([tmp_path / "runs"]) if "algo_a_Walker" in r.name or "c_" in r.name]  # fmt: skip
    res = aggregate(apart, reps=200, refs=REFS)
    assert res["shared_tasks"] == [] and res["aggregates"] == {} and not res["cross_task"]
    assert "No task is shared by every method" in res["note"]


def test_curves_use_the_runs_clock(tmp_path: Path) -> None:
    _write_run(tmp_path / "off", "iql", "Hopper-v5", 0, [1.0, 2.0, 3.0], steps=0, updates=3000)
    metrics_path = tmp_path / "off" / "metrics.jsonl"
    recs = [json.loads(x) for x in metrics_path.read_text().splitlines()]
    for r in recs:  # an offline run steps no env: every event is at step 0
        r["step"] = 0
    metrics_path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    run = load_run(tmp_path / "off")
    assert run.x_label == "gradient updates"
    assert run.curves["return"][0].tolist() == [1000.0, 2000.0, 3000.0]
    _write_run(tmp_path / "on", "sac", "Hopper-v5", 0, [1.0, 2.0, 3.0])
    assert load_run(tmp_path / "on").x_label == "env steps"
    curves = learning_curves([run], reps=50)
    assert curves[("iql", "Hopper-v5")]["x_label"] == "gradient updates"
    # a run on a robot: robot time from its control rate (config.yaml's robot.rate_hz)
    _write_run(tmp_path / "robot", "sac", "robot:arm", 0, [1.0, 2.0, 3.0])
    (tmp_path / "robot" / "config.yaml").write_text("robot:\n  name: arm\n  rate_hz: 20.0\n")
    robot = load_run(tmp_path / "robot")
    assert robot.x_label.startswith("robot time (s")
    assert robot.curves["return"][0].tolist() == [50.0, 100.0, 150.0]


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
    bad = tmp_path / "bad.yaml"
    bad.write_text("Hopper-v5: {random: 1.0}\n")
    with pytest.raises(ConfigError, match="needs both 'random' and 'reference'"):
        aggregate([tmp_path / "runs"], refs=bad, reps=200)
    bad.write_text("Ant-v5: {random: 1.0, reference: 2.0}\n")
    with pytest.raises(ConfigError, match="names the tasks Ant-v5"):
        aggregate([tmp_path / "runs"], refs=bad, reps=200)


def test_two_variants_of_one_algorithm_get_their_own_rows(tmp_path: Path) -> None:
    """Runs of one algorithm with different settings: by default they share the `sac` row;
    `label.NAME=GLOB` and `group_by=KEY` split them, each row holding its own runs."""
    for variant, lr in (("fast", 1e-3), ("slow", 3e-4)):
        for seed in range(3):
            d = tmp_path / f"{variant}_s{seed}"
            curve = [10.0, 20.0, (500.0 if variant == "fast" else 100.0) + seed]
            _write_run(d, "sac", "Hopper-v5", seed, curve)
            (d / "config.yaml").write_text(f"seed: {seed}\nalgo:\n  name: sac\n  actor_lr: {lr}\n")
    cmd = ["report", "plots=false", "reps=50"]

    def rows(*args: str) -> dict[str, float]:
        out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
        proc = run_roborl([*cmd, f"out={out}", *args], timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        res = json.loads((out / "report.json").read_text())
        per = res["per_task_aggregates"]["final"]["Hopper-v5"]
        return {name: v["mean"]["point"] for name, v in per.items()}

    assert set(rows(str(tmp_path))) == {"sac"}
    labelled = rows(f"label.fast='{tmp_path}/fast_*'", f"label.slow='{tmp_path}/slow_*'")
    assert labelled == pytest.approx({"fast": 501.0, "slow": 101.0})
    grouped = rows(str(tmp_path), "group_by=algo.actor_lr")
    assert grouped == pytest.approx(
        {"sac [algo.actor_lr=0.001]": 501.0, "sac [algo.actor_lr=0.0003]": 101.0}
    )

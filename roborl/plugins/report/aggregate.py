"""Aggregate run directories into scores, rliable interval estimates and learning curves.

Following Agarwal et al. (2021), "Deep RL at the Edge of the Statistical Precipice": the
interquartile mean (IQM), mean and median over all runs x tasks of a method, each with a 95%
stratified-bootstrap percentile confidence interval (`rliable.library.get_interval_estimates`),
and performance profiles (`rliable.library.create_performance_profile`). Both the final and the
best evaluation of each run are reported, since they can rank methods differently (Tarasov et
al., 2022, CORL). "best" takes every metric at the evaluation with the highest return
(checkpoint selection by return), so a best cost is the cost of that checkpoint.

Metrics come from what runs logged (DESIGN.md's run directory): `return` (eval/return_mean),
`normalized_score` (D4RL-normalised, eval/normalized_score), `normalized_reward` /
`normalized_cost` (DSRL, eval/normalized_*), `cost` (eval/cost_mean) and `success_rate`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.errors import ConfigError

METRIC_KEYS = {
    "return": "eval/return_mean",
    "normalized_score": "eval/normalized_score",
    "normalized_reward": "eval/normalized_reward",
    "normalized_cost": "eval/normalized_cost",
    "cost": "eval/cost_mean",
    "success_rate": "eval/success_rate",
}
WHICH = ("final", "best")


@dataclass
class RunRecord:
    """One run directory, reduced to what a report needs."""

    path: Path
    algo: str
    env: str
    seed: int
    final: dict[str, float] = field(default_factory=dict)
    best: dict[str, float] = field(default_factory=dict)
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Each path is a run directory (has summary.json) or a folder searched for them."""
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ConfigError(f"roborl report: {str(p)!r} does not exist; pass run directories.")
        if (p / "summary.json").exists():
            found.append(p)
        else:
            found.extend(sorted(s.parent for s in p.rglob("summary.json")))
    if not found:
        raise ConfigError(
            "roborl report: no run directories found (a run directory has summary.json and "
            f"metrics.jsonl); searched: {', '.join(map(str, paths))}."
        )
    return sorted(set(found))


def load_run(path: str | Path) -> RunRecord:
    """Read summary.json and the eval events of metrics.jsonl."""
    path = Path(path)
    try:
        summary = json.loads((path / "summary.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"roborl report: {path}/summary.json is unreadable ({exc}).") from None
    evals: list[dict[str, Any]] = []
    metrics_path = path / "metrics.jsonl"
    if metrics_path.exists():
        for line in metrics_path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a crashed run
            if "eval/return_mean" in rec:
                evals.append(rec)
    run = RunRecord(
        path=path,
        algo=str(summary.get("algo")),
        env=str(summary.get("env")),
        seed=int(summary.get("seed") or 0),
    )
    if evals:
        steps = np.array([e["step"] for e in evals], dtype=float)
        best_i = int(np.argmax([e["eval/return_mean"] for e in evals]))
        for name, key in METRIC_KEYS.items():
            vals = [e.get(key) for e in evals]
            if all(v is not None for v in vals):
                run.curves[name] = (steps, np.array(vals, dtype=float))
                run.final[name] = float(vals[-1])
                run.best[name] = float(vals[best_i])
    elif summary.get("final_eval_return") is not None:
        run.final["return"] = run.best["return"] = float(summary["final_eval_return"])
    return run


def score_matrices(
    runs: Sequence[RunRecord], metric: str = "return", which: str = "final"
) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """{algo: (num_runs x num_tasks)} for rliable; seeds beyond the smallest count per task
    are dropped (rliable needs a rectangle), lowest seeds kept."""
    if which not in WHICH:
        raise ConfigError(f"roborl report: which={which!r}; accepted: {', '.join(WHICH)}.")
    per: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        values = r.final if which == "final" else r.best
        if metric in values:
            per[r.algo][r.env].append((r.seed, values[metric]))
    if not per:
        have = sorted({m for r in runs for m in r.final})
        raise ConfigError(
            f"roborl report: no run logged the metric {metric!r}; available: "
            f"{', '.join(have) or '(none: no eval events)'}."
        )
    matrices, tasks = {}, {}
    for algo, by_env in sorted(per.items()):
        envs = sorted(by_env)
        n = min(len(v) for v in by_env.values())
        cols = [[v for _, v in sorted(by_env[e])[:n]] for e in envs]
        matrices[algo] = np.array(cols, dtype=float).T
        tasks[algo] = envs
    return matrices, tasks


AGGREGATES = ("iqm", "mean", "median")


def _aggregate_fn(name: str) -> Any:
    from rliable import metrics

    fn = {
        "iqm": metrics.aggregate_iqm,
        "mean": metrics.aggregate_mean,
        "median": metrics.aggregate_median,
    }[name]
    return lambda x: np.array([fn(x)])


def interval_estimates(
    matrices: Mapping[str, np.ndarray], reps: int = 2000, ci: float = 0.95, seed: int = 0
) -> dict[str, dict[str, dict[str, float]]]:
    """IQM, mean, median with stratified-bootstrap percentile CIs, per algorithm (rliable).

    Each aggregate is its own `get_interval_estimates` call, exactly as a user calling
    rliable for that aggregate would. rliable 1.2's `StratifiedBootstrap` draws its resamples
    from NumPy's global generator (its `random_state` argument does not reach them), so each
    call runs after `np.random.seed(seed)`; the caller's global state is restored afterwards.
    """
    from rliable import library as rly

    out: dict[str, dict[str, dict[str, float]]] = {algo: {} for algo in matrices}
    saved = np.random.get_state()
    for name in AGGREGATES:
        np.random.seed(seed)
        points, intervals = rly.get_interval_estimates(
            dict(matrices),
            _aggregate_fn(name),
            reps=reps,
            confidence_interval_size=ci,
            random_state=np.random.RandomState(seed),
        )
        for algo in matrices:
            out[algo][name] = {
                "point": float(points[algo][0]),
                "ci_low": float(intervals[algo][0][0]),
                "ci_high": float(intervals[algo][1][0]),
            }
    np.random.set_state(saved)
    return out


def aggregate(
    runs: Sequence[RunRecord | str | Path],
    metric: str | None = None,
    which: Sequence[str] = WHICH,
    reps: int = 2000,
    ci: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """The Python API of `roborl report`: benchmarks call this on their run directories.

    Returns ``{"metric", "runs", "tasks", "per_task", "aggregates": {which: {algo: {iqm|mean|
    median: {point, ci_low, ci_high}}}}, "extra": {metric: {which: ...}}}``. `metric` defaults
    to `normalized_score` when every run logged it, else `return`; every other metric the runs
    logged (success rate, cost, DSRL's normalised reward/cost) is aggregated under "extra".
    """
    records = [
        r if isinstance(r, RunRecord) else load_run(r)
        for r in (runs if runs and isinstance(runs[0], RunRecord) else find_run_dirs(runs))
    ]
    if metric is None:
        metric = (
            "normalized_score" if all("normalized_score" in r.final for r in records) else "return"
        )
    elif metric not in METRIC_KEYS:
        raise ConfigError(f"roborl report: metric={metric!r}; accepted: {', '.join(METRIC_KEYS)}.")
    result: dict[str, Any] = {
        "metric": metric,
        "confidence": ci,
        "reps": reps,
        "runs": [
            {
                "path": str(r.path),
                "algo": r.algo,
                "env": r.env,
                "seed": r.seed,
                **{
                    f"{w}_{m}": v
                    for w, vals in (("final", r.final), ("best", r.best))
                    for m, v in vals.items()
                },
            }
            for r in records
        ],
        "aggregates": {},
        "extra": {},
    }
    for w in which:
        matrices, tasks = score_matrices(records, metric, w)
        result["aggregates"][w] = interval_estimates(matrices, reps, ci, seed)
        result["tasks"] = tasks
        result.setdefault("matrices", {})[w] = {a: m.tolist() for a, m in matrices.items()}
    others = sorted({m for r in records for m in r.final} - {metric})
    for m in others:
        result["extra"][m] = {}
        for w in which:
            matrices, _ = score_matrices(records, m, w)
            result["extra"][m][w] = interval_estimates(matrices, reps, ci, seed)
    per_task: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (algo, env), group in _group(records).items():
        cell: dict[str, Any] = {"runs": len(group)}
        for m in sorted({k for r in group for k in r.final}):
            for w in which:
                vals = [(r.final if w == "final" else r.best).get(m) for r in group]
                vals = [v for v in vals if v is not None]
                cell[f"{w}_{m}"] = {"mean": float(np.mean(vals)), "std": float(np.std(vals))}
        per_task[algo][env] = cell
    result["per_task"] = per_task
    return result


def _group(records: Sequence[RunRecord]) -> dict[tuple[str, str], list[RunRecord]]:
    groups: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for r in records:
        groups[(r.algo, r.env)].append(r)
    return dict(sorted(groups.items()))


def learning_curves(
    records: Sequence[RunRecord],
    metric: str = "return",
    reps: int = 500,
    ci: float = 0.95,
    seed: int = 0,
    points: int = 50,
) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """Per (algo, env): steps, IQM across seeds and a bootstrap CI band at each step.

    Runs are linearly interpolated onto a common grid up to the shortest run's last eval.
    """
    out = {}
    rs = np.random.RandomState(seed)
    for key, group in _group(records).items():
        curves = [r.curves[metric] for r in group if metric in r.curves]
        if not curves:
            continue
        lo = max(c[0][0] for c in curves)
        hi = min(c[0][-1] for c in curves)
        grid = np.linspace(lo, hi, points) if hi > lo else np.array([hi])
        ys = np.stack([np.interp(grid, s, v) for s, v in curves])  # runs x points
        iqm = _trim_mean(ys)
        idx = rs.randint(0, len(ys), size=(reps, len(ys)))
        boot = np.stack([_trim_mean(ys[i]) for i in idx])
        alpha = (1.0 - ci) / 2
        out[key] = {
            "steps": grid,
            "iqm": iqm,
            "low": np.quantile(boot, alpha, axis=0),
            "high": np.quantile(boot, 1 - alpha, axis=0),
            "runs": np.array(len(ys)),
        }
    return out


def _trim_mean(x: np.ndarray) -> np.ndarray:
    from scipy.stats import trim_mean

    return trim_mean(x, 0.25, axis=0)

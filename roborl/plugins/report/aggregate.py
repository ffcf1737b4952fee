"""Aggregate run directories into scores, rliable interval estimates and learning curves.

Following Agarwal et al. (2021), "Deep RL at the Edge of the Statistical Precipice": the
interquartile mean (IQM), mean and median of a method, each with a 95% stratified-bootstrap
percentile confidence interval (`rliable.library.get_interval_estimates`), and performance
profiles (`rliable.library.create_performance_profile`). Both the final and the best
evaluation of each run are reported, since they can rank methods differently (Tarasov et al.,
2022, CORL). "best" takes every metric at the evaluation with the highest return (checkpoint
selection by return), so a best cost is the cost of that checkpoint.

Aggregates across tasks are taken only over normalised scores, as rliable's method requires
(a task whose returns are in the thousands would otherwise swamp one in the tens):

1. `normalized_score` when every run logged it (D4RL reference returns: 0 random, 100 expert);
2. else `normalized_return`, a per-task min-max over the random and reference scores a user
   declares (`roborl report RUNS refs=FILE`, `runs.load_refs`), on the same 0..100 scale;
3. else no cross-task aggregate: per-task interval estimates only, and `note` says why.

Methods are compared on the tasks they all share; `missing` lists what each one lacks.
Curves carry the run's own clock: env steps, gradient updates (offline runs, which step no
env) or robot time (control steps / `robot.rate_hz`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.errors import ConfigError
from roborl.plugins.report.runs import (
    METRIC_KEYS,
    RunRecord,
    apply_refs,
    find_run_dirs,
    load_refs,
    load_run,
)

DERIVED = ("normalized_return",)  # computed here from refs=FILE, never logged
METRICS = (*METRIC_KEYS, *DERIVED)
# Metrics on a common scale across tasks: these may be aggregated over runs x tasks.
NORMALISED = frozenset(
    {
        "normalized_score",
        "normalized_return",
        "normalized_reward",
        "normalized_cost",
        "success_rate",
    }
)
WHICH = ("final", "best")
AGGREGATES = ("iqm", "mean", "median")


# -- score matrices and interval estimates ----------------------------------------------------


def score_matrices(
    runs: Sequence[RunRecord],
    metric: str = "return",
    which: str = "final",
    tasks: Sequence[str] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """{algo: (num_runs x num_tasks)} for rliable, over `tasks` when given; seeds beyond the
    smallest count per task are dropped (rliable needs a rectangle), lowest seeds kept."""
    if which not in WHICH:
        raise ConfigError(f"roborl report: which={which!r}; accepted: {', '.join(WHICH)}.")
    per: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        values = r.final if which == "final" else r.best
        if metric in values and (tasks is None or r.env in tasks):
            per[r.algo][r.env].append((r.seed, values[metric]))
    if not per:
        have = sorted({m for r in runs for m in r.final})
        raise ConfigError(
            f"roborl report: no run logged the metric {metric!r}; available: "
            f"{', '.join(have) or '(none: no eval events)'}."
        )
    matrices, task_lists = {}, {}
    for algo, by_env in sorted(per.items()):
        envs = sorted(by_env)
        n = min(len(v) for v in by_env.values())
        cols = [[v for _, v in sorted(by_env[e])[:n]] for e in envs]
        matrices[algo] = np.array(cols, dtype=float).T
        task_lists[algo] = envs
    return matrices, task_lists


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
    try:
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
    finally:
        np.random.set_state(saved)
    return out


# -- the report's numbers -------------------------------------------------------------------


def _choose_metric(
    records: Sequence[RunRecord], metric: str | None, refs: Mapping[str, Any] | None
) -> str:
    if metric is None:
        if all("normalized_score" in r.final for r in records):
            return "normalized_score"
        if refs and any("normalized_return" in r.final for r in records):
            return "normalized_return"
        return "return"
    if metric not in METRICS:
        raise ConfigError(f"roborl report: metric={metric!r}; accepted: {', '.join(METRICS)}.")
    if metric == "normalized_return" and not refs:
        raise ConfigError(
            "roborl report: metric=normalized_return needs refs=FILE (each task's random and "
            "reference score)."
        )
    return metric


def _shared_tasks(
    records: Sequence[RunRecord], metric: str
) -> tuple[list[str], dict[str, list[str]]]:
    """Tasks every method has a score on, and for each method the tasks it lacks."""
    by_algo: dict[str, set[str]] = defaultdict(set)
    for r in records:
        by_algo.setdefault(r.algo, set())
        if metric in r.final:
            by_algo[r.algo].add(r.env)
    every = set().union(*by_algo.values()) if by_algo else set()
    shared = set.intersection(*by_algo.values()) if by_algo else set()
    missing = {a: sorted(every - have) for a, have in sorted(by_algo.items()) if every - have}
    return sorted(shared), missing


def _note(
    metric: str,
    tasks: Sequence[str],
    shared: Sequence[str],
    missing: Mapping[str, list[str]],
    refs_name: str | None,
    no_refs: Sequence[str],
) -> tuple[bool, str]:
    """(aggregate across tasks?, the sentences a reader needs to trust the aggregate table)."""
    all_tasks = sorted(set(tasks))
    lines = []
    if metric in NORMALISED:
        how = {
            "normalized_score": "D4RL-normalised scores the runs logged (0 = random, 100 = "
            "expert reference return)",
            "normalized_return": f"returns min-max normalised per task with the random and "
            f"reference scores of {refs_name} (0 = random, 100 = reference)",
        }.get(metric, f"`{metric}`, which is on the same scale in every task")
        ok = True
        lines.append(f"Aggregates are over runs x tasks of {how}.")
        if no_refs:
            lines.append(
                f"{', '.join(no_refs)} {'has' if len(no_refs) == 1 else 'have'} no entry in "
                f"{refs_name}, so {'it is' if len(no_refs) == 1 else 'they are'} reported "
                "per task only."
            )
    elif len(all_tasks) <= 1:
        ok = True
        lines.append(
            f"One task ({all_tasks[0] if all_tasks else '-'}): aggregates are over its runs, "
            f"in its own units (`{metric}`)."
        )
    else:
        ok = False
        lines.append(
            f"No aggregate across tasks: `{metric}` is not normalised (no run logged "
            "`normalized_score` and no refs=FILE gave each task's random and reference score), "
            "and a task whose returns are in the thousands would swamp one in the tens; "
            "the per-task results below compare methods task by task."
        )
    if ok and len(all_tasks) > 1:
        if not shared:
            ok = False
            lines.append(
                "No task is shared by every method, so there is no aggregate across tasks."
            )
        elif missing:
            lacks = "; ".join(f"{a} lacks {', '.join(t)}" for a, t in missing.items())
            lines.append(
                f"Methods are compared on the {len(shared)} task(s) they all share "
                f"({', '.join(shared)}); left out: {lacks}."
            )
    elif missing:
        lacks = "; ".join(f"{a} lacks {', '.join(t)}" for a, t in missing.items())
        lines.append(f"Not every method ran every task: {lacks}.")
    return ok, " ".join(lines)


def aggregate(
    runs: Sequence[RunRecord | str | Path],
    metric: str | None = None,
    which: Sequence[str] = WHICH,
    reps: int = 2000,
    ci: float = 0.95,
    seed: int = 0,
    refs: str | Path | Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """The Python API of `roborl report`: benchmarks call this on their run directories.

    Returns ``{"metric", "normalization", "note", "shared_tasks", "missing", "runs",
    "tasks", "aggregates": {which: {algo: {iqm|mean|median: {point, ci_low, ci_high}}}},
    "per_task_metric", "per_task_aggregates": {which: {task: {algo: ...}}}, "per_task",
    "extra": {metric: {which: ...}}, "x_labels"}``. `aggregates` is empty when the scores may
    not be aggregated across tasks (see the module docstring); `note` says why. `metric`
    defaults to `normalized_score` when every run logged it, else `normalized_return` when
    `refs` (a file or a mapping, see `load_refs`) covers a task, else `return`.
    """
    records = [
        r if isinstance(r, RunRecord) else load_run(r)
        for r in (runs if runs and isinstance(runs[0], RunRecord) else find_run_dirs(runs))
    ]
    refs_name = None
    if refs is not None and not isinstance(refs, Mapping):
        refs_name = Path(refs).name
        refs = load_refs(refs)
    elif refs is not None:
        refs_name = "the given refs"
    if refs:
        apply_refs(records, refs)
        if not any("normalized_return" in r.final for r in records):
            raise ConfigError(
                f"roborl report: {refs_name} names the tasks {', '.join(sorted(refs))}, but the "
                f"runs are on {', '.join(sorted({r.env for r in records}))}; a task is the env "
                "id in each run's summary.json."
            )
    metric = _choose_metric(records, metric, refs)
    tasks_all = sorted({r.env for r in records})
    no_refs = (
        [t for t in tasks_all if t not in refs] if refs and metric == "normalized_return" else []
    )
    shared, missing = _shared_tasks(records, metric)
    cross_ok, note = _note(metric, tasks_all, shared, missing, refs_name, no_refs)
    kind = {"normalized_score": "d4rl", "normalized_return": "refs"}.get(
        metric, "metric" if metric in NORMALISED else "none"
    )
    result: dict[str, Any] = {
        "metric": metric,
        "normalization": {"kind": kind, "refs": dict(refs) if refs else None},
        "note": note,
        "cross_task": cross_ok,
        "shared_tasks": shared,
        "missing": missing,
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
        "x_labels": {f"{r.algo}/{r.env}": r.x_label for r in records},
        "aggregates": {},
        "extra": {},
    }
    if cross_ok:
        for w in which:
            matrices, tasks = score_matrices(records, metric, w, shared)
            result["aggregates"][w] = interval_estimates(matrices, reps, ci, seed)
            result["tasks"] = tasks
            result.setdefault("matrices", {})[w] = {a: m.tolist() for a, m in matrices.items()}
    else:
        _, result["tasks"] = score_matrices(records, metric, WHICH[0])
    # Per task, always: in the primary metric where every run of the task has it.
    per_task_metric = metric if all(metric in r.final for r in records) else "return"
    result["per_task_metric"] = per_task_metric
    result["per_task_aggregates"] = {}
    for w in which:
        by_task: dict[str, Any] = {}
        for task in tasks_all:
            scored = [r for r in records if r.env == task and per_task_metric in r.final]
            if scored:  # a task whose runs all stopped before their first evaluation has none
                matrices, _ = score_matrices(scored, per_task_metric, w)
                by_task[task] = interval_estimates(matrices, reps, ci, seed)
        result["per_task_aggregates"][w] = by_task
    others = sorted({m for r in records for m in r.final} - {metric})
    for m in others:
        m_shared, _ = _shared_tasks(records, m)
        if not m_shared or (m not in NORMALISED and len(tasks_all) > 1):
            continue  # on raw scales, the per-task table shows it
        result["extra"][m] = {}
        for w in which:
            matrices, _ = score_matrices(records, m, w, m_shared)
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
    result["per_task"] = dict(per_task)
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
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (algo, env): x on the runs' clock, IQM across seeds and a bootstrap CI band.

    Runs are linearly interpolated onto a common grid up to the shortest run's last eval.
    """
    out: dict[tuple[str, str], dict[str, Any]] = {}
    rs = np.random.RandomState(seed)
    for key, group in _group(records).items():
        runs = [r for r in group if metric in r.curves]
        if not runs:
            continue
        curves = [r.curves[metric] for r in runs]
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
            "x_label": runs[0].x_label,
        }
    return out


def _trim_mean(x: np.ndarray) -> np.ndarray:
    from scipy.stats import trim_mean

    return trim_mean(x, 0.25, axis=0)

"""`roborl compare`'s sequential design: which runs each group needs, and AdaStop per task.

Split from `compare.py` (the command line): `run_comparison` lays out the jobs of each group
(a method's seeds, its run directory) and feeds their scores to one `TaskTest` per task, so
the design can be run with any scorer (`compare_runs.make_scorer` trains; tests fake it).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from roborl.plugins.report.compare import CompareOptions, Method


@dataclass(frozen=True)
class Job:
    """One run: which method on which task with which seed, and where it goes."""

    task: str
    method: str
    index: int  # the method's run number on this task, 0-based
    seed: int
    overrides: tuple[str, ...]
    run_dir: str


class TaskTest:
    """AdaStop on one task: the sequential test plus the scores and seeds it has seen."""

    def __init__(
        self, task: str, labels: Sequence[str], n: int, K: int, alpha: float, B: int, seed: int
    ) -> None:
        from roborl.plugins.report.adastop import AdaStop

        self.task, self.labels = task, list(labels)
        self.comparator = AdaStop(n=n, K=K, B=B, alpha=alpha, seed=seed)
        self.scores: dict[str, list[float]] = {lab: [] for lab in labels}
        self.seeds: dict[str, list[int]] = {lab: [] for lab in labels}
        self.groups = 0
        self.n = n

    @property
    def finished(self) -> bool:
        return bool(self.comparator.is_finished) or self.groups >= self.comparator.K

    def active(self) -> list[str]:
        """Methods still in an undecided pair (all of them before the first group)."""
        if self.groups == 0:
            return list(self.labels)
        current = self.comparator.current_comparisons
        idx = sorted({int(i) for pair in current for i in pair})
        return [self.labels[i] for i in idx]

    def add_group(self) -> None:
        """The test after a group: every active method has n more scores."""
        values = {lab: np.asarray(self.scores[lab], dtype=float) for lab in self.labels}
        for lab in self.active():
            need = (self.groups + 1) * self.n
            if len(values[lab]) != need:
                raise RuntimeError(f"{lab} on {self.task}: {len(values[lab])} scores, not {need}")
        self.comparator.partial_compare(values)
        self.groups += 1

    def decisions(self) -> list[dict[str, Any]]:
        """One row per pair: better / equal / undecided, with means and seed counts."""
        rows = []
        decided = self.comparator.decisions
        for i, j in itertools.combinations(range(len(self.labels)), 2):
            a, b = self.labels[i], self.labels[j]
            raw = decided.get((i, j), "continue")
            if raw == "larger":
                decision, better = f"{a} better", a
            elif raw == "smaller":
                decision, better = f"{b} better", b
            elif raw == "equal":
                decision, better = "equal", None
            else:
                decision, better = "undecided", None
            rows.append(
                {
                    "task": self.task,
                    "a": a,
                    "b": b,
                    "decision": decision,
                    "better": better,
                    "adastop": raw,
                    "mean_a": float(np.mean(self.scores[a])) if self.scores[a] else None,
                    "mean_b": float(np.mean(self.scores[b])) if self.scores[b] else None,
                    "seeds_a": len(self.scores[a]),
                    "seeds_b": len(self.scores[b]),
                }
            )
        return rows


ScoreFn = Callable[[Sequence[Job]], Sequence[float]]


def run_comparison(
    methods: Sequence[Method],
    tasks: Sequence[str],
    opts: CompareOptions,
    score: ScoreFn,
    out: Path | None = None,
    on_group: Callable[[list[TaskTest], int], None] | None = None,
) -> list[TaskTest]:
    """Groups of `opts.n` seeds per active method and task until every test is finished.

    `score(jobs)` runs the jobs (or looks up finished ones) and returns one score per job;
    `tasks` are the per-task overrides ("" for the config's own env). `on_group(tests, k)`
    sees the state after each group (`main` saves it there, so an interrupt loses no group).
    """
    labels = [m.label for m in methods]
    by_label = {m.label: m for m in methods}
    alpha_task = opts.alpha / len(tasks)
    tests = [
        TaskTest(t, labels, opts.n, opts.max_groups, alpha_task, opts.permutations, opts.seed)
        for t in tasks
    ]
    runs = Path(out or ".") / "runs"
    for k in range(opts.max_groups):
        pending = [t for t in tests if not t.finished]
        if not pending:
            break
        jobs: list[Job] = []
        for t in pending:
            for lab in t.active():
                m = labels.index(lab)
                for j in range(opts.n):
                    r = k * opts.n + j
                    seed = opts.seed + m + r * len(labels)
                    task_dir = _slug(t.task.split("=", 1)[-1] or "default")
                    jobs.append(
                        Job(
                            task=t.task,
                            method=lab,
                            index=r,
                            seed=seed,
                            overrides=(*by_label[lab].overrides, *([t.task] if t.task else [])),
                            run_dir=str(runs / task_dir / _slug(lab) / f"seed{seed}"),
                        )
                    )
        values = score(jobs)
        by_task = {t.task: t for t in tests}
        for job, v in zip(jobs, values, strict=True):
            test = by_task[job.task]
            test.scores[job.method].append(float(v))
            test.seeds[job.method].append(job.seed)
        for t in pending:
            t.add_group()
        if on_group is not None:
            on_group(tests, k + 1)
    return tests


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text) or "_"

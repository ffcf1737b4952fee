"""`roborl compare 'algo=A' 'algo=B' [shared overrides] n=5 max_groups=5 alpha=0.05`.

Answers "is A better than B, and how many seeds does that take?" with AdaStop (Mathieu, Le
Tour, Le Corff, Gilbert and Moulines, 2023, "AdaStop: adaptive statistical testing for sound
comparisons of Deep RL agents"), implemented in `roborl.plugins.report.adastop` (a port of
the authors' `adastop` package with its two-sided reference distribution corrected; that
module says why and how it was cross-checked). Seeds run in groups of `n` per method; after
each group the sequential permutation test (a group-sequential design with an alpha-spending
boundary of alpha * k / K, and a step-down over all pairs) decides the pairs it can, at a
family-wise error of at most `alpha`; it stops when every pair is decided or after
`max_groups` (AdaStop's K) groups, when the remaining pairs are accepted as equal (the design
without early acceptance).

roborl's choices around the test, each for a reason:
- Each method gets its own seeds (method m of M runs seeds seed+m, seed+m+M, ...): the
  permutation test assumes independent samples, and two identical configs run on the same
  seeds would give identical scores, which tests nothing.
- Several tasks: one AdaStop test per task at alpha / T (Bonferroni over the T tasks), so the
  family-wise error over every pair and task stays at most `alpha` while each task stops on
  its own; the paper compares on one environment at a time.
- The score of a run is its final evaluation return (`metric=`, `which=` choose another).
- Runs are ordinary run directories under `out/runs/`; running the same command again with
  the same `out=` reuses every finished run and replays the test, so an interrupted
  comparison continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.checkpoint import atomic_write_bytes, atomic_write_json
from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError

CITATION = (
    "Mathieu, Le Tour, Le Corff, Gilbert, Moulines (2023). AdaStop: adaptive statistical "
    "testing for sound comparisons of Deep RL agents. arXiv:2306.10882."
)
HIGHER_IS_BETTER = ("return", "normalized_score", "normalized_reward", "success_rate")
_LABEL = re.compile(r"^\s*([A-Za-z0-9_.+-]+):\s*(.*)$", re.S)


@dataclass
class CompareOptions:
    """`roborl compare` options; every other key=value is a config override for all methods."""

    n: int = field(default=5, metadata=rng(1, 1000, "seeds per method in each group"))
    max_groups: int = field(
        default=5,
        metadata=rng(1, 100, "AdaStop's K: at most this many groups (n*K seeds per method)"),
    )
    alpha: float = field(
        default=0.05,
        metadata=rng(1e-6, 0.5, "family-wise error: chance of declaring any false difference"),
    )
    seed: int = field(
        default=0, metadata=rng(0, None, "first seed; method m of M gets seed+m, seed+m+M, ...")
    )
    out: str = field(default="compare", metadata={"help": "output folder (runs, tables, report)"})
    jobs: int = field(
        default=1, metadata=rng(1, 256, "runs at a time (1: in this process; N: N processes)")
    )
    metric: str = field(
        default="return",
        metadata={"choices": list(HIGHER_IS_BETTER), "help": "score of a run (higher is better)"},
    )
    which: str = field(
        default="final",
        metadata={"choices": ["final", "best"], "help": "last evaluation, or best one"},
    )
    permutations: int = field(
        default=10_000, metadata=rng(100, None, "AdaStop's B: random permutations at most")
    )
    report: bool = field(
        default=True, metadata={"help": "also write out/report (roborl report on the runs)"}
    )
    reps: int = field(default=2000, metadata=rng(10, None, "bootstrap replications of the report"))
    refs: str | None = field(
        default=None,
        metadata={"help": "the report's refs=FILE (task -> {random, reference}) for a task list"},
    )


@dataclass(frozen=True)
class Method:
    label: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Job:
    """One run: which method on which task with which seed, and where it goes."""

    task: str
    method: str
    index: int  # the method's run number on this task, 0-based
    seed: int
    overrides: tuple[str, ...]
    run_dir: str


# -- the command line ------------------------------------------------------------------------


def compare_help() -> str:
    from roborl.core.help import field_lines, section

    return (
        "usage: roborl compare METHOD METHOD [METHOD ...] [key=value ...]\n\n"
        "Run two or more configs seed group by seed group until AdaStop (Mathieu et al.,\n"
        "2023) decides, for every pair, which is better or that they are equal, at a\n"
        "family-wise error of at most alpha. Writes out/compare.md and out/compare.json\n"
        "(decision table, seeds used, error level), the run directories under out/runs/\n"
        "and a roborl report of them under out/report/.\n\n"
        "A METHOD is one quoted argument: `algo=NAME`, or several overrides separated by\n"
        "spaces ('algo=sac algo.utd_ratio=4'), optionally named 'LABEL: overrides'.\n"
        "Every other key=value applies to all methods (env=, total_steps=, eval_episodes=...);\n"
        "env=a,b compares on each task (AdaStop per task at alpha/T, Bonferroni).\n\n"
        + section("Keys", field_lines(CompareOptions))
        + "\nExamples:\n"
        "  roborl compare algo=sac algo=dsac_t env=hopper total_steps=100000 n=5 max_groups=4\n"
        "  roborl compare 'a: algo=sac' 'b: algo=sac algo.utd_ratio=4' env=inverted_pendulum\n"
        "  roborl compare algo=sac algo=random env=inverted_pendulum,hopper total_steps=5000\n"
        "Seeds: at most n*K runs per method. A group can decide a pair only when the\n"
        "smallest p-value its permutations allow, 2/C(2n,n) in the first group, is within\n"
        "alpha*k/K: at alpha=0.05 n=5 (2/252) can stop after one group when K <= 6,\n"
        "n=6 (2/924) when K <= 23; n=4 (2/70) cannot before the second group.\n"
        "AdaStop needs a fixed K: running the same command with a larger max_groups= is a\n"
        "new test (give a new out=)."
    )


def _method_label(overrides: Sequence[str]) -> str:
    if len(overrides) == 1 and overrides[0].startswith("algo="):
        return overrides[0].split("=", 1)[1]
    return " ".join(overrides)


def parse_methods(args: Sequence[str]) -> tuple[list[Method], list[str]]:
    """METHOD arguments (an `algo=` override, a 'LABEL: ...' or anything with a space) and
    the shared `key=value` arguments."""
    methods: list[Method] = []
    shared: list[str] = []
    for arg in args:
        match = _LABEL.match(arg)
        label = None
        body = arg
        if match and "=" not in match.group(1):
            label, body = match.group(1), match.group(2)
        is_method = label is not None or any(c.isspace() for c in body.strip())
        is_method = is_method or body.startswith("algo=")
        if not is_method:
            shared.append(arg)
            continue
        try:
            overrides = tuple(shlex.split(body))
        except ValueError as exc:
            raise ConfigError(f"roborl compare: cannot split the method {arg!r} ({exc}).") from None
        if not overrides:
            raise ConfigError(f"roborl compare: the method {arg!r} has no overrides.")
        methods.append(Method(label or _method_label(overrides), overrides))
    if len(methods) < 2:
        raise ConfigError(
            f"roborl compare: give two or more methods (got {len(methods)}), each one quoted "
            "argument such as algo=sac or 'fast: algo=sac algo.utd_ratio=4'; roborl compare "
            "--help shows examples."
        )
    labels = [m.label for m in methods]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ConfigError(
            f"roborl compare: two methods are both named {dupes[0]!r}; name them, e.g. "
            f"'a: {' '.join(methods[labels.index(dupes[0])].overrides)}' and 'b: ...'."
        )
    return methods, shared


def parse_args(argv: Sequence[str]) -> tuple[CompareOptions, list[Method], list[str], list[str]]:
    """(options, methods, shared overrides without the task sweep, one override per task)."""
    from roborl.core.compose import override_key, parse_overrides, split_overrides

    methods, shared = parse_methods(argv)
    keys = {f.name for f in dataclasses.fields(CompareOptions)}
    own, rest = split_overrides(shared, keys, "compare")
    opts = build_config(CompareOptions, own)
    tasks: list[str] = []
    common: list[str] = []
    for arg, ov in zip(rest, parse_overrides(rest, "compare"), strict=True):
        key = override_key(ov)
        if ov.is_sweep_override():
            if key not in ("env", "env.id") or tasks:
                raise ConfigError(
                    f"roborl compare: {arg!r} is a sweep; only the task list may be one "
                    "(env=a,b or env.id=A,B). To compare values of another key, make each a "
                    "method: 'x1: algo=sac algo.lr=1e-3' 'x2: algo=sac algo.lr=3e-4'."
                )
            prefix = arg.split("=", 1)[0]
            tasks = [f"{prefix}={v}" for v in ov.sweep_string_iterator()]
        else:
            common.append(arg)
    for m in methods:
        for o in m.overrides:
            if o.split("=", 1)[0].lstrip("+~") == "seed":
                raise ConfigError(
                    f"roborl compare: method {m.label!r} sets {o!r}; seeds are compare's "
                    "to choose (seed= is the first one)."
                )
    return opts, methods, common, tasks or [""]


# -- the sequential test ------------------------------------------------------------------------


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


# -- running the jobs ---------------------------------------------------------------------------


def _finished(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status") == "finished"
    except (OSError, json.JSONDecodeError):
        return False


def run_job(overrides: Sequence[str], run_dir: str) -> None:
    """One training run as `roborl train` would compose it, in this process."""
    from roborl.core.compose import compose_dict
    from roborl.core.plugins import get_host
    from roborl.core.runner import Runner

    host = get_host()
    cfg = compose_dict(host, list(overrides), "compare")
    Runner(cfg, run_dir, host).execute()


def _job_overrides(job: Job, common: Sequence[str]) -> list[str]:
    return [*common, *job.overrides, f"seed={job.seed}", "progress=false"]


def make_scorer(common: Sequence[str], opts: CompareOptions) -> ScoreFn:
    """Run each job not finished yet (in-process, or `opts.jobs` processes) and read its
    score from its run directory."""
    from roborl.plugins.report.aggregate import load_run

    def score(jobs: Sequence[Job]) -> list[float]:
        todo = [j for j in jobs if not _finished(Path(j.run_dir))]
        for j in todo:
            if Path(j.run_dir).exists():  # an interrupted run of ours: start it again
                shutil.rmtree(j.run_dir)
        t0 = time.time()
        if opts.jobs == 1 or len(todo) <= 1:
            for j in todo:
                run_job(_job_overrides(j, common), j.run_dir)
                _progress(j, time.time() - t0, opts)
        else:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor, as_completed

            pool = ProcessPoolExecutor(opts.jobs, mp_context=mp.get_context("spawn"))
            try:
                futures = {
                    pool.submit(run_job, _job_overrides(j, common), j.run_dir): j for j in todo
                }
                for fut in as_completed(futures):
                    fut.result()
                    _progress(futures[fut], time.time() - t0, opts)
            except BaseException:  # Ctrl-C or a failed run: queued runs must not start
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown()
        values = []
        for j in jobs:
            rec = load_run(j.run_dir)
            vals = rec.final if opts.which == "final" else rec.best
            if opts.metric not in vals:
                raise ConfigError(
                    f"roborl compare: the run {j.run_dir} logged no {opts.metric!r} "
                    f"(it has: {', '.join(sorted(vals)) or 'no evaluation'}); choose metric= "
                    "from those, or make the runs evaluate (eval_every=)."
                )
            values.append(vals[opts.metric])
        return values

    return score


def _progress(job: Job, elapsed: float, opts: CompareOptions) -> None:
    from roborl.plugins.report.aggregate import load_run

    rec = load_run(job.run_dir)
    value = (rec.final if opts.which == "final" else rec.best).get(opts.metric)
    shown = "n/a" if value is None else f"{value:.2f}"
    task = job.task.split("=", 1)[-1] or rec.env
    print(
        f"roborl compare: {job.method} on {task} seed {job.seed}: {opts.which} {opts.metric} "
        f"{shown} ({elapsed:.0f}s)",
        flush=True,
    )


# -- outputs -------------------------------------------------------------------------------------


def summarise(
    tests: Sequence[TaskTest], methods: Sequence[Method], opts: CompareOptions, status: str
) -> dict[str, Any]:
    rows = [row for t in tests for row in t.decisions()]
    n_pairs = len(rows)
    return {
        "status": status,
        "test": "AdaStop (roborl.plugins.report.adastop; two-sided, see its docstring)",
        "citation": CITATION,
        "family_wise_error": opts.alpha,
        "alpha_per_task": opts.alpha / len(tests),
        "pairs": n_pairs,
        "n": opts.n,
        "max_groups": opts.max_groups,
        "permutations": opts.permutations,
        "score": f"{opts.which} {opts.metric}",
        "methods": {m.label: list(m.overrides) for m in methods},
        "groups_used": {t.task or "default": t.groups for t in tests},
        "decisions": rows,
        "seeds": {t.task or "default": t.seeds for t in tests},
        "scores": {t.task or "default": t.scores for t in tests},
    }


def decision_table(result: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["task", "A", "B", "decision", "mean A (seeds)", "mean B (seeds)"]
    rows = []
    for d in result["decisions"]:
        fmt = lambda v, n: "-" if v is None else f"{v:.2f} ({n})"  # noqa: E731
        rows.append(
            [
                d["task"].split("=", 1)[-1] or "default",
                d["a"],
                d["b"],
                d["decision"],
                fmt(d["mean_a"], d["seeds_a"]),
                fmt(d["mean_b"], d["seeds_b"]),
            ]
        )
    return header, rows


def status_sentence(result: Mapping[str, Any]) -> str:
    groups = result["groups_used"]
    most = max(groups.values()) if groups else 0
    tasks = len(groups)
    per_task = (
        f" (alpha/{tasks} = {result['alpha_per_task']:.4g} per task, Bonferroni)"
        if tasks > 1
        else ""
    )
    state = {
        "decided": f"every pair decided after {most} of {result['max_groups']} group(s)"
        + (" (stopped early)" if most < result["max_groups"] else ""),
        "budget spent": f"budget spent: all {result['max_groups']} groups ran",
        "interrupted": f"interrupted after {most} group(s); run the same command again to continue",
        "running": f"{most} group(s) done so far (if no roborl compare is running on this "
        "out=, run the same command again to continue)",
    }[result["status"]]
    return (
        f"AdaStop, {result['score']}, groups of n={result['n']} seeds per method, at most "
        f"K={result['max_groups']} groups: {state}. Family-wise error at most "
        f"alpha={result['family_wise_error']:g} over all {result['pairs']} pair(s){per_task}. "
        "'equal' means no difference was found within the budget (AdaStop accepts equality at "
        "its last group); 'undecided' pairs were still running. "
        f"{result['citation']}"
    )


def to_markdown(result: Mapping[str, Any]) -> str:
    header, rows = decision_table(result)
    lines = [
        "# roborl compare\n",
        status_sentence(result) + "\n",
        "## Decisions\n",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *["| " + " | ".join(r) + " |" for r in rows],
        "",
        "## Methods\n",
        *[f"- **{lab}**: `{' '.join(ov)}`" for lab, ov in result["methods"].items()],
        "",
        "## Seeds used\n",
    ]
    for task, by_method in result["seeds"].items():
        for lab, seeds in by_method.items():
            lines.append(f"- {task.split('=', 1)[-1]} / {lab}: {len(seeds)} seeds {seeds}")
    return "\n".join(lines) + "\n"


def _spec(
    methods: Sequence[Method], common: Sequence[str], tasks: Sequence[str], opts: CompareOptions
) -> dict[str, Any]:
    """What fixes the runs and the test; `out=` may be reused only with the same spec."""
    keep = ("n", "max_groups", "alpha", "seed", "metric", "which", "permutations")
    return {
        "methods": {m.label: list(m.overrides) for m in methods},
        "common": list(common),
        "tasks": list(tasks),
        **{k: getattr(opts, k) for k in keep},
    }


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(compare_help())
        return 0
    opts, methods, common, tasks = parse_args(argv)
    from roborl.core.compose import compose_dict
    from roborl.core.plugins import get_host

    host = get_host()
    for m in methods:  # every config composes before the first run starts
        for t in tasks:
            cfg = compose_dict(host, [*common, *m.overrides, *([t] if t else [])], "compare")
    if tasks == [""]:  # no task list: the one env every method runs, named by its id
        env_id = (cfg.get("env") or {}).get("id")
        tasks = [f"env.id={env_id}"] if env_id else [""]
    out = Path(opts.out)
    spec = _spec(methods, common, tasks, opts)
    state_file = out / "compare.json"
    if state_file.exists():
        try:
            saved = json.loads(state_file.read_text()).get("spec")
        except json.JSONDecodeError:
            saved = None
        if saved != json.loads(json.dumps(spec)):
            raise ConfigError(
                f"roborl compare: out={str(out)!r} holds a comparison of another setup; give "
                "another out= (or delete that folder) to start this one."
            )
    out.mkdir(parents=True, exist_ok=True)

    def write(tests: Sequence[TaskTest], status: str) -> dict[str, Any]:
        result = {"spec": spec, **summarise(tests, methods, opts, status)}
        atomic_write_json(state_file, result)
        atomic_write_bytes(out / "compare.md", to_markdown(result).encode())
        return result

    last: list[TaskTest] = []

    def on_group(tests: list[TaskTest], k: int) -> None:
        last[:] = tests
        done = all(t.finished for t in tests)
        write(tests, _status(tests) if done else "running")
        for t in tests:
            said = "; ".join(f"{d['a']} vs {d['b']}: {d['decision']}" for d in t.decisions())
            name = t.task.split("=", 1)[-1] or "default"
            print(f"roborl compare: after group {k}, {name}: {said}", flush=True)

    try:
        tests = run_comparison(methods, tasks, opts, make_scorer(common, opts), out, on_group)
    except KeyboardInterrupt:
        if last:
            write(last, "interrupted")
        raise
    result = write(tests, _status(tests))
    if opts.report:
        from roborl.plugins.report.cli import write_report

        header, rows = decision_table(result)
        write_report(
            [out / "runs"],
            out / "report",
            metric=None,
            reps=opts.reps,
            seed=opts.seed,
            refs=opts.refs,
            md_sections=[("AdaStop decisions", to_markdown(result).split("## Decisions\n", 1)[1])],
            html_sections=[("AdaStop decisions", header, rows, status_sentence(result))],
        )
    print(to_markdown(result))
    print(
        f"roborl compare: wrote {out / 'compare.md'}, {state_file}"
        + (f" and {out / 'report' / 'report.html'}" if opts.report else ""),
        file=sys.stderr,
    )
    return 0


def _status(tests: Sequence[TaskTest]) -> str:
    undecided = any(d["adastop"] == "continue" for t in tests for d in t.decisions())
    if undecided:
        return "interrupted"
    early = all(t.comparator.is_finished and t.groups < t.comparator.K for t in tests)
    budget = any(t.groups >= t.comparator.K for t in tests)
    return "budget spent" if budget and not early else "decided"


__all__ = ["CompareOptions", "Method", "TaskTest", "main", "parse_methods", "run_comparison"]

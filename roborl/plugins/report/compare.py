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

This module is the command line (options, METHOD parsing, `main`); the design is in
`compare_sequential.py`, the runs in `compare_runs.py`, the results in `compare_output.py`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roborl.core.checkpoint import atomic_write_bytes, atomic_write_json
from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError
from roborl.plugins.report.compare_output import (
    decision_table,
    status_sentence,
    summarise,
    to_markdown,
)
from roborl.plugins.report.compare_runs import make_scorer
from roborl.plugins.report.compare_sequential import TaskTest, run_comparison

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


# -- the command line ------------------------------------------------------------------------


def compare_help() -> str:
    from roborl.core.cli import logs
    from roborl.core.help import field_lines, section

    return (
        "usage: roborl compare METHOD METHOD [METHOD ...] [key=value ...]\n\n"
        "Run two or more configs seed group by seed group until AdaStop (Mathieu et al.,\n"
        "2023) decides, for every pair, which is better or that they are equal, at a\n"
        "family-wise error of at most alpha. Writes out/compare.md and out/compare.json\n"
        "(decision table, seeds used, error level), the run directories under out/runs/\n"
        "and a roborl report of them under out/report/.\n\n"
        "A METHOD is one quoted argument: `algo=NAME`, or several overrides separated by\n"
        "spaces ('algo=sac utd_ratio=4'), optionally named 'LABEL: overrides'.\n"
        "Every other key=value applies to all methods (env=, total_steps=, eval_episodes=...);\n"
        "env=a,b compares on each task (AdaStop per task at alpha/T, Bonferroni).\n\n"
        + section("Keys", field_lines(CompareOptions))
        + "\nExamples:\n"
        "  roborl compare algo=sac algo=dsac_t env=hopper total_steps=100000 n=5 max_groups=4\n"
        "  roborl compare 'a: algo=sac' 'b: algo=sac utd_ratio=4' env=inverted_pendulum\n"
        "  roborl compare algo=sac algo=random env=inverted_pendulum,hopper total_steps=5000\n"
        "Seeds: at most n*K runs per method. A group can decide a pair only when the\n"
        "smallest p-value its permutations allow, 2/C(2n,n) in the first group, is within\n"
        "alpha*k/K: at alpha=0.05 n=5 (2/252) can stop after one group when K <= 6,\n"
        "n=6 (2/924) when K <= 23; n=4 (2/70) cannot before the second group.\n"
        "AdaStop needs a fixed K: running the same command with a larger max_groups= is a\n"
        "new test (give a new out=).\n" + logs.HELP
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
            "argument such as algo=sac or 'fast: algo=sac utd_ratio=4'; roborl compare "
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


# -- the run --------------------------------------------------------------------------------------


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

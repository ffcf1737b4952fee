"""`roborl tune [key=value ...] OVERRIDES...`: a Hydra-style grid sweep run as Ray Tune trials
(`sampler=optuna`: an Optuna study that prunes, `roborl.plugins.ray.optuna_sweep`).

Each grid point is one Tune trial that runs `roborl train OVERRIDES` in its own process, so
the run is exactly the one `roborl train` would make (Hydra composition, plugins, run
directory), only scheduled by Ray Tune onto whichever node of the cluster has the resources
(`cpus_per_trial=`, `gpus_per_trial=`). Overrides use Hydra's sweep grammar, parsed by
Hydra's own parser as in `roborl train -m`: ``seed=0,1,2 algo.actor_lr=3e-4,1e-3`` is a
6-trial grid, ``seed=range(5)`` and ``algo=glob(sb3/*)`` expand too, brackets keep a list
whole (``algo.hidden_sizes=[64,64]``), and ``interval(lo, hi)`` becomes a Ray Tune sampler.
Run directories go under `out=` (on a real cluster: a path every node shares), one per
trial, and `roborl report OUT` reads them directly.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roborl.core.config import rng
from roborl.core.errors import ConfigError


@dataclass
class TuneOptions:
    """`roborl tune` keys; every other key=value is a `roborl train` override (sweepable)."""

    out: str = field(default="runs/tune", metadata={"help": "folder for the run directories"})
    address: str | None = field(
        default=None,
        metadata={"help": "Ray cluster: auto or ray://HOST:10001 (null: a local Ray)"},
    )
    cpus_per_trial: float = field(
        default=1.0, metadata=rng(0.0, None, "CPUs Ray reserves per trial")
    )
    gpus_per_trial: float = field(
        default=0.0, metadata=rng(0.0, None, "GPUs Ray reserves per trial")
    )
    max_concurrent: int = field(
        default=0, metadata=rng(0, None, "trials at a time (0: as resources allow; optuna: 1)")
    )
    num_samples: int = field(
        default=1, metadata=rng(1, None, "samples per grid point of the interval() keys")
    )
    sampler: str = field(
        default="ray",
        metadata={
            "choices": ["ray", "optuna"],
            "help": "ray: Ray Tune trials; optuna: an Optuna study that prunes",
        },
    )
    # sampler=optuna only (roborl.plugins.ray.optuna_sweep)
    n_trials: int = field(default=20, metadata=rng(1, None, "optuna: trials to run"))
    metric: str = field(
        default="eval/return_mean",
        metadata={"help": "optuna: the eval/... metric reported, pruned on and optimised"},
    )
    direction: str = field(
        default="maximize",
        metadata={"choices": ["maximize", "minimize"], "help": "optuna: of metric"},
    )
    optuna_sampler: str = field(
        default="tpe", metadata={"choices": ["tpe", "random"], "help": "optuna: the sampler"}
    )
    sampler_seed: int | None = field(
        default=None, metadata={"help": "optuna: the sampler's seed (null: random)"}
    )
    pruner: str = field(
        default="median",
        metadata={
            "choices": ["median", "hyperband", "successive_halving", "none"],
            "help": "optuna: the pruner asked after each evaluation",
        },
    )
    startup_trials: int = field(
        default=5, metadata=rng(0, None, "optuna: median pruner: trials finished before pruning")
    )
    warmup_steps: int = field(
        default=0, metadata=rng(0, None, "optuna: median pruner: steps before a trial is pruned")
    )
    study: str = field(default="roborl", metadata={"help": "optuna: the study's name"})
    storage: str | None = field(
        default=None,
        metadata={"help": "optuna: journal file or RDB URL (null: OUT/optuna.journal)"},
    )


RAY_ONLY = ("address", "cpus_per_trial", "gpus_per_trial", "num_samples")
OPTUNA_ONLY = (
    "n_trials", "metric", "direction", "optuna_sampler", "sampler_seed", "pruner",
    "startup_trials", "warmup_steps", "study", "storage",
)  # fmt: skip


# The argparse spellings of the first release, kept for one more (deprecation warning).
DEPRECATED = {
    "--out": "out", "--address": "address", "--cpus-per-trial": "cpus_per_trial",
    "--gpus-per-trial": "gpus_per_trial", "--max-concurrent": "max_concurrent",
    "--num-samples": "num_samples",
}  # fmt: skip


def _group_options(key: str) -> list[str]:
    """Options a `glob()` over config group `key` may match (YAML presets and algorithms)."""
    from roborl.core.compose import group_options
    from roborl.core.plugins import get_host

    host = get_host()
    options = set(group_options(host, key))
    if key == "algo":
        options |= set(host.registry.algorithms)
    return sorted(options)


def parse_sweep(
    overrides: list[str],
) -> tuple[list[list[str]], dict[str, tuple[float, float, bool]]]:
    """Hydra sweep syntax -> (grid points, sampled keys).

    Comma lists, `choice()`, `range()` and `glob()` expand to a cartesian grid, each point a
    list of `key=value`; `interval(lo, hi)` (with `tag(log, ...)` for a log scale) is sampled
    by Ray Tune, `num_samples=` times per grid point: `{key: (lo, hi, log)}`.
    """
    from hydra.core.override_parser.types import Glob

    from roborl.core.compose import override_key, parse_overrides

    axes: list[list[str]] = []
    sampled: dict[str, tuple[float, float, bool]] = {}
    for arg, ov in zip(overrides, parse_overrides(overrides, "tune"), strict=True):
        prefix = arg.split("=", 1)[0]
        if not ov.is_sweep_override():
            axes.append([arg])
        elif ov.is_interval_sweep():
            value = ov.value()
            sampled[prefix] = (float(value.start), float(value.end), "log" in value.tags)
        elif isinstance(ov.value(), Glob):
            options = ov.value().filter(_group_options(override_key(ov)))
            if not options:
                raise ConfigError(f"roborl tune: {arg!r} matches no {override_key(ov)} option.")
            axes.append([f"{prefix}={o}" for o in options])
        else:
            axes.append([f"{prefix}={v}" for v in ov.sweep_string_iterator()])
    return [list(p) for p in itertools.product(*axes)] or [[]], sampled


def expand_grid(overrides: list[str]) -> list[list[str]]:
    """The grid points of `overrides`; `interval()` is refused here (it needs a sampler)."""
    points, sampled = parse_sweep(overrides)
    if sampled:
        raise ConfigError(
            f"roborl tune: {', '.join(sampled)} use interval(), which Ray Tune samples; "
            "run it through `roborl tune` (with num_samples=N), not as a grid."
        )
    return points


def _slug(point: list[str]) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "_".join(point))[:120] or "default"


def _trial(config: dict[str, Any]) -> None:
    from ray import tune

    point = config["point"]
    sampled = [f"{k}={v!r}" for k, v in sorted((config.get("sampled") or {}).items())]
    run_dir = Path(point["run_dir"] + (f"_{_slug(sampled)}" if sampled else ""))
    cmd = [sys.executable, "-m", "roborl.core.cli", "train", *point["overrides"], *sampled]
    cmd += [f"hydra.run.dir={run_dir}", "progress=false"]
    env = {**os.environ, "RAY_ADDRESS": ""}  # a nested distributed=ray run starts its own
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    metrics = {
        "returncode": proc.returncode,
        "final_eval_return": summary.get("final_eval_return"),
        "best_eval_return": summary.get("best_eval_return"),
        "run_dir": str(run_dir),
    }
    if proc.returncode != 0:
        (run_dir.parent / f"{run_dir.name}.stderr.txt").write_text(proc.stderr[-20000:])
    tune.report(metrics)


def run_sweep(
    overrides: list[str],
    out: str | Path,
    address: str | None = None,
    cpus_per_trial: float = 1.0,
    gpus_per_trial: float = 0.0,
    max_concurrent: int = 0,
    num_samples: int = 1,
) -> list[dict[str, Any]]:
    """Run the sweep on Ray Tune; returns one result dict per trial (in grid order)."""
    from roborl.core.compose import compose
    from roborl.core.plugins import get_host

    out = Path(out).resolve()
    points, sampled = parse_sweep(overrides)
    # A typo fails here, once, with roborl's error, not in every trial (nor after Ray starts).
    first = [f"{k}={lo}" for k, (lo, _hi, _log) in sampled.items()]
    compose(get_host(), [*points[0], *first], "tune")
    import ray
    from ray import tune

    out.mkdir(parents=True, exist_ok=True)
    started = False
    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if address:
            ray.init(address=address, include_dashboard=False, logging_level="WARNING")
        else:
            ray.init(include_dashboard=False, logging_level="WARNING")
        started = True
    try:
        space = [
            {"overrides": p, "run_dir": str(out / f"{i}_{_slug(p)}")} for i, p in enumerate(points)
        ]
        tuner = tune.Tuner(
            tune.with_resources(_trial, {"cpu": cpus_per_trial, "gpu": gpus_per_trial}),
            param_space={
                "point": tune.grid_search(space),
                "sampled": {
                    k: (tune.loguniform(lo, hi) if log else tune.uniform(lo, hi))
                    for k, (lo, hi, log) in sampled.items()
                },
            },
            tune_config=tune.TuneConfig(
                max_concurrent_trials=max_concurrent or None,
                num_samples=num_samples if sampled else 1,
            ),
            run_config=tune.RunConfig(
                name="roborl_tune", storage_path=str(out / "_tune"), verbose=0
            ),
        )
        grid = tuner.fit()
        results = [dict(r.metrics or {}) for r in grid]
    finally:
        if started:
            ray.shutdown()
    order = {s["run_dir"]: i for i, s in enumerate(space)}

    def rank(result: dict[str, Any]) -> tuple[int, str]:
        run_dir = str(result.get("run_dir", ""))
        base = next((d for d in order if run_dir == d or run_dir.startswith(d + "_")), "")
        return order.get(base, 1 << 30), run_dir

    return sorted(results, key=rank)


def tune_help() -> str:
    from roborl.core.cli import logs
    from roborl.core.help import field_lines, section

    return (
        "usage: roborl tune [key=value ...] TRAIN_OVERRIDES...\n\n"
        "A sweep of `roborl train` runs as Ray Tune trials (local or cluster). The overrides\n"
        "take every `roborl train` key (roborl train --help lists them) in Hydra's sweep\n"
        "syntax: seed=0,1,2, seed=range(5), algo=glob(sb3/*), choice(a,b), and\n"
        "algo.actor_lr=interval(1e-4,1e-3) or tag(log,interval(1e-4,1e-3)), sampled by Ray\n"
        "Tune num_samples times per grid point.\n\n"
        "sampler=optuna runs an Optuna study instead (n_trials trials; lists, choice() and\n"
        "glob() are categorical, range() integer, interval() float): each trial reports its\n"
        "evaluations' metric and the pruner stops unpromising trials early (their summary.json\n"
        "says status: stopped, stop_reason: pruned by Optuna ...); the study is kept in\n"
        "OUT/optuna.journal, so the same command again continues it.\n\n"
        + section("Keys", field_lines(TuneOptions))
        + "\nExample: roborl tune out=runs/tune cpus_per_trial=1 seed=0,1,2 algo=sac,dsac_t\n"
        "         roborl tune sampler=optuna n_trials=30 out=runs/opt "
        "'algo.actor_lr=tag(log,interval(1e-4,3e-3))'\n"
        "Older spellings still work for one release: --out DIR, --address A, "
        "--cpus-per-trial N,\n--gpus-per-trial N, --max-concurrent N, --num-samples N.\n"
        + logs.HELP
    )


def parse_args(argv: list[str]) -> tuple[TuneOptions, list[str]]:
    """The command's own keys and the `roborl train` overrides to sweep."""
    from roborl.core.cli import command_options, deprecated_flags

    args = deprecated_flags(argv, DEPRECATED, "tune")
    return command_options(TuneOptions, args, "tune", passthrough=None)


def main(argv: list[str]) -> int:
    """sweep `roborl train` runs as Ray Tune trials (a,b / range() / glob() / interval())"""
    if any(a in ("-h", "--help") for a in argv):
        print(tune_help())
        return 0
    opts, overrides = parse_args(argv)
    _refuse_other_sampler_keys(opts)
    if opts.sampler == "optuna":
        return _main_optuna(opts, overrides)
    results = run_sweep(
        overrides,
        opts.out,
        opts.address,
        opts.cpus_per_trial,
        opts.gpus_per_trial,
        opts.max_concurrent,
        opts.num_samples,
    )
    failed = [r for r in results if r.get("returncode") != 0]
    for r in results:
        print(
            f"  {r.get('run_dir')}: final eval return {r.get('final_eval_return')}"
            + ("" if r.get("returncode") == 0 else f" (FAILED, exit {r.get('returncode')})")
        )
    print(
        f"roborl tune: {len(results) - len(failed)}/{len(results)} trials finished; "
        f"report with: roborl report {opts.out}"
    )
    return 1 if failed else 0


def _refuse_other_sampler_keys(opts: TuneOptions) -> None:
    """A key of the other sampler is a mistake to name, not to ignore silently."""
    import dataclasses

    defaults = TuneOptions()
    other = RAY_ONLY if opts.sampler == "optuna" else OPTUNA_ONLY
    given = [
        f.name
        for f in dataclasses.fields(TuneOptions)
        if f.name in other and getattr(opts, f.name) != getattr(defaults, f.name)
    ]
    if given:
        owner = "ray" if opts.sampler == "optuna" else "optuna"
        raise ConfigError(
            f"roborl tune: {', '.join(given)} belong(s) to sampler={owner}, but "
            f"sampler={opts.sampler}; drop them or give sampler={owner} "
            "(roborl tune --help lists which key belongs to which)."
        )


def _main_optuna(opts: TuneOptions, overrides: list[str]) -> int:
    from roborl.plugins.ray.optuna_sweep import run_optuna_sweep

    records = run_optuna_sweep(
        overrides,
        opts.out,
        n_trials=opts.n_trials,
        metric=opts.metric,
        direction=opts.direction,
        sampler=opts.optuna_sampler,
        sampler_seed=opts.sampler_seed,
        pruner=opts.pruner,
        startup_trials=opts.startup_trials,
        warmup_steps=opts.warmup_steps,
        study=opts.study,
        storage=opts.storage,
        max_concurrent=opts.max_concurrent,
    )
    for r in records:
        print(f"  trial {r['trial']} {r['state']}: {r['metric']} {r['value']} ({r['run_dir']})")
    counts = {s: sum(r["state"] == s for r in records) for s in ("COMPLETE", "PRUNED", "FAIL")}
    complete = [r for r in records if r["state"] == "COMPLETE"]
    if complete:
        pick = max if opts.direction == "maximize" else min
        best = pick(complete, key=lambda r: r["value"])
        print(f"  best of these: trial {best['trial']} {best['params']} ({best['run_dir']})")
    print(
        f"roborl tune: {counts['COMPLETE']} complete, {counts['PRUNED']} pruned, "
        f"{counts['FAIL']} failed of {len(records)} trials (study {opts.study!r}); "
        f"report with: roborl report {opts.out}"
    )
    return 1 if counts["FAIL"] else 0

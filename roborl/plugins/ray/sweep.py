"""`roborl tune [options] OVERRIDES...`: a Hydra-style grid sweep run as Ray Tune trials.

Each grid point is one Tune trial that runs `roborl train OVERRIDES` in its own process, so
the run is exactly the one `roborl train` would make (Hydra composition, plugins, run
directory), only scheduled by Ray Tune onto whichever node of the cluster has the resources
(`--cpus-per-trial`, `--gpus-per-trial`). Comma lists sweep as in `roborl train -m`:
``seed=0,1,2 algo.lr=3e-4,1e-3`` is a 6-trial grid; brackets keep a list whole
(``algo.hidden_sizes=[64,64]``). Run directories go under `--out` (on a real cluster: a path
every node shares), one per trial, and `roborl report --out ...` reads them directly.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from roborl.core.errors import ConfigError


def split_top_level(value: str) -> list[str]:
    """Split `a,b,[c,d]` on commas outside brackets/quotes: ['a', 'b', '[c,d]']."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in value:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def expand_grid(overrides: list[str]) -> list[list[str]]:
    """The cartesian product of comma-list overrides, each point a list of `key=value`."""
    axes = []
    for ov in overrides:
        if "=" not in ov:
            raise ConfigError(f"roborl tune: expected key=value, got {ov!r}.")
        key, value = ov.split("=", 1)
        axes.append([f"{key}={v}" for v in split_top_level(value)])
    return [list(p) for p in itertools.product(*axes)] or [[]]


def _slug(point: list[str]) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "_".join(point))[:120] or "default"


def _trial(config: dict[str, Any]) -> None:
    from ray import tune

    point = config["point"]
    run_dir = Path(point["run_dir"])
    cmd = [sys.executable, "-m", "roborl.core.cli", "train", *point["overrides"]]
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
) -> list[dict[str, Any]]:
    """Run the grid on Ray Tune; returns one result dict per trial (in grid order)."""
    import ray
    from ray import tune

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    points = expand_grid(overrides)
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
            param_space={"point": tune.grid_search(space)},
            tune_config=tune.TuneConfig(max_concurrent_trials=max_concurrent or None),
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
    return sorted(results, key=lambda r: order.get(r.get("run_dir", ""), 1 << 30))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="roborl tune",
        description="Grid sweep of `roborl train` runs as Ray Tune trials (local or cluster).",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides; a,b,c sweeps")
    parser.add_argument("--out", default="runs/tune", help="folder for the run directories")
    parser.add_argument("--address", default=None, help="Ray cluster: auto or ray://HOST:10001")
    parser.add_argument("--cpus-per-trial", type=float, default=1.0)
    parser.add_argument("--gpus-per-trial", type=float, default=0.0)
    parser.add_argument("--max-concurrent", type=int, default=0, help="0: as resources allow")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    results = run_sweep(
        args.overrides,
        args.out,
        args.address,
        args.cpus_per_trial,
        args.gpus_per_trial,
        args.max_concurrent,
    )
    failed = [r for r in results if r.get("returncode") != 0]
    for r in results:
        print(
            f"  {r.get('run_dir')}: final eval return {r.get('final_eval_return')}"
            + ("" if r.get("returncode") == 0 else f" (FAILED, exit {r.get('returncode')})")
        )
    print(
        f"roborl tune: {len(results) - len(failed)}/{len(results)} trials finished; "
        f"report with: roborl report {args.out}"
    )
    return 1 if failed else 0

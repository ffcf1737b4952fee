"""The README's default run (`roborl train`, nothing else) over many seeds.

Why: the first run a newcomer makes has to learn every time, not on a lucky seed. This script
runs exactly what `make train` runs, `roborl train seed=S`, for each seed (several at once, one
torch thread each), and records per seed the final eval return, the eval curve and the wall
time. Extra Hydra overrides after `--` let the same harness compare candidate settings.

    python benchmarks/default_run.py --seeds 10 --jobs 2 \
        --out benchmarks/results/default_run.json
    python benchmarks/default_run.py --seeds 10 --jobs 16 --label lr1e-3 -- algo.actor_lr=1e-3

Output: JSON with the machine, the command, per-seed results, how many seeds reached
`--threshold` (950 by default: the pendulum balanced for at least 95% of the episode) and
the median wall time; a Markdown table beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def _run_one(seed: int, overrides: list[str], root: Path) -> dict:
    run_dir = root / f"s{seed}"
    cmd = [
        sys.executable,
        "-c",
        "import sys; from roborl.core.cli import main; sys.exit(main())",
        "train",
        f"seed={seed}",
        "progress=false",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"seed": seed, "error": proc.stderr[-2000:], "wall_time_s": wall}
    curve = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "eval/return_mean" in row:
            curve.append([row["step"], round(row["eval/return_mean"], 1)])
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "seed": seed,
        "final_eval_return": summary["final_eval_return"],
        "wall_time_s": round(wall, 1),
        "eval_curve": curve,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    parser.add_argument("--threshold", type=float, default=950.0)
    parser.add_argument("--label", default="default")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (and .md beside it)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides after --")
    args = parser.parse_args()

    seeds = range(args.first_seed, args.first_seed + args.seeds)
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="roborl_default_run_") as tmp,
        ThreadPoolExecutor(args.jobs) as pool,
    ):
        runs = list(pool.map(lambda s: _run_one(s, args.overrides, Path(tmp)), seeds))
    finals = [r["final_eval_return"] for r in runs if "final_eval_return" in r]
    walls = [r["wall_time_s"] for r in runs if "final_eval_return" in r]
    result = {
        "label": args.label,
        "command": "roborl train seed=S " + " ".join(args.overrides),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "jobs_at_once": args.jobs,
        },
        "threshold": args.threshold,
        "reached": sum(f >= args.threshold for f in finals),
        "seeds": len(runs),
        "errors": sum("error" in r for r in runs),
        "final_returns": finals,
        "median_wall_time_s": statistics.median(walls) if walls else None,
        "total_time_s": round(time.perf_counter() - started, 1),
        "runs": runs,
    }
    print(
        f"{args.label}: {result['reached']}/{len(runs)} seeds reached {args.threshold:g}; "
        f"finals {finals}; median wall {result['median_wall_time_s']} s"
    )
    for r in runs:
        if "error" in r:
            print(f"seed {r['seed']} failed:\n{r['error']}", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        rows = "\n".join(
            f"| {r['seed']} | {r.get('final_eval_return', 'error')} | {r['wall_time_s']} |"
            for r in runs
        )
        args.out.with_suffix(".md").write_text(
            f"# Default run over {len(runs)} seeds\n\n"
            f"`{result['command']}` ({args.jobs} at once, {os.cpu_count()} CPUs, "
            f"{platform.platform()}).\n\n"
            f"{result['reached']} of {len(runs)} seeds reached a final eval return "
            f">= {args.threshold:g}; median wall time {result['median_wall_time_s']} s.\n\n"
            f"| seed | final eval return | wall time (s) |\n|---|---|---|\n{rows}\n"
        )


if __name__ == "__main__":
    main()

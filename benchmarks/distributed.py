"""Env steps/s with 1, 2 and 4 Ray rollout workers against the single-process runner.

Two modes, each on the same machine in the same invocation (timings elsewhere are noise):
- `collect`: learning_starts = total_steps, so no updates happen: raw collection throughput
  of each setup, including Ray's transport of the transitions to the learner;
- `train`: SAC with utd_ratio 1 after `learning_starts`; on a small machine the learner's
  updates bound the rate, so more workers mostly add policy lag, not speed.
Also the per-worker overhead: actor start-up time and the round trip of a 1-step request.

On a 2-core machine expect little or no gain: the learner and the workers share two cores.

    .venv/bin/python benchmarks/distributed.py [--env HalfCheetah-v5] [--steps 20000]

Writes benchmarks/results/distributed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import ray
import torch

from roborl.core.plugins import get_host
from roborl.core.runner import Runner
from roborl.plugins.ray.loop import RolloutWorker

RESULTS = Path(__file__).parent / "results"


def _cfg(env: str, steps: int, learning_starts: int, workers: int | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "algo": {"name": "sac"},
        "env": {"id": env},
        "logger": {"name": "jsonl"},
        "seed": 0,
        "total_steps": steps,
        "learning_starts": learning_starts,
        "eval_every": 10 * steps,
        "eval_episodes": 1,
        "checkpoint_every": 10 * steps,
        "log_every": max(steps // 4, 1),
        "progress": False,
    }
    if workers:
        cfg["distributed"] = "ray"
        cfg["ray"] = {"num_workers": workers, "rollout_steps": 100, "sync_every": 1000}
    return cfg


def _run(cfg: dict[str, Any]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        summary = Runner(cfg, d, get_host()).execute()
        wall = time.perf_counter() - t0
        rates = [
            r["time/sps"]
            for r in map(json.loads, (Path(d) / "metrics.jsonl").read_text().splitlines())
            if "time/sps" in r
        ]
    # the first log window includes actor start-up; the steady rate is the median of the rest
    steady = float(np.median(rates[1:])) if len(rates) > 1 else float("nan")
    return {
        "steps": summary["steps"],
        "updates": summary["updates"],
        "wall_s": round(wall, 2),
        "steps_per_s_overall": round(summary["steps"] / wall, 1),
        "steps_per_s_steady": round(steady, 1),
    }


def _overhead(env: str) -> dict[str, float]:
    actor = ray.remote(num_cpus=0.5)(RolloutWorker)
    cfg = _cfg(env, 1000, 0, None)
    t0 = time.perf_counter()
    w = actor.remote(cfg, 0, 0, 1)
    ray.get(w.pid.remote())
    startup = time.perf_counter() - t0
    ray.get(w.collect.remote(1, True))
    t0 = time.perf_counter()
    for _ in range(50):
        ray.get(w.collect.remote(1, True))
    rtt = (time.perf_counter() - t0) / 50
    t0 = time.perf_counter()
    ray.get(w.collect.remote(1000, True))
    in_actor = 1000 / (time.perf_counter() - t0)
    ray.kill(w)
    return {
        "actor_startup_s": round(startup, 3),
        "one_step_request_roundtrip_ms": round(1000 * rtt, 3),
        "random_action_steps_per_s_inside_one_actor": round(in_actor, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--steps", type=int, default=20_000, help="collect-mode budget")
    p.add_argument("--train-steps", type=int, default=3_000)
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--out", type=Path, default=RESULTS / "distributed.json")
    args = p.parse_args()
    torch.set_num_threads(1)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING")
    setups: list[int | None] = [None, *[int(w) for w in args.workers.split(",")]]
    out: dict[str, Any] = {
        "env": args.env,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "ray": ray.__version__,
        "torch_threads": 1,
        "overhead": _overhead(args.env),
        "collect": {},
        "train": {},
    }
    for mode, steps, starts in (
        ("collect", args.steps, args.steps),
        ("train", args.train_steps, 1000),
    ):
        for w in setups:
            name = "single_process" if w is None else f"ray_{w}_workers"
            res = _run(_cfg(args.env, steps, starts, w))
            out[mode][name] = res
            print(mode, name, res, flush=True)
        base = out[mode]["single_process"]["steps_per_s_overall"]
        for res in out[mode].values():
            res["ratio_vs_single"] = round(res["steps_per_s_overall"] / base, 3)
    ray.shutdown()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

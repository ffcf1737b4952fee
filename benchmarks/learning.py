"""Learning comparison: roborl DSAC-T vs roborl SAC vs stable-baselines3 SAC.

Default (`--mode compare`): runs the three through `roborl compare` (AdaStop, Mathieu et al.
2023): seeds in groups of `--n` per method until every pair is decided at a family-wise error
of `--alpha`, or `--max-groups` groups are spent. Same env-step budget, learning starts, eval
protocol (deterministic policy, N episodes) for every method; SB3's SAC gets the same
`learning_starts` through its kwargs. Copies compare.md/json and the report (rliable
aggregates, plots, self-contained report.html) to benchmarks/results/<out>/; the run
directories stay in --work-dir. Usage:

    nice -n 10 python benchmarks/learning.py --envs inverted_pendulum --steps 5000 --n 5 \
        --max-groups 2 --jobs 2

`--mode cells` is the older fixed-seed grid (every method x env x seed in worker processes,
finals aggregated with rliable's IQM per env, learning.json/learning.png), kept so the
earlier results can be regenerated:

    nice python benchmarks/learning.py --mode cells --steps 100000 --seeds 3 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

OUT = Path(__file__).parent / "results"
ENVS = {"halfcheetah": "HalfCheetah-v5", "hopper": "Hopper-v5"}


METHODS = ("dsac_t", "sac", "sb3_sac")


def run_roborl(
    algo: str, env_id: str, seed: int, steps: int, eval_every: int, episodes: int, starts: int
):
    from roborl.core.plugins import PluginHost
    from roborl.core.runner import Runner

    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "algo": {"name": algo}, "env": {"id": env_id}, "seed": seed, "total_steps": steps,
        "learning_starts": starts, "eval_every": eval_every,
        "eval_episodes": episodes, "checkpoint_every": steps, "log_every": eval_every,
        "progress": False, "torch_threads": 1,
    }  # fmt: skip
    d = Path(tempfile.mkdtemp()) / f"{algo}_{seed}"
    Runner(cfg, d, host).execute()
    curve = []
    for line in (d / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "eval/return_mean" in rec:
            curve.append((rec["step"], rec["eval/return_mean"]))
    return curve


def run_sb3(env_id: str, seed: int, steps: int, eval_every: int, episodes: int, starts: int):
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy

    env, eval_env = gym.make(env_id), gym.make(env_id)
    curve: list[tuple[int, float]] = []

    class Eval(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % eval_every == 0:
                m, _ = evaluate_policy(self.model, eval_env, episodes, deterministic=True)
                curve.append((self.num_timesteps, float(m)))
            return True

    model = SAC("MlpPolicy", env, seed=seed, learning_starts=starts, verbose=0)
    model.learn(steps, callback=Eval())
    return curve


def run_cell(args: tuple) -> tuple[str, int, list, float]:
    """One (method, env, seed) run in a worker process; returns its eval curve."""
    method, env, seed, steps, ev, episodes, starts = args
    torch.set_num_threads(1)
    t0 = time.time()
    if method == "sb3_sac":
        torch.manual_seed(seed)
        c = run_sb3(ENVS[env], seed, steps, ev, episodes, starts)
    else:
        c = run_roborl(method, ENVS[env], seed, steps, ev, episodes, starts)
    return f"{method}/{env}", seed, c, time.time() - t0


COMPARE_ENVS = {"halfcheetah": "halfcheetah", "hopper": "hopper",
                "inverted_pendulum": "inverted_pendulum"}  # fmt: skip


def compare_main(a: argparse.Namespace) -> None:
    """The three methods through `roborl compare`; results copied to benchmarks/results."""
    import shutil

    from roborl.core.cli import main as roborl_main

    starts = a.learning_starts if a.learning_starts is not None else min(5000, a.steps // 4)
    ev = a.eval_every or max(a.steps // 4, 1)
    work = Path(a.work_dir)
    argv = [
        "compare",
        "dsac_t: algo=dsac_t",
        "sac: algo=sac",
        f"sb3_sac: algo=sb3/sac algo.kwargs={{learning_starts:{starts}}}",
        f"env={','.join(COMPARE_ENVS[e] for e in a.envs)}",
        f"total_steps={a.steps}", f"learning_starts={starts}", f"eval_every={ev}",
        f"eval_episodes={a.episodes}", f"checkpoint_every={a.steps}", f"log_every={ev}",
        f"n={a.n}", f"max_groups={a.max_groups}", f"alpha={a.alpha}", f"jobs={a.jobs}",
        f"seed={a.seed}", f"out={work}",
    ]  # fmt: skip
    print("roborl " + " ".join(repr(x) if " " in x else x for x in argv), flush=True)
    t0 = time.time()
    code = roborl_main(argv)
    if code:
        raise SystemExit(code)
    dest = OUT / a.out
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("compare.json", "compare.md"):
        shutil.copy(work / name, dest / name)
    for f in (work / "report").iterdir():
        if f.suffix in (".md", ".html", ".json", ".png"):
            shutil.copy(f, dest / f.name)
    meta = {"command": ["roborl", *argv], "wall_s": time.time() - t0, "jobs": a.jobs,
            "torch_threads": 1, "note": a.note}  # fmt: skip
    (dest / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"wrote {dest}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["compare", "cells"], default="compare")
    p.add_argument("--n", type=int, default=5, help="compare: seeds per method per group")
    p.add_argument("--max-groups", type=int, default=2, help="compare: AdaStop's K")
    p.add_argument("--alpha", type=float, default=0.05, help="compare: family-wise error")
    p.add_argument("--seed", type=int, default=0, help="compare: first seed")
    p.add_argument("--work-dir", default="runs/learning_compare", help="compare: run dirs")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--envs", nargs="+", default=list(ENVS))
    p.add_argument("--jobs", type=int, default=1, help="cells run in parallel processes")
    p.add_argument("--learning-starts", type=int, default=None, help="default min(5000, steps/4)")
    p.add_argument("--out", default=None, help="results name (learning / learning_compare)")
    p.add_argument("--from-partial", type=Path, default=None, help="summarise a partial jsonl")
    p.add_argument("--note", default=None, help="free text stored in the JSON")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.mode == "compare":
        a.out = a.out or "learning_compare"
        compare_main(a)
        return
    a.out = a.out or "learning"
    ev = a.eval_every or max(a.steps // 10, 1)
    starts = a.learning_starts if a.learning_starts is not None else min(5000, a.steps // 4)
    if a.from_partial is not None:
        meta = {"steps": a.steps, "seeds": a.seeds, "eval_every": ev, "eval_episodes": a.episodes,
                "learning_starts": starts, "torch_threads": 1, "jobs": a.jobs, "note": a.note}  # fmt: skip
        from_partial(a.from_partial, meta, a.out)
        return
    cells = [
        (m, env, seed, a.steps, ev, a.episodes, starts)
        for seed in range(a.seeds)
        for env in a.envs
        for m in METHODS
    ]
    curves: dict[str, dict[int, list]] = {f"{m}/{env}": {} for env in a.envs for m in METHODS}
    cell_s: dict[str, list[float]] = {k: [] for k in curves}
    t0 = time.time()
    OUT.mkdir(exist_ok=True)
    partial = OUT / f"{a.out}_partial.jsonl"
    partial.write_text("")
    with mp.get_context("spawn").Pool(a.jobs, maxtasksperchild=1) as pool:
        for key, seed, c, wall in pool.imap_unordered(run_cell, cells):
            curves[key][seed] = c
            cell_s[key].append(wall)
            with partial.open("a") as f:
                f.write(json.dumps({"cell": key, "seed": seed, "wall_s": wall, "curve": c}) + "\n")
            print(f"{key} seed {seed}: final {c[-1][1]:.1f} ({time.time() - t0:.0f}s)", flush=True)
    meta = {"steps": a.steps, "seeds": a.seeds, "eval_every": ev, "eval_episodes": a.episodes,
            "learning_starts": starts, "torch_threads": 1, "jobs": a.jobs,
            "wall_s": time.time() - t0, "cell_wall_s": cell_s}  # fmt: skip
    summarise(curves, meta, a.envs, a.out)


def summarise(
    curves: dict[str, dict[int, list]], meta: dict, envs: list[str], out: str
) -> dict[str, Any]:
    """IQM and 95% stratified-bootstrap CIs of the final returns over the seeds each cell has
    (`seeds_done` says how many), the JSON and the learning-curve PNG."""
    from rliable import library as rly
    from rliable import metrics

    done = {k: sorted(v) for k, v in curves.items()}
    flat = {k: [v[s] for s in sorted(v)] for k, v in curves.items()}
    summary: dict[str, Any] = {}
    for env in envs:
        scores = {
            m: np.array([[c[-1][1]] for c in flat[f"{m}/{env}"]])
            for m in METHODS
            if flat[f"{m}/{env}"]
        }
        point, ci = rly.get_interval_estimates(
            scores, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=2000
        )
        summary[env] = {
            m: {
                "iqm": float(point[m][0]),
                "ci95": [float(ci[m][0][0]), float(ci[m][1][0])],
                "seeds_done": done[f"{m}/{env}"],
                "finals": [float(c[-1][1]) for c in flat[f"{m}/{env}"]],
            }
            for m in scores
        }
    res = {**meta, "final_return_iqm": summary, "curves": flat}
    tmp = OUT / f".{out}.json.tmp"
    tmp.write_text(json.dumps(res, indent=2) + "\n")
    tmp.replace(OUT / f"{out}.json")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(envs), figsize=(5 * len(envs), 3.5), squeeze=False)
    for ax, env in zip(axes[0], envs):
        n = 0
        for m in METHODS:
            runs = flat[f"{m}/{env}"]
            if not runs:
                continue
            n = max(n, len(runs))
            arr = np.array([[r for _, r in c] for c in runs])
            x = [s for s, _ in runs[0]]
            ax.plot(x, arr.mean(0), label=f"{m} ({len(runs)})")
            ax.fill_between(x, arr.min(0), arr.max(0), alpha=0.2)
        ax.set_title(f"{ENVS[env]} (mean, min-max band; seeds in legend)", fontsize=9)
        ax.set_xlabel("env steps")
        ax.set_ylabel("eval return")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / f"{out}.png", dpi=100)
    print(json.dumps(summary, indent=2))
    return res


def from_partial(path: Path, meta: dict, out: str) -> None:
    """Summarise the cells an interrupted run finished (its `<out>_partial.jsonl`)."""
    curves: dict[str, dict[int, list]] = {}
    cell_s: dict[str, list[float]] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        curves.setdefault(rec["cell"], {})[rec["seed"]] = rec["curve"]
        cell_s.setdefault(rec["cell"], []).append(rec["wall_s"])
    envs = [e for e in ENVS if any(k.endswith(f"/{e}") for k in curves)]
    for env in envs:
        for m in METHODS:
            curves.setdefault(f"{m}/{env}", {})
    summarise(curves, {**meta, "cell_wall_s": cell_s, "from_partial": str(path.name)}, envs, out)


if __name__ == "__main__":
    main()

"""WSRL vs its three baselines at a reduced scale that fits a 2-core CPU.

For each task a dataset is generated here (uniform-random policy; no downloads), then every
method runs for every seed with the same budgets:

- wsrl: Cal-QL pre-training, frozen-policy warm-up, SAC fine-tuning without offline data;
- no_warmup: the same without the warm-up;
- rlpd: fine-tuning that keeps the offline data (50/50 batches);
- scratch: SAC from scratch (same ensemble/UTD/batch), uniform actions for the warm-up.

Reported per method and task, as IQM with 95% stratified-bootstrap CIs (rliable) over seeds:
the return at the end of pre-training, the worst eval return in the first `dip_window` online
steps (the fine-tuning dip), and the final return; plus learning curves (PNG).

The budgets are far below the paper's (1M pre-training steps, 1024 batch, 256x256 networks,
250k+ online steps): the defaults here are what fits in minutes on 2 busy cores, so the
numbers show that the pipeline runs and compare methods at equal budget, not the paper's
results. Every reduced setting is written into the JSON.

    python benchmarks/wsrl.py --tasks InvertedPendulum-v5 Hopper-v5 --seeds 0 1 2
    python benchmarks/wsrl.py --tasks InvertedPendulum-v5 --dataset IP-medium-replay.npz

`--dataset` uses an existing dataset (e.g. `roborl dataset collect quality=medium-replay`)
instead of the generated random one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.datasets import OfflineDataset
from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner

METHODS = {
    "wsrl": {},
    "no_warmup": {"warmup_steps": 0},
    "rlpd": {"offline_ratio": 0.5},
    "scratch": {"pretrain": "none"},
}


def random_dataset(env_id: str, n: int, path: Path, seed: int = 10_000) -> Path:
    env = gym.make(env_id)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    rows: dict[str, list[Any]] = {k: [] for k in "oarndt"}
    low, high = env.action_space.low, env.action_space.high
    for _ in range(n):
        a = rng.uniform(low, high).astype(np.float32)
        nxt, r, term, trunc, _ = env.step(a)
        for k, v in zip("oarndt", (obs, a, r, nxt, term, trunc)):
            rows[k].append(v)
        obs = env.reset()[0] if (term or trunc) else nxt
    ds = OfflineDataset.from_arrays(
        {
            "observations": np.array(rows["o"], np.float32),
            "actions": np.array(rows["a"], np.float32),
            "rewards": np.array(rows["r"], np.float32),
            "next_observations": np.array(rows["n"], np.float32),
            "terminals": np.array(rows["d"], bool),
            "timeouts": np.array(rows["t"], bool),
        },
        metadata={"env_id": env_id},
    )
    return ds.save(path)


def run_one(host: PluginHost, args: argparse.Namespace, task: str, method: str, seed: int,
            data: Path, out: Path) -> dict[str, Any]:  # fmt: skip
    algo = {
        "name": "wsrl", "hidden_sizes": args.hidden, "pretrain_steps": args.pretrain_steps,
        "warmup_steps": args.warmup_steps, "batch_size": args.batch_size,
        "pretrain_batch_size": args.batch_size, "utd_ratio": args.utd,
        "cql_n_actions": args.cql_n_actions, **METHODS[method],
    }  # fmt: skip
    cfg = {
        "algo": algo, "env": {"id": task}, "seed": seed, "total_steps": args.online_steps,
        "eval_every": args.eval_every, "eval_episodes": args.eval_episodes,
        "checkpoint_every": 10**9, "log_every": args.eval_every, "progress": False,
        "dataset": str(data),
    }  # fmt: skip
    run_dir = out / f"{task}_{method}_s{seed}"
    t0 = time.time()
    Runner(cfg, run_dir, host).execute()
    boundary = json.loads((run_dir / "wsrl.json").read_text())["phase_boundary_step"]
    evals = [
        (r["step"] - boundary, r["eval/return_mean"])
        for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if "eval/return_mean" in r
    ]
    pre = [v for s, v in evals if s <= 0]
    online = [(s, v) for s, v in evals if s > 0]
    return {
        "pretrain_return": pre[-1] if pre and method != "scratch" else None,
        "dip_return": min(v for s, v in online if s <= args.dip_window),
        "final_return": online[-1][1],
        "curve": online,
        "wall_s": time.time() - t0,
    }


def iqm_ci(scores: dict[str, np.ndarray]) -> dict[str, Any]:
    from rliable import library as rly
    from rliable import metrics as rm

    point, ci = rly.get_interval_estimates(
        scores, lambda x: np.array([rm.aggregate_iqm(x)]), reps=2000
    )
    return {k: {"iqm": float(point[k][0]), "ci95": [float(ci[k][0][0]), float(ci[k][1][0])]}
            for k in scores}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", nargs="+", default=["InvertedPendulum-v5", "Hopper-v5"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--dataset-size", type=int, default=5000)
    p.add_argument("--dataset", default=None,
                   help="an existing dataset (e.g. from `roborl dataset collect quality="
                        "medium-replay`) instead of a generated random one (one task only)")  # fmt: skip
    p.add_argument("--pretrain-steps", type=int, default=500)
    p.add_argument("--online-steps", type=int, default=1500)
    p.add_argument("--warmup-steps", type=int, default=250)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--utd", type=int, default=1)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--cql-n-actions", type=int, default=4)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--eval-episodes", type=int, default=3)
    p.add_argument("--dip-window", type=int, default=500)
    p.add_argument("--out", default="benchmarks/results/wsrl")
    p.add_argument("--result", default="benchmarks/results/wsrl", help="JSON/PNG path stem")
    args = p.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    host = PluginHost()
    host.load_entry_points()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    t_all = time.time()
    for task in args.tasks:
        if args.dataset:
            data = Path(args.dataset)
        else:
            data = random_dataset(task, args.dataset_size, out / f"{task}_random.npz")
        for method in METHODS:
            for seed in args.seeds:
                res = run_one(host, args, task, method, seed, data, out / "runs")
                runs.setdefault(task, {}).setdefault(method, []).append(res)
                print(task, method, seed, {k: v for k, v in res.items() if k != "curve"},
                      flush=True)  # fmt: skip
    summary: dict[str, Any] = {}
    for key in ("pretrain_return", "dip_return", "final_return"):
        summary[key] = {}
        for task, by_m in runs.items():
            scores = {m: np.array([[r[key]] for r in rs], float) for m, rs in by_m.items()
                      if rs[0][key] is not None}  # fmt: skip
            summary[key][task] = iqm_ci(scores)
    result = {
        "benchmark": "wsrl",
        "machine": "2-core CPU, shared with other jobs",
        "settings": vars(args),
        "dataset": args.dataset or "uniform-random policy, generated here",
        "deviations_from_paper": f"pretrain 1M->{args.pretrain_steps} steps, batch 1024->{args.batch_size}, UTD 4->{args.utd}, hidden "
        f"256x256->{args.hidden}, online budget {args.online_steps} env steps, warm-up 5000->{args.warmup_steps}",
        "summary_iqm_ci95": summary,
        "runs": runs,
        "wall_time_s": time.time() - t_all,
    }
    Path(args.result + ".json").write_text(json.dumps(result, indent=1))
    plot(runs, Path(args.result + ".png"))
    print(json.dumps(summary, indent=1))


def plot(runs: dict[str, dict[str, list[dict[str, Any]]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.6), squeeze=False)
    for ax, (task, by_m) in zip(axes[0], runs.items()):
        for method, rs in by_m.items():
            steps = [s for s, _ in rs[0]["curve"]]
            vals = np.array([[v for _, v in r["curve"]] for r in rs])
            ax.plot(steps, vals.mean(0), label=method)
            ax.fill_between(steps, vals.min(0), vals.max(0), alpha=0.15)
            pre = [r["pretrain_return"] for r in rs if r["pretrain_return"] is not None]
            if pre:
                ax.scatter([0], [np.mean(pre)], marker="x")
        ax.axvline(0, color="k", lw=0.8, ls="--")
        ax.set(title=f"{task} (x = end of pre-training)", xlabel="online env steps",
               ylabel="eval return")  # fmt: skip
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()

"""IQL vs RIQL on generated medium-replay datasets, clean and under the four random corruptions
of Yang et al. (ICLR 2024), D4RL-normalised scores aggregated as IQM with 95% bootstrap CIs
(rliable).

    python benchmarks/offline.py [--envs Hopper-v5 Walker2d-v5 HalfCheetah-v5] [--seeds 3]
        [--train-steps 50000] [--updates 100000] [--eval-episodes 10] [--out PATH]

Datasets come from `roborl dataset collect quality=medium-replay` (SAC through the registry),
corruptions from `roborl dataset corrupt` (c=0.3, eps=1.0). A peer IQL (CORL's single-file
implementation, fetched separately and run from an uncommitted path via --peer-iql FILE) is
not run by default.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from roborl.core.datasets import OfflineDataset, load_file, normalized_score
from roborl.core.plugins import get_host
from roborl.core.runner import build_algorithm
from roborl.plugins.datasets.collect import collect, rollout
from roborl.plugins.datasets.corruption import corrupt

CORRUPTIONS = ("clean", "obs", "action", "reward", "dynamics")


def train_eval(
    algo_name: str, ds: OfflineDataset, env_id: str, updates: int, seed: int, episodes: int
) -> float:
    import gymnasium as gym

    torch.manual_seed(seed)
    algo = build_algorithm(
        get_host(),
        {"name": algo_name, "max_steps": updates},
        ds.observation_space,
        ds.action_space,
        "cpu",
    )
    algo.prepare(ds)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(updates):
        algo.update(ds.sample(256, gen))
    env = gym.make(env_id)
    pol = algo.policy()
    ret = float(np.mean(rollout(env, pol.act, episodes=episodes, seed=1000 + seed)))
    return normalized_score(ret, ds.reference_returns)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--envs", nargs="+", default=["Hopper-v5", "Walker2d-v5", "HalfCheetah-v5"])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--train-steps", type=int, default=50_000)
    p.add_argument("--learning-starts", type=int, default=5_000)
    p.add_argument("--updates", type=int, default=100_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-dir", default="/tmp/roborl_offline_bench")
    p.add_argument("--out", default="benchmarks/results/offline.json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    data_dir = Path(a.data_dir)
    results: dict = {"config": vars(a), "scores": {}, "datasets": {}}
    t0 = time.time()
    for env_id in a.envs:
        path = data_dir / f"{env_id}-medium-replay.npz"
        if path.exists():
            ds = load_file(path)
        else:
            ds = collect(env_id, "medium-replay", train_steps=a.train_steps, learning_starts=a.learning_starts,
                         eval_every=max(a.train_steps // 10, 1), ref_episodes=3, seed=0)  # fmt: skip
            ds.save(path)
        results["datasets"][env_id] = {k: v for k, v in ds.info().items() if k != "metadata"}
        results["datasets"][env_id]["reference_returns"] = ds.reference_returns
        for corr in CORRUPTIONS:
            d = ds if corr == "clean" else corrupt(ds, corr, "random", 0.3, 1.0, seed=0)
            for algo in ("iql", "riql"):
                scores = [
                    train_eval(algo, d, env_id, a.updates, s, a.eval_episodes)
                    for s in range(a.seeds)
                ]
                results["scores"].setdefault(algo, {}).setdefault(corr, {})[env_id] = scores
                print(
                    f"{env_id} {corr} {algo}: {np.round(scores, 1).tolist()} ({time.time() - t0:.0f}s)",
                    flush=True,
                )
    from rliable import library as rly
    from rliable import metrics

    agg: dict = {}
    for algo, by_corr in results["scores"].items():
        for corr, by_env in by_corr.items():
            mat = np.array([by_env[e] for e in a.envs]).T  # (seeds, envs)
            iqm, ci = rly.get_interval_estimates(
                {algo: mat}, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=2000
            )
            agg.setdefault(algo, {})[corr] = {
                "iqm": float(iqm[algo][0]),
                "ci95": [float(c) for c in ci[algo][:, 0]],
            }
    results["aggregate"] = agg
    results["wall_time_s"] = time.time() - t0
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2))
    tmp.replace(out)
    print("corruption  " + "  ".join(f"{alg:>24}" for alg in agg))
    for corr in CORRUPTIONS:
        row = "  ".join(
            f"{agg[alg][corr]['iqm']:7.1f} [{agg[alg][corr]['ci95'][0]:6.1f},{agg[alg][corr]['ci95'][1]:6.1f}]"
            for alg in agg
        )
        print(f"{corr:10}  {row}")


if __name__ == "__main__":
    main()

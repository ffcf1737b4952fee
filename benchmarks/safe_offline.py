"""FISOR vs BC-all, BC-safe and cost-blind IQL on safe tasks (issue 6), DSRL metrics.

Reduced scale for a 2-core CPU: the navigation task only (SafePointGoal-v0, scripted
two-behaviour dataset from roborl.plugins.fisor.nav_data), `--updates` gradient steps per method
(paper: 1e6), `--seeds` seeds, `--episodes` evaluation episodes per seed. Reports per method the
IQM of normalised return and normalised cost over all (seed, episode) pairs with 95% bootstrap
CIs, and the fraction of evaluation episodes with any violation. kappa = 0 (hard constraint),
eps = 0.1 as DSRL. IQL is the registered `iql` algorithm, fetched by name.

    python benchmarks/safe_offline.py --updates 1500 --seeds 3 --episodes 10
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from roborl.core.plugins import get_host
from roborl.plugins.fisor import BC, FISOR, dsrl_normalized, safe_subset
from roborl.plugins.fisor.baselines import BCConfig
from roborl.plugins.fisor.evaluate import rollout_safe
from roborl.plugins.fisor.fisor import FISORConfig
from roborl.plugins.fisor.nav_data import collect_nav_dataset
from roborl.sim.safety import make_safe_env


def iqm(x: np.ndarray) -> float:
    x = np.sort(np.asarray(x, float))
    n = len(x)
    return float(x[n // 4 : n - n // 4].mean()) if n >= 4 else float(x.mean())


def boot_ci(x: np.ndarray, reps: int = 2000, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    stats = [iqm(rng.choice(x, len(x))) for _ in range(reps)]
    return [float(np.percentile(stats, 2.5)), float(np.percentile(stats, 97.5))]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--updates", type=int, default=1500)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--out", default="benchmarks/results/safe_offline.json")
    args = p.parse_args()
    torch.set_num_threads(1)
    env = make_safe_env("SafePointGoal-v0")
    data = collect_nav_dataset(env, episodes_per_policy=20, seed=0)
    ref = data.reference_returns
    IQL = get_host().registry.get("algorithms", "iql")
    obs_space, act_space = data.observation_space, env.action_space
    h = [128, 128]
    makers = {
        "fisor": lambda: FISOR(
            obs_space, act_space, FISORConfig(hidden_sizes=h, actor_hidden_sizes=h)
        ),
        "iql_cost_blind": lambda: IQL(obs_space, act_space, IQL.Config(hidden_sizes=h)),
        "bc_all": lambda: BC(obs_space, act_space, BCConfig(hidden_sizes=h)),
        "bc_safe": lambda: BC(obs_space, act_space, BCConfig(hidden_sizes=h, safe_only=True)),
    }
    results: dict[str, dict] = {}
    for name, make in makers.items():
        nr_all, nc_all, viol, wall = [], [], [], 0.0
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            algo = make()
            d = safe_subset(data, 0.0) if name == "bc_safe" else data
            if hasattr(algo, "prepare"):
                algo.prepare(d)
            g = torch.Generator().manual_seed(seed)
            t0 = time.time()
            for _ in range(args.updates):
                algo.update(d.sample(256, generator=g))
            wall += time.time() - t0
            r = rollout_safe(algo, env, args.episodes, seed=10_000 + 100 * seed)
            nr, nc = dsrl_normalized(r["returns"], r["costs"], ref["min"], ref["max"], kappa=0.0)
            nr_all += list(nr)
            nc_all += list(nc)
            viol += list(r["violated"])
        nr_a, nc_a = np.array(nr_all), np.array(nc_all)
        results[name] = {
            "normalized_return_iqm": iqm(nr_a),
            "normalized_return_ci95": boot_ci(nr_a),
            "normalized_cost_iqm": iqm(nc_a),
            "normalized_cost_ci95": boot_ci(nc_a),
            "violation_fraction": float(np.mean(viol)),
            "safe": bool(iqm(nc_a) <= 1.0),
            "train_wall_s": wall,
        }
        print(name, json.dumps(results[name]), flush=True)
    out = {
        "task": "SafePointGoal-v0",
        "dataset": {"transitions": len(data), "reference_returns": ref},
        "budget": vars(args) | {"note": "reduced scale; paper uses 1e6 updates"},
        "kappa": 0.0,
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=2))
    tmp.replace(args.out)


if __name__ == "__main__":
    main()

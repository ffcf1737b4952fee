"""IQL vs RIQL on a generated medium-replay dataset, clean and under the random corruptions of
Yang et al. (ICLR 2024), D4RL-normalised scores as IQM with 95% stratified-bootstrap CIs
(rliable), with a peer IQL implementation run on the same data, side by side.

    python benchmarks/offline.py [--envs Hopper-v5] [--seeds 3] [--updates 100000]
        [--corruptions clean obs action reward dynamics] [--workers 2]
        [--peer-iql PATH/TO/CORL/algorithms/offline/iql.py] [--out PATH]

- Datasets: `collect(env, "medium-replay")` (SAC through the registry; the same code as
  `roborl dataset collect`) unless `--dataset-dir` already holds `<env>-medium-replay.npz`;
  corruptions from `corrupt(ds, field, "random", c=0.3, eps=1.0, seed=0)` (`roborl dataset
  corrupt`). The dataset's own random/expert reference returns normalise the scores.
- RIQL runs with the official per-task preset for each corrupted cell
  (`preset=<task>/random/<field>`) and the official defaults on clean data.
- The peer is CORL's single-file IQL (github.com/tinkoff-ai/CORL,
  algorithms/offline/iql.py), fetched separately and imported from the path given to
  `--peer-iql` (its `d4rl`/`pyrallis`/`gym` imports are satisfied by stubs; only its networks,
  `ImplicitQLearning`, `ReplayBuffer` and `modify_reward` are used). It runs roborl IQL's
  config: Gaussian actor, tau 0.005, reward scaling 1000/return range, no obs normalisation,
  cosine horizon = `--updates`. Not committed; not run unless the path is given.
- Each (algo, corruption, seed) cell is one process (`--workers` at a time); the JSON is
  rewritten after every cell, so a killed run keeps what it finished.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import torch

CORRUPTIONS = ("clean", "obs", "action", "reward", "dynamics")
TASK_KEYS = {"Hopper": "hopper", "Walker2d": "walker2d", "HalfCheetah": "halfcheetah"}


def dataset_path(data_dir: Path, env_id: str, corr: str) -> Path:
    return data_dir / f"{env_id}-medium-replay-{corr}.npz"


def evaluate(env_id: str, act: Any, episodes: int, seed: int) -> float:
    import gymnasium as gym

    from roborl.plugins.datasets.collect import rollout

    env = gym.make(env_id)
    return float(np.mean(rollout(env, act, episodes=episodes, seed=seed)))


def run_roborl(algo_name: str, env_id: str, corr: str, path: str, a: dict, seed: int) -> float:
    from roborl.core.algorithms import build_algorithm
    from roborl.core.plugins import get_host
    from roborl.plugins.datasets.files import load_file

    ds = load_file(path)
    torch.manual_seed(seed)
    cfg: dict[str, Any] = {"name": algo_name, "max_steps": a["updates"]}
    if algo_name == "riql" and corr != "clean" and a.get("riql_preset", True):
        cfg["preset"] = f"{TASK_KEYS[env_id.split('-')[0]]}/random/{corr}"
    algo = build_algorithm(get_host(), cfg, ds.observation_space, ds.action_space, "cpu")
    algo.prepare(ds)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(a["updates"]):
        algo.update(ds.sample(256, gen))
    return evaluate(env_id, algo.policy().act, a["eval_episodes"], 1000 + seed)


def _import_peer(path: str) -> types.ModuleType:
    """Import CORL's iql.py with its D4RL-era imports stubbed (they are never called here)."""
    import gymnasium

    sys.modules.setdefault("d4rl", types.ModuleType("d4rl"))
    pyrallis = types.ModuleType("pyrallis")
    pyrallis.wrap = lambda *a, **k: lambda f: f  # type: ignore[attr-defined]
    sys.modules.setdefault("pyrallis", pyrallis)
    sys.modules.setdefault("gym", gymnasium)
    try:
        import wandb  # noqa: F401
    except ImportError:
        sys.modules.setdefault("wandb", types.ModuleType("wandb"))
    spec = importlib.util.spec_from_file_location("corl_iql", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_peer(env_id: str, path: str, a: dict, seed: int) -> float:
    """CORL IQL on the same dataset with roborl IQL's config (see the module docstring)."""
    from roborl.plugins.datasets.files import load_file

    corl = _import_peer(a["peer_iql"])
    ds = load_file(path)
    data = {
        "observations": ds.observations.astype(np.float32),
        "actions": ds.actions.astype(np.float32),
        "rewards": ds.rewards.astype(np.float32).copy(),
        "next_observations": ds.next_observations.astype(np.float32),
        "terminals": ds.terminals.astype(np.float32),
    }
    corl.modify_reward(data, env_id.lower())  # 1000 / (max - min episode return)
    np.random.seed(seed)
    torch.manual_seed(seed)
    sd, ad = data["observations"].shape[1], data["actions"].shape[1]
    max_action = float(np.max(ds.action_space.high))
    buf = corl.ReplayBuffer(sd, ad, len(ds), "cpu")
    buf.load_d4rl_dataset(data)
    q, v = corl.TwinQ(sd, ad), corl.ValueFunction(sd)
    actor = corl.GaussianPolicy(sd, ad, max_action)
    trainer = corl.ImplicitQLearning(
        max_action=max_action,
        actor=actor,
        actor_optimizer=torch.optim.Adam(actor.parameters(), lr=3e-4),
        q_network=q,
        q_optimizer=torch.optim.Adam(q.parameters(), lr=3e-4),
        v_network=v,
        v_optimizer=torch.optim.Adam(v.parameters(), lr=3e-4),
        iql_tau=0.7,
        beta=3.0,
        max_steps=a["updates"],
        discount=0.99,
        tau=0.005,
        device="cpu",
    )
    for _ in range(a["updates"]):
        trainer.train(buf.sample(256))
    actor.eval()
    return evaluate(env_id, lambda o: actor.act(o, "cpu"), a["eval_episodes"], 1000 + seed)


def cell(algo: str, env_id: str, corr: str, path: str, a: dict, seed: int) -> dict[str, Any]:
    torch.set_num_threads(a["threads"])
    t0 = time.time()
    if algo == "corl_iql":
        ret = run_peer(env_id, path, a, seed)
    else:
        ret = run_roborl(algo, env_id, corr, path, a, seed)
    return {"algo": algo, "env": env_id, "corr": corr, "seed": seed, "return": ret,
            "wall_s": time.time() - t0}  # fmt: skip


def aggregate(results: dict, envs: list[str], algos: list[str], corrs: list[str]) -> dict:
    from rliable import library as rly
    from rliable import metrics

    agg: dict = {}
    for algo in algos:
        for corr in corrs:
            by_env = results["scores"].get(algo, {}).get(corr, {})
            if not all(e in by_env for e in envs):
                continue
            n = min(len(by_env[e]) for e in envs)
            if n == 0:
                continue
            mat = np.array([by_env[e][:n] for e in envs], dtype=float).T  # (seeds, envs)
            iqm, ci = rly.get_interval_estimates(
                {algo: mat}, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=2000
            )
            agg.setdefault(algo, {})[corr] = {
                "iqm": float(iqm[algo][0]),
                "ci95": [float(c) for c in ci[algo][:, 0]],
                "mean": float(mat.mean()),
                "seeds": n,
            }
    return agg


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--envs", nargs="+", default=["Hopper-v5", "Walker2d-v5", "HalfCheetah-v5"])
    p.add_argument("--corruptions", nargs="+", default=list(CORRUPTIONS))
    p.add_argument("--algos", nargs="+", default=["iql", "riql"])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--train-steps", type=int, default=50_000)
    p.add_argument("--learning-starts", type=int, default=5_000)
    p.add_argument("--updates", type=int, default=100_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--no-riql-preset", dest="riql_preset", action="store_false",
                   help="RIQL with its defaults on corrupted cells too (an ablation)")  # fmt: skip
    p.add_argument("--peer-iql", default=None, help="path of CORL's algorithms/offline/iql.py")
    p.add_argument("--data-dir", default="/tmp/roborl_offline_bench")
    p.add_argument("--out", default="benchmarks/results/offline.json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    from roborl.core.datasets import normalized_score
    from roborl.plugins.datasets.collect import collect
    from roborl.plugins.datasets.corruption import corrupt
    from roborl.plugins.datasets.files import load_file

    algos = list(a.algos) + (["corl_iql"] if a.peer_iql else [])
    data_dir = Path(a.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    results: dict = {"config": vars(a), "command": " ".join(["python", *sys.argv]),
                     "datasets": {}, "scores": {}, "returns": {}, "cells": []}  # fmt: skip
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    def write() -> None:
        results["aggregate"] = aggregate(results, a.envs, algos, a.corruptions)
        results["wall_time_s"] = time.time() - t0
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=2))
        tmp.replace(out)

    jobs = []
    refs: dict[str, dict] = {}
    for env_id in a.envs:
        base = data_dir / f"{env_id}-medium-replay.npz"
        if base.exists():
            ds = load_file(base)
        else:
            ds = collect(env_id, "medium-replay", train_steps=a.train_steps,
                         learning_starts=a.learning_starts,
                         eval_every=max(a.train_steps // 10, 1), ref_episodes=3, seed=0)  # fmt: skip
            ds.save(base)
        info = {k: v for k, v in ds.info().items() if k != "metadata"}
        info["reference_returns"] = refs[env_id] = ds.reference_returns
        info["medium_policy_return"] = ds.metadata.get("medium_policy_return")
        info["expert_policy_return"] = ds.metadata.get("expert_policy_return")
        results["datasets"][env_id] = info
        for corr in a.corruptions:
            path = dataset_path(data_dir, env_id, corr)
            if not path.exists():
                d = ds if corr == "clean" else corrupt(ds, corr, "random", 0.3, 1.0, seed=0)
                d.save(path)
            for s in range(a.seeds):  # seeds outermost: partial runs cover every cell
                for algo in algos:
                    jobs.append((s, algo, env_id, corr, str(path)))
    jobs.sort(key=lambda j: j[0])
    opts = {"updates": a.updates, "eval_episodes": a.eval_episodes, "threads": a.threads,
            "peer_iql": a.peer_iql, "riql_preset": a.riql_preset}  # fmt: skip
    with ProcessPoolExecutor(a.workers) as pool:
        futs = [pool.submit(cell, algo, e, c, path, opts, s) for s, algo, e, c, path in jobs]
        for fut in as_completed(futs):
            r = fut.result()
            score = normalized_score(r["return"], refs[r["env"]])
            r["normalized_score"] = score
            results["cells"].append(r)
            results["scores"].setdefault(r["algo"], {}).setdefault(r["corr"], {}).setdefault(
                r["env"], []
            ).append(score)
            results["returns"].setdefault(r["algo"], {}).setdefault(r["corr"], {}).setdefault(
                r["env"], []
            ).append(r["return"])
            print(f"{r['env']} {r['corr']:8} {r['algo']:8} seed {r['seed']}: score {score:6.1f} "
                  f"({r['wall_s']:.0f}s cell, {time.time() - t0:.0f}s total)", flush=True)  # fmt: skip
            write()
    agg = results["aggregate"]
    if "corl_iql" in agg and "iql" in agg:
        results["peer_ratio_iqm"] = {
            c: agg["iql"][c]["iqm"] / agg["corl_iql"][c]["iqm"]
            for c in a.corruptions
            if c in agg["iql"] and c in agg["corl_iql"] and abs(agg["corl_iql"][c]["iqm"]) > 1e-9
        }
    write()
    print("corruption  " + "  ".join(f"{alg:>24}" for alg in agg))
    for corr in a.corruptions:
        row = "  ".join(
            f"{agg[alg][corr]['iqm']:7.1f} [{agg[alg][corr]['ci95'][0]:6.1f},"
            f"{agg[alg][corr]['ci95'][1]:6.1f}]"
            if corr in agg[alg]
            else " " * 24
            for alg in agg
        )
        print(f"{corr:10}  {row}")


if __name__ == "__main__":
    main()

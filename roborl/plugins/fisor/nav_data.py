"""A small DSRL-style dataset on `SafePointGoal-v0` from scripted behaviour policies.

Why: the FISOR test and benchmark need data that covers safe and unsafe behaviour with a range
of returns, without a long online run. Two behaviours, each with Gaussian action noise:
``direct`` drives straight at the goal (fast, crosses hazards), ``avoid`` follows a potential
field that is repelled by hazards (slower, mostly safe). Reference returns/costs are recorded in
the metadata for DSRL normalisation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from roborl.core.datasets import OfflineDataset


def direct_action(obs: np.ndarray) -> np.ndarray:
    return np.clip(3.0 * obs[4:6], -1.0, 1.0)


def avoid_action(obs: np.ndarray, hazard_radius: float = 0.25) -> np.ndarray:
    goal = obs[4:6]
    force = goal / (np.linalg.norm(goal) + 1e-6)
    haz = obs[6:].reshape(-1, 2)
    d = np.linalg.norm(haz, axis=1, keepdims=True) + 1e-6
    near = np.clip((2.4 * hazard_radius - d) / hazard_radius, 0.0, None)
    force = force - (near * 3.0 * haz / d).sum(0) - 0.5 * obs[2:4]
    return np.clip(force, -1.0, 1.0)


def collect_nav_dataset(
    env: Any, episodes_per_policy: int = 20, noise: float = 0.3, seed: int = 0
) -> OfflineDataset:
    """Roll out both behaviours for `episodes_per_policy` episodes each (layouts from seeds)."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "observations",
            "actions",
            "rewards",
            "next_observations",
            "terminals",
            "timeouts",
            "costs",
        )
    }
    rets, costs = [], []
    for i, fn in enumerate([direct_action, avoid_action] * episodes_per_policy):
        obs, _ = env.reset(seed=seed * 100_000 + i)
        ret = cost = 0.0
        while True:
            a = np.clip(fn(obs) + noise * rng.standard_normal(2), -1.0, 1.0).astype(np.float32)
            nxt, r, term, trunc, info = env.step(a)
            for k, v in zip(
                cols,
                (obs, a, r, nxt, term, trunc, info["cost"]),
            ):
                cols[k].append(v)
            ret, cost, obs = ret + r, cost + info["cost"], nxt
            if term or trunc:
                if not term:
                    cols["timeouts"][-1] = True
                break
        rets.append(ret)
        costs.append(cost)
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    arrays["observations"] = arrays["observations"].astype(np.float32)
    arrays["next_observations"] = arrays["next_observations"].astype(np.float32)
    meta = {
        "env_id": "SafePointGoal-v0",
        "reference_returns": {"min": float(min(rets)), "max": float(max(rets))},
        "reference_costs": {"min": float(min(costs)), "max": float(max(costs))},
    }
    return OfflineDataset.from_arrays(arrays, meta)

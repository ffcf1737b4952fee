"""Episode returns, costs and violation flags of an algorithm on a safe env (used by the test
and benchmarks/safe_offline.py)."""

from __future__ import annotations

from typing import Any

import numpy as np


def rollout_safe(algo: Any, env: Any, episodes: int, seed: int) -> dict[str, np.ndarray]:
    """Deterministic rollouts; layouts/initial states from seeds seed, seed+1, ..."""
    rets, costs = np.zeros(episodes), np.zeros(episodes)
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        while True:
            a = algo.act(np.asarray(obs, np.float32)[None], deterministic=True)[0]
            obs, r, term, trunc, info = env.step(a)
            rets[i] += r
            costs[i] += info["cost"]
            if term or trunc:
                break
    return {"returns": rets, "costs": costs, "violated": costs > 0}

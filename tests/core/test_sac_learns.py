"""SAC learns: on InvertedPendulum-v5 it reaches an eval return random actions never reach."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from roborl.core.plugins import get_host
from roborl.core.runner import Runner


def random_returns(episodes: int = 50) -> list[float]:
    env = gym.make("InvertedPendulum-v5")
    env.action_space.seed(0)
    out = []
    for i in range(episodes):
        env.reset(seed=i)
        done, total = False, 0.0
        while not done:
            _, r, term, trunc, _ = env.step(env.action_space.sample())
            total += float(r)
            done = term or trunc
        out.append(total)
    return out


def test_sac_beats_random_on_inverted_pendulum(tmp_path) -> None:
    best_random = max(random_returns())
    cfg = {
        "algo": {"name": "sac"},  # the paper's defaults: 256x256, batch 256, lr 3e-4
        "env": {"id": "InvertedPendulum-v5"},
        "seed": 0,
        "total_steps": 6000,
        "learning_starts": 500,
        "eval_every": 6000,
        "eval_episodes": 5,
        "checkpoint_every": 6000,
        "log_every": 1000,
        "progress": False,
    }
    summary = Runner(cfg, tmp_path / "run", get_host()).execute()
    final = summary["final_eval_return"]
    print(f"SAC eval return after 6000 steps: {final:.1f}; best random episode: {best_random:.1f}")
    # Random play never balances long: its best of 50 episodes stays far below SAC's mean.
    assert best_random < 60
    assert final > 3 * best_random, (final, best_random)
    assert np.isfinite(final)

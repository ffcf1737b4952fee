"""SAC learns InvertedPendulum-v5 within a CI budget, far above random play (about 5-10)."""

from __future__ import annotations

import torch

from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner


def test_sac_beats_random_on_inverted_pendulum(tmp_path) -> None:
    torch.set_num_threads(1)
    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "algo": {"name": "sac", "hidden_sizes": [64, 64], "batch_size": 128},
        "env": {"id": "InvertedPendulum-v5"},
        "seed": 0, "total_steps": 3000, "learning_starts": 500, "eval_every": 3000,
        "eval_episodes": 5, "checkpoint_every": 3000, "log_every": 1000, "progress": False,
    }  # fmt: skip
    summary = Runner(cfg, tmp_path / "sac", host).execute()
    print(f"SAC eval return after 3000 steps: {summary['final_eval_return']:.1f}")
    assert summary["final_eval_return"] > 50.0  # 5x the best random return

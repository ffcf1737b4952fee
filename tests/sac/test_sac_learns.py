"""SAC learns InvertedPendulum-v5 within a CI budget, above its own broken control.

Measured at this budget (3000 steps, 64x64, 5 eval episodes), seeds 0/1/2: SAC 82.6/79.8/77.0;
the negative control, the same run with gamma=0 (no bootstrapping, so no credit for staying up
later), 41.0/49.2/29.2; doing nothing (zero action) 26; random play about 5. The bound, 65,
sits between the best control and the worst real run.
"""

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
    assert summary["final_eval_return"] > 65.0  # gamma=0 control: at most 49.2

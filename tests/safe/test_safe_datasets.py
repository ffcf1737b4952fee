"""`roborl dataset collect quality=safe-mixed`: DSRL-style data with costs, safe and unsafe."""

from __future__ import annotations

import numpy as np
import torch

from roborl.plugins.datasets.cli import main as dataset_cli
from roborl.plugins.datasets.files import load_file


def test_safe_mixed_dataset_records_costs_and_spans_safe_and_unsafe(tmp_path, capsys) -> None:
    torch.set_num_threads(1)
    out = tmp_path / "nav_safe.npz"
    rc = dataset_cli(
        [
            "collect",
            "env=SafePointGoal-v0",
            f"out={out}",
            "quality=safe-mixed",
            "train_steps=1200",
            "steps=400",
            "learning_starts=400",
            "cost_limits=[0]",
            "ref_episodes=2",
            "algo.hidden_sizes=[32,32]",
            "algo.batch_size=64",
        ]
    )
    assert rc == 0
    ds = load_file(out)
    meta = ds.metadata
    # one reward-only SAC run and one SAC-Lagrangian run per budget, all recorded
    assert [p["algo"] for p in meta["policies"]] == ["sac", "sac_lagrangian"]
    assert [p["cost_limit"] for p in meta["policies"]] == [None, 0.0]
    assert len(ds) == 2 * (1200 + 400)
    # per-step costs are the task's 0/1 hazard indicator, and some steps do cost
    assert ds.costs is not None
    assert set(np.unique(ds.costs)) <= {0.0, 1.0}
    assert ds.costs.sum() > 0
    # the episodes span safe (zero-cost) and unsafe trajectories
    ep_costs = ds.episode_costs()
    assert (ep_costs == 0).any() and (ep_costs > 0).any(), ep_costs
    # DSRL normalisation references: the dataset's episode extremes
    rets = ds.episode_returns()
    assert meta["reference_returns"] == {"min": rets.min(), "max": rets.max()}
    assert meta["reference_costs"] == {"min": ep_costs.min(), "max": ep_costs.max()}
    assert meta["reference_costs"]["max"] > meta["reference_costs"]["min"]
    assert "safe-mixed" in meta["quality"] and "wrote" in capsys.readouterr().out

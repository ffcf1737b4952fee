"""`seed=` reproduces a run's network initialisation, whatever ran before in the process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner


def _tensors(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for key in sorted(tree, key=str) for t in _tensors(tree[key])]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    return []


def _initial_weights(seed: int, run_dir: Path) -> list[torch.Tensor]:
    host = PluginHost()
    host.load_entry_points()
    cfg = {"algo": {"name": "sac", "hidden_sizes": [16, 16]}, "seed": seed, "progress": False}
    runner = Runner(cfg, run_dir, host)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    algo = runner.build_algorithm(obs_space, act_space)
    weights = [t.clone() for t in _tensors(algo.state_dict()) if t.is_floating_point()]
    assert weights, "SAC's state_dict should hold its network weights"
    return weights


def test_same_seed_same_initial_networks_different_seed_different(tmp_path: Path) -> None:
    first = _initial_weights(7, tmp_path / "a")
    torch.rand(1000)  # whatever else used the global generator in between
    again = _initial_weights(7, tmp_path / "b")
    other = _initial_weights(8, tmp_path / "c")
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(first, other, strict=True))

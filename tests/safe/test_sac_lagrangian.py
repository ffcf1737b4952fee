"""SAC-Lagrangian: the multiplier moves the right way, and a tight budget lowers episode cost."""

from __future__ import annotations

import itertools
import json

import gymnasium as gym
import numpy as np
import torch

from roborl.core.interfaces import Batch
from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner
from roborl.plugins.sac_lagrangian import SACLagrangian, SACLagrangianConfig


def _batch(cost: float, n: int = 64) -> Batch:
    g = torch.Generator().manual_seed(0)
    return Batch(
        obs=torch.randn(n, 3, generator=g),
        actions=torch.rand(n, 2, generator=g) * 2 - 1,
        rewards=torch.zeros(n),
        next_obs=torch.randn(n, 3, generator=g),
        terminated=torch.zeros(n),
        costs=torch.full((n,), cost),
        discount=torch.full((n,), 0.99),
    )


def _algo(**kw: float) -> SACLagrangian:
    torch.manual_seed(0)
    cfg = SACLagrangianConfig(hidden_sizes=[32, 32], episode_length=100, lambda_lr=0.05, **kw)
    return SACLagrangian(
        gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32), cfg
    )


def test_multiplier_rises_over_budget_and_falls_under_it() -> None:
    torch.set_num_threads(1)
    # every step costs 1: the critic's cost estimate grows past a zero budget -> lambda rises
    over = _algo(cost_limit=0.0)
    lams = [float(over.update(_batch(1.0))["lagrange_multiplier"]) for _ in range(200)]
    assert lams[-1] > 5.0, lams[-1]
    assert all(b >= a for a, b in itertools.pairwise(lams))
    # no step costs anything and the budget is generous: lambda falls from 5 to its floor, 0
    under = _algo(cost_limit=50.0, lambda_init=5.0)
    lams = [float(under.update(_batch(0.0))["lagrange_multiplier"]) for _ in range(200)]
    assert lams[-1] == 0.0, lams[-1]
    assert under.cost_limit_q > 0.0


def _run(tmp_path, algo: dict) -> tuple[dict, list[dict]]:
    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "algo": {"hidden_sizes": [64, 64], "batch_size": 128, **algo},
        "env": {"id": "SafePointGoal-v0"},
        "seed": 0, "total_steps": 3000, "learning_starts": 1000, "eval_every": 3000,
        "eval_episodes": 10, "checkpoint_every": 3000, "log_every": 500, "progress": False,
    }  # fmt: skip
    run_dir = tmp_path / algo["name"]
    summary = Runner(cfg, run_dir, host).execute()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return summary, [json.loads(x) for x in lines]


def test_tight_cost_limit_lowers_episode_cost_vs_unconstrained_sac(tmp_path) -> None:
    """d=0 drives the multiplier up and the episode cost to 0 (SAC: 59.2) at 3000 steps.

    What this does not show: reward progress. Measured on SafePointGoal (seed 0, 10 eval
    layouts): SAC-Lag's return is -26.1 here, below doing nothing (0.0 at cost 0), and no
    setting tried reached both at 6000 steps (d=0: -35.9 at cost 2.8; d=0 with lambda_lr
    0.005: -1.0 at 7.3; d=1: 8.0 at 32.9; d=5 and d=15 at 3000 steps never raise the
    multiplier: 17.7 at 70.4). A test of both needs a longer run than CI allows.
    """
    torch.set_num_threads(1)
    sac, _ = _run(tmp_path, {"name": "sac"})
    lag, metrics = _run(
        tmp_path,
        {"name": "sac_lagrangian", "cost_limit": 0.0, "episode_length": 200, "lambda_lr": 0.03},
    )
    lam = [m["train/lagrange_multiplier"] for m in metrics if "train/lagrange_multiplier" in m]
    c_sac, c_lag = sac["final_eval_cost_mean"], lag["final_eval_cost_mean"]
    print(f"episode cost: SAC {c_sac:.1f}, SAC-Lag(d=0) {c_lag:.1f}; lambda {lam}")
    assert lam[-1] > lam[0] and lam[-1] > 1.0
    assert c_sac > 10.0  # reward-only SAC drives through the hazards on the way to the goal
    assert c_lag < 0.5 * c_sac

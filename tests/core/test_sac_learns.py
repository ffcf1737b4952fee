"""The README's default run learns: `roborl train seed=S`, exactly as a newcomer launches it
(SAC on InvertedPendulum-v5 with the tuned settings of configs/tuned/), reaches an eval return
of at least 950 (balanced for 95% of the 1000-step episode) on each seed tried.

Negative controls at the same budget, measured on this machine: random actions score about 5
per episode and doing nothing (zero force) about 26; SAC's paper settings (lr 3e-4, 256x256,
alpha 1.0) at the old 12,000-step default reached 1000 on 0 of 8 seeds (finals 90-145); the
default run with its learning signal broken (`algo.gamma=0`, no bootstrapping) ends at 64.2
and 45.0 on seeds 0 and 1. The bound, 950, is far above all of them.
`benchmarks/default_run.py` runs the same command over 10 seeds.
"""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest


def zero_action_return(episodes: int = 10) -> float:
    """Doing nothing: the pendulum falls on its own."""
    env = gym.make("InvertedPendulum-v5")
    out = []
    for i in range(episodes):
        env.reset(seed=i)
        done, total = False, 0.0
        while not done:
            _, r, term, trunc, _ = env.step(np.zeros(env.action_space.shape, np.float32))
            total += float(r)
            done = term or trunc
        out.append(total)
    return float(np.mean(out))


@pytest.mark.parametrize(
    "seed",
    # Each seed is a scheduling group of its own (tests/conftest.py: _GROUP_PER_PARAMETER), so
    # `make test`'s two workers run the two seeds side by side, as benchmarks/default_run.py
    # does, rather than one after the other.
    [0, 1],
)
def test_readme_default_run_balances_the_pendulum(cli, tmp_path, seed: int) -> None:
    run = tmp_path / "run"
    cli("train", f"seed={seed}", "progress=false", f"hydra.run.dir={run}", timeout=900)
    summary = json.loads((run / "summary.json").read_text())
    config = (run / "config.yaml").read_text()
    assert summary["algo"] == "sac" and summary["env"] == "InvertedPendulum-v5"
    assert "hidden_sizes:\n  - 128\n  - 128" in config, "the tuned settings were applied"
    evals = [r for r in cli.read_jsonl(run / "metrics.jsonl") if "eval/return_mean" in r]
    assert evals[0]["eval/return_mean"] < 200, "the first evaluation is still near the start"
    assert summary["final_eval_return"] >= 950, [e["eval/return_mean"] for e in evals]
    assert summary["final_eval_return"] > 10 * zero_action_return()

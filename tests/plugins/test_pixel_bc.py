"""algo=pixel_bc (HIL-SERL's BC baseline, HG-DAgger with a person): cloning scripted-expert
demos from camera frames gives a policy that reaches the block far more often than random
actions, and it refuses to run without demos to clone."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from cli_runner import roborl

from roborl.core.config import build_config
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.plugins.pixel_sac.bc import PixelBC
from roborl.sim.tabletop.env import TabletopEnv

from .conftest import TABLETOP_PIXELS


def random_success(episodes: int) -> float:
    env = TabletopEnv(**TABLETOP_PIXELS)
    env.action_space.seed(0)
    wins = []
    for ep in range(episodes):
        env.reset(seed=1000 + ep)
        while True:
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            if terminated or truncated:
                wins.append(info["success"])
                break
    env.close()
    return float(np.mean(wins))


@pytest.mark.parametrize(
    "seed",
    # Each seed is a scheduling group of its own (tests/conftest.py: _GROUP_PER_PARAMETER): the
    # two runs go to both workers instead of one after the other.
    [0, 1],
)
def test_cloned_policy_beats_random_actions(tmp_path: Path, demos: Path, seed: int) -> None:
    run = tmp_path / "run"
    roborl(
        "train", "algo=pixel_bc", "algo.batch_size=64", "algo.conv_channels=16",
        "algo.conv_strided=2", "env=tabletop_reach_pixels", f"demos={demos}",
        "demo_fraction=1.0", "total_steps=1000", "learning_starts=0", "eval_every=1000",
        "eval_episodes=20", "checkpoint_every=1000", "log_every=500", f"seed={seed}",
        f"hydra.run.dir={run}", cwd=tmp_path,
    )  # fmt: skip
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/bc_loss"] for r in rows if "train/bc_loss" in r]
    cloned = [r["eval/success_rate"] for r in rows if "eval/success_rate" in r][-1]
    assert losses[-1] < losses[0]
    assert cloned >= random_success(20) + 0.25, cloned


def test_without_demos_it_says_what_to_give() -> None:
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)})
    algo = PixelBC(space, gym.spaces.Box(-1, 1, (2,)), build_config(PixelBC.Config, {}))
    obs = {"image": torch.zeros(4, 16, 16, 3, dtype=torch.uint8)}
    batch = Batch(obs, torch.zeros(4, 2), torch.zeros(4), obs, torch.zeros(4))
    with pytest.raises(ConfigError, match="demos="):
        algo.update(batch)

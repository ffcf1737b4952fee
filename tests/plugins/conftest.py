"""Fixtures shared by the learned-reward tests: scripted-expert demos on RoborlTabletop from
pixels, and a success classifier trained on them."""

from __future__ import annotations

import pytest
import torch

from roborl.plugins.demos.record import record
from roborl.plugins.rewards.train import train_classifier
from roborl.sim.tabletop.env import TabletopEnv

TABLETOP_PIXELS = {"obs_mode": "pixels", "tasks": [0], "image_size": 64, "max_episode_steps": 50}


@pytest.fixture
def tabletop_pixels() -> dict:
    """RoborlTabletop's kwargs for the demos: 64 px camera frames, reach task, 50 steps."""
    return dict(TABLETOP_PIXELS)


@pytest.fixture(scope="session")
def demos(tmp_path_factory):
    """40 noisy scripted-expert episodes: one success frame each, the rest not. Session
    scope: an xdist worker that runs another module in between must not record and train
    twice."""
    torch.set_num_threads(1)
    env = TabletopEnv(**TABLETOP_PIXELS)
    ds, _ = record(env, lambda o: env.expert_action(noise=0.3), 40, seed=0, log=lambda m: None)
    env.close()
    return ds.save(tmp_path_factory.mktemp("demos") / "demos.npz")


@pytest.fixture(scope="session")
def trained(demos, tmp_path_factory):
    out = tmp_path_factory.mktemp("clf") / "classifier"
    config = train_classifier(
        str(demos), str(out), steps=300, batch_size=64, val_fraction=0.3, seed=0,
        log=lambda m: None,
    )  # fmt: skip
    return out, config

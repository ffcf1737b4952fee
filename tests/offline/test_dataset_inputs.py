"""Datasets as a user hands them in: wrong env, out-of-bound actions, missing next_observations."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.datasets import OfflineDataset, check_dataset_spaces
from roborl.core.errors import DatasetError


def dataset(n: int = 50, obs_dim: int = 4, act_dim: int = 1, act_scale: float = 1.0):
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n + 1, obs_dim)).astype(np.float32)
    return OfflineDataset.from_arrays(
        {
            "observations": obs[:-1],
            "next_observations": obs[1:],
            "actions": rng.uniform(-act_scale, act_scale, (n, act_dim)).astype(np.float32),
            "rewards": np.ones(n, np.float32),
            "terminals": np.zeros(n, bool),
            "timeouts": np.arange(n) % 10 == 9,
        }
    )


def pendulum_spaces() -> tuple[gym.Space, gym.Space]:
    env = gym.make("InvertedPendulum-v5")  # obs (4,), action (1,) in [-3, 3]
    spaces = env.observation_space, env.action_space
    env.close()
    return spaces


def test_matching_dataset_passes_silently(caplog: pytest.LogCaptureFixture) -> None:
    obs_space, act_space = pendulum_spaces()
    with caplog.at_level(logging.WARNING, logger="roborl.datasets"):
        check_dataset_spaces(dataset(), obs_space, act_space, "InvertedPendulum-v5")
    assert not caplog.records


def test_wrong_observation_dim_names_field_shapes_and_env() -> None:
    obs_space, act_space = pendulum_spaces()
    with pytest.raises(DatasetError) as err:
        check_dataset_spaces(dataset(obs_dim=7), obs_space, act_space, "InvertedPendulum-v5")
    msg = str(err.value)
    assert "'observations'" in msg and "(7,)" in msg and "(4,)" in msg
    assert "InvertedPendulum-v5" in msg


def test_wrong_action_dim_names_field_shapes_and_env() -> None:
    obs_space, act_space = pendulum_spaces()
    with pytest.raises(DatasetError) as err:
        check_dataset_spaces(dataset(act_dim=3), obs_space, act_space, "InvertedPendulum-v5")
    msg = str(err.value)
    assert "'actions'" in msg and "(3,)" in msg and "(1,)" in msg
    assert "InvertedPendulum-v5" in msg


def test_out_of_bound_actions_warn_once_with_the_fraction(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Chosen behaviour: accept and warn once (RIQL's corrupted actions are unclipped)."""
    obs_space, act_space = pendulum_spaces()
    ds = dataset(n=40)
    actions = ds.actions.copy()
    actions[:10] = 5.0  # 25% of transitions beyond the +-3 bounds
    ds = ds.replace(actions=actions)
    with caplog.at_level(logging.WARNING, logger="roborl.datasets"):
        check_dataset_spaces(ds, obs_space, act_space, "InvertedPendulum-v5")
    records = [r for r in caplog.records if r.name == "roborl.datasets"]
    assert len(records) == 1
    assert "25.00%" in records[0].getMessage() and "10 of 40" in records[0].getMessage()

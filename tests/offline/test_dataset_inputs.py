"""Datasets as a user hands them in: wrong env, out-of-bound actions, missing next_observations."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.dataset_spaces import check_dataset_spaces
from roborl.core.datasets import OfflineDataset
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


# -- episodes: only terminals and timeouts end them --------------------------------------------


def episodic(n_eps: int = 20, length: int = 25, seed: int = 0) -> OfflineDataset:
    """Continuous episodes (s'_t = s_{t+1}) cut by timeouts, rewards about 1 per step."""
    rng = np.random.default_rng(seed)
    obs, nxt, rew = [], [], []
    for _ in range(n_eps):
        traj = np.cumsum(rng.normal(size=(length + 1, 3)), 0).astype(np.float32)
        obs.append(traj[:-1])
        nxt.append(traj[1:])
        rew.append(1.0 + 0.5 * rng.random(length))
    n = n_eps * length
    return OfflineDataset.from_arrays(
        {
            "observations": np.concatenate(obs),
            "next_observations": np.concatenate(nxt),
            "actions": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
            "rewards": np.concatenate(rew).astype(np.float32),
            "terminals": np.zeros(n, bool),
            "timeouts": np.arange(n) % length == length - 1,
        }
    )


@pytest.mark.parametrize("field", ["obs", "dynamics"])
def test_corrupted_observations_do_not_split_episodes(field: str) -> None:
    """Issue 17 item 2: IQL's 1000 / (R_max - R_min) must not change when 30% of observations
    (or next observations) are corrupted; before, every corrupted row cut an episode."""
    from roborl.plugins.datasets.corruption import corrupt
    from roborl.plugins.offline.iql import IQL, IQLConfig

    clean = episodic()
    dirty = corrupt(clean, field, "random", rate=0.3, seed=0)
    assert len(dirty.episode_returns()) == len(clean.episode_returns()) == 20
    scales = []
    for ds in (clean, dirty):
        algo = IQL(ds.observation_space, ds.action_space, IQLConfig())
        algo.prepare(ds)
        scales.append(float(algo.reward_scale))
    assert scales[1] == pytest.approx(scales[0], rel=1e-6)


# -- D4RL files without next_observations or timeouts ------------------------------------------


def d4rl_qlearning_reference(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """D4RL's published `qlearning_dataset` rule (terminate_on_end=False, timeouts present),
    restated row by row: next obs is the next row's obs; a timeout row is skipped; the file's
    last row has no next row and is skipped."""
    keep_rows = [i for i in range(len(data["rewards"]) - 1) if not data["timeouts"][i]]
    return {
        "observations": data["observations"][keep_rows],
        "next_observations": data["observations"][[i + 1 for i in keep_rows]],
        "actions": data["actions"][keep_rows],
        "rewards": data["rewards"][keep_rows],
        "terminals": data["terminals"][keep_rows],
    }


def test_missing_next_observations_are_derived_like_d4rl(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rng = np.random.default_rng(1)
    n = 12
    timeouts = np.zeros(n, bool)
    terminals = np.zeros(n, bool)
    timeouts[4] = True  # episode 0..4 cut by a time limit
    terminals[7] = True  # episode 5..7 ends in a terminal
    timeouts[10] = True  # episode 8..10 cut; row 11 starts one more, unfinished
    data = {
        "observations": rng.normal(size=(n, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "terminals": terminals,
        "timeouts": timeouts,
    }
    with caplog.at_level(logging.WARNING, logger="roborl.datasets"):
        ds = OfflineDataset.from_arrays(data, source="d4rl.hdf5")
    ref = d4rl_qlearning_reference(data)
    for name, want in ref.items():
        np.testing.assert_array_equal(getattr(ds, name), want, err_msg=name)
    assert len(ds) == 9  # rows 4, 10 (timeouts) and 11 (last) dropped
    # The kept rows before each dropped timeout now end their episodes.
    assert np.flatnonzero(ds.timeouts).tolist() == [3, 8]
    assert ds.episode_lengths().tolist() == [4, 3, 2]
    msgs = [r.getMessage() for r in caplog.records if r.name == "roborl.datasets"]
    assert len(msgs) == 1 and "derived from the next row" in msgs[0] and "9 of 12" in msgs[0]


def test_missing_next_observations_and_timeouts_is_a_clear_error() -> None:
    n = 5
    with pytest.raises(DatasetError, match="neither 'next_observations' nor 'timeouts'"):
        OfflineDataset.from_arrays(
            {
                "observations": np.zeros((n, 2)),
                "actions": np.zeros((n, 1)),
                "rewards": np.zeros(n),
                "terminals": np.zeros(n, bool),
            }
        )


def test_missing_timeouts_are_inferred_from_continuity() -> None:
    ds = episodic(n_eps=3, length=5)
    data = ds.arrays()
    del data["timeouts"]
    again = OfflineDataset.from_arrays(data)
    assert np.flatnonzero(again.timeouts).tolist() == [4, 9]  # the last row ends the data
    assert again.episode_lengths().tolist() == [5, 5, 5]


def test_minari_refuses_data_whose_next_observations_break_continuity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    from roborl.plugins.datasets.corruption import corrupt
    from roborl.plugins.datasets.sources import save_minari

    dirty = corrupt(episodic(n_eps=2, length=5), "dynamics", "random", rate=0.5, seed=0)
    with pytest.raises(DatasetError, match="npz"):
        save_minari(dirty, "roborl/never-written-v0")


# -- IQL's cosine schedule ----------------------------------------------------------------------


def test_iql_cosine_lr_follows_the_run_length_and_never_rises_again() -> None:
    """Issue 17 item 5: the horizon is the run's total_updates (the offline loop calls
    `set_total_updates`), the lr reaches 0 there and stays at 0 (CosineAnnealingLR rose again
    past T_max, and its horizon was fixed at 1e6)."""
    import torch

    from roborl.plugins.offline.iql import IQL, IQLConfig

    ds = episodic(n_eps=4, length=10)
    algo = IQL(ds.observation_space, ds.action_space, IQLConfig(hidden_sizes=[8, 8]))
    algo.set_total_updates(10)
    algo.prepare(ds)
    gen = torch.Generator().manual_seed(0)
    lrs = []
    for _ in range(25):
        algo.update(ds.sample(16, gen))
        lrs.append(algo.actor_opt.param_groups[0]["lr"])
    assert lrs[4] == pytest.approx(3e-4 * 0.5 * (1 + np.cos(np.pi * 5 / 10)))
    assert all(b <= a for a, b in itertools.pairwise(lrs))
    assert lrs[9:] == [0.0] * 16
    # An explicit max_steps wins over the run's length.
    fixed = IQL(ds.observation_space, ds.action_space, IQLConfig(max_steps=40))
    fixed.set_total_updates(10)
    assert fixed.lr_horizon == 40

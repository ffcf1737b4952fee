"""Exact tests of `load_demo_buffer` (roborl/core/demos.py), written against the mutants that
`make mutants` left open there (tests/mutants-report.md): Dict observations, a two-axis action
space, a dataset whose per-step observation shape differs from the env's flat Box, and the
learned-reward relabel (its episode ends, which include time limits, and its log line). Every
dataset is a few synthetic rows built with `OfflineDataset.from_arrays`; the reward model is a
plain callable with the interface `relabel` calls (`model(obs) -> (reward, success)`)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.datasets import OfflineDataset
from roborl.core.demos import EXTRAS, load_demo_buffer, sample_mixed

ACTION = gym.spaces.Box(-1, 1, (1,), np.float32)


def context(ds: OfflineDataset, config: dict | None = None, model=None) -> SimpleNamespace:
    """The parts of a TrainContext that `load_demo_buffer` reads."""
    return SimpleNamespace(
        run=SimpleNamespace(demos="demos.npz", buffer_device=None),
        device="cpu",
        config=config or {},
        load_dataset=lambda path: ds,
        reward_model=lambda: model,
    )


def dataset(obs, next_obs, n: int, actions=None, **fields) -> OfflineDataset:
    data = {
        "observations": obs,
        "actions": np.linspace(-1, 1, n).reshape(n, 1) if actions is None else actions,
        "rewards": np.arange(n, dtype=np.float64),
        "next_observations": next_obs,
        "terminals": np.eye(n)[-1].astype(bool),
        "timeouts": np.zeros(n, bool),
        **fields,
    }
    return OfflineDataset.from_arrays(data, metadata={"intervened_rows": [1]})


# -- Dict observations ---------------------------------------------------------------------------

DICT = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 255, (2, 2, 1), np.uint8),
        "state": gym.spaces.Box(-100, 100, (2,), np.float32),
    }
)


def test_dict_demos_load_in_the_envs_dtypes_with_their_next_observations() -> None:
    """A Dict env's demos: the buffer is built from the Dict space (not the dataset's dict of
    shapes), and both obs and next obs are cast to each entry's dtype (uint8 image, float32
    state) by reading the space; every sampled row's next obs is the dataset's."""
    n = 4
    frames = {
        "image": np.arange(n + 1, dtype=np.float64)[:, None, None, None] * np.ones((1, 2, 2, 1)),
        "state": np.stack([np.arange(n + 1), -np.arange(n + 1)], 1).astype(np.float64),
    }
    ds = dataset({k: v[:-1] for k, v in frames.items()}, {k: v[1:] for k, v in frames.items()}, n)
    buf = load_demo_buffer(context(ds), DICT, ACTION)
    assert buf.dict_obs and len(buf) == n and buf.capacity == n
    assert buf.obs["image"].dtype == torch.uint8 and buf.obs["state"].dtype == torch.float32
    assert buf.obs["image"][:n, 0, 0, 0].tolist() == [0, 1, 2, 3]
    assert buf.obs["state"][:n].tolist() == [[0.0, 0.0], [1.0, -1.0], [2.0, -2.0], [3.0, -3.0]]
    assert buf.extras["intervened"].tolist() == [False, True, False, False]
    batch = buf.sample(32, torch.Generator().manual_seed(0))
    rows = [int(s) for s in batch.obs["state"][:, 0].tolist()]
    assert set(rows) == set(range(n))
    assert batch.next_obs["image"].dtype == torch.uint8
    assert batch.next_obs["image"][:, 0, 0, 0].tolist() == [r + 1 for r in rows]
    assert batch.next_obs["state"].tolist() == [[r + 1.0, -(r + 1.0)] for r in rows]
    assert batch.rewards.tolist() == [float(r) for r in rows]


# -- two-axis actions ----------------------------------------------------------------------------


def test_actions_of_a_two_axis_space_keep_their_shape() -> None:
    """A (2, 2) action space: the dataset's flat (n, 4) actions are stored as (n, 2, 2), row
    by row, not as one flat axis."""
    n = 3
    obs = np.arange(n + 1, dtype=np.float64).reshape(n + 1, 1) * np.ones((1, 3))
    actions = np.linspace(-1, 1, n * 4).reshape(n, 4)
    space = gym.spaces.Box(-1, 1, (2, 2), np.float32)
    buf = load_demo_buffer(context(dataset(obs[:-1], obs[1:], n, actions)), obs_box(3), space)
    assert tuple(buf.actions.shape) == (n, 2, 2)
    np.testing.assert_allclose(buf.actions.numpy(), actions.reshape(n, 2, 2).astype(np.float32))


def obs_box(dim: int) -> gym.spaces.Box:
    return gym.spaces.Box(-100, 100, (dim,), np.float32)


# -- a dataset shape that differs from the env's flat Box ----------------------------------------


def test_demos_of_another_per_step_shape_mix_with_the_online_rows() -> None:
    """The space check accepts (3, 1) dataset observations for a (3,) Box env (same size, flat
    env); the demo rows must then be stored in the env's shape, so that a mixed batch holds
    online and demo rows alike, the demo rows being the dataset's flattened (it crashed in
    torch.cat when the buffer took the dataset's shape)."""
    n = 4
    obs = np.arange((n + 1) * 3, dtype=np.float64).reshape(n + 1, 3, 1)
    demos = load_demo_buffer(context(dataset(obs[:-1], obs[1:], n)), obs_box(3), ACTION)
    online = ReplayBuffer(8, (3,), (1,), with_costs=True, extras=EXTRAS)
    online.extend(
        np.full((4, 3), -1, np.float32),
        np.zeros((4, 1), np.float32),
        np.zeros(4, np.float32),
        np.full((4, 3), -1, np.float32),
        np.zeros(4, np.float32),
    )
    batch = sample_mixed(online, demos, 8, 0.5, torch.Generator().manual_seed(0))
    assert tuple(batch.obs.shape) == (8, 3)
    assert batch.obs[:4].tolist() == [[-1.0] * 3] * 4
    for row, nxt in zip(batch.obs[4:].tolist(), batch.next_obs[4:].tolist(), strict=True):
        t = int(row[0]) // 3
        assert row == obs[t, :, 0].tolist() and nxt == obs[t + 1, :, 0].tolist()


# -- the learned-reward relabel ------------------------------------------------------------------

FIRES = [False, True, True, True, False, True]  # the model's success on each next obs
TIMEOUT_ROW = 2  # the first episode ends here by a time limit; the second ends at the last row


def fake_model(seen: list):
    """A reward model as `relabel` calls it: one next observation in, (reward, success) out;
    success is the observation's second entry, the reward 10 + its first."""

    def model(obs):
        seen.append(obs)
        return 10.0 + float(obs[0]), bool(obs[1] > 0.5)

    return model


def relabel_reference(fires: list, ends: set, consecutive: int) -> tuple[list, list, int]:
    """Plain Python: success once the model said so on this frame and the consecutive-1 before
    it in the same episode; terminal on success; reward 10 + row on a success, else 0 (with
    consecutive 1 the model's reward on every row, as the wrapper gives it online)."""
    streak, rewards, terminals = 0, [], []
    for i, fired in enumerate(fires):
        streak = streak + 1 if fired else 0
        ok = streak >= consecutive
        rewards.append(10.0 + i if ok or consecutive == 1 else 0.0)
        terminals.append(ok)
        if i in ends:
            streak = 0
    return rewards, terminals, sum(terminals)


def test_relabelled_demos_restart_the_success_streak_at_a_time_limit(caplog) -> None:
    """With `reward=` and `consecutive=2`, the model's streak must restart after a row that
    ended its episode by a time limit (`timeouts`), not only after a terminal: rows 1-3 all
    fire, but row 2 ends the first episode, so only row 2 is a success (row 3 would be one if
    the streak ran on through the timeout). Rewards, terminals and the log line's count follow
    the reference; the log line names the path, the rows, the reward and the successes."""
    n = len(FIRES)
    next_obs = np.stack([np.arange(n), np.asarray(FIRES, np.float64)], 1)
    obs = np.vstack([[[-1.0, 0.0]], next_obs[:-1]])
    timeouts = np.zeros(n, bool)
    timeouts[TIMEOUT_ROW] = True
    ds = dataset(obs, next_obs, n, timeouts=timeouts)
    seen: list = []
    config = {"reward": {"name": "fake", "consecutive": 2}}
    with caplog.at_level(logging.INFO, logger="roborl.core.demos"):
        buf = load_demo_buffer(context(ds, config, fake_model(seen)), obs_box(2), ACTION)
    rewards, terminals, successes = relabel_reference(FIRES, {TIMEOUT_ROW, n - 1}, 2)
    assert successes == 1 and terminals == [False, False, True, False, False, False]
    assert buf.rewards.tolist() == rewards
    assert buf.terminated.tolist() == [float(t) for t in terminals]
    assert len(seen) == n and all(o.dtype == np.float32 and o.shape == (2,) for o in seen)
    assert [float(o[0]) for o in seen] == list(map(float, range(n)))  # next obs, in order
    lines = [r for r in caplog.records if "relabelled" in r.getMessage()]
    assert [r.getMessage() for r in lines] == [
        "demos=demos.npz: 6 transitions relabelled by reward=fake (1 successes)"
    ]
    assert lines[0].levelno == logging.INFO and lines[0].name == "roborl.core.demos"


def test_without_a_timeout_the_streak_runs_on_to_the_next_row(caplog) -> None:
    """The same rows with no time limit: with `reward=fake` (consecutive 1) the four firing
    rows succeed, with `consecutive=2` rows 2 and 3 (one episode); each log line names its
    reward and counts the relabel's successes (not a constant)."""
    n = len(FIRES)
    next_obs = np.stack([np.arange(n), np.asarray(FIRES, np.float64)], 1)
    obs = np.vstack([[[-1.0, 0.0]], next_obs[:-1]])
    config = {"reward": "fake"}  # a bare name: consecutive 1, every firing row succeeds
    with caplog.at_level(logging.INFO, logger="roborl.core.demos"):
        buf = load_demo_buffer(
            context(dataset(obs, next_obs, n), config, fake_model([])), obs_box(2), ACTION
        )
    rewards, terminals, successes = relabel_reference(FIRES, {n - 1}, 1)
    assert successes == 4 and buf.rewards.tolist() == rewards
    config = {"reward": {"name": "fake2", "consecutive": 2}}
    with caplog.at_level(logging.INFO, logger="roborl.core.demos"):
        buf = load_demo_buffer(
            context(dataset(obs, next_obs, n), config, fake_model([])), obs_box(2), ACTION
        )
    rewards, terminals, successes = relabel_reference(FIRES, {n - 1}, 2)
    assert successes == 2 and buf.terminated.tolist() == [float(t) for t in terminals]
    assert [r.getMessage() for r in caplog.records if "relabelled" in r.getMessage()] == [
        "demos=demos.npz: 6 transitions relabelled by reward=fake (4 successes)",
        "demos=demos.npz: 6 transitions relabelled by reward=fake2 (2 successes)",
    ]

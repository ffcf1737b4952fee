"""Hindsight Experience Replay's buffer (`roborl.core.buffer_her`): relabelled goals come from
the same episode (its future for ``future``, inclusive; its last step for ``final``), the
relabelled reward is the env's compute_reward(next achieved goal, new goal), a share
1 - 1/(1+n_sampled_goal) of each batch is relabelled, unfinished and overwritten episodes are
never sampled, n-step windows recompute every reward for the new goal, and a checkpoint
restores (closing the episode it cut). The behavioural check
of HER itself; learning on Fetch is tests/sim/test_her_fetch.py.

Transitions here are synthetic and self-describing: observation = (episode, step, goal_x,
goal_y), the next observation's achieved goal = (episode, step + 1), so each sampled row says
where it came from and which achieved goal it was given."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.buffer_her import HerReplayBuffer
from roborl.core.errors import ConfigError
from roborl.core.goals import ACHIEVED_GOAL, EPISODE_END, GoalObservation, HerConfig, her_options

NO_GOAL = (-1.0, -1.0)  # the stored desired goal, never achieved
GOAL = slice(2, 4)


def compute_reward(achieved: np.ndarray, desired: np.ndarray, info: object) -> np.ndarray:
    """Fetch's sparse reward: 0 within the threshold, else -1."""
    return -(np.linalg.norm(achieved - desired, axis=-1) > 0.5).astype(np.float32)


def make_buffer(capacity: int = 1000, **her: object) -> HerReplayBuffer:
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    return HerReplayBuffer(
        capacity, space, (1,), GOAL, compute_reward, HerConfig(**her), with_costs=True
    )


def rows(episode: int, steps: range, length: int) -> dict[str, np.ndarray]:
    """Transitions `steps` of `episode` (which has `length` steps), as `extend` takes them."""
    k = np.array(list(steps), dtype=np.float32)
    n = len(k)
    obs = np.stack([np.full(n, episode), k, *[np.full(n, g) for g in NO_GOAL]], 1)
    nxt = obs.copy()
    nxt[:, 1] += 1
    achieved = np.stack([np.full(n, episode), k + 1], 1).astype(np.float32)
    return {
        "obs": obs.astype(np.float32),
        "actions": k[:, None],
        "rewards": compute_reward(achieved, np.array(NO_GOAL), None),
        "next_obs": nxt.astype(np.float32),
        "terminated": np.zeros(n, np.float32),
        "extras": {ACHIEVED_GOAL: achieved, EPISODE_END: k + 1 == length},
    }


def fill(buf: HerReplayBuffer, lengths: list[int], consecutive: bool = True) -> None:
    for ep, length in enumerate(lengths):
        if consecutive:
            buf.extend(**rows(ep, range(length), length))
        else:  # one step per add, as the collector's one-env steps after learning starts
            for k in range(length):
                buf.add(**rows(ep, range(k, k + 1), length))


def check_batch(batch, lengths: dict[int, int], strategy: str, n_virtual: int) -> None:
    obs, nxt = batch.obs.numpy(), batch.next_obs.numpy()
    ep, step = obs[:, 0].astype(int), obs[:, 1].astype(int)
    goal = obs[:, GOAL]
    np.testing.assert_array_equal(nxt[:, GOAL], goal)  # obs and next obs: the same goal
    np.testing.assert_array_equal(batch.actions.numpy()[:, 0], step)  # rows kept together
    virtual, real = slice(0, n_virtual), slice(n_virtual, None)
    # relabelled rows: an achieved goal of the same episode, chosen by the strategy
    np.testing.assert_array_equal(goal[virtual, 0], ep[virtual])
    goal_step = goal[virtual, 1].astype(int)
    length = np.array([lengths[e] for e in ep[virtual]])
    if strategy == "future":  # inclusive: the transition's own next achieved goal may come
        assert (goal_step >= step[virtual] + 1).all() and (goal_step <= length).all()
    elif strategy == "final":
        np.testing.assert_array_equal(goal_step, length)
    else:
        assert (goal_step >= 1).all() and (goal_step <= length).all()
    achieved = np.stack([ep, step + 1], 1).astype(np.float32)
    expected = compute_reward(achieved, goal, None)
    np.testing.assert_array_equal(batch.rewards.numpy(), expected)
    # real rows: the stored goal and reward
    np.testing.assert_array_equal(goal[real], np.broadcast_to(NO_GOAL, goal[real].shape))
    assert (batch.rewards.numpy()[real] == -1.0).all()


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_relabelled_goals_and_rewards(strategy: str) -> None:
    lengths = [7, 3, 12, 5, 9]
    buf = make_buffer(strategy=strategy)
    fill(buf, lengths)
    batch = buf.sample(256, torch.Generator().manual_seed(0))
    n_virtual = int((1 - 1 / 5) * 256)  # SB3's her_ratio for n_sampled_goal=4: 204 rows
    check_batch(batch, dict(enumerate(lengths)), strategy, n_virtual)
    rewards = batch.rewards.numpy()
    if strategy == "future":  # hindsight gives successes the stored goals never had
        assert 0.1 < (rewards[:n_virtual] == 0).mean() < 0.9
    if strategy == "final":  # the last step's own row gets its own goal back: reward 0
        obs = batch.obs.numpy()
        last = obs[:n_virtual, 1] + 1 == np.array([lengths[int(e)] for e in obs[:n_virtual, 0]])
        assert (rewards[:n_virtual][last] == 0).all() and last.any()


def test_n_sampled_goal_sets_the_relabelled_share() -> None:
    assert HerConfig(n_sampled_goal=4).relabel_fraction == pytest.approx(0.8)
    for n, relabelled in ((0, 0), (1, 128), (4, 204), (8, 227)):
        buf = make_buffer(n_sampled_goal=n)
        fill(buf, [10, 10])
        batch = buf.sample(256, torch.Generator().manual_seed(1))
        check_batch(batch, {0: 10, 1: 10}, "future", relabelled)


def test_one_step_adds_number_the_same_episodes() -> None:
    buf = make_buffer()
    fill(buf, [4, 6, 5], consecutive=False)
    check_batch(
        buf.sample(256, torch.Generator().manual_seed(2)), {0: 4, 1: 6, 2: 5}, "future", 204
    )


def test_episodes_not_finished_are_not_sampled() -> None:
    buf = make_buffer()
    buf.extend(**rows(0, range(0, 4), 8))  # half an episode
    assert not buf.can_sample(1)
    with pytest.raises(RuntimeError, match="no finished episode"):
        buf.sample(8)
    buf.extend(**rows(0, range(4, 8), 8))
    buf.extend(**rows(1, range(0, 5), 10))  # episode 1 still running
    assert buf.can_sample(8) and not buf.can_sample(20)  # 13 stored
    batch = buf.sample(256, torch.Generator().manual_seed(0))
    assert (batch.obs[:, 0] == 0).all()
    check_batch(batch, {0: 8}, "future", 204)


def test_several_envs_interleaved() -> None:
    """`add` of one row per env (stride = num_envs): each env's episodes are walked on their
    own stream, also with episodes of different lengths ending at different steps."""
    buf = make_buffer()
    lengths = {0: 5, 1: 7, 10: 6, 11: 4}  # env 0 plays episodes 0, 1; env 1 plays 10, 11
    streams = [[(0, k) for k in range(5)] + [(1, k) for k in range(7)],
               [(10, k) for k in range(6)] + [(11, k) for k in range(4)] + [(12, 0), (12, 1)]]  # fmt: skip
    for t in range(12):
        parts = [
            rows(ep, range(k, k + 1), lengths.get(ep, 99)) for ep, k in (s[t] for s in streams)
        ]
        merged = {
            key: np.concatenate([p[key] for p in parts])
            for key in ("obs", "actions", "rewards", "next_obs", "terminated")
        }
        merged["extras"] = {
            key: np.concatenate([p["extras"][key] for p in parts])
            for key in (ACHIEVED_GOAL, EPISODE_END)
        }
        buf.add(**merged)
    batch = buf.sample(512, torch.Generator().manual_seed(3))
    assert set(batch.obs[:, 0].int().tolist()) == {0, 1, 10, 11}  # 12 is unfinished
    check_batch(batch, lengths, "future", int(0.8 * 512))


def test_an_overwritten_episode_is_dropped_whole() -> None:
    buf = make_buffer(capacity=12)
    fill(buf, [5, 5, 5])  # episode 0's first three steps are overwritten
    batch = buf.sample(256, torch.Generator().manual_seed(0))
    assert set(batch.obs[:, 0].int().tolist()) == {1, 2}
    check_batch(batch, {1: 5, 2: 5}, "future", 204)
    small = make_buffer(capacity=4)
    fill(small, [6], consecutive=False)  # longer than the buffer: never sampleable
    assert not small.can_sample(1)


@pytest.mark.parametrize("capacity", [40, 60])
def test_checkpoint_round_trip_closes_the_cut_episode(capacity: int) -> None:
    buf = make_buffer(capacity=40)
    fill(buf, [10, 10, 10, 10])
    buf.extend(**rows(4, range(0, 6), 10))  # the ring wraps (episode 0 is gone); the
    state = buf.state_dict()  # checkpoint cuts episode 4 after 6 of its 10 steps
    restored = make_buffer(capacity=capacity)
    restored.load_state_dict(state)
    batch = restored.sample(512, torch.Generator().manual_seed(0))
    assert set(batch.obs[:, 0].int().tolist()) == {1, 2, 3, 4}
    check_batch(batch, {1: 10, 2: 10, 3: 10, 4: 6}, "future", int(0.8 * 512))
    # the resumed collector restarts its episode: the next rows start a new one
    restored.extend(**rows(5, range(0, 3), 3))
    batch = restored.sample(512, torch.Generator().manual_seed(1))
    assert 5 in set(batch.obs[:, 0].int().tolist())
    check_batch(batch, {1: 10, 2: 10, 3: 10, 4: 6, 5: 3}, "future", int(0.8 * 512))
    mid = make_buffer(capacity=40)
    fill(mid, [10])
    mid.extend(**rows(1, range(0, 4), 10))
    again = make_buffer(capacity=40)
    again.load_state_dict(mid.state_dict())
    assert set(again.sample(256).obs[:, 0].int().tolist()) == {0, 1}  # the cut one, closed


def test_writes_without_goals_are_refused() -> None:
    buf = make_buffer()
    data = rows(0, range(3), 3)
    data["extras"] = {}
    with pytest.raises(ValueError, match="achieved goal"):
        buf.extend(**data)


def n_step_return(ep: int, step: int, used: int, goal: np.ndarray, gamma: float) -> float:
    """The discounted sum of the env's rewards for `goal` over steps step..step+used-1."""
    return sum(
        gamma**k * float(compute_reward(np.array([ep, step + k + 1.0]), goal, None))
        for k in range(used)
    )


def test_n_step_returns_recompute_every_reward_for_the_new_goal() -> None:
    """Relabelled and stored rows alike: the window stays in the transition's episode, every
    reward in it is the env's for the row's goal, and the bootstrap is the window's last next
    observation with that goal, discounted gamma^m."""
    buf, lengths, gamma, n = make_buffer(), [10, 7, 2], 0.9, 3
    fill(buf, lengths)
    batch = buf.sample_nstep(512, n, gamma, torch.Generator().manual_seed(0))
    obs, nxt = batch.obs.numpy(), batch.next_obs.numpy()
    ep, step = obs[:, 0].astype(int), obs[:, 1].astype(int)
    used = np.minimum(n, np.array([lengths[e] for e in ep]) - step)
    np.testing.assert_array_equal(nxt[:, 0], ep)
    np.testing.assert_array_equal(nxt[:, 1], step + used)
    np.testing.assert_array_equal(nxt[:, GOAL], obs[:, GOAL])
    np.testing.assert_allclose(batch.discount.numpy(), gamma**used, rtol=1e-6)
    expected = [n_step_return(*row, gamma) for row in zip(ep, step, used, obs[:, GOAL])]
    np.testing.assert_allclose(batch.rewards.numpy(), expected, rtol=1e-6)
    n_virtual = int(0.8 * 512)
    hits = batch.rewards.numpy()[:n_virtual] > -(1 + gamma + gamma**2) + 1e-6
    assert 0 < hits.sum() < n_virtual  # relabelled windows reach their goal, not all of them
    assert (batch.rewards.numpy()[n_virtual:] <= -1).all()  # stored goals are never reached


def test_n_step_window_stops_at_a_terminal() -> None:
    buf = make_buffer()
    data = rows(0, range(5), 5)
    data["terminated"][1] = 1.0
    buf.extend(**data)
    batch = buf.sample_nstep(256, 3, 0.5, torch.Generator().manual_seed(1))
    step, nxt = batch.obs[:, 1].int().numpy(), batch.next_obs[:, 1].int().numpy()
    expected = np.where(step <= 1, 2, np.minimum(step + 3, 5))  # the terminal's next, or on
    np.testing.assert_array_equal(nxt, expected)
    np.testing.assert_array_equal(batch.terminated.numpy(), (step <= 1).astype(np.float32))


def test_her_options() -> None:
    assert her_options({}) is None and her_options({"her": None}) is None
    assert her_options({"her": "none"}) is None
    assert her_options({"her": "final"}) == HerConfig(strategy="final")
    assert her_options({"her": {"strategy": "episode", "n_sampled_goal": 8}}).n_sampled_goal == 8
    with pytest.raises(ConfigError, match=r"her.strategy='later'.*future, final, episode"):
        her_options({"her": "later"})
    with pytest.raises(ConfigError, match=r"unknown config key 'her\.k'"):
        her_options({"her": {"strategy": "future", "k": 4}})


def test_a_non_goal_env_is_refused_with_what_it_lacks() -> None:
    with pytest.raises(ConfigError, match=r"'Pendulum-v1'.*Box \(3,\), not a Dict"):
        GoalObservation(gym.make("Pendulum-v1"))

    class NoReward(gym.Env):
        observation_space = gym.spaces.Dict(
            {
                k: gym.spaces.Box(-1, 1, (2,))
                for k in ("observation", "achieved_goal", "desired_goal")
            }
        )
        action_space = gym.spaces.Box(-1, 1, (1,))

    with pytest.raises(ConfigError, match="no compute_reward"):
        GoalObservation(NoReward())
    NoReward.observation_space = gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (2,))})
    with pytest.raises(ConfigError, match="lacks achieved_goal, desired_goal"):
        GoalObservation(NoReward())


def test_n_step_window_stops_before_a_person_took_over_when_asked() -> None:
    """As `ReplayBuffer.sample_nstep`'s stop (tests/sac/test_nstep_buffer.py): a window that
    would run into steps 2-3, which a person took, ends before them."""
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    buf = HerReplayBuffer(
        100, space, (1,), GOAL, compute_reward, HerConfig(), extras={"intervened": ((), np.bool_)}
    )
    data = rows(0, range(6), 6)
    data["extras"]["intervened"] = np.isin(np.arange(6), [2, 3])
    buf.extend(**data)
    batch = buf.sample_nstep(256, 3, 0.5, torch.Generator().manual_seed(1), "intervened")
    step, nxt = batch.obs[:, 1].int().numpy(), batch.next_obs[:, 1].int().numpy()
    # 0 and 1 stop before 2; the person's row 2 before 3; from 3 on the policy acts again
    expected = np.select([step <= 1, step == 2], [2, 3], np.minimum(step + 3, 6))
    np.testing.assert_array_equal(nxt, expected)
    plain = buf.sample_nstep(256, 3, 0.5, torch.Generator().manual_seed(1))
    np.testing.assert_array_equal(plain.next_obs[:, 1].int().numpy(), np.minimum(step + 3, 6))

"""The shared Policy helpers: one observation in gives one action out, a batch gives a batch."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from roborl.core.nn import TanhGaussianActor
from roborl.core.policies import AlgorithmPolicy, SquashedGaussianPolicy

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))


class RecordingAlgo:
    observation_space, action_space = OBS, ACT

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], bool]] = []

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        self.calls.append((obs.shape, deterministic))
        return np.tile(np.array([1.5, 0.5], np.float32), (len(obs), 1))


def test_algorithm_policy_batches_one_observation_and_asks_for_deterministic_actions() -> None:
    algo = RecordingAlgo()
    policy = AlgorithmPolicy(algo)
    assert policy.act(np.zeros(3)).shape == (2,)
    assert policy.act(np.zeros((5, 3))).shape == (5, 2)
    assert algo.calls == [((1, 3), True), ((5, 3), True)]


def test_squashed_gaussian_policy_maps_tanh_mean_into_the_action_bounds() -> None:
    torch.manual_seed(0)
    actor = TanhGaussianActor(3, 2, [8])
    policy = SquashedGaussianPolicy(actor, OBS, ACT)
    batch = np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype(np.float32)
    actions = policy.act(batch)
    assert actions.shape == (4, 2)
    assert np.all(actions >= ACT.low) and np.all(actions <= ACT.high)
    with torch.no_grad():
        squashed = actor.deterministic(torch.as_tensor(batch)).numpy()
    np.testing.assert_allclose(
        actions, ACT.low + (squashed + 1) * 0.5 * (ACT.high - ACT.low), rtol=1e-5
    )
    np.testing.assert_allclose(policy.act(batch[2]), actions[2], rtol=1e-6)

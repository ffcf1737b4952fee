"""roborl.core.obs helpers, dict-obs policies and Dict spaces in checkpoints."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.errors import ConfigError
from roborl.core.obs import (
    check_obs_space,
    concat_obs,
    image_keys,
    index_obs,
    is_image_space,
    obs_len,
    stack_obs,
    to_torch,
)
from roborl.core.policies import BatchedPolicy
from roborl.core.spaces import space_from_dict, space_to_dict

SPACE = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 255, (6, 6, 3), np.uint8),
        "stack": gym.spaces.Box(0, 255, (2, 6, 6, 3), np.uint8),
        "state": gym.spaces.Box(-1.0, 1.0, (4,), np.float64),
    }
)


def test_image_keys_and_space_checks():
    assert image_keys(SPACE) == ["image", "stack"]
    assert not is_image_space(SPACE["state"])
    assert not is_image_space(gym.spaces.Box(0, 1, (6, 6, 3), np.float32))  # float: not a frame
    with pytest.raises(ConfigError, match="'task' is a Discrete"):
        check_obs_space(gym.spaces.Dict({"image": SPACE["image"], "task": gym.spaces.Discrete(3)}))


def test_to_torch_keeps_frames_uint8_and_batch_ops():
    batch = stack_obs([SPACE.sample() for _ in range(5)])
    assert obs_len(batch) == 5 and batch["stack"].shape == (5, 2, 6, 6, 3)
    t = to_torch(batch, "cpu")
    assert t["image"].dtype == torch.uint8 and t["stack"].dtype == torch.uint8
    assert t["state"].dtype == torch.float32
    assert torch.equal(t["image"], torch.from_numpy(batch["image"]))
    both = concat_obs([batch, index_obs(batch, slice(1, 3))])
    assert obs_len(both) == 7 and np.array_equal(both["state"][5:], batch["state"][1:3])
    arr = np.zeros((3, 2))
    assert to_torch(arr, "cpu").dtype == torch.float32 and obs_len(arr) == 3


class _MeanPolicy(BatchedPolicy):
    def act_batch(self, obs):
        assert obs["image"].dtype == np.uint8 and obs["image"].ndim == 4
        return np.stack([obs["image"].mean((1, 2, 3)), obs["state"].sum(1)], 1)


def test_batched_policy_takes_one_dict_obs_or_a_batch():
    pol = _MeanPolicy(SPACE, gym.spaces.Box(-1, 1, (2,)))
    one = SPACE.sample()
    a = pol.act(one)
    assert a.shape == (2,)
    assert np.isclose(a[0], one["image"].mean()) and np.isclose(a[1], one["state"].sum())
    batch = stack_obs([one, SPACE.sample()])
    assert pol.act(batch).shape == (2, 2)


def test_dict_space_round_trips_through_weights_only_checkpoint(tmp_path):
    path = tmp_path / "s.pt"
    torch.save({"space": space_to_dict(SPACE)}, path)
    back = space_from_dict(torch.load(path, weights_only=True)["space"])
    assert back == SPACE
    assert space_to_dict(SPACE)["spaces"]["image"]["low"] == 0  # one number, not 108

"""`algo.image_pad_fraction`: the random shift as a fraction of the view (issue 48), so a
32 px and a 64 px camera are augmented alike, where a fixed `image_pad` of 4 pixels moves a
32 px view by 12.5% and a 64 px one by 6%."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.algorithms import resolve_algorithm
from roborl.core.compose import compose_dict
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host


def make(size: int, **kw: object):
    algo_cfg = compose_dict(get_host(), ["algo=drq"], "train")["algo"]
    small = {"hidden_sizes": [16], "feature_dim": 8, "conv_channels": 4, "conv_layers": 2}
    cls, config = resolve_algorithm(get_host(), {**algo_cfg, **small, **kw})
    space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (size, size, 3), np.uint8),
            "state": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        }
    )
    return cls(space, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), config)


def largest_shift(algo, size: int, draws: int = 400) -> int:
    """The largest displacement of a marker pixel under the algorithm's own shift."""
    torch.manual_seed(0)
    image = torch.zeros(draws, 1, size, size)
    image[:, 0, size // 2, size // 2] = 1.0
    moved = algo.shift(image)
    rows, cols = np.unravel_index(moved.flatten(1).argmax(1).numpy(), (size, size))
    return int(max(np.abs(rows - size // 2).max(), np.abs(cols - size // 2).max()))


def test_the_same_fraction_shifts_two_image_sizes_by_the_same_share_of_the_view() -> None:
    small, large = make(32, image_pad_fraction=0.125), make(64, image_pad_fraction=0.125)
    assert largest_shift(small, 32) / 32 == largest_shift(large, 64) / 64 == 0.125
    # the fixed pad does not: 4 pixels are twice the share of the smaller view
    fixed_small, fixed_large = make(32, image_pad=4), make(64, image_pad=4)
    assert largest_shift(fixed_small, 32) / 32 == 2 * largest_shift(fixed_large, 64) / 64


def test_fraction_zero_turns_augmentation_off_and_bad_values_are_refused() -> None:
    algo = make(32, image_pad_fraction=0.0)
    assert largest_shift(algo, 32) == 0
    with pytest.raises(ConfigError, match="image_pad_fraction"):
        make(32, image_pad_fraction=0.9)

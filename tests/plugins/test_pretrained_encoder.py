"""`algo.pretrained_encoder=`: a success classifier's conv net, trained here on the task's
frames, becomes the pixel agent's frozen encoder (SERL's frozen pretrained encoder, with
weights that need no download): loaded exactly, untouched by updates while the trunk and
critics learn, and a layout that does not fit is refused naming the options to set."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.config import build_config
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.plugins.pixel_sac.drq import RLPD
from roborl.plugins.rewards.classifier import load

FITS = {"conv_channels": 32, "conv_layers": 4, "conv_strided": 3, "batch_size": 8}


def agent(path, **overrides) -> RLPD:
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)})
    cfg = build_config(RLPD.Config, {**FITS, "pretrained_encoder": str(path), **overrides})
    return RLPD(space, gym.spaces.Box(-1, 1, (2,), np.float32), cfg)


def test_classifier_conv_is_loaded_frozen_and_the_trunk_still_learns(trained) -> None:
    path, _ = trained
    algo = agent(path)
    conv = algo.encoder.convs["image"]
    for mine, theirs in zip(conv.state_dict().values(), load(path).net.conv.state_dict().values()):
        torch.testing.assert_close(mine, theirs)
    assert not any(p.requires_grad for p in conv.parameters())
    before_conv = [p.clone() for p in conv.parameters()]
    before_trunk = [p.clone() for p in algo.encoder.trunks["image"].parameters()]
    gen = torch.Generator().manual_seed(0)
    obs = {"image": torch.randint(0, 255, (8, 64, 64, 3), generator=gen, dtype=torch.uint8)}
    batch = Batch(obs, torch.rand(8, 2) * 2 - 1, torch.rand(8), obs, torch.zeros(8))
    batch.discount = torch.full((8,), 0.99)  # as the loop's sampler sets it
    for _ in range(3):
        algo.update(batch)
    assert all(torch.equal(a, b) for a, b in zip(before_conv, conv.parameters()))
    assert not all(
        torch.equal(a, b) for a, b in zip(before_trunk, algo.encoder.trunks["image"].parameters())
    )
    target_conv = algo.encoder_target.convs["image"]
    assert all(torch.equal(a, b) for a, b in zip(target_conv.parameters(), conv.parameters()))


def test_a_layout_that_does_not_fit_is_refused_naming_the_options(trained) -> None:
    path, _ = trained
    with pytest.raises(ConfigError, match="conv_strided=3"):
        agent(path, conv_strided=1)


def test_a_small_frame_classifier_names_its_own_strides(tmp_path) -> None:
    """A classifier on 32 px frames has one stride-2 layer: the refusal names conv_strided=1,
    and with it the conv net loads."""
    from roborl.plugins.rewards.classifier import SuccessNet, save

    net = SuccessNet(32, 32, 3, 8, [2, 1, 1, 1])
    config = {"image_keys": ["image"], "frame_shapes": {"image": [32, 32, 3]}, "height": 32,
              "width": 32, "channels": 3, "hidden": 8, "conv_strides": [2, 1, 1, 1]}  # fmt: skip
    save(net, config, tmp_path / "clf32")
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (32, 32, 3), np.uint8)})

    def build(strided: int) -> RLPD:
        cfg = build_config(
            RLPD.Config,
            {**FITS, "conv_strided": strided, "pretrained_encoder": str(tmp_path / "clf32")},
        )
        return RLPD(space, gym.spaces.Box(-1, 1, (2,), np.float32), cfg)

    with pytest.raises(ConfigError, match="conv_strided=1"):
        build(3)
    conv = build(1).encoder.convs["image"]
    for mine, theirs in zip(conv.state_dict().values(), net.conv.state_dict().values()):
        torch.testing.assert_close(mine, theirs)

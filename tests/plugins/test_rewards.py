"""Learned rewards: the success classifier, `roborl reward train`, and the reward wrapper on a
sim env (RoborlTabletop from pixels, scripted-expert frames)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_runner import roborl

from roborl.core.envs import make_env
from roborl.core.errors import CheckpointError, ConfigError
from roborl.core.plugins import PluginHost
from roborl.core.rewards import LearnedReward
from roborl.plugins.rewards.classifier import SuccessNet, classifier_reward, load, save
from roborl.plugins.rewards.cli import main as reward_cli
from roborl.plugins.rewards.train import load_frames


def test_classifier_learns_tabletop_success_on_held_out_frames(trained):
    """Held-out frames (30% of each class, never trained on): chance is 0.5 balanced
    accuracy; the frames one step before success are the hard negatives."""
    _, config = trained
    m = config["metrics"]
    assert m["val_positives"] >= 10 and m["val_negatives"] >= 30
    assert m["val_balanced"] >= 0.75, m
    assert m["val_tpr"] >= 0.6 and m["val_tnr"] >= 0.6, m


def test_classifier_reward_is_its_thresholded_probability(trained, demos):
    out, _ = trained
    frames, _, _ = load_frames(str(demos))
    obs = {"image": frames}
    p = load(out).probability(obs)
    assert (p >= 0.5).any() and (p < 0.5).any()  # both verdicts occur, so the check bites
    for threshold in (0.2, 0.5, 0.8):
        clf = classifier_reward(path=str(out), threshold=threshold)
        reward, success = clf(obs)
        np.testing.assert_array_equal(success, p >= threshold)
        np.testing.assert_array_equal(reward, (p >= threshold).astype(np.float32))
        i = int(np.argmax(p))  # a single observation gives plain Python values
        r1, s1 = clf({"image": frames[i]})
        assert (r1, s1) == (float(p[i] >= threshold), bool(p[i] >= threshold))


def test_learned_reward_wrapper_on_tabletop(trained, tabletop_pixels):
    """`reward=classifier` through the env builder: every step's reward and termination are
    the classifier's verdict on the returned frame; the env's own success still ends the
    episode, as a truncation, and info keeps the env's reward and success."""
    out, _ = trained
    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "env": {"id": "RoborlTabletop-v0", "kwargs": tabletop_pixels},
        "reward": {"name": "classifier", "path": str(out), "threshold": 0.5},
    }
    env = make_env(host.registry, cfg, seed=0)
    wrapper = env.env
    assert isinstance(wrapper, LearnedReward)
    clf = load(out)
    verdicts = []
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, r, term, trunc, info = env.step(env.unwrapped.expert_action(noise=0.3))
            p = float(clf.probability(obs)[0])
            assert r == float(p >= 0.5) and term == (p >= 0.5)
            assert info["learned_success"] == (p >= 0.5)
            assert info["env_reward"] == float(info["success"])
            if info["success"] and not term:
                assert trunc  # env success the classifier missed: episode ends, no terminal
            verdicts.append(p >= 0.5)
            done = term or trunc
    assert any(verdicts)


def test_reward_train_cli_round_trip(demos, tmp_path):
    out = tmp_path / "clf"
    proc = roborl(
        "reward", "train", f"data={demos}", f"out={out}", "steps=20", "seed=3", cwd=tmp_path
    )
    assert "held-out accuracy" in proc.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["format"] == "roborl-success-classifier-1" and config["steps"] == 20
    assert config["image_keys"] == ["image"] and config["frame_shapes"] == {"image": [64, 64, 3]}
    assert "Success classifier" in (out / "README.md").read_text()
    # The folder and a .pt copy (plain tensors + JSON: torch.load(weights_only=True)) agree.
    clf = load(out)
    pt = save(clf.net, {k: v for k, v in config.items() if k != "format"}, tmp_path / "c.pt")
    blob = torch.load(pt, weights_only=True)
    net = SuccessNet(64, 64, 3, config["hidden"])
    net.load_state_dict(blob["state_dict"])
    frames, _, _ = load_frames(str(demos))
    with torch.no_grad():
        expect = torch.sigmoid(net(torch.as_tensor(frames[:16]))).numpy()
    np.testing.assert_allclose(load(pt).probability({"image": frames[:16]}), expect, rtol=1e-6)
    np.testing.assert_allclose(clf.probability({"image": frames[:16]}), expect, rtol=1e-6)


def test_reward_config_errors_name_the_problem(tmp_path, trained, tabletop_pixels):
    host = PluginHost()
    host.load_entry_points()
    assert host.registry.owners[("rewards", "classifier")] == "rewards"
    with pytest.raises(ConfigError, match=r"reward\.path"):
        classifier_reward()
    with pytest.raises(CheckpointError, match="does not exist"):
        classifier_reward(path=str(tmp_path / "nope"))
    cfg = {
        "env": {"id": "RoborlTabletop-v0", "kwargs": {**tabletop_pixels, "image_size": 32}},
        "reward": {"name": "classifier", "path": str(trained[0])},
    }
    with pytest.raises(ConfigError, match=r"'image' frames of shape \(64, 64, 3\)"):
        make_env(host.registry, cfg)


def test_small_frames_keep_a_feature_map_and_old_models_load(demos, tmp_path):
    """Under 64 px the default strides keep a spatial map (three stride-2 layers would leave
    1x1 at 32 px); the strides are saved with the model and used to load it; a model saved
    before the key existed loads with the original strides; bad strides are refused."""
    frames, labels, _ = load_frames(str(demos))
    small = tmp_path / "small.npz"
    np.savez(small, frames=frames[:, ::2, ::2], labels=labels.astype(np.int8))
    out = tmp_path / "clf32"
    roborl("reward", "train", f"data={small}", f"out={out}", "steps=5", cwd=tmp_path)
    assert json.loads((out / "config.json").read_text())["conv_strides"] == [2, 1, 1, 1]
    with torch.no_grad():
        assert load(out).net.conv(torch.zeros(1, 3, 32, 32)).shape[-2:] == (9, 9)
        assert SuccessNet(32, 32, 3).conv(torch.zeros(1, 3, 32, 32)).shape[-2:] == (1, 1)

    net = SuccessNet(64, 64, 3, 16)  # the original strides, saved with no conv_strides key
    legacy = {"image_keys": ["image"], "frame_shapes": {"image": [64, 64, 3]}, "height": 64,
              "width": 64, "channels": 3, "hidden": 16}  # fmt: skip
    save(net, legacy, tmp_path / "old")
    with torch.no_grad():
        expect = torch.sigmoid(net(torch.as_tensor(frames[:4]))).numpy()
    got = load(tmp_path / "old").probability({"image": frames[:4]})
    np.testing.assert_allclose(got, expect, rtol=1e-6)

    with pytest.raises(ConfigError, match=r"conv_strides=\[2, 0\]"):
        reward_cli(["train", f"data={small}", f"out={tmp_path / 'bad'}", "conv_strides=[2,0]"])

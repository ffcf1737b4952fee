"""The actor-learner messages: transitions (Box and Dict observations) and weights survive the
trip exactly, and a message that does not fit fails with a RobotError naming what is wrong."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.errors import RobotError
from roborl.core.loops.collectors import Chunk
from roborl.core.plugins import get_host
from roborl.core.runner import build_algorithm
from roborl.robots.training.actor_learner import wire

ACT = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
BOX = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
DICT = gym.spaces.Dict({"state": BOX, "wrist": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)})


def _chunk(space: gym.Space, n: int = 5) -> Chunk:
    rng = np.random.default_rng(0)

    def obs():
        if isinstance(space, gym.spaces.Dict):
            return {
                k: rng.integers(0, 255, (n, *s.shape)).astype(s.dtype) for k, s in space.items()
            }
        return rng.normal(size=(n, *space.shape)).astype(space.dtype)

    return Chunk(
        obs(),
        rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        rng.normal(size=n).astype(np.float32),
        obs(),
        np.array([0, 0, 0, 0, 1], np.float32),
        None,
        [(12.5, 40, {})],
        {"intervened": np.array([0, 1, 1, 0, 0], bool)},
    )


@pytest.mark.parametrize("space", [BOX, DICT], ids=["box", "dict"])
def test_chunk_round_trip(space: gym.Space) -> None:
    sent = _chunk(space)
    got, version = wire.decode_chunk(wire.encode_chunk(sent, 7), space, ACT)
    assert version == 7 and got.episodes == [(12.5, 40, {})]
    for name in ("obs", "next_obs"):
        a, b = getattr(sent, name), getattr(got, name)
        if isinstance(a, dict):
            assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
        else:
            assert np.array_equal(a, b)
    for name in ("actions", "rewards", "terminated"):
        assert np.array_equal(getattr(sent, name), getattr(got, name))
    assert got.extras["intervened"].dtype == bool
    assert np.array_equal(got.extras["intervened"], sent.extras["intervened"])


def test_chunk_that_does_not_fit_names_the_field() -> None:
    payload = wire.encode_chunk(_chunk(BOX), 0)
    wider = gym.spaces.Box(-np.inf, np.inf, (6,), np.float64)
    with pytest.raises(RobotError, match=r"'obs' has shape \(5, 4\), expected \(5, 6\)"):
        wire.decode_chunk(payload, wider, ACT)
    with pytest.raises(RobotError, match=r"'obs/state' is missing"):
        wire.decode_chunk(payload, DICT, ACT)
    with pytest.raises(RobotError, match="not a safetensors buffer"):
        wire.decode_chunk(b"\x80\x04pickle?", BOX, ACT)


def _sac(hidden: list[int]):
    return build_algorithm(get_host(), {"name": "sac", "hidden_sizes": hidden}, BOX, ACT, "cpu")


def test_weights_reach_the_policy_and_mismatches_are_refused() -> None:
    torch.manual_seed(0)
    learner, actor = _sac([8, 8]), _sac([8, 8])
    obs = np.ones((1, 4))
    assert not np.allclose(learner.act(obs, True), actor.act(obs, True))
    tensors, version = wire.decode_weights(wire.encode_weights(learner.state_dict(), 42))
    assert version == 42
    assert not any("optimizer" in k for k in tensors)  # optimiser states stay with the learner
    actor.load_state_dict(wire.merged_state(actor.state_dict(), tensors))
    assert np.allclose(learner.act(obs, True), actor.act(obs, True))

    other = _sac([16, 16])
    with pytest.raises(RobotError, match=r"learner weights: .* is torch.float32"):
        wire.merged_state(other.state_dict(), tensors)
    del tensors[next(iter(tensors))]
    with pytest.raises(RobotError, match="do not fit the actor's algorithm: missing"):
        wire.merged_state(actor.state_dict(), tensors)

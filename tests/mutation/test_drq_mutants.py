"""Tests of the pixel SAC family (roborl/plugins/pixel_sac/drq.py: DrQ, RLPD) written against
the mutants that `make mutants` found alive there (tests/mutants-report.md): the demo-row
layout and the critic minibatches made from it (against the `nonzero` split), the refusals
and their messages, the encoder/actor/critic settings reaching the networks, frozen targets,
the target entropy, the update counter, the metrics, RLPD's one warning without demos, and
the capture setting reaching its wrapper. The update's maths is
tests/plugins/test_pixel_sac_update_maths.py."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.plugins.pixel_sac.config import DrQConfig, RLPDConfig
from roborl.plugins.pixel_sac.drq import RLPD, DrQ

H, ACT, B = 16, 2, 8
SMALL = {"hidden_sizes": [8], "batch_size": B, "feature_dim": 6, "conv_channels": 2,
         "conv_layers": 2}  # fmt: skip
OBS_SPACE = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 255, (H, H, 3), np.uint8),
        "state": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    }
)
ACT_SPACE = gym.spaces.Box(-np.ones(ACT, np.float32), np.ones(ACT, np.float32))


def make(cls=DrQ, **kw) -> DrQ:
    torch.manual_seed(0)
    config = (RLPDConfig if cls is RLPD else DrQConfig)(**{**SMALL, **kw})
    return cls(OBS_SPACE, ACT_SPACE, config)


def batch(seed: int, is_demo=None, demo_rows=None, discount: bool = True) -> Batch:
    gen = torch.Generator().manual_seed(seed)

    def obs() -> dict[str, torch.Tensor]:
        return {
            "image": torch.randint(0, 256, (B, H, H, 3), generator=gen, dtype=torch.uint8),
            "state": torch.rand(B, 3, generator=gen) * 2 - 1,
        }

    return Batch(
        obs=obs(),
        actions=torch.rand(B, ACT, generator=gen) * 2 - 1,
        rewards=torch.randn(B, generator=gen),
        next_obs=obs(),
        terminated=(torch.rand(B, generator=gen) < 0.3).float(),
        discount=torch.full((B,), 0.99) if discount else None,
        extras={} if is_demo is None else {"is_demo": torch.tensor(is_demo, dtype=torch.bool)},
        demo_rows=demo_rows,
    )


def nonzero_split(mask: list[bool], k: int) -> list[list[int]]:
    m = torch.tensor(mask)
    demo = m.nonzero().squeeze(-1).tensor_split(k)
    online = (~m).nonzero().squeeze(-1).tensor_split(k)
    return [torch.cat([d, o]).tolist() for d, o in zip(demo, online, strict=True)]


BLOCK = [False, False, True, True, True, False, False, False]  # demo rows 2..4
SCATTERED = [True, False, True, False, False, True, False, False]
TAIL = [False] * 5 + [True] * 3


def test_demo_layout() -> None:
    algo = make(critic_steps=2)
    assert algo._demo_layout(batch(0)) == (B, 0, 0)
    assert algo._demo_layout(batch(0, TAIL, demo_rows=3)) == (B, 5, 3)
    assert algo._demo_layout(batch(0, BLOCK)) == (B, 2, 3)
    assert algo._demo_layout(batch(0, [False] * B)) == (B, 0, 0)
    assert algo._demo_layout(batch(0, SCATTERED)) is None


@pytest.mark.parametrize("mask", [BLOCK, SCATTERED, TAIL, [False] * B], ids=str)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_minibatches_split_demo_and_online_rows_evenly(mask: list[bool], k: int) -> None:
    algo = make(critic_steps=k)
    got = [idx.tolist() for idx in algo._minibatches(batch(0, mask))]
    assert got == nonzero_split(mask, k)
    again = algo._minibatches(batch(1, mask))  # made once per layout
    assert [idx.tolist() for idx in again] == got
    if algo._demo_layout(batch(0, mask)) is not None:
        assert algo._splits[algo._demo_layout(batch(0, mask))] is not None


def test_refusals_name_the_algorithm() -> None:
    with pytest.raises(ConfigError, match="algo=drq"):
        DrQ(gym.spaces.Box(0, 255, (8, 8, 3), np.uint8), ACT_SPACE, DrQConfig(**SMALL))
    with pytest.raises(ConfigError, match="algo=drq needs a continuous"):
        DrQ(OBS_SPACE, gym.spaces.Discrete(2), DrQConfig(**SMALL))
    algo = make()
    bad = batch(0)
    bad.obs = bad.obs["state"]
    with pytest.raises(TypeError, match=r"^algo=drq expects Dict batches, got <class 'torch"):
        algo.update(bad)
    with pytest.raises(ValueError, match="algo=drq "):
        algo.update(batch(0, discount=False))


def test_settings_reach_the_networks() -> None:
    algo = make(feature_dim=5, conv_layers=3, conv_strided=2, actor_layer_norm=True,
                critic_layer_norm=True, log_std_min=-7.0, log_std_max=1.5,
                target_entropy=-0.25)  # fmt: skip
    assert algo.encoder.out_dim == 5 + 3
    convs = [m for m in algo.encoder.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 3 and sum(c.stride == (2, 2) for c in convs) == 2
    assert any(isinstance(m, torch.nn.LayerNorm) for m in algo.actor.net)
    assert not any(isinstance(m, torch.nn.Identity) for m in algo.critic.norms)
    assert (algo.actor.log_std_min, algo.actor.log_std_max) == (-7.0, 1.5)
    assert algo.target_entropy == -0.25
    assert make().target_entropy == -ACT
    for net in (algo.encoder_target, algo.critic_target):
        assert not any(p.requires_grad for p in net.parameters())
    assert algo.observation_space is OBS_SPACE and algo.action_space is ACT_SPACE
    assert algo.updates == 0


def test_update_counter_and_metrics(monkeypatch) -> None:
    algo = make(critic_steps=2)
    seen = []
    actor_loss = algo.actor_loss

    def spy(*args, **kwargs):
        out = actor_loss(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(algo, "actor_loss", spy)
    m = algo.update(batch(0, BLOCK))
    assert algo.updates == 1
    assert float(m["demo_fraction"]) == pytest.approx(3 / B)
    logp = next(t for t in seen[0] if isinstance(t, torch.Tensor) and t.dim() == 1)
    assert float(m["entropy"]) == pytest.approx(float(-logp.detach().mean()), rel=1e-6)
    assert "demo_fraction" not in algo.update(batch(1))
    assert algo.updates == 2


def test_rlpd_warns_once_without_demos(caplog) -> None:
    algo = make(RLPD, critic_steps=2)
    with caplog.at_level(logging.WARNING):
        algo.update(batch(0, TAIL, demo_rows=3))
        assert not caplog.records
        algo.update(batch(1))
        algo.update(batch(2))
    warned = [r.getMessage() for r in caplog.records if "without demonstrations" in r.getMessage()]
    assert warned == [
        "algo=rlpd got a batch without demonstrations: give demos=PATH (and demo_fraction, "
        "0.5 = RLPD's symmetric sampling) to learn from them; without, it trains online only "
        "with RLPD's critics and UTD."
    ]


def test_capture_on_cpu_warns_under_the_algorithm_name() -> None:
    with pytest.warns(RuntimeWarning, match="roborl: drq: capture=true but CUDA graphs"):
        algo = make(capture=True)
    assert algo._capture.enabled and not algo._capture.active

"""Tests of FISOR (roborl/plugins/fisor/fisor.py) written against the mutants that `make
mutants` found alive there (tests/mutants-report.md): what the actor's weighted diffusion
loss receives (actions clipped inside (-1, 1); the feasible/infeasible weights on the
boundaries V_h = 0 and Q_h = 0 and below weight 1), the actor-lr decay for 0 and 1 decay
steps, the beta schedule and learning rate reaching the networks, frozen targets, the
missing-cost refusal and the update counter. The update's maths is
tests/safe/test_fisor_update_maths.py."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.plugins.fisor.diffusion import cosine_beta_schedule
from roborl.plugins.fisor.fisor import FISOR, FISORConfig

OBS, ACT, B = 3, 2, 8
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
ACT_SPACE = gym.spaces.Box(-np.ones(ACT, np.float32) * 2, np.ones(ACT, np.float32) * 2)


def make(**overrides) -> FISOR:
    torch.manual_seed(0)
    cfg = FISORConfig(
        **{"hidden_sizes": [8], "actor_width": 8, "actor_blocks": 1, "diffusion_steps": 3,
           **overrides}
    )  # fmt: skip
    return FISOR(OBS_SPACE, ACT_SPACE, cfg)


def batch(seed: int, costs: bool = True) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    actions = torch.rand(B, ACT, generator=gen) * 4 - 2
    actions[0], actions[1] = 2.0, -2.0  # on the action bounds
    return Batch(
        obs=torch.randn(B, OBS, generator=gen),
        actions=actions,
        rewards=torch.randn(B, generator=gen),
        next_obs=torch.randn(B, OBS, generator=gen),
        terminated=(torch.rand(B, generator=gen) < 0.3).float(),
        costs=(torch.rand(B, generator=gen) < 0.5).float() if costs else None,
    )


def constant(net, value: float) -> None:
    """Make an EnsembleMLP output `value` everywhere."""
    with torch.no_grad():
        net.head.weight.zero_()
        net.head.bias.fill_(value)


def spy_actor_loss(algo: FISOR) -> dict:
    seen: dict = {}
    loss = algo.actor.loss

    def recording(obs, actions, weight):
        seen["actions"], seen["weight"] = actions.detach().clone(), weight.detach().clone()
        return loss(obs, actions, weight)

    algo.actor.loss = recording
    return seen


def test_actor_sees_clipped_actions_and_boundary_weights() -> None:
    """V_h = 0 is feasible and Q_h = 0 keeps the reward weight; the reward weight
    exp(T (Q_r - V_r)) is not clipped up to 1."""
    algo = make(reward_temperature=0.5)
    constant(algo.q_r_target, -2.0)
    constant(algo.v_r, 0.0)
    constant(algo.v_h, 0.0)
    constant(algo.q_h_target, 0.0)
    seen = spy_actor_loss(algo)
    m = algo.update(batch(0))
    eps = 1e-5
    assert float(seen["actions"].max()) == pytest.approx(1.0 - eps, abs=1e-7)
    assert float(seen["actions"].min()) == pytest.approx(-1.0 + eps, abs=1e-7)
    assert float(seen["actions"].max()) < 1.0 and float(seen["actions"].min()) > -1.0
    torch.testing.assert_close(seen["weight"], torch.full((B,), math.exp(-1.0)))
    assert m["feasible_frac"] == 1.0


def test_actor_lr_decay_edges() -> None:
    algo = make(actor_decay_steps=0, actor_lr=1e-3)
    algo.update(batch(0))  # no decay, no division by zero
    assert algo.actor_opt.param_groups[0]["lr"] == 1e-3
    algo = make(actor_decay_steps=1, actor_lr=1e-3)
    algo.update(batch(0))
    assert algo.actor_opt.param_groups[0]["lr"] == pytest.approx(1e-3)
    algo.update(batch(1))
    assert algo.actor_opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_configuration_reaches_the_networks() -> None:
    algo = make(beta_schedule="cosine", actor_lr=7e-4)
    torch.testing.assert_close(algo.actor.betas, cosine_beta_schedule(3).to(algo.actor.betas))
    assert algo.actor_opt.param_groups[0]["lr"] == 7e-4
    for net in (algo.q_r_target, algo.q_h_target, algo.actor_target):
        assert not any(p.requires_grad for p in net.parameters())
    assert algo.observation_space is OBS_SPACE and algo.action_space is ACT_SPACE
    with pytest.raises(ConfigError, match="algo=fisor needs a continuous"):
        FISOR(OBS_SPACE, gym.spaces.Discrete(2), FISORConfig(hidden_sizes=[8]))


def test_missing_costs_and_counter() -> None:
    algo = make()
    with pytest.raises(ValueError, match=r"^fisor needs a dataset with per-step costs \(Batch"):
        algo.update(batch(0, costs=False))
    for n in range(1, 3):
        algo.update(batch(n))
        assert algo.updates == n

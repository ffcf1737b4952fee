"""Tests of SAC-Lagrangian (roborl/plugins/sac_lagrangian/sac_lagrangian.py) written against
the mutants that `make mutants` found alive there (tests/mutants-report.md): the refusals and
their messages, the critic count and activation, the frozen cost-critic target, the
undiscounted budget (cost_gamma = 1), the learning rates, the update counter with a delayed
Polyak update, and the metrics. The update's maths is
tests/safe/test_sac_lagrangian_update_maths.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from random_batch import random_batch

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.plugins.sac_lagrangian.sac_lagrangian import SACLagrangian, SACLagrangianConfig

OBS, ACT, B = 3, 2, 12


def make(**overrides) -> SACLagrangian:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(-np.ones(ACT, np.float32), np.ones(ACT, np.float32))
    cfg = SACLagrangianConfig(**{"hidden_sizes": [8, 8], **overrides})
    return SACLagrangian(obs_space, act_space, cfg)


def batch(seed: int, costs: bool = True, discount: bool = True) -> Batch:
    return random_batch(seed, B, OBS, ACT, costs=costs, discount=0.99 if discount else None)


@pytest.mark.parametrize("key", ["compile", "cudagraphs", "capture"])
def test_speed_options_refused_by_name(key: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"algo\.{key}=true is not available .*algo\.{key}=false"
    ):
        make(**{key: True})


def test_n_step_refused_with_its_fix() -> None:
    with pytest.raises(ConfigError, match=r"^algo\.n_step=3: algo=sac_lagrangian uses one-step "
                       r"reward and cost targets; set algo\.n_step=1\.$"):  # fmt: skip
        make(n_step=3)


def test_missing_costs_and_discount_refused() -> None:
    algo = make()
    with pytest.raises(ConfigError, match=r"^algo=sac_lagrangian needs per-step costs \(Batch\."
                       r"costs is None\): train it on a safe task that reports info\['cost'\], "
                       r"e\.g\. env=safe_point_goal\.$"):  # fmt: skip
        algo.update(batch(0, costs=False))
    with pytest.raises(ValueError, match="algo=sac_lagrangian "):
        algo.update(batch(0, discount=False))


def test_layout_learning_rates_and_frozen_cost_target() -> None:
    algo = make(num_critics=3, activation="tanh", actor_lr=1e-2, critic_lr=2e-3, alpha_lr=5e-4)
    assert algo.critic.ensemble == 3
    assert isinstance(algo.cost_critic.act, torch.nn.Tanh)
    assert not any(p.requires_grad for p in algo.cost_critic_target.parameters())
    assert [g["lr"] for g in algo.optimizer.param_groups] == [1e-2, 2e-3, 5e-4]


def test_undiscounted_budget_is_the_episode_budget() -> None:
    assert make(cost_gamma=1.0, cost_limit=25.0, episode_length=50).cost_limit_q == 25.0
    d = make(cost_gamma=0.5, cost_limit=4.0, episode_length=2).cost_limit_q
    assert d == pytest.approx(2.0 * 1.5)  # per-step 2, times 1 + 0.5


def test_counter_delayed_targets_and_metrics() -> None:
    algo = make(target_update_every=2, tau=0.5, cost_gamma=1.0, cost_limit=10.0)
    assert algo.updates == 0
    data = batch(1)
    with torch.no_grad():
        q = algo.q_values(data.obs, data.actions)
    torch.manual_seed(3)
    both = torch.cat([data.obs, data.next_obs], 0)
    with torch.no_grad():
        _, logp = algo.actor.sample(both)
    target_before = [p.detach().clone() for p in algo.critic_target.parameters()]
    torch.manual_seed(3)
    m = algo.update(data)
    assert algo.updates == 1
    for a, b in zip(algo.critic_target.parameters(), target_before, strict=True):
        assert torch.equal(a, b)  # not yet: every second update
    assert float(m["alpha"]) == pytest.approx(algo.config.init_alpha)
    assert m["cost_limit_q"] == 10.0
    assert float(m["q_mean"]) == pytest.approx(float(q.mean()), rel=1e-5, abs=1e-7)
    assert float(m["entropy"]) == pytest.approx(float(-logp[:B].mean()), rel=1e-5)
    algo.update(batch(2))
    assert algo.updates == 2
    for a, b, c in zip(
        algo.critic_target.parameters(), target_before, algo.critic.parameters(), strict=True
    ):
        torch.testing.assert_close(a, 0.5 * b + 0.5 * c.detach())
    algo.update(batch(3))
    assert algo.updates == 3

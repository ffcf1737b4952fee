"""Tests of IQL/RIQL (roborl/plugins/offline/iql.py) written against the mutants that `make
mutants` found alive there (tests/mutants-report.md): the RIQL preset reaching the networks,
the activation and the value network's layout, the frozen target critic, the log-std clip,
the cosine actor-lr horizon (default, and a one-update run), the update counter and the
metrics. The update's maths is tests/offline/test_iql_update_maths.py."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from random_batch import random_batch

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.plugins.offline.iql import (
    DEFAULT_HORIZON,
    IQL,
    LOG_STD_MAX,
    LOG_STD_MIN,
    IQLConfig,
    RIQLConfig,
    expectile_loss,
)

OBS, ACT, B = 3, 2, 12
OBS_SPACE = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
ACT_SPACE = gym.spaces.Box(-np.ones(ACT, np.float32), np.ones(ACT, np.float32))


def make(config_cls=IQLConfig, **overrides) -> IQL:
    torch.manual_seed(0)
    return IQL(OBS_SPACE, ACT_SPACE, config_cls(**{"hidden_sizes": [8, 8], **overrides}))


def batch(seed: int) -> Batch:
    return random_batch(seed, B, OBS, ACT)


def test_riql_preset_reaches_config_and_networks() -> None:
    algo = make(RIQLConfig, preset="hopper/random/dynamics")  # sigma 1, alpha 0.5, K 5
    assert algo.config.num_critics == 5 and algo.config.quantile == 0.5
    assert algo.config.huber_delta == 1.0
    assert algo.critic.ensemble == 5
    assert algo.observation_space is OBS_SPACE and algo.action_space is ACT_SPACE


def test_discrete_actions_refused_naming_the_algorithm() -> None:
    with pytest.raises(ConfigError, match="algo=iql needs a continuous"):
        IQL(OBS_SPACE, gym.spaces.Discrete(3), IQLConfig(hidden_sizes=[8]))


def test_activation_layout_and_frozen_target() -> None:
    algo = make(activation="tanh")
    assert isinstance(algo.critic.act, torch.nn.Tanh)
    assert isinstance(algo.value.act, torch.nn.Tanh)
    assert any(isinstance(m, torch.nn.Tanh) for m in algo.actor.net)
    assert algo.value.ensemble == 1
    assert not any(p.requires_grad for p in algo.critic_target.parameters())


def test_log_prob_clips_the_log_std() -> None:
    algo = make()
    obs, actions = torch.zeros(2, OBS), torch.full((2, ACT), 0.5)
    mean = algo.actor.mean(obs).detach()
    for raw, used in ((-9.0, LOG_STD_MIN), (5.0, LOG_STD_MAX)):
        with torch.no_grad():
            algo.actor.log_std.fill_(raw)
        z = (actions - mean) / math.exp(used)
        want = (-0.5 * z**2 - used - 0.5 * math.log(2 * math.pi)).sum(-1)
        torch.testing.assert_close(algo.actor.log_prob(obs, actions).detach(), want)


def test_expectile_loss_weights() -> None:
    diff = torch.tensor([-2.0, 0.0, 3.0], dtype=torch.float64)
    assert float(expectile_loss(diff, 0.8)) == pytest.approx((0.2 * 4 + 0.8 * 9) / 3)


def test_actor_lr_horizon_default_and_one_update_run() -> None:
    assert make().lr_horizon == DEFAULT_HORIZON
    assert make(max_steps=7).lr_horizon == 7
    algo = make(actor_lr=1e-2)
    algo.set_total_updates(1)
    assert algo.actor_opt.param_groups[0]["lr"] == pytest.approx(1e-2)
    algo.update(batch(0))
    assert algo.actor_opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


def test_update_counter_and_metrics() -> None:
    algo = make()
    data = batch(1)
    with torch.no_grad():
        sa = torch.cat([data.obs, data.actions], -1)
        v = algo.value(data.obs).squeeze(-1)[0]
        q = algo.critic(sa).squeeze(-1)
    m = algo.update(data)
    assert set(m) == {"value_loss", "actor_loss", "critic_loss", "q_mean", "v_mean", "adv_mean"}
    assert float(m["v_mean"]) == pytest.approx(float(v.mean()), rel=1e-5, abs=1e-7)
    assert float(m["q_mean"]) == pytest.approx(float(q.mean()), rel=1e-5, abs=1e-7)
    for n in range(1, 4):
        assert algo.updates == n
        assert algo.state_dict()["updates"] == n
        algo.update(batch(n + 1))


def test_riql_preset_table_and_refusal() -> None:
    from roborl.plugins.offline.iql import riql_preset

    got = riql_preset("Walker2d-medium-replay/Adversarial/Reward")  # dataset names too
    assert got == {"huber_delta": pytest.approx(1.0 / 9.0), "quantile": 0.1, "num_critics": 5}
    assert riql_preset("halfcheetah/random/obs")["huber_delta"] == pytest.approx(100.0)
    for bad in ("ant/random/obs", "hopper/noisy/obs", "hopper/random"):
        with pytest.raises(ConfigError) as err:
            riql_preset(bad)
        assert str(err.value) == (
            f"unknown RIQL preset {bad!r}; accepted: '<task>/<mode>/<field>' with task in "
            "halfcheetah, walker2d, hopper, mode in random, adversarial and field in obs, "
            "action, reward, dynamics (e.g. 'hopper/random/dynamics'), or null for the defaults."
        )


def test_checkpoint_round_trip() -> None:
    a = make(actor_lr=1e-2, max_steps=10)
    with torch.no_grad():
        a.obs_mean.fill_(0.5)
        a.obs_std.fill_(2.0)
        a.reward_scale.fill_(3.0)
    a.update(batch(0))
    a.update(batch(1))
    state = copy.deepcopy(a.state_dict())
    b = make(actor_lr=1e-2)
    b.load_state_dict(state)
    for name in ("actor", "critic", "critic_target", "value"):
        for pa, pb in zip(
            getattr(a, name).parameters(), getattr(b, name).parameters(), strict=True
        ):
            assert torch.equal(pa, pb), name
    for name in ("actor_opt", "critic_opt", "value_opt"):
        sa, sb = getattr(a, name).state_dict()["state"], getattr(b, name).state_dict()["state"]
        assert sa and all(torch.equal(sa[k]["exp_avg"], sb[k]["exp_avg"]) for k in sa), name
    assert torch.equal(b.obs_mean, a.obs_mean) and torch.equal(b.obs_std, a.obs_std)
    assert float(b.reward_scale) == 3.0
    assert b.updates == 2 and b.lr_horizon == 10
    assert b.actor_opt.param_groups[0]["lr"] == pytest.approx(a.actor_opt.param_groups[0]["lr"])
    old = {k: v for k, v in state.items() if k not in ("actor_opt", "updates", "lr_horizon")}
    c = make()
    c.load_state_dict({**old, "actor_sched": {"T_max": 4}})
    assert c.updates == 0 and c.lr_horizon == 4
    assert c.actor_opt.state_dict()["state"] == {}
    d = make()
    d.load_state_dict(old)  # neither a horizon nor an old scheduler state: the default stays
    assert d.lr_horizon == DEFAULT_HORIZON

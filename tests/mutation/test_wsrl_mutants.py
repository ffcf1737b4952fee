"""Tests of WSRL (roborl/plugins/wsrl/wsrl.py) written against the mutants that `make
mutants` found alive there (tests/mutants-report.md): the entropy term of the backup and the
max-target backup against a plain reference, the config refusals and their messages, the
LayerNorm/log-std/value layout, the initial phase, learning rates, the update counters (one
online update with utd_ratio 1 and 4, pretraining), the fixed temperature, the IQL
pretraining branch, the CQL temperature reaching the regulariser, the metrics, and the
capture setting reaching its wrapper. The update's maths is tests/wsrl/test_wsrl_update_maths.py.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from random_batch import random_batch

import roborl.plugins.wsrl.wsrl as wsrl_module
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Batch
from roborl.plugins.wsrl.config import WSRLConfig
from roborl.plugins.wsrl.wsrl import LOG_STD_BOUNDS, WSRL

OBS, ACT, B = 3, 2, 8


def make(**overrides) -> WSRL:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(-np.ones(ACT, np.float32), np.ones(ACT, np.float32))
    cfg = {"hidden_sizes": [8, 8], "num_critics": 2, "batch_size": B, "utd_ratio": 1,
           "cql_n_actions": 2, **overrides}  # fmt: skip
    return WSRL(obs_space, act_space, WSRLConfig(**cfg))


def batch(seed: int) -> Batch:
    return random_batch(seed, B, OBS, ACT, extras=["mc"])


@pytest.mark.parametrize("entropy", [False, True])
@pytest.mark.parametrize("max_backup", [False, True])
def test_td_target_against_reference(entropy: bool, max_backup: bool) -> None:
    algo = make(num_critics=1, critic_subsample=1, cql_n_actions=3, gamma=0.9)
    with torch.no_grad():
        algo.log_alpha.fill_(math.log(0.5))
    data = batch(0)
    n = 3 if max_backup else 1
    torch.manual_seed(5)
    with torch.no_grad():
        rep = data.next_obs.repeat_interleave(n, 0)
        a, logp = algo.actor.sample(rep)
        q = algo.critic_target(torch.cat([rep, a], -1))[0, :, 0]
        if entropy:
            q = q - 0.5 * logp
        v = q.view(B, n).max(1).values
    want = data.rewards + 0.9 * (1 - data.terminated) * v
    torch.manual_seed(5)
    got = algo.td_target(
        data.rewards, data.terminated, data.next_obs, entropy=entropy, max_backup=max_backup
    )
    torch.testing.assert_close(got, want)


def test_backup_entropy_reaches_the_online_target(monkeypatch) -> None:
    seen = []
    algo = make(backup_entropy=True)
    td_target = algo.td_target

    def spy(*args, **kwargs):
        seen.append(kwargs["entropy"])
        return td_target(*args, **kwargs)

    monkeypatch.setattr(algo, "td_target", spy)
    algo.update(batch(0))
    assert seen == [True]


def test_config_refusals() -> None:
    make(num_critics=2, critic_subsample=2)  # the whole ensemble is a valid subset
    with pytest.raises(ConfigError, match=r"^algo\.critic_subsample=3 exceeds algo\.num_critics"
                       r"=2; the REDQ subsample must be at most the ensemble size\.$"):  # fmt: skip
        make(critic_subsample=3)
    with pytest.raises(ConfigError, match=r"^algo\.batch_size=8 is not divisible by algo\."
                       r"utd_ratio=3: .*\(official WSRL: 1024 = 4 x 256\)\.$"):  # fmt: skip
        make(utd_ratio=3)
    with pytest.raises(ConfigError, match=r"^algo\.n_step=3: WSRL uses one-step targets "
                       r"\(as the official code\); set algo\.n_step=1\.$"):  # fmt: skip
        make(n_step=3)


def test_layout_phase_and_learning_rates() -> None:
    algo = make(layer_norm=True, actor_layer_norm=True, actor_lr=1e-2, critic_lr=2e-3,
                alpha_lr=5e-4)  # fmt: skip
    assert not any(isinstance(m, torch.nn.Identity) for m in algo.critic.norms)
    assert not any(isinstance(m, torch.nn.Identity) for m in algo.value.norms)
    assert any(isinstance(m, torch.nn.LayerNorm) for m in algo.actor.net)
    assert (algo.actor.log_std_min, algo.actor.log_std_max) == LOG_STD_BOUNDS
    assert algo.value.ensemble == 1 and algo.value.out_dim == 1
    plain = make(layer_norm=False)
    assert all(isinstance(m, torch.nn.Identity) for m in plain.value.norms)
    assert plain.phase == {"pretrain_updates": 0, "online_steps": 0, "pretrain_done": False}
    assert plain.updates == 0
    assert [g["lr"] for g in algo.optimizer.param_groups] == [1e-2, 2e-3, 2e-3, 5e-4]


@pytest.mark.parametrize("utd", [1, 4])
def test_online_update_counter_and_metrics(utd: int) -> None:
    algo = make(utd_ratio=utd)
    with torch.no_grad():
        alpha = float(algo.log_alpha.exp())
    m = algo.update(batch(0))
    assert algo.updates == (1 if utd == 1 else utd + 1)
    assert set(m) == {"critic_loss", "actor_loss", "alpha", "entropy", "q_mean"}
    assert float(m["alpha"]) == pytest.approx(alpha)
    assert float(m["entropy"]) > -10.0 and torch.isfinite(m["q_mean"])
    algo.update(batch(1))
    assert algo.updates == 2 * (1 if utd == 1 else utd + 1)


def spy_log_pi(algo: WSRL, monkeypatch) -> list:
    seen = []
    actor_losses = algo._actor_losses

    def spy(obs):
        out = actor_losses(obs)
        seen.append(out[2])
        return out

    monkeypatch.setattr(algo, "_actor_losses", spy)
    return seen


@pytest.mark.parametrize("phase", ["online", "pretrain"])
def test_entropy_metric_is_minus_log_pi(phase: str, monkeypatch) -> None:
    algo = make()
    seen = spy_log_pi(algo, monkeypatch)
    m = (algo.update if phase == "online" else algo.pretrain_update)(batch(2))
    assert float(m["entropy"]) == pytest.approx(float(-seen[0].mean()), rel=1e-6)
    assert float(m["entropy"]) != pytest.approx(float(seen[0].mean()), rel=1e-6)


def test_fixed_temperature_gets_no_gradient() -> None:
    algo = make(autotune_alpha=False)
    algo.update(batch(0))
    algo.pretrain_update(batch(1))
    assert algo.log_alpha.grad is None


def test_pretraining_branches_counter_and_temperature(monkeypatch) -> None:
    algo = make(pretrain="iql")
    m = algo.pretrain_update(batch(0))
    assert set(m) == {"v_loss", "td_loss", "q_mean"}
    assert algo.updates == 1

    seen = []
    regulariser = wsrl_module.calql_regulariser

    def spy(*args):
        seen.append(args[-1])
        return regulariser(*args)

    monkeypatch.setattr(wsrl_module, "calql_regulariser", spy)
    algo = make(cql_temperature=2.5)
    m = algo.pretrain_update(batch(0))
    assert seen == [2.5]
    assert set(m) == {"td_loss", "cql_gap", "actor_loss", "alpha", "entropy", "q_mean"}
    assert float(m["alpha"]) == pytest.approx(float(algo.log_alpha.detach().exp()), rel=1e-2)
    assert float(m["entropy"]) > -10.0
    algo.pretrain_update(batch(1))
    assert algo.updates == 2


def test_capture_on_cpu_warns_under_the_algorithm_name() -> None:
    with pytest.warns(RuntimeWarning, match="roborl: wsrl: capture=true but CUDA graphs"):
        algo = make(capture=True)
    assert algo._capture.enabled and not algo._capture.active

"""WSRL matches the official code (zhouzypaul/wsrl) where WSRL is about: the high-UTD update,
the actor's ensemble minimum, the defaults, CQL's max-target backup and the LayerNorm actor."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from roborl.core.errors import CheckpointError, ConfigError
from roborl.core.interfaces import Batch
from roborl.plugins.wsrl.wsrl import WSRL, WSRLConfig

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)


def _algo(**kw) -> WSRL:
    torch.manual_seed(0)
    return WSRL(OBS, ACT, WSRLConfig(**{"hidden_sizes": [16, 16], **kw}))


def _batch(n: int, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        obs=torch.randn(n, 3, generator=g),
        actions=torch.rand(n, 1, generator=g) * 2 - 1,
        rewards=torch.randn(n, generator=g),
        next_obs=torch.randn(n, 3, generator=g),
        terminated=torch.zeros(n),
    )


def _adam_steps(algo: WSRL, params) -> set[int]:
    return {int(algo.optimizer.state[p]["step"]) for p in params}


def test_online_update_is_utd_critic_minibatch_steps_then_one_actor_step() -> None:
    """Official `update_high_utd`: 1024 -> 4 critic steps on 256 each, then ONE actor and
    temperature step on all 1024 (here 64 -> 4 x 16)."""
    torch.set_num_threads(1)
    algo = _algo(batch_size=64, utd_ratio=4)
    seen: list[int] = []
    algo.critic.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[0]))
    metrics = algo.update(_batch(64))
    assert _adam_steps(algo, algo.critic.parameters()) == {4}
    assert _adam_steps(algo, algo.actor.parameters()) == {1}
    assert _adam_steps(algo, [algo.log_alpha]) == {1}
    # four critic minibatches of a quarter batch, then the actor's pass over the whole batch
    assert seen == [16, 16, 16, 16, 64]
    assert set(metrics) >= {"critic_loss", "actor_loss", "alpha", "entropy", "q_mean"}
    # the target critics moved once per critic step: tau = 1 copies the critic exactly
    algo2 = _algo(batch_size=64, utd_ratio=4, tau=1.0)
    algo2.update(_batch(64))
    for p, t in zip(algo2.critic.parameters(), algo2.critic_target.parameters()):
        assert torch.equal(p, t)


def test_batch_not_divisible_by_utd_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"divisible by algo\.utd_ratio"):
        _algo(batch_size=100, utd_ratio=3)


@pytest.mark.parametrize("utd", [1, 4])
def test_actor_loss_is_alpha_logp_minus_min_over_the_ensemble(utd: int) -> None:
    """Three critics that output the constants 1, -2 and 5: the actor's Q is the minimum -2
    (the mean would be 4/3). alpha = 1 and nothing moves (learning rates 0)."""
    algo = _algo(num_critics=3, critic_subsample=2, batch_size=8, utd_ratio=utd,
                 critic_lr=0.0, alpha_lr=0.0, actor_lr=0.0)  # fmt: skip
    with torch.no_grad():
        algo.critic.head.weight.zero_()
        algo.critic.head.bias.copy_(torch.tensor([1.0, -2.0, 5.0]).view(3, 1, 1))
    m = algo.update(_batch(8))
    alpha, entropy = float(m["alpha"]), float(m["entropy"])
    assert alpha == pytest.approx(1.0)
    # actor loss = mean(alpha log pi - min_i Q_i) = -alpha * entropy + 2
    assert float(m["actor_loss"]) == pytest.approx(-alpha * entropy + 2.0, abs=1e-5)


def test_defaults_match_the_official_locomotion_configs() -> None:
    cfg = WSRLConfig()
    assert cfg.backup_entropy is False
    assert cfg.cql_max_target_backup is True
    assert (cfg.actor_lr, cfg.critic_lr, cfg.alpha_lr) == (1e-4, 3e-4, 1e-4)
    assert (cfg.batch_size, cfg.utd_ratio, cfg.warmup_steps) == (1024, 4, 5000)
    assert (cfg.num_critics, cfg.critic_subsample) == (10, 2)
    assert (cfg.cql_alpha, cfg.cql_n_actions, cfg.init_alpha) == (5.0, 10, 1.0)
    assert cfg.hidden_sizes == [256, 256] and cfg.layer_norm and cfg.actor_layer_norm
    algo = WSRL(OBS, ACT, WSRLConfig(hidden_sizes=[8, 8]))
    assert sum(isinstance(m, nn.LayerNorm) for m in algo.actor.modules()) == 2
    # official Policy clips the std to [1e-5, 10]
    assert algo.actor.log_std_min == pytest.approx(math.log(1e-5))
    assert algo.actor.log_std_max == pytest.approx(math.log(10.0))


def test_max_target_backup_takes_the_max_over_sampled_next_actions() -> None:
    """Target critics Q'(s', a') = a' (no hidden layer) and an actor with mean 0 and std 10:
    tanh-squashed samples are near +-1, so the max over 64 sampled next actions is above 0.99
    (all 64 below 0.99 has probability 0.6^64), while one sample is negative half the time."""
    torch.manual_seed(0)
    algo = WSRL(OBS, ACT, WSRLConfig(hidden_sizes=[], num_critics=2, cql_n_actions=64))
    with torch.no_grad():
        algo.actor.head.weight.zero_()
        algo.actor.head.bias.copy_(torch.tensor([0.0, 5.0]))  # log-std clamps to log(10)
        algo.critic_target.head.weight.zero_()
        algo.critic_target.head.weight[:, 3, 0] = 1.0  # input = [obs (3), action (1)]
        algo.critic_target.head.bias.zero_()
    b = _batch(32)
    b.terminated[:4] = 1.0
    gamma = algo.config.gamma
    target = algo.td_target(b.rewards, b.terminated, b.next_obs, entropy=False, max_backup=True)
    v_next = (target - b.rewards)[4:] / gamma
    assert (v_next > 0.99).all() and (v_next < 1.0 + 1e-5).all(), v_next
    torch.testing.assert_close(target[:4], b.rewards[:4])  # terminal: no bootstrap
    single = algo.td_target(b.rewards, b.terminated, b.next_obs, entropy=False, max_backup=False)
    assert ((single - b.rewards)[4:] < 0).any()


def test_checkpoint_without_actor_layernorm_names_the_key_to_set() -> None:
    old = _algo(actor_layer_norm=False).state_dict()
    with pytest.raises(CheckpointError, match=r"algo\.actor_layer_norm=false"):
        _algo().load_state_dict(old)
    _algo(actor_layer_norm=False).load_state_dict(old)  # loads as configured

"""The one soft actor-critic block: every SAC-family member refuses a bad action space the same
way (ConfigError naming the space), and shares SAC's config instead of copying it."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.actor_critic import SACConfig, SoftActorCritic
from roborl.core.config import OffPolicyConfig
from roborl.core.errors import ConfigError
from roborl.plugins.sac.dsac_t import DSACT, DSACTConfig
from roborl.plugins.sac.sac import SAC
from roborl.plugins.sac_lagrangian import SACLagrangian, SACLagrangianConfig
from roborl.plugins.wsrl.wsrl import WSRL, WSRLConfig

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
FAMILY = [
    (SAC, SACConfig),
    (DSACT, DSACTConfig),
    (SACLagrangian, SACLagrangianConfig),
    (WSRL, WSRLConfig),
]


@pytest.mark.parametrize("cls,cfg_cls", FAMILY, ids=lambda x: getattr(x, "name", ""))
def test_discrete_or_unbounded_actions_are_a_config_error(cls, cfg_cls) -> None:
    cfg = cfg_cls(hidden_sizes=[8])
    with pytest.raises(ConfigError, match=r"algo=\w+ needs a continuous action space.*Discrete"):
        cls(OBS, gym.spaces.Discrete(3), cfg)
    unbounded = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(ConfigError, match="finite action bounds"):
        cls(OBS, unbounded, cfg)


def test_every_member_builds_on_the_shared_block_and_off_policy_config() -> None:
    for cls, cfg_cls in FAMILY:
        assert issubclass(cls, SoftActorCritic)
        assert issubclass(cfg_cls, OffPolicyConfig)
    assert issubclass(SACLagrangianConfig, SACConfig)
    # SAC-Lagrangian's SAC fields are SAC's, default for default
    sac = {f.name: f.default for f in dataclasses.fields(SACConfig)}
    lag = {f.name: f.default for f in dataclasses.fields(SACLagrangianConfig)}
    assert {k: lag[k] for k in sac} == sac


@pytest.mark.parametrize("key,value", [("compile", True), ("cudagraphs", True), ("n_step", 3)])
def test_sac_lagrangian_refuses_sac_options_it_does_not_implement(key: str, value) -> None:
    act = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    with pytest.raises(ConfigError, match=rf"algo\.{key}"):
        SACLagrangian(OBS, act, SACLagrangianConfig(hidden_sizes=[8], **{key: value}))


@pytest.mark.parametrize("name", ["fisor", "iql", "riql", "bc"])
def test_other_box_only_algorithms_share_the_same_check(name: str) -> None:
    """FISOR, IQL/RIQL and BC raised TypeError (a roborl bug by the project's rules)."""
    from roborl.core.plugins import get_host

    cls = get_host().registry.get("algorithms", name)
    with pytest.raises(ConfigError, match=rf"algo={name} needs a continuous action space"):
        cls(OBS, gym.spaces.Discrete(3), cls.Config())

"""`roborl dataset collect` finds env configs wherever plugins put them and refuses what it
cannot record."""

from __future__ import annotations

import pytest

from roborl.core.errors import ConfigError
from roborl.plugins.datasets.collect import collect, env_config


def test_env_config_names_resolve_in_core_and_plugin_config_dirs() -> None:
    assert env_config("inverted_pendulum")["id"] == "InvertedPendulum-v5"  # roborl/configs
    assert env_config("safe_point_goal")["id"] == "SafePointGoal-v0"  # a plugin's config dir
    assert env_config("Hopper-v5") == {"id": "Hopper-v5"}  # anything else is a Gymnasium id


def test_discrete_action_env_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"CartPole-v1 has action space Discrete\(2\)"):
        collect("CartPole-v1", quality="random", steps=10)

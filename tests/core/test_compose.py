"""The one composition path (`roborl.core.compose`) that every subcommand uses."""

from __future__ import annotations

import pytest

from roborl.core.compose import compose_dict, compose_saved, first_point, parse_overrides
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host


def test_saved_config_takes_overrides_and_names_unknown_keys() -> None:
    """`resume` and `eval checkpoint=` compose the saved config; a typo is a clear error."""
    host = get_host()
    saved = {"seed": 1, "total_steps": 100, "algo": {"name": "sac", "tau": 0.01}}
    cfg = compose_saved(host, saved, ["total_steps=500"], "resume")
    assert cfg["total_steps"] == 500 and cfg["algo"]["tau"] == 0.01 and cfg["seed"] == 1
    with pytest.raises(ConfigError, match=r"unknown config key 'totl_steps'.*'total_steps'"):
        compose_saved(host, saved, ["totl_steps=500"], "resume")


def test_override_syntax_errors_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="roborl eval: cannot parse"):
        parse_overrides(["seed=[1,"], "eval")
    with pytest.raises(ConfigError, match="unknown option '--seed'"):
        parse_overrides(["--seed", "3"], "deploy")


def test_first_point_of_a_sweep_is_checked_before_the_multirun() -> None:
    assert first_point(["seed=range(3,6)", "algo=sac,dsac_t", "hydra.launcher.x=1"]) == [
        "seed=3",
        "algo=sac",
    ]
    # glob() options are listed by Hydra's sweeper at run time; interval() is a sampler.
    assert first_point(["algo=glob(*sac*)", "x=interval(0,1)", "seed=2"]) == ["seed=2"]


def test_plugin_env_names_compose_for_sim_robot() -> None:
    """sim-robot's env=NAME comes from any plugin's config dir (it read roborl's only)."""
    from roborl.robots.nodes.common import SIM_ROBOT_CONFIG, compose_options
    from roborl.robots.nodes.sim_robot import SimRobotOptions

    opts, cfg = compose_options(
        ["env=safe_point_goal", "rate_hz=50"], SimRobotOptions, SIM_ROBOT_CONFIG, "sim-robot"
    )
    assert cfg["env"]["id"] == "SafePointGoal-v0"
    assert opts.rate_hz == 50.0 and opts.on_terminate == "reset"


def test_compose_inside_a_hydra_context_keeps_it() -> None:
    """A compose inside a running Hydra app (a job, a notebook's initialize) leaves it intact."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    host = get_host()
    with initialize_config_module("roborl.configs", version_base="1.3"):
        assert compose_dict(host, ["env=hopper"], "test")["env"]["id"] == "Hopper-v5"
        assert GlobalHydra.instance().is_initialized()


def test_eval_with_checkpoint_refuses_algo_overrides(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    """The checkpoint fixes the algorithm: an algo.* override would be silently ignored, so
    only the keys saved data may not decide (none for SAC) are accepted beside it."""
    import gymnasium as gym
    import numpy as np

    from roborl.core.algorithms import build_algorithm
    from roborl.core.checkpoint import save_checkpoint
    from roborl.core.cli import main
    from roborl.core.config import config_to_dict
    from roborl.core.spaces import space_to_dict

    obs_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)
    act_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    algo = build_algorithm(
        get_host(), {"name": "sac", "hidden_sizes": [4]}, obs_space, act_space, "cpu"
    )
    path = tmp_path / "sac.pt"
    save_checkpoint(
        path,
        {
            "algo": "sac",
            "algo_config": config_to_dict(algo.config),
            "observation_space": space_to_dict(obs_space),
            "action_space": space_to_dict(act_space),
            "state": algo.state_dict(),
            "config": {"env": {"id": "Pendulum-v1"}},
        },
    )
    assert main(["eval", f"checkpoint={path}", "algo.tau=0.1"]) == 2
    err = capsys.readouterr().err
    assert "algo.tau=0.1" in err and "come from the checkpoint" in err, err


def test_train_sweep_with_interval_names_a_sampler(capsys: pytest.CaptureFixture[str]) -> None:
    """Hydra's grid sweeper cannot enumerate interval(): a clear error, not its traceback."""
    from roborl.core.cli import main

    assert main(["train", "-m", "algo.tau=interval(0.001,0.01)"]) == 2
    err = capsys.readouterr().err
    assert "interval" in err and "roborl tune" in err and "Traceback" not in err

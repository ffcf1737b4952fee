"""More bad input that must end in a one-paragraph error, not a traceback: a checkpoint
evaluated on an env of other spaces, a device this machine lacks, and the tuned preset of the
default env applied to another env id."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from roborl.core.cli.eval import check_saved_spaces
from roborl.core.compose import compose, tuned_overrides
from roborl.core.config import RunConfig, build_config
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host
from roborl.core.spaces import space_to_dict

TINY = [
    "total_steps=300",
    "learning_starts=100",
    "eval_every=300",
    "eval_episodes=1",
    "checkpoint_every=300",
    "algo.batch_size=32",
    "algo.hidden_sizes=[16,16]",
    "progress=false",
]


def _assert_clean_error(proc, *needles: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


# -- 1. a checkpoint evaluated on an env whose spaces differ --------------------------------


def test_eval_on_env_of_other_spaces_names_env_and_shapes(cli, tmp_path) -> None:
    run = tmp_path / "run"
    cli("train", *TINY, f"hydra.run.dir={run}")  # InvertedPendulum-v5: obs (4,)
    proc = cli("eval", f"checkpoint={run}", "env=hopper", "episodes=1", check=False)
    _assert_clean_error(proc, "Hopper-v5", "(4,)", "(11,)", "observation_space")
    assert "mat1 and mat2" not in proc.stderr


def _saved(obs: gym.Space, act: gym.Space) -> dict:
    return {"observation_space": space_to_dict(obs), "action_space": space_to_dict(act)}


class _Env:
    def __init__(self, obs: gym.Space, act: gym.Space) -> None:
        self.observation_space, self.action_space = obs, act


def test_saved_space_check_accepts_other_bounds_and_float_precision() -> None:
    cfg = {"env": {"id": "X-v0"}}
    saved = _saved(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,)))
    env = _Env(gym.spaces.Box(-5, 5, (3,), np.float64), gym.spaces.Box(-2, 2, (2,)))
    check_saved_spaces(saved, env, cfg, "checkpoint 'x'")  # bounds and float width may differ
    check_saved_spaces({}, env, cfg, "checkpoint 'x'")  # nothing saved: nothing to compare
    with pytest.raises(ConfigError, match=r"X-v0.*takes actions in.*shape: saved \(2,\), env"):
        check_saved_spaces(
            saved, _Env(env.observation_space, gym.spaces.Box(-1, 1, (3,))), cfg, "c"
        )


def test_saved_space_check_names_dict_keys_and_image_dtype() -> None:
    cfg = {"env": {"id": "Cam-v0"}}
    act = gym.spaces.Box(-1, 1, (2,))
    image = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    state = gym.spaces.Box(-1, 1, (4,))
    saved = _saved(gym.spaces.Dict({"image": image, "state": state}), act)
    with pytest.raises(ConfigError, match=r"keys: saved \['image', 'state'\], env \['state'\]"):
        check_saved_spaces(saved, _Env(gym.spaces.Dict({"state": state}), act), cfg, "c")
    float_image = gym.spaces.Box(0, 1, (8, 8, 3), np.float32)
    with pytest.raises(ConfigError, match=r"dtype at key 'image': saved uint8, env float32"):
        env = _Env(gym.spaces.Dict({"image": float_image, "state": state}), act)
        check_saved_spaces(saved, env, cfg, "c")
    with pytest.raises(ConfigError, match=r"space type: saved Dict, env Box"):
        check_saved_spaces(saved, _Env(state, act), cfg, "c")


# -- 2. device= and buffer_device= -----------------------------------------------------------


def test_train_device_gpu_names_key_value_and_accepted(cli) -> None:
    proc = cli("train", *cli.FAST, "device=gpu", check=False)
    _assert_clean_error(proc, "device='gpu'", "not a torch device", "'cuda'", "cpu")
    assert "RuntimeError" not in proc.stderr


def test_device_that_is_not_here_is_a_config_error() -> None:
    missing = f"cuda:{torch.cuda.device_count() if torch.cuda.is_available() else 0}"
    with pytest.raises(ConfigError, match=rf"^device='{missing}' is not available.*cpu"):
        build_config(RunConfig, {"device": missing})
    with pytest.raises(ConfigError, match=r"^buffer_device='gpu' is not a torch device"):
        build_config(RunConfig, {"buffer_device": "gpu"})
    with pytest.raises(ConfigError, match=r"^device='meta' is not a device roborl trains on"):
        build_config(RunConfig, {"device": "meta"})
    run = build_config(RunConfig, {"device": "cpu", "buffer_device": None})
    assert run.device == "cpu" and run.buffer_device is None


def test_eval_device_is_checked_before_loading(cli, tmp_path) -> None:
    proc = cli("eval", f"checkpoint={tmp_path / 'missing.pt'}", "device=gpu", check=False)
    _assert_clean_error(proc, "device='gpu'", "not a torch device")


# -- 3. the tuned preset applies to the env id it was tuned on -------------------------------


def test_tuned_preset_only_for_its_env_id() -> None:
    host = get_host()
    default = compose(host, [], "train").algo
    assert (default.actor_lr, list(default.hidden_sizes)) == (1.0e-3, [128, 128])
    other = compose(host, ["env.id=Pendulum-v1"], "train")
    assert other.env.id == "Pendulum-v1"
    assert (other.algo.actor_lr, list(other.algo.hidden_sizes)) == (3.0e-4, [256, 256])
    assert other.algo.init_alpha == 1.0
    same = compose(host, ["env.id=InvertedPendulum-v5"], "train").algo
    assert same.actor_lr == 1.0e-3, "the tuned env's own id keeps the preset"
    kept = compose(host, ["env.id=Pendulum-v1", "algo.critic_lr=0.01"], "train").algo
    assert (kept.critic_lr, kept.actor_lr) == (0.01, 3.0e-4)
    chosen = compose(host, ["env.id=Pendulum-v1", "tuned=sac_inverted_pendulum"], "train")
    assert chosen.algo.actor_lr == 1.0e-3, "an explicit tuned= is the user's choice"
    assert tuned_overrides(host, ["env.id=Pendulum-v1"]) == ["~tuned"]
    assert tuned_overrides(host, []) == []


def test_train_cfg_job_with_other_env_id_has_no_tuned_settings(cli) -> None:
    """`roborl train` composes again inside `@hydra.main`: it gets the same `~tuned`."""
    proc = cli("train", "env.id=Pendulum-v1", "--cfg", "job")
    algo = yaml.safe_load(proc.stdout)["algo"]
    assert (algo["actor_lr"], algo["hidden_sizes"]) == (3.0e-4, [256, 256])
    proc = cli("train", "--cfg", "job")
    algo = yaml.safe_load(proc.stdout)["algo"]
    assert (algo["actor_lr"], algo["hidden_sizes"]) == (1.0e-3, [128, 128]), "the README run"


def test_a_buffer_smaller_than_a_batch_is_refused(cli) -> None:
    """algo.buffer_size=10 under batch_size 256 used to run to the end without one update."""
    proc = cli(
        "train", "algo.buffer_size=10", "total_steps=300", "learning_starts=50",
        "progress=false", check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "algo.buffer_size=10 is smaller than algo.batch_size=256" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("algo", ["sac", "dsac_t", "iql", "fisor", "rlpd"])
def test_a_zero_hidden_width_is_a_config_error_naming_the_key(algo: str) -> None:
    """`algo.hidden_sizes=[0]` used to end in a ZeroDivisionError from the weight init."""
    from roborl.core.algorithms import resolve_algorithm

    algo_cfg = compose(get_host(), [f"algo={algo}"]).algo
    values = {**dict(algo_cfg), "hidden_sizes": [64, 0]}
    with pytest.raises(ConfigError, match=r"hidden_sizes=\[64, 0\].*got 0"):
        resolve_algorithm(get_host(), values)


@pytest.mark.parametrize("value", [-1, 0, 2.5, "many"])
def test_a_bad_max_episode_steps_is_a_config_error(value: object) -> None:
    """`env.max_episode_steps=-1` used to be accepted and reach Gymnasium's TimeLimit."""
    from roborl.core.envs import env_factory

    registry = get_host().registry
    with pytest.raises(ConfigError, match=r"env\.max_episode_steps=.* whole number >= 1"):
        env_factory(registry, {"id": "Pendulum-v1", "max_episode_steps": value})


@pytest.mark.parametrize(
    ("key", "hint"), [("frame_stak", "Did you mean 'frame_stack'"), ("render_mode", "env.kwargs")]
)
def test_an_unknown_env_key_is_a_config_error(key: str, hint: str) -> None:
    """`+env.frame_stak=3` (or an env argument outside `kwargs`) used to be accepted and read
    by nothing: the run started without the setting."""
    from roborl.core.algorithms import split_config

    cfg = dict(compose(get_host(), ["env=inverted_pendulum", "algo=sac"]))
    cfg["env"] = {"id": "InvertedPendulum-v5", "kwargs": {}, key: 3}
    with pytest.raises(ConfigError, match=rf"unknown env config key\(s\): {key}\..*{hint}"):
        split_config(cfg, get_host())


def test_every_shipped_env_config_passes_the_env_key_check() -> None:
    """The check must not refuse what roborl ships: every env YAML's keys are accepted."""
    from roborl.core.compose import config_roots
    from roborl.core.envs import check_env_section

    files = [p for root in config_roots(get_host()) for p in (root / "env").rglob("*.yaml")]
    assert len(files) >= 20
    for path in files:
        section = yaml.safe_load(path.read_text()) or {}
        section.pop("defaults", None)
        check_env_section(section)

"""`PolicySource` / `load_policy`: the one place eval, deploy, export, demos and collect turn
checkpoint=/model=/runtime=/algo= into a policy; each kind loads, each bad combination is
refused with the message every command shares."""

from __future__ import annotations

import logging
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.checkpoint import save_checkpoint
from roborl.core.config import config_to_dict
from roborl.core.errors import ConfigError
from roborl.core.model_dir import save_model_dir
from roborl.core.plugins import get_host
from roborl.core.policy_source import PolicySource, load_policy, require_checkpoint_free
from roborl.core.saved_data import LocalSettings
from roborl.core.spaces import space_to_dict

# Pendulum-v1's spaces, so the policies can also act on that env (demos, collect).
HIGH = np.array([1.0, 1.0, 8.0], np.float32)
OBS = gym.spaces.Box(-HIGH, HIGH, dtype=np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
SAVED_ROBOT = {"name": "ros2", "rate_hz": 10.0}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny SAC checkpoint written through the real plugin and checkpoint format."""
    from roborl.core.algorithms import build_algorithm

    algo = build_algorithm(get_host(), {"name": "sac", "hidden_sizes": [4]}, OBS, ACT, "cpu")
    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    save_checkpoint(
        path,
        {
            "algo": "sac",
            "algo_config": config_to_dict(algo.config),
            "observation_space": space_to_dict(OBS),
            "action_space": space_to_dict(ACT),
            "state": algo.state_dict(),
            "config": {"env": {"id": "Tiny-v0"}, "robot": SAVED_ROBOT},
            "runner": {"step": 7},
        },
    )
    return path


@pytest.fixture(scope="module")
def model(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint as a model folder (safetensors + config.json)."""
    from roborl.core.checkpoint import load_checkpoint

    ckpt = load_checkpoint(checkpoint)
    out = tmp_path_factory.mktemp("model") / "m"
    save_model_dir(
        out,
        algo=ckpt["algo"],
        algo_config=ckpt["algo_config"],
        observation_space=ckpt["observation_space"],
        action_space=ckpt["action_space"],
        state=ckpt["state"],
        config=ckpt["config"],
        source={"step": 7},
    )
    return out


def _acts(policy: object) -> np.ndarray:
    obs = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    return np.asarray(policy.act(obs))  # type: ignore[attr-defined]


def test_a_checkpoint_loads_its_algorithm_and_data(checkpoint: Path) -> None:
    loaded = load_policy(PolicySource("eval", checkpoint=str(checkpoint)), get_host())
    assert loaded.source.kind == "checkpoint"
    assert loaded.algorithm is not None and loaded.metadata["algo"] == "sac"
    assert loaded.metadata["runner"]["step"] == 7
    assert loaded.description == f"checkpoint {str(checkpoint)!r}"
    assert loaded.policy is loaded.policy  # asked of the algorithm once
    assert _acts(loaded.policy).shape == (1,)


def test_a_model_folder_acts_like_its_checkpoint(checkpoint: Path, model: Path) -> None:
    host = get_host()
    from_ckpt = load_policy(PolicySource("eval", checkpoint=str(checkpoint)), host)
    loaded = load_policy(PolicySource("eval", model=str(model)), host)
    assert loaded.source.kind == "model" and loaded.algorithm is not None
    assert loaded.description == f"model folder {str(model)!r}"
    assert loaded.metadata["config"]["env"]["id"] == "Tiny-v0"
    np.testing.assert_array_equal(_acts(loaded.policy), _acts(from_ckpt.policy))


def test_from_path_tells_a_model_folder_from_a_checkpoint(checkpoint: Path, model: Path) -> None:
    assert PolicySource.from_path(model, "demos record").kind == "model"
    assert PolicySource.from_path(checkpoint, "demos record").kind == "checkpoint"


def test_runtime_onnx_runs_policy_onnx_without_an_algorithm(
    checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from roborl.plugins.export.cli import export

    host = get_host()
    out = tmp_path / "onnx"
    export(host, str(checkpoint), out, format="onnx")
    source = PolicySource("deploy", model=str(out), runtime="onnx")
    local = LocalSettings(robot={**SAVED_ROBOT, "rate_hz": 50.0})
    with caplog.at_level(logging.WARNING):
        loaded = load_policy(source, host, settings=local)
    assert source.kind == "onnx" and loaded.algorithm is None
    assert loaded.description == f"model folder {str(out)!r}"
    assert loaded.metadata["algo"] == "sac"
    torch_policy = load_policy(PolicySource("eval", checkpoint=str(checkpoint)), host).policy
    np.testing.assert_allclose(_acts(loaded.policy), _acts(torch_policy), atol=1e-5)
    # No algorithm is built, so the loader itself names where the saved robot differs.
    assert any("rate_hz" in r.getMessage() for r in caplog.records), caplog.text
    loaded.close()  # nothing to close; must not fail


def test_a_checkpoint_free_algorithm_is_built_on_the_given_spaces() -> None:
    source = PolicySource("eval", algo="random", algo_config={"name": "random", "seed": 3})
    assert source.kind == "algo"
    with pytest.raises(TypeError, match="spaces"):
        load_policy(source, get_host())
    loaded = load_policy(source, get_host(), spaces=(OBS, ACT))
    assert loaded.algorithm is not None and loaded.algorithm.name == "random"
    assert loaded.description == "algo=random" and loaded.metadata == {"algo": "random"}
    assert ACT.contains(_acts(loaded.policy))
    loaded.close()


def test_an_algorithm_that_learns_needs_a_checkpoint() -> None:
    source = PolicySource("deploy", algo="sac")
    message = r"roborl deploy: algo=sac learns its weights, so it needs checkpoint=PATH"
    with pytest.raises(ConfigError, match=message):
        source.check_algorithm(get_host())
    with pytest.raises(ConfigError, match=message):
        load_policy(source, get_host(), spaces=(OBS, ACT))
    with pytest.raises(ConfigError, match="can run from config alone"):
        require_checkpoint_free(get_host(), "sac", "eval")
    require_checkpoint_free(get_host(), "random", "eval")  # acts without training


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"checkpoint": "a.pt", "model": "d"}, r"roborl eval: give checkpoint=PATH or model=DIR, not both\."),
        ({"checkpoint": "a.pt", "algo": "llm"}, r"give one of checkpoint=PATH, model=DIR or algo=NAME"),
        ({"checkpoint": "a.pt", "runtime": "onnx"}, r"roborl eval: runtime=onnx runs the policy\.onnx of an export folder: give model=DIR"),
        ({"algo": "llm", "runtime": "onnx"}, r"checkpoint= and algo= run on torch"),
        ({}, r"roborl eval: checkpoint=PATH is required \(a \.pt file or a run directory\), or model=DIR"),
    ],
)  # fmt: skip
def test_bad_combinations_are_refused_with_one_message(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        PolicySource("eval", **options)  # type: ignore[arg-type]


def test_a_model_folder_given_as_checkpoint_is_refused(model: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        PolicySource("eval", checkpoint=str(model))
    assert str(refused.value) == (
        f"roborl eval: {str(model)!r} is a folder written by roborl export; load it with "
        f"model={model} (checkpoint= takes a .pt file or a run directory)."
    )
    with pytest.raises(ConfigError, match=r"roborl export: .* it is already exported"):
        PolicySource("export", checkpoint=str(model), accepts_model=False)


def test_export_refuses_a_model_folder_as_its_checkpoint(model: Path, tmp_path: Path) -> None:
    from roborl.plugins.export.cli import export

    with pytest.raises(ConfigError, match="is a folder written by roborl export"):
        export(get_host(), str(model), tmp_path / "again")
    assert not (tmp_path / "again").exists()


def test_demos_record_acts_with_a_model_folder_or_a_checkpoint(
    model: Path, checkpoint: Path
) -> None:
    from roborl.plugins.demos.record import make_policy

    env = gym.make("Pendulum-v1")
    try:
        act = make_policy(str(model), env, get_host())
        from_ckpt = make_policy(str(checkpoint), env, get_host())
    finally:
        env.close()
    obs = np.linspace(-1.0, 1.0, 3, dtype=np.float32)
    np.testing.assert_array_equal(act(obs), from_ckpt(obs))
    assert act(obs).dtype == np.float32


def test_dataset_collect_rolls_out_a_model_folder_like_its_checkpoint(
    model: Path, checkpoint: Path
) -> None:
    from roborl.plugins.datasets.collect import collect

    kwargs = {"quality": "expert", "steps": 30, "ref_episodes": 1, "log": lambda m: None}
    by_model = collect("Pendulum-v1", policy=str(model), **kwargs)  # type: ignore[arg-type]
    by_ckpt = collect("Pendulum-v1", policy=str(checkpoint), **kwargs)  # type: ignore[arg-type]
    assert by_model.metadata["train_steps"] == 0 and len(by_model) == 30
    assert by_model.metadata["policy"] == str(model.resolve())
    assert by_model.metadata["expert_policy_return"] == by_ckpt.metadata["expert_policy_return"]

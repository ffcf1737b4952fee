"""`roborl export ... format=onnx`: every algorithm with an actor graph writes a policy.onnx
whose onnxruntime actions equal its torch policy's (atol 1e-5) on random observations from
the space; `eval`/`deploy`'s `runtime=onnx` loader; refusals, a missing onnxruntime and a
broken policy.onnx are one-line errors. Tiny, randomly initialised networks: no training."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.actor_graph import GraphInput
from roborl.core.algorithms import build_algorithm
from roborl.core.checkpoint import save_checkpoint
from roborl.core.cli import main as roborl_main
from roborl.core.config import config_to_dict
from roborl.core.errors import CheckpointError, ConfigError, MissingExtraError
from roborl.core.interfaces import Algorithm
from roborl.core.model_dir import CONFIG_FILE, WEIGHTS_FILE, algorithm_from_model_dir
from roborl.core.onnx_policy import ONNX_FILE, onnx_policy_from_model_dir
from roborl.core.plugins import get_host
from roborl.core.spaces import space_to_dict
from roborl.plugins.export import hub
from roborl.plugins.export.cli import export
from roborl.plugins.export.onnx import ATOL, export_onnx, max_difference, sample_observations

BOX = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
# Asymmetric bounds: the graph must scale and clip exactly as ActionScaler.to_env does.
ACTIONS = gym.spaces.Box(
    np.array([-2.0, -0.5, 0.0], np.float32), np.array([1.0, 3.0, 0.25], np.float32)
)
PIXELS = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 255, (12, 12, 3), np.uint8),
        "state": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    }
)
STACKED = gym.spaces.Dict({"frames": gym.spaces.Box(0, 255, (2, 12, 12, 3), np.uint8)})
TINY_PIXEL = {"hidden_sizes": [8, 8], "feature_dim": 8, "conv_channels": 4, "conv_layers": 2}
CASES: dict[str, tuple[dict[str, Any], gym.Space]] = {
    "sac": ({"hidden_sizes": [8, 8]}, BOX),
    "dsac_t": ({"hidden_sizes": [8, 8]}, BOX),
    "sac_lagrangian": ({"hidden_sizes": [8, 8]}, BOX),
    "wsrl": ({"hidden_sizes": [8, 8]}, BOX),  # LayerNorm actor
    "iql": ({"hidden_sizes": [8, 8]}, BOX),
    "riql": ({"hidden_sizes": [8, 8]}, BOX),  # observation normalisation in the graph
    "bc": ({"hidden_sizes": [8, 8]}, BOX),
    "fisor": (
        {"hidden_sizes": [8, 8], "actor_width": 8, "actor_blocks": 1, "num_samples": 4},
        BOX,
    ),  # sample-and-select: the noise is an input
    "drq": (TINY_PIXEL, PIXELS),  # a camera image beside a state vector
    "rlpd": ({**TINY_PIXEL, "num_critics": 2}, STACKED),  # frame-stacked camera only
    "pixel_bc": (TINY_PIXEL, PIXELS),  # DrQ's encoder and actor, trained by cloning
}
REFUSED = {"vla_rl", "sb3/ppo", "sb3/a2c", "sb3/sac", "sb3/td3", "sb3/ddpg", "sb3/dqn"}
"""Algorithms that override `actor_graph` only to refuse, with their reason."""


def _build(name: str) -> Algorithm:
    cfg, space = CASES[name]
    torch.manual_seed(0)
    algo = build_algorithm(get_host(), {"name": name, **cfg}, space, ACTIONS, "cpu")
    if name in ("iql", "riql"):  # statistics as `prepare` computes them from a dataset
        algo.obs_mean.copy_(torch.linspace(-1.0, 2.0, 5))
        algo.obs_std.copy_(torch.linspace(0.5, 3.0, 5))
    return algo


def _checkpoint(tmp_path: Path, algo: Algorithm, name: str, config: dict[str, Any]) -> Path:
    path = tmp_path / f"{name.replace('/', '_')}.pt"
    payload = {
        "algo": name,
        "algo_config": config_to_dict(algo.config),
        "observation_space": space_to_dict(algo.observation_space),
        "action_space": space_to_dict(algo.action_space),
        "state": algo.state_dict(),
        "config": config,
    }
    save_checkpoint(path, payload)
    return path


def test_every_algorithm_with_an_actor_graph_is_tested_here() -> None:
    """A new algorithm that overrides `actor_graph` must join CASES (or REFUSED)."""
    registered = get_host().registry.algorithms
    overriding = {
        n for n, cls in registered.items() if cls.actor_graph is not Algorithm.actor_graph
    }
    assert overriding - set(CASES) <= REFUSED, overriding - set(CASES)
    assert set(CASES) <= overriding


@pytest.mark.parametrize("name", list(CASES))
def test_onnx_actions_equal_torch_actions(name: str, tmp_path: Path) -> None:
    """Export through `export(...)` (as the CLI does), then load policy.onnx with the runtime
    loader and compare with the torch policy loaded from the same folder."""
    algo = _build(name)
    ckpt = _checkpoint(tmp_path, algo, name, {"env": {"id": "none"}})
    done = export(get_host(), str(ckpt), tmp_path / "m", format="onnx")
    out = done["out"]
    assert {ONNX_FILE, WEIGHTS_FILE, CONFIG_FILE} <= {p.name for p in out.iterdir()}
    meta = json.loads((out / CONFIG_FILE).read_text())
    spec = meta["onnx"]
    assert spec["file"] == ONNX_FILE and spec["outputs"][0]["name"] == "action"
    assert spec["check"]["max_abs_diff"] <= ATOL
    assert meta["observation_space"]["type"] == (
        "Dict" if name in ("drq", "rlpd", "pixel_bc") else "Box"
    )

    onnx_policy, loaded_meta = onnx_policy_from_model_dir(out)
    assert loaded_meta["algo"] == name
    torch_algo, _ = algorithm_from_model_dir(get_host(), out)
    graph = torch_algo.actor_graph()
    # Fresh observations (not the export's own check): a batch with matched noise...
    obs = sample_observations(algo.observation_space, 50, seed=123)
    diff = max_difference(torch_algo.policy(), graph, onnx_policy, obs, seed=7)
    assert diff <= ATOL, diff
    # ...and the Policy contract on one observation: same action shape, inside the bounds.
    one = algo.observation_space.sample()
    action = onnx_policy.act(one)
    assert action.shape == ACTIONS.shape and action.dtype == np.float32
    assert np.all(action >= ACTIONS.low) and np.all(action <= ACTIONS.high)
    if graph.draw_noise is None:  # deterministic: the single-observation paths agree too
        np.testing.assert_allclose(action, torch_algo.policy().act(one), rtol=0, atol=ATOL)
    if name == "riql":
        assert "observation normalisation (obs - mean) / std" in spec["graph"]


def test_normalisation_statistics_are_baked_into_the_graph() -> None:
    """RIQL's observation statistics are part of policy.onnx: after the torch algorithm's
    statistics change, the exported graph still acts with the ones it was exported with."""
    from roborl.core.onnx_policy import OnnxPolicy, inference_session

    algo = _build("riql")
    obs = sample_observations(BOX, 20, seed=1)
    model, _ = export_onnx(algo, "riql")
    graph = algo.actor_graph()
    onnx_policy = OnnxPolicy(inference_session(model), graph.inputs, BOX, ACTIONS)
    assert max_difference(algo.policy(), graph, onnx_policy, obs) <= ATOL
    algo.obs_mean.zero_()
    algo.obs_std.fill_(1.0)
    assert max_difference(algo.policy(), graph, onnx_policy, obs) > 1e-3


def test_fisor_graph_is_the_torch_sampler_under_one_seed() -> None:
    """FISOR samples inside its deterministic action: with the noise drawn as `act` draws it,
    the graph (in torch) gives act's actions; the ONNX policy draws its own noise."""
    algo = _build("fisor")
    graph = algo.actor_graph()
    obs = torch.as_tensor(sample_observations(BOX, 6, seed=2))
    torch.manual_seed(11)
    expected = algo.policy().act(obs.numpy())
    torch.manual_seed(11)
    noise = graph.draw_noise(6)["noise"]
    with torch.no_grad():
        got = graph.module(obs, noise).numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert graph.inputs[-1] == GraphInput("noise", (4, 5, 3), "float32", noise=True)


def test_refusals_name_the_reason_and_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vla_space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
            "task": gym.spaces.Box(0, 3, (), np.int64),
        }
    )
    vla = build_algorithm(get_host(), {"name": "vla_rl"}, vla_space, ACTIONS, "cpu")
    with pytest.raises(ConfigError, match=r"vla_rl cannot be exported to ONNX: .*transformer"):
        export_onnx(vla, "vla_rl")

    class NoGraph:  # what an algorithm without an override gets (e.g. a third-party one)
        name = "third_party"

    with pytest.raises(ConfigError, match="third_party does not describe its policy"):
        Algorithm.actor_graph(NoGraph())  # type: ignore[arg-type]

    algo = _build("sac")
    ckpt = _checkpoint(tmp_path, algo, "sac", {"env": {"id": "none"}})

    def refuse(self: Any) -> Any:
        raise ConfigError("algo=sac cannot be exported to ONNX: a test says so.")

    monkeypatch.setattr(type(algo), "actor_graph", refuse)
    with pytest.raises(ConfigError, match="a test says so"):
        export(get_host(), str(ckpt), tmp_path / "m", format="onnx")
    assert not (tmp_path / "m").exists()


def test_missing_onnxruntime_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    algo = _build("sac")
    ckpt = _checkpoint(tmp_path, algo, "sac", {"env": {"id": "none"}})
    export(get_host(), str(ckpt), tmp_path / "m", format="onnx")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import now fails
    with pytest.raises(MissingExtraError, match=r'pip install "roborl\[onnx\]"'):
        onnx_policy_from_model_dir(tmp_path / "m")
    with pytest.raises(MissingExtraError, match=r"format=onnx needs onnxruntime.*roborl\[onnx\]"):
        export(get_host(), str(ckpt), tmp_path / "m2", format="onnx")
    assert not (tmp_path / "m2").exists()


def test_broken_policy_onnx_is_an_error_naming_the_file(tmp_path: Path) -> None:
    algo = _build("sac")
    ckpt = _checkpoint(tmp_path, algo, "sac", {"env": {"id": "none"}})
    out = tmp_path / "m"
    export(get_host(), str(ckpt), out)  # safetensors only
    assert not (out / ONNX_FILE).exists()
    with pytest.raises(ConfigError, match=r"has no policy\.onnx; export it with .*format=onnx"):
        onnx_policy_from_model_dir(out)
    export(get_host(), str(ckpt), out, format="onnx")  # replaces the export in place
    good = (out / ONNX_FILE).read_bytes()
    (out / ONNX_FILE).write_bytes(good[: len(good) // 3])
    with pytest.raises(CheckpointError, match=re.escape(f"{out / ONNX_FILE} could not be loaded")):
        onnx_policy_from_model_dir(out)
    (out / ONNX_FILE).write_bytes(b"not an onnx model")
    with pytest.raises(CheckpointError, match="truncated, corrupted or not an ONNX model"):
        onnx_policy_from_model_dir(out)
    # A model from another export (other inputs) beside this config.json.
    (out / ONNX_FILE).write_bytes(good)
    meta = json.loads((out / CONFIG_FILE).read_text())
    meta["onnx"]["inputs"][0]["shape"] = ["batch", 7]
    (out / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"does not match its config\.json"):
        onnx_policy_from_model_dir(out)
    # A plain export afterwards removes the stale graph.
    export(get_host(), str(ckpt), out)
    assert not (out / ONNX_FILE).exists() and "onnx" not in json.loads(
        (out / CONFIG_FILE).read_text()
    )


def test_cli_export_and_eval_with_onnxruntime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`roborl export format=onnx`, then `roborl eval model=DIR runtime=onnx` scores what
    `runtime=torch` scores on the same episodes; the card and the push list name the file."""
    obs = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
    act = gym.spaces.Box(-3.0, 3.0, (1,), np.float32)
    torch.manual_seed(3)
    algo = build_algorithm(get_host(), {"name": "sac", "hidden_sizes": [8, 8]}, obs, act, "cpu")
    env = {"id": "InvertedPendulum-v5", "kwargs": {}, "max_episode_steps": 30}
    ckpt = _checkpoint(tmp_path, algo, "sac", {"env": env, "seed": 0})
    out = tmp_path / "m"
    assert roborl_main(["export", f"checkpoint={ckpt}", f"out={out}", "format=onnx"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}/{ONNX_FILE}" in printed and "runtime=onnx" in printed
    assert "roborl eval model=THIS_FOLDER runtime=onnx" in (out / "README.md").read_text()
    (tmp_path / "staged").mkdir()
    staged = hub.stage(out, tmp_path / "staged")  # what push= uploads
    assert (staged / ONNX_FILE).read_bytes() == (out / ONNX_FILE).read_bytes()

    reports = {}
    for runtime in ("torch", "onnx"):
        report = tmp_path / f"{runtime}.json"
        args = ["eval", f"model={out}", "episodes=2", "seed=5", f"runtime={runtime}"]
        assert roborl_main([*args, f"out={report}"]) == 0
        reports[runtime] = json.loads(report.read_text())
    assert reports["onnx"]["runtime"] == "onnx" and reports["onnx"]["algo"] == "sac"
    assert reports["onnx"]["lengths"] == reports["torch"]["lengths"]
    np.testing.assert_allclose(reports["onnx"]["returns"], reports["torch"]["returns"], atol=1e-3)

    capsys.readouterr()
    code = roborl_main(["eval", f"checkpoint={ckpt}", "runtime=onnx"])
    err = capsys.readouterr().err
    assert code == 2 and "runtime=onnx runs the policy.onnx of an export folder" in err
    assert "Traceback" not in err


def test_deploy_takes_runtime_onnx_only_with_a_model_folder() -> None:
    """deploy's side of the switch, checked before any ROS traffic starts (its robot tests
    run the node; the loader it calls is `onnx_policy_from_model_dir`, tested above)."""
    from roborl.robots.nodes.deploy import deploy

    with pytest.raises(ConfigError, match=r"runtime=onnx runs the policy\.onnx of an export"):
        deploy(["runtime=onnx", "checkpoint=last.pt"])
    with pytest.raises(ConfigError, match=r"runtime='tflite' is not accepted: .*torch, onnx"):
        deploy(["runtime=tflite", "model=exported"])

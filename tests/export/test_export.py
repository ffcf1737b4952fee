"""`roborl export`: safetensors + config.json + model card; `eval model=DIR` loads it without
unpickling and scores exactly what the checkpoint scores; `push=` up to the Hub call."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from cli_runner import roborl
from cli_server import run_roborl

from roborl.core.algorithms import algorithm_from_checkpoint, build_algorithm
from roborl.core.errors import CheckpointError, ConfigError
from roborl.core.model_dir import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    _decode,
    _Encoder,
    algorithm_from_model_dir,
    save_model_dir,
)
from roborl.core.plugins import get_host
from roborl.core.spaces import space_to_dict
from roborl.plugins.export import hub
from roborl.plugins.export.cli import same_actions

TINY = [
    "total_steps=400",
    "learning_starts=200",
    "eval_every=400",
    "eval_episodes=3",
    "checkpoint_every=400",
    "log_every=200",
    "algo.batch_size=32",
    "algo.hidden_sizes=[16,16]",
    "progress=false",
    "seed=4",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small SAC run (InvertedPendulum), its run directory."""
    root = tmp_path_factory.mktemp("export_run")
    roborl("train", *TINY, cwd=root)
    (summary,) = root.rglob("summary.json")
    return summary.parent


def test_export_then_eval_model_scores_exactly_the_checkpoint(
    trained: Path, tmp_path: Path
) -> None:
    out = tmp_path / "model"
    proc = roborl("export", f"checkpoint={trained}", f"out={out}", cwd=tmp_path)
    assert "actions match the checkpoint's" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["README.md", CONFIG_FILE, WEIGHTS_FILE]

    roborl("eval", f"checkpoint={trained}", "episodes=3", "seed=11", "out=ckpt.json", cwd=tmp_path)
    roborl("eval", f"model={out}", "episodes=3", "seed=11", "out=model.json", cwd=tmp_path)
    ckpt = json.loads((tmp_path / "ckpt.json").read_text())
    model = json.loads((tmp_path / "model.json").read_text())
    assert model["returns"] == ckpt["returns"] and model["lengths"] == ckpt["lengths"]
    assert model["model"] == str(out) and model["checkpoint"] is None
    assert model["env"] == "InvertedPendulum-v5"


def test_loading_a_model_never_unpickles(
    trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = get_host()
    roborl("export", f"checkpoint={trained}", f"out={tmp_path / 'm'}", cwd=tmp_path)
    original, _ = algorithm_from_checkpoint(host, trained)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model folder must load without unpickling")

    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    loaded, meta = algorithm_from_model_dir(host, tmp_path / "m")
    assert meta["algo"] == "sac" and meta["source"]["step"] == 400
    assert same_actions(original, loaded, original.observation_space) is True
    # ...and the comparison can fail: an untrained SAC acts differently.
    fresh = build_algorithm(
        host, {"name": "sac", "hidden_sizes": [16, 16]}, original.observation_space,
        original.action_space, "cpu",
    )  # fmt: skip
    assert same_actions(original, fresh, original.observation_space) is False


def test_model_card_names_algo_env_seed_return_ci_versions_and_command(
    trained: Path, tmp_path: Path
) -> None:
    roborl("export", f"checkpoint={trained}", f"out={tmp_path / 'm'}", cwd=tmp_path)
    card = (tmp_path / "m" / "README.md").read_text()
    front = card.split("---")[1]
    assert "library_name: roborl" in front and "mean_reward" in front
    metrics = [json.loads(x) for x in (trained / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in metrics if "eval/return_mean" in r][-1]
    assert f"**{last['eval/return_mean']:.2f}**" in card
    assert "95% CI [" in card and "Student-t over 3" in card
    assert "| Algorithm | `sac` |" in card and "| Environment | `InvertedPendulum-v5` |" in card
    assert "| Seed | 4 |" in card
    assert "roborl train total_steps=400" in card and "'algo.hidden_sizes=[16,16]'" in card
    for package in ("roborl", "torch", "mujoco", "gymnasium"):
        assert f"| {package} | " in card
    assert "http" not in card  # nothing the card says points outside the folder


def test_export_refuses_a_folder_with_other_files(trained: Path, tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    proc = run_roborl(["export", f"checkpoint={trained}", "out=busy"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and "other files" in proc.stderr
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("algo", ["sac", "dsac_t", "sac_lagrangian", "wsrl", "iql", "fisor", "bc"])
def test_every_state_layout_round_trips(algo: str, tmp_path: Path) -> None:
    """Strict loaders (FISOR, BC need their optimiser states) load through `$fresh`."""
    host = get_host()
    obs = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)
    act = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    cfg = {"name": algo, "hidden_sizes": [8, 8]}
    if algo == "fisor":
        cfg = {"name": algo}
    torch.manual_seed(0)
    original = build_algorithm(host, cfg, obs, act, "cpu")
    state = original.state_dict()
    save_model_dir(
        tmp_path, algo=algo, algo_config={k: v for k, v in cfg.items() if k != "name"},
        observation_space=space_to_dict(obs), action_space=space_to_dict(act), state=state,
        config={"env": {"id": "none"}},
    )  # fmt: skip
    torch.manual_seed(1)  # a differently initialised copy must be overwritten by the load
    loaded, _ = algorithm_from_model_dir(host, tmp_path)
    assert same_actions(original, loaded, obs) is True


def test_layout_encodes_plain_values_and_marks_training_only_parts() -> None:
    state = {
        "net": {"w": torch.arange(6.0).reshape(2, 3)},
        "optimizer": {"state": {0: {"exp_avg": torch.ones(2)}}, "param_groups": [{"lr": 1e-3}]},
        "replay_buffer": {"obs": torch.zeros(100, 3)},
        "stats": np.array([1.5, -2.0]),
        "counts": {3: "three", 4: (1, 2)},
        "scale": float("inf"),
        "phase": "online",
    }
    enc = _Encoder()
    layout = json.loads(json.dumps(enc.encode(state, []), allow_nan=False))
    assert set(enc.tensors) == {"net/w", "stats"}  # no optimiser moments, no replay buffer
    fresh = {"optimizer": {"state": {}, "param_groups": [{"lr": 3e-4}]}}
    back = _decode(layout, enc.tensors, fresh, "")
    assert torch.equal(back["net"]["w"], state["net"]["w"])
    assert isinstance(back["stats"], np.ndarray) and back["stats"].tolist() == [1.5, -2.0]
    assert back["counts"] == {3: "three", 4: (1, 2)} and back["scale"] == float("inf")
    assert back["optimizer"] == fresh["optimizer"] and "replay_buffer" not in back


def test_broken_model_folders_are_one_line_errors(trained: Path, tmp_path: Path) -> None:
    host = get_host()
    with pytest.raises(CheckpointError, match="looks like a run directory"):
        algorithm_from_model_dir(host, trained)
    roborl("export", f"checkpoint={trained}", f"out={tmp_path / 'm'}", cwd=tmp_path)
    proc = run_roborl(["eval", f"checkpoint={tmp_path / 'm'}"], cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and f"model={tmp_path / 'm'}" in proc.stderr
    weights = tmp_path / "m" / WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="truncated or not a safetensors file"):
        algorithm_from_model_dir(host, tmp_path / "m")


SECRET = "sk-do-not-publish-123"
RUN_CONFIG = {
    "seed": 3,
    "env": {"id": "InvertedPendulum-v5", "xml_file": "/home/alice/lab/models/pendulum.xml"},
    "dataset": "C:\\Users\\alice\\data\\d4rl.hdf5",
    "video_dir": "~/videos/run1",
    "actor_learner": {"bind": "tcp://10.0.0.5:5555", "keys_dir": "/home/alice/.roborl/keys"},
    "ray": {"address": "ray://head.lab.example:10001"},
    "robot": {"name": "ros2", "command_topic": "/arm/commands", "host": "arm-7.lab"},
    "logger": {"wandb": {"api_key": SECRET, "host": "https://wandb.lab.example"}},
    "hub_token": SECRET,
    "callback_url": "http://192.168.1.20:8080/hook",
    "algo": {"name": "sac", "hidden_sizes": [16, 16]},
}


def _exported(tmp_path: Path) -> Path:
    folder = tmp_path / "m"
    folder.mkdir()
    for name in hub.UPLOADED:
        (folder / name).write_text("x")
    meta = {"algo": "sac", "algo_config": {"lr": 3e-4, "pretrained": "/srv/ckpt/a.pt"}}
    (folder / CONFIG_FILE).write_text(json.dumps({**meta, "config": RUN_CONFIG}))
    return folder


def test_push_is_private_by_default_and_uploads_a_sanitised_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No absolute path, host, address, secret or robot setting reaches the Hub; the local
    export keeps its full config."""
    from huggingface_hub import HfApi, constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    folder = _exported(tmp_path)
    calls: dict[str, dict[str, Any]] = {}
    uploaded: dict[str, str] = {}

    def create_repo(self: HfApi, **kwargs: Any) -> str:
        calls["create_repo"] = kwargs
        return "url"

    def upload_folder(self: HfApi, **kwargs: Any) -> Any:
        calls["upload_folder"] = kwargs
        staged = Path(kwargs["folder_path"])
        uploaded.update({p.name: p.read_text() for p in staged.iterdir()})
        return type("CommitInfo", (), {"commit_url": "hub/c/1"})()

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    hub.push(folder, "me/sac-pendulum")
    assert calls["create_repo"]["private"] is True
    assert sorted(uploaded) == sorted(hub.UPLOADED)
    text = uploaded[CONFIG_FILE]
    for leak in (SECRET, "/home/", "alice\\", "~/", "/srv/", "10.0.0.5", "192.168.", "://",
                 "lab.example", "arm-7", "/arm/commands", "keys_dir"):  # fmt: skip
        assert leak not in text, (leak, text)
    cfg = json.loads(text)["config"]
    assert cfg["env"] == {"id": "InvertedPendulum-v5", "xml_file": "pendulum.xml"}
    assert cfg["dataset"] == "d4rl.hdf5" and cfg["video_dir"] == "run1"
    assert "actor_learner" not in cfg and "ray" not in cfg and cfg["robot"] == {"name": "ros2"}
    assert cfg["seed"] == 3 and cfg["algo"] == RUN_CONFIG["algo"]
    assert json.loads(text)["algo_config"] == {"lr": 3e-4, "pretrained": "a.pt"}
    assert "/home/alice" in (folder / CONFIG_FILE).read_text()  # the local export is whole
    hub.push(folder, "me/sac-pendulum", private=False)  # publishing is explicit
    assert calls["create_repo"]["private"] is False


def test_card_command_is_sanitised() -> None:
    from roborl.plugins.export.cli import sanitize_command

    cmd = (
        "roborl train algo=sac hydra.run.dir=/home/alice/runs/x llm.base_url=http://h:8000/v1 "
        "actor_learner.bind=0.0.0.0 +logger.wandb.api_key=sk-1 env=hopper"
    )
    out = sanitize_command(cmd)
    assert "/home" not in out and "http" not in out and "0.0.0.0" not in out and "sk-1" not in out
    assert "hydra.run.dir=x" in out and "algo=sac" in out and "env=hopper" in out


def test_push_checks_everything_then_calls_the_hub_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upload itself needs the network (not here); everything before it is tested."""
    from huggingface_hub import HfApi, constants

    folder = _exported(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match="HF_HUB_OFFLINE"):
        hub.push(folder, "me/sac-pendulum")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no stored token either
    with pytest.raises(ConfigError, match="token"):
        hub.push(folder, "me/sac-pendulum")
    monkeypatch.setenv("HF_TOKEN", "hf_dummy")
    with pytest.raises(ConfigError, match="NAMESPACE/NAME"):
        hub.push(folder, "sac-pendulum")
    with pytest.raises(ConfigError, match="lacks"):
        hub.push(tmp_path, "me/sac-pendulum")

    calls: list[tuple[str, dict[str, Any]]] = []

    def create_repo(self: HfApi, **kwargs: Any) -> str:
        calls.append(("create_repo", kwargs))
        return "url"

    def upload_folder(self: HfApi, **kwargs: Any) -> Any:
        calls.append(("upload_folder", kwargs))
        return type("CommitInfo", (), {"commit_url": "hub/me/sac-pendulum/commit/1"})()

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    assert hub.push(folder, "me/sac-pendulum", private=True) == "hub/me/sac-pendulum/commit/1"
    assert [name for name, _ in calls] == ["create_repo", "upload_folder"]
    assert calls[0][1] == {"repo_id": "me/sac-pendulum", "repo_type": "model", "private": True, "exist_ok": True}  # fmt: skip
    upload = calls[1][1]
    assert upload["folder_path"] != str(folder) and upload["repo_id"] == "me/sac-pendulum"
    assert sorted(upload["allow_patterns"]) == sorted(hub.UPLOADED)


def test_export_refuses_non_finite_weights(trained: Path, tmp_path: Path) -> None:
    """A checkpoint written before the runner refused NaN weights is not exported or pushed."""
    from roborl.core.errors import DivergedError
    from roborl.plugins.export.cli import export

    ckpt = torch.load(trained / "checkpoints" / "last.pt", weights_only=True)
    ckpt["state"]["log_alpha"] = torch.tensor(float("nan"))
    torch.save(ckpt, tmp_path / "bad.pt")  # bypasses save_checkpoint's own refusal
    with pytest.raises(DivergedError, match=r"state\.log_alpha holds NaN"):
        export(get_host(), str(tmp_path / "bad.pt"), tmp_path / "out", push="me/x")
    assert not (tmp_path / "out").exists()

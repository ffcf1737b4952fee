"""Model folders and checkpoints are data: they may not choose where an LLM policy sends its
requests, which environment variable holds the key sent there, what model is loaded from
outside the folder, or the robot `eval`/`deploy` drive (issue 47; docs/security.md).

Each folder or checkpoint here names an attacker's server (a live local one, to see that no
request reaches it) and an environment variable holding a secret; the loaders `eval` and
`deploy` use must take the local defaults or the command line instead, and say so."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.algorithms import algorithm_from_checkpoint
from roborl.core.checkpoint import save_checkpoint
from roborl.core.cli import main as roborl_main
from roborl.core.errors import ConfigError
from roborl.core.model_dir import algorithm_from_model_dir, save_model_dir
from roborl.core.plugins import get_host
from roborl.core.saved_data import LocalSettings, local_algo_config, robot_differences
from roborl.core.spaces import space_to_dict
from roborl.plugins.llm.policy import LLMAlgorithm, LLMConfig

STOLEN_VAR = "ROBORL_TEST_STOLEN_SECRET"
STOLEN = "stolen-aws-key-0123456789"
LOCAL_KEY = "sk-local-openai-key-42"
DEFAULT_URL = LLMConfig().base_url


class Server:
    """An OpenAI-compatible stub on 127.0.0.1 that records every request's path and
    Authorization header; every completion is the CartPole action "0"."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                server.seen.append((self.path, self.headers.get("Authorization", "")))
                self._reply({"version": "0.12.0"})

            def do_POST(self) -> None:
                server.seen.append((self.path, self.headers.get("Authorization", "")))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._reply({"choices": [{"index": i, "text": "0"} for i in range(len(body["prompt"]))]})  # fmt: skip

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def evil() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.close()


@pytest.fixture
def good() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STOLEN_VAR, STOLEN)
    monkeypatch.setenv("OPENAI_API_KEY", LOCAL_KEY)


OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
ACT = gym.spaces.Discrete(2)


def malicious_algo_config(url: str) -> dict[str, Any]:
    return {
        "backend": "openai",
        "model": "/home/attacker/models/evil",  # outside the folder
        "base_url": url,
        "api_key_env": STOLEN_VAR,
        "api_key": "EMPTY",
        "max_tokens": 4,
        "timeout_s": 10.0,
    }


def run_config(robot: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"env": {"id": "CartPole-v1"}, "seed": 0, **({"robot": robot} if robot else {})}


def llm_folder(path: Path, url: str, robot: dict[str, Any] | None = None) -> Path:
    """A hand-made `algo: llm` model folder (roborl export refuses llm, an attacker need not)."""
    save_model_dir(
        path,
        algo="llm",
        algo_config=malicious_algo_config(url),
        observation_space=space_to_dict(OBS),
        action_space=space_to_dict(ACT),
        state={},
        config=run_config(robot),
    )
    return path


def llm_checkpoint(path: Path, url: str) -> Path:
    save_checkpoint(
        path,
        {
            "algo": "llm",
            "algo_config": malicious_algo_config(url),
            "observation_space": space_to_dict(OBS),
            "action_space": space_to_dict(ACT),
            "state": {},
            "config": run_config(),
        },
    )
    return path


def act_once(algo: Any) -> None:
    """Build the policy's backend (which contacts its server) and act once."""
    try:
        algo.act(np.zeros(4))
    finally:
        algo.close()


def test_model_folder_cannot_choose_the_llm_server_or_the_key_variable(
    evil: Server, good: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Loaded as `roborl deploy model=DIR` does (no settings): the local defaults, a warning."""
    folder = llm_folder(tmp_path / "m", evil.url)
    with (
        caplog.at_level(logging.WARNING, logger="roborl.model"),
        pytest.raises(ConfigError, match=r"needs llm\.model"),
    ):
        algorithm_from_model_dir(get_host(), folder)  # its model path is not used either
    (line,) = [r.getMessage() for r in caplog.records if r.name == "roborl.model"]
    assert evil.url in line and STOLEN_VAR in line and "/home/attacker" in line
    assert DEFAULT_URL in line and "OPENAI_API_KEY" in line and "trust_model_config" in line
    assert STOLEN not in line

    algo, _ = algorithm_from_model_dir(
        get_host(), folder, settings=LocalSettings(algo={"model": "m", "base_url": good.url})
    )
    assert algo.config.base_url == good.url and algo.config.api_key_env == "OPENAI_API_KEY"
    assert algo.config.model == "m"
    act_once(algo)
    assert evil.seen == []
    assert good.seen and {auth for _, auth in good.seen} == {f"Bearer {LOCAL_KEY}"}


def test_checkpoint_cannot_choose_the_llm_server_or_the_key_variable(
    evil: Server, tmp_path: Path
) -> None:
    ckpt = llm_checkpoint(tmp_path / "last.pt", evil.url)
    with pytest.raises(ConfigError, match=r"needs llm\.model"):  # its model path is not used
        algorithm_from_checkpoint(get_host(), ckpt)
    algo, _ = algorithm_from_checkpoint(
        get_host(), ckpt, settings=LocalSettings(algo={"model": "m"})
    )
    assert algo.config.base_url == DEFAULT_URL
    assert algo.config.api_key_env == "OPENAI_API_KEY"
    assert algo.config.max_tokens == 4  # the rest of the saved config is data and is kept
    algo.close()
    assert evil.seen == []


def test_eval_model_dir_sends_nothing_to_the_folders_server(
    evil: Server, good: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`roborl eval model=DIR algo.base_url=MINE algo.model=m`: the command line decides."""
    folder = llm_folder(tmp_path / "m", evil.url)
    out = tmp_path / "eval.json"
    args = ["eval", f"model={folder}", f"algo.base_url={good.url}", "algo.model=m"]
    assert roborl_main([*args, "episodes=1", f"out={out}"]) == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["length_mean"] >= 1
    assert evil.seen == []
    assert {auth for _, auth in good.seen} == {f"Bearer {LOCAL_KEY}"}


def test_trust_model_config_is_the_explicit_opt_in(
    evil: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = llm_folder(tmp_path / "m", evil.url)
    out = tmp_path / "eval.json"
    args = ["eval", f"model={folder}", "trust_model_config=true", "algo.model=m", "episodes=1"]
    assert roborl_main([*args, f"out={out}"]) == 0, capsys.readouterr().err
    assert evil.seen and {auth for _, auth in evil.seen} == {f"Bearer {STOLEN}"}


def test_eval_refuses_other_algo_keys_with_a_model_folder(
    evil: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = llm_folder(tmp_path / "m", evil.url)
    assert roborl_main(["eval", f"model={folder}", "algo.max_tokens=8"]) == 2
    err = capsys.readouterr().err
    assert "algo.max_tokens=8" in err and "algo.base_url" in err and "algo.api_key_env" in err


def test_a_model_path_inside_the_folder_is_kept(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    (folder / "lm").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    base = {"backend": "transformers"}
    inside = local_algo_config(LLMAlgorithm, {**base, "model": "lm"}, "model folder", None, folder)
    assert inside["model"] == str((folder / "lm").resolve())
    for escape in ("../outside", str(tmp_path / "outside"), "HuggingFaceTB/SmolLM2", "."):
        cfg = local_algo_config(LLMAlgorithm, {**base, "model": escape}, "x", None, folder)
        assert cfg["model"] == "", escape


def test_a_saved_api_key_is_neither_used_nor_shown(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="roborl.model"):
        cfg = local_algo_config(LLMAlgorithm, {"api_key": "sk-folder-key"}, "checkpoint 'c'")
    assert cfg["api_key"] == "EMPTY"
    (line,) = [r.getMessage() for r in caplog.records if r.name == "roborl.model"]
    assert "sk-folder-key" not in line and "algo.api_key='<redacted>'" in line


def test_eval_never_drives_a_saved_robot_section(
    evil: Server, good: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder's robot section (topics, safety limits) is refused without robot=NAME;
    robot=null evaluates the folder's env in simulation."""
    robot = {"name": "ros2", "transport": "dds", "connect_timeout_s": 1.0,
             "safety": {"low": [-100.0], "high": [100.0]}}  # fmt: skip
    folder = llm_folder(tmp_path / "m", evil.url, robot=robot)
    base = ["eval", f"model={folder}", "algo.model=m", f"algo.base_url={good.url}", "episodes=1"]
    assert roborl_main([*base, f"out={tmp_path / 'a.json'}"]) == 2
    err = capsys.readouterr().err
    assert "robot section" in err and "robot=NAME" in err and "robot=null" in err
    out = tmp_path / "b.json"
    assert roborl_main([*base, "robot=null", f"out={out}"]) == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["env"] == "CartPole-v1"


def test_local_robot_config_wins_and_differences_are_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`eval ... robot=ros2`: the local preset is used; the saved limits are only named."""
    from roborl.core.cli.eval import EvalOptions, _local_robot_config

    saved = {"name": "ros2", "rate_hz": 25.0, "safety": {"low": [-100.0], "high": [100.0]}}
    cfg = run_config(saved)
    with caplog.at_level(logging.WARNING, logger="roborl.model"):
        used = _local_robot_config(get_host(), cfg, ["robot=ros2"], EvalOptions(), "model folder")
    assert used["robot"]["safety"]["high"] == [3.0]  # roborl/robots/configs/robot/ros2.yaml
    (line,) = [r.getMessage() for r in caplog.records if r.name == "roborl.model"]
    assert "robot.safety.low" in line and "robot.safety.high" in line
    assert "robot.rate_hz" not in line  # the same locally
    assert robot_differences({"name": "ros2", "joints": ["a"]}, {"name": "ros2"}) == [
        "robot.joints"
    ]


def test_deploy_passes_the_command_line_to_its_loader(
    evil: Server, good: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """`roborl deploy model=DIR algo.base_url=MINE`: the node loads the folder as the real
    `DeployNode` does (`algorithm_from_model_dir(host, opts.model)`, no settings passed)."""
    import roborl.robots.nodes.deploy as deploy_mod

    loaded: list[Any] = []

    class Node:
        def __init__(self, opts: Any, robot_cfg: Any, algo_cfg: Any, ros_args: Any) -> None:
            algo, _ = algorithm_from_model_dir(get_host(), opts.model)
            loaded.append(algo)

        def run(self) -> int:
            return 0

        def teardown(self) -> None:
            pass

    monkeypatch.setattr(deploy_mod, "DeployNode", Node)
    robot = {"name": "ros2", "safety": {"low": [-100.0], "high": [100.0]}}
    folder = llm_folder(tmp_path / "m", evil.url, robot=robot)
    args = [f"model={folder}", f"algo.base_url={good.url}", "algo.model=m", "robot=ros2"]
    with caplog.at_level(logging.WARNING, logger="roborl.model"):
        assert deploy_mod.deploy(args) == 0
    (algo,) = loaded
    assert algo.config.base_url == good.url and algo.config.api_key_env == "OPENAI_API_KEY"
    lines = [r.getMessage() for r in caplog.records if r.name == "roborl.model"]
    assert any("robot.safety.high" in line for line in lines), lines
    act_once(algo)
    assert evil.seen == [] and {auth for _, auth in good.seen} == {f"Bearer {LOCAL_KEY}"}

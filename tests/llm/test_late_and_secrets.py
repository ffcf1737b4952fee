"""The openai backend against a tiny local OpenAI-compatible server (no model): a late or
silent server makes the step hold within `llm.timeout_s` (never ~91 s), and the API key, from
the environment or given directly, reaches the server but nothing the run writes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from roborl.core.errors import ConfigError
from roborl.core.secrets import REDACTED, redact
from roborl.plugins.llm.backends import OpenAIBackend
from roborl.plugins.llm.policy import LLMConfig, LLMPolicy

SECRET_ENV = "sk-from-env-0123456789"
SECRET_CFG = "sk-given-directly-9876543210"


class FakeServer:
    """OpenAI-compatible `/version` and `/v1/completions` on 127.0.0.1; `delay_s` sleeps
    before each completion, `text` is every choice's reply; headers are recorded."""

    def __init__(self) -> None:
        self.delay_s = 0.0
        self.text = '{"action": [0.25]}'
        self.auth: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                fake.auth.append(self.headers.get("Authorization", ""))
                self._json({"version": "0.12.0"})

            def do_POST(self) -> None:
                fake.auth.append(self.headers.get("Authorization", ""))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(fake.delay_s)
                choices = [{"index": i, "text": fake.text} for i in range(len(body["prompt"]))]
                try:
                    self._json({"choices": choices})
                except OSError:  # the client gave up
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    yield srv
    srv.close()


def box_policy(url: str, **kw: Any) -> LLMPolicy:
    import gymnasium as gym

    cfg = LLMConfig(backend="openai", model="m", base_url=url, **kw)
    obs = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
    act = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    return LLMPolicy(obs, act, cfg, backend=OpenAIBackend(cfg))


def test_slow_server_holds_within_the_timeout(server: FakeServer) -> None:
    """Old behaviour: 30 s per attempt x 3 attempts + backoff (~91 s), then an exception."""
    policy = box_policy(server.url, timeout_s=0.5, retries=2, backoff_s=0.05)
    np.testing.assert_allclose(policy.act(np.zeros(4)), [0.25])  # a prompt server: acts
    server.delay_s = 3.0
    start = time.monotonic()
    action = policy.act(np.zeros((2, 4)))
    took = time.monotonic() - start
    assert took < 1.5, took  # the whole request, retries and backoff included, is capped
    assert action.shape == (2, 1) and np.isnan(action).all()  # hold, not the centre (0)
    assert policy.n_invalid == 2 and policy.n_late == 2
    assert policy.metrics()["llm/late_replies"] == 2.0
    assert all(r.startswith("late reply") for r in policy.last_reasons), policy.last_reasons


def test_slow_server_with_fallback(server: FakeServer) -> None:
    policy = box_policy(server.url, timeout_s=0.3, retries=0, on_invalid="fallback")
    server.delay_s = 2.0
    np.testing.assert_allclose(policy.act(np.zeros(4)), [0.0])  # the centre, as asked
    assert policy.n_invalid == 1


def test_key_from_env_reaches_the_server(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_LLM_KEY", SECRET_ENV)
    box_policy(server.url, api_key_env="MY_LLM_KEY").act(np.zeros(4))
    assert server.auth and set(server.auth) == {f"Bearer {SECRET_ENV}"}
    monkeypatch.delenv("MY_LLM_KEY")
    server.auth.clear()
    box_policy(server.url, api_key_env="MY_LLM_KEY").act(np.zeros(4))
    assert set(server.auth) == {"Bearer EMPTY"}
    with pytest.raises(ConfigError, match="api_key_env=MY_LLM_KEY"):
        box_policy(server.url, api_key=REDACTED, api_key_env="MY_LLM_KEY")


def test_redact_is_general_but_leaves_look_alikes() -> None:
    cfg = {
        "algo": {"api_key": "sk-x", "max_tokens": 8, "api_key_env": "OPENAI_API_KEY"},
        "logger": [{"wandb": {"token": "t"}}],
        "hub": {"hf_token": "hf_x", "password": None, "secret_key": "EMPTY"},
    }
    out = redact(cfg)
    assert out["algo"] == {"api_key": REDACTED, "max_tokens": 8, "api_key_env": "OPENAI_API_KEY"}
    assert out["logger"][0]["wandb"]["token"] == REDACTED
    assert out["hub"] == {"hf_token": REDACTED, "password": None, "secret_key": "EMPTY"}
    assert cfg["algo"]["api_key"] == "sk-x"  # a copy


@pytest.mark.parametrize("direct", [False, True], ids=["env", "direct"])
def test_key_never_written(
    server: FakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    """A real `algo=llm` run: config.yaml, metrics, summary, a checkpoint of it, eval.json."""
    from roborl.core.plugins import get_host
    from roborl.core.runner import Runner

    monkeypatch.setenv("OPENAI_API_KEY", SECRET_ENV)
    algo = {"name": "llm", "backend": "openai", "model": "m", "base_url": server.url}
    if direct:
        algo["api_key"] = SECRET_CFG
    server.text = "0"
    cfg = {
        "algo": algo,
        "env": {"id": "CartPole-v1"},
        "eval_episodes": 1,
        "progress": False,
    }
    run = tmp_path / "run"
    runner = Runner(cfg, run, get_host())
    summary = runner.execute()
    assert summary["status"] == "finished"
    assert set(server.auth) == {f"Bearer {SECRET_CFG if direct else SECRET_ENV}"}
    ckpt = runner.ctx.checkpoint(runner.current_algo, name="probe.pt")
    blob = ckpt.read_bytes()
    loaded = torch.load(ckpt, weights_only=True)
    written = [p for p in run.rglob("*") if p.is_file()]
    assert run / "config.yaml" in written and run / "summary.json" in written
    for secret in (SECRET_CFG, SECRET_ENV):
        for path in written:
            assert secret.encode() not in path.read_bytes(), path
        assert secret.encode() not in blob and secret not in repr(loaded)
    if direct:
        assert loaded["algo_config"]["api_key"] == REDACTED
        assert loaded["config"]["algo"]["api_key"] == REDACTED
        assert REDACTED in (run / "config.yaml").read_text()


def test_hydra_files_are_redacted(tmp_path: Path) -> None:
    """`roborl train llm.api_key=...`: Hydra's own record of the overrides is redacted too."""
    import yaml

    from roborl.core.secrets import redact_hydra_dir

    hydra = tmp_path / ".hydra"
    hydra.mkdir()
    overrides = ["algo=llm", f"llm.api_key={SECRET_CFG}", "llm.max_tokens=8"]
    (hydra / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (hydra / "config.yaml").write_text(yaml.safe_dump({"algo": {"api_key": SECRET_CFG}}))
    dirname = ",".join(overrides)
    (hydra / "hydra.yaml").write_text(
        yaml.safe_dump({"hydra": {"overrides": {"task": overrides}, "job": {"dirname": dirname}}})
    )
    redact_hydra_dir(tmp_path)
    for path in hydra.iterdir():
        assert SECRET_CFG not in path.read_text(), path
    assert yaml.safe_load((hydra / "overrides.yaml").read_text()) == [
        "algo=llm", f"llm.api_key={REDACTED}", "llm.max_tokens=8",
    ]  # fmt: skip

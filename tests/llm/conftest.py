"""Shared, expensive LLM fixtures: one converted model, one vLLM engine, one vLLM server.

The OpenAI-compatible vLLM server is launched as soon as the first test of this folder starts
(autouse session fixture) so its ~35-60 s start-up overlaps the codec, transformers and
in-process vLLM tests; the `openai_url` fixture only waits for it to become healthy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

SERVER_START_TIMEOUT_S = 240.0


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """SmolLM2-135M-Instruct as an HF folder, converted once into the user cache."""
    from roborl.plugins.llm.model import prepare_model

    return prepare_model()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A real `vllm.entrypoints.openai.api_server` child process on 127.0.0.1."""

    def __init__(self, model: Path, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = log_path
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model), "--host", "127.0.0.1", "--port", str(self.port),
            "--enforce-eager", "--max-model-len", "1024", "--seed", "0",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.healthy = False

    def wait_healthy(self) -> str:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not self.healthy:
            if self.proc.poll() is not None:
                tail = self.log_path.read_bytes()[-3000:].decode(errors="replace")
                raise RuntimeError(f"vLLM server exited with {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(self.url[:-3] + "/health", timeout=2) as r:
                    self.healthy = r.status == 200
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"vLLM server not healthy after {SERVER_START_TIMEOUT_S:.0f} s"
                    ) from None
                time.sleep(1.0)
        return self.url

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)  # in case a test left it stopped
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[Server]:
    """Started by the first test that needs it, stopped after its module: under `-n 2` each
    worker collects every test, so a session-wide autouse server ran on both workers for the
    whole run, and its engine kept about a tenth of a core busy polling."""
    server = Server(model_dir, tmp_path_factory.mktemp("vllm") / "server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def openai_url(vllm_server: Server) -> str:
    return vllm_server.wait_healthy()


@pytest.fixture(scope="module")
def vllm_engine(model_dir: Path) -> Iterator[Any]:
    """One in-process engine for the module's vLLM tests (start-up is the expensive part),
    shut down after them: its engine-core process polls while it lives.

    numba is imported first on purpose: other test modules (rliable -> arch) import it at
    collection, and vLLM's CPU start-up crashed on it; the engine must start regardless.
    """
    import numba  # noqa: F401

    from roborl.plugins.llm.vllm_compat import start_engine

    engine = start_engine(
        model=str(model_dir), enforce_eager=True, max_model_len=1024, seed=0, dtype="auto"
    )
    yield engine
    with contextlib.suppress(Exception):
        engine.llm_engine.engine_core.shutdown()


@pytest.fixture(scope="session")
def hf_model(model_dir: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)

"""Each backend with the real SmolLM2-135M model: valid, in-bounds actions for batches of a
MuJoCo task (InvertedPendulum, Box) and a discrete task (CartPole); invalid replies from a real
backend fall back and are counted; a silent or stopped server is a clear error, not a hang.

These check the format and the plumbing, never the 135M model's competence.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from cli_server import run_roborl

from roborl.plugins.llm.backends import (
    LLMServerError,
    OpenAIBackend,
    TransformersBackend,
    VLLMBackend,
    _version_tuple,
)
from roborl.plugins.llm.policy import LLMConfig, LLMPolicy

BATCH = 4
# a short prompt: on this CPU the prompt's prefill is most of the time per call
SHORT = "{instruction}\n{observation}\nAction as {action_format}: "


def config(**kw: Any) -> LLMConfig:
    return LLMConfig(prompt_template=SHORT, instruction="Balance.", decimals=2, **kw)


def observations(env_id: str) -> tuple[gym.Env, np.ndarray]:
    env = gym.make(env_id)
    obs = np.stack([env.reset(seed=s)[0] for s in range(BATCH)])
    return env, obs


@pytest.fixture(scope="module")
def tasks() -> dict[str, tuple[gym.Env, np.ndarray]]:
    out = {"mujoco": observations("InvertedPendulum-v5"), "discrete": observations("CartPole-v1")}
    yield out
    for env, _ in out.values():
        env.close()


def policy_for(env: gym.Env, backend: Any, config: LLMConfig) -> LLMPolicy:
    return LLMPolicy(env.observation_space, env.action_space, config, backend=backend)


def check_valid_batch(policy: LLMPolicy, obs: np.ndarray) -> None:
    """Every reply is a valid action: structured outputs leave nothing to reject.

    The fallback action (the centre of the Box) is itself in the space, so "every action is in
    the space" alone would pass a run where every reply was rejected (issue 37): the policy's
    own count of rejected replies must be zero, and each action must be the reply's numbers.
    """
    actions = policy.act(obs)
    assert len(actions) == BATCH and len(policy.last_replies) == BATCH
    assert all(policy.action_space.contains(a) for a in actions)
    assert policy.n_replies == BATCH
    assert policy.n_invalid == 0, list(zip(policy.last_replies, policy.last_reasons))
    assert policy.metrics()["llm/invalid_rate"] == 0.0
    assert policy.last_reasons == [""] * BATCH, policy.last_replies
    for reply, action in zip(policy.last_replies, actions):
        if policy.codec.discrete:
            assert reply in policy.codec.choices and int(reply) == int(action)  # exact choice
        else:
            numbers = json.loads(reply)["action"]  # JSON by the backend, nothing scraped
            np.testing.assert_allclose(np.ravel(action), numbers, rtol=1e-6)


def check_truncated(policy: LLMPolicy, obs: np.ndarray) -> None:
    """max_tokens=2 cannot hold a JSON action: every reply is malformed and holds (NaN, which
    the robot safety layer replaces by its hold command), not the centre of [-3, 3]."""
    actions = policy.act(obs)
    assert policy.metrics()["llm/invalid_rate"] == 1.0
    assert all("not JSON" in r for r in policy.last_reasons), policy.last_reasons
    assert actions.shape == (BATCH, 1) and np.isnan(actions).all()


# -- vLLM in-process ----------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["mujoco", "discrete"])
def test_vllm_in_process_batch(vllm_engine: Any, tasks: dict, task: str) -> None:
    env, obs = tasks[task]
    cfg = config(backend="vllm", max_tokens=24)
    check_valid_batch(policy_for(env, VLLMBackend(cfg, llm=vllm_engine), cfg), obs)


def test_vllm_truncated_replies_fall_back(vllm_engine: Any, tasks: dict) -> None:
    env, obs = tasks["mujoco"]
    cfg = config(backend="vllm", max_tokens=2)
    check_truncated(policy_for(env, VLLMBackend(cfg, llm=vllm_engine), cfg), obs)


# -- transformers -------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["mujoco", "discrete"])
def test_transformers_batch(hf_model: tuple, model_dir: Path, tasks: dict, task: str) -> None:
    env, obs = tasks[task]
    cfg = config(backend="transformers", model=str(model_dir))
    backend = TransformersBackend(cfg, model=hf_model[0], tokenizer=hf_model[1])
    policy = policy_for(env, backend, cfg)
    check_valid_batch(policy, obs)  # bounded number decoding: every reply valid, in bounds


# -- OpenAI-compatible server (a real vLLM api_server) ------------------------------------------


def openai_config(url: str, model_dir: Path, **kw: Any) -> LLMConfig:
    return config(backend="openai", model=str(model_dir), base_url=url, **kw)


@pytest.mark.parametrize("task", ["mujoco", "discrete"])
def test_openai_vllm_server_batch(openai_url: str, model_dir: Path, tasks: dict, task: str) -> None:
    env, obs = tasks[task]
    cfg = openai_config(openai_url, model_dir, max_tokens=24, timeout_s=120.0)
    backend = OpenAIBackend(cfg)
    assert _version_tuple(backend.server_version) >= (0, 12)
    check_valid_batch(policy_for(env, backend, cfg), obs)


def test_openai_truncated_replies_fall_back(openai_url: str, model_dir: Path, tasks: dict) -> None:
    env, obs = tasks["mujoco"]
    cfg = openai_config(openai_url, model_dir, max_tokens=2, timeout_s=120.0)
    check_truncated(policy_for(env, OpenAIBackend(cfg), cfg), obs)


def test_openai_rejected_request_is_clear(openai_url: str, tasks: dict) -> None:
    env, obs = tasks["discrete"]
    cfg = config(backend="openai", model="no-such-model", base_url=openai_url, retries=3)
    policy = policy_for(env, OpenAIBackend(cfg), cfg)
    start = time.monotonic()
    with pytest.raises(LLMServerError, match="rejected the request with HTTP 404"):
        policy.act(obs)
    assert time.monotonic() - start < 60  # a 4xx is not retried


def test_silent_server_times_out() -> None:
    """A socket that accepts connections (kernel backlog) but never answers."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        cfg = config(backend="openai", model="m", base_url=url, timeout_s=0.5, retries=1)
        cfg.backoff_s = 0.05
        start = time.monotonic()
        with pytest.raises(LLMServerError, match=r"did not answer within llm.timeout_s=0.5 s"):
            OpenAIBackend(cfg)
        assert time.monotonic() - start < 30


def test_stopped_server_times_out_then_recovers(
    openai_url: str, vllm_server: Any, model_dir: Path, tasks: dict
) -> None:
    """SIGSTOP the real server mid-run: the step holds after the timeout; SIGCONT recovers."""
    env, obs = tasks["discrete"]
    cfg = openai_config(openai_url, model_dir, max_tokens=4, timeout_s=2.0, retries=1)
    cfg.backoff_s = 0.1
    policy = policy_for(env, OpenAIBackend(cfg), cfg)
    os.kill(vllm_server.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        actions = policy.act(obs)  # CartPole: the hold of a Discrete space is fallback_index
        assert time.monotonic() - start < 5  # timeout_s=2 caps retries and backoff too
        assert list(actions) == [0] * BATCH and policy.n_late == BATCH
        assert all("did not answer within llm.timeout_s=2 s" in r for r in policy.last_reasons)
    finally:
        os.kill(vllm_server.proc.pid, signal.SIGCONT)
    policy.config.timeout_s = 120.0
    assert policy.act(obs).shape == (BATCH,)


def test_eval_cli_without_checkpoint(openai_url: str, model_dir: Path, tmp_path: Path) -> None:
    """`roborl eval algo=llm llm.model=... env=...` runs from config alone."""
    out = tmp_path / "eval.json"
    cmd = [
        "eval", "algo=llm", f"llm.model={model_dir}",
        "llm.backend=openai", f"llm.base_url={openai_url}", "llm.max_tokens=4",
        "llm.timeout_s=120", "env=gym", "env.id=CartPole-v1", "episodes=1", f"out={out}",
    ]  # fmt: skip
    proc = run_roborl(cmd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["algo"] == "llm" and report["env"] == "CartPole-v1"
    assert report["checkpoint"] is None and report["length_mean"] >= 5
    assert report["llm/invalid_rate"] == 0.0 and report["llm/replies"] == report["length_mean"]


def test_dataset_collect_with_llm_policy(openai_url: str, model_dir: Path, tmp_path: Path) -> None:
    """`roborl dataset collect policy=llm ...`: an LLM as the behaviour policy of a dataset.

    A Box task: the collector stores actions as float vectors (Discrete envs are not supported
    by `roborl dataset collect` itself)."""
    from roborl.plugins.datasets.files import load_file

    out = tmp_path / "llm.npz"
    cmd = [
        "dataset", "collect", "env=inverted_pendulum",
        f"out={out}", "policy=llm", f"algo.model={model_dir}", "algo.backend=openai",
        f"algo.base_url={openai_url}", "algo.max_tokens=16", "algo.timeout_s=120",
        "steps=12", "ref_episodes=1", "quality=expert",
    ]  # fmt: skip
    proc = run_roborl(cmd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = load_file(out)
    assert data.metadata["policy"] == "llm"
    assert len(data) == 12
    actions = data.arrays()["actions"]
    assert actions.shape == (12, 1) and np.all(np.abs(actions) <= 3.0)

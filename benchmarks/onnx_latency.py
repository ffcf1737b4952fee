"""Policy inference latency, batch 1: roborl's torch policy vs the same policy as ONNX in
onnxruntime (`roborl export ... format=onnx`, `runtime=onnx`).

Each policy is built at its algorithm's default network sizes with random weights (latency
does not depend on the weights), exported with `export_onnx` (which checks the ONNX actions
against torch's), and then called one observation at a time through the `Policy` interface
that `roborl eval` and `roborl deploy` use: numpy observation in, numpy action out, so both
sides pay their own conversions. Every call is timed on its own (perf_counter_ns); the two
runtimes alternate in blocks so a change in machine load hits both. One thread each
(`torch.set_num_threads(1)`, onnxruntime `intra_op_num_threads=1`), as a control loop runs.

Policies:
- sac: HalfCheetah sizes (17-D observation, 6-D action), 256x256 tanh-Gaussian actor;
- fisor: the same spaces, 16 diffusion samples x 5 steps of the 256-wide ResNet noise model,
  lowest-Q_h selection (the ONNX policy draws its noise with numpy);
- drq: a 64x64 RGB camera beside a 3-D state, DrQ-v2's 4-layer conv encoder, 256x256 actor.

    python benchmarks/onnx_latency.py [--calls 1000] [--warmup 100]

Writes benchmarks/results/onnx_latency.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

RESULTS = Path(__file__).parent / "results"
HALFCHEETAH_OBS = gym.spaces.Box(-np.inf, np.inf, (17,), np.float64)
HALFCHEETAH_ACT = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
CAMERA_OBS = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 255, (64, 64, 3), np.uint8),
        "state": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    }
)
POLICIES: dict[str, tuple[dict[str, Any], gym.Space]] = {
    "sac": ({}, HALFCHEETAH_OBS),
    "fisor": ({}, HALFCHEETAH_OBS),
    "drq": ({}, CAMERA_OBS),
}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _policies(name: str) -> tuple[Any, Any, dict[str, Any]]:
    """(torch policy, onnx policy, export facts) of `name` at its default sizes."""
    from roborl.core.algorithms import build_algorithm
    from roborl.core.onnx_policy import OnnxPolicy, inference_session
    from roborl.core.plugins import get_host
    from roborl.plugins.export.onnx import export_onnx

    cfg, obs_space = POLICIES[name]
    torch.manual_seed(0)
    algo = build_algorithm(get_host(), {"name": name, **cfg}, obs_space, HALFCHEETAH_ACT, "cpu")
    start = time.perf_counter()
    model, spec = export_onnx(algo, name)
    export_s = time.perf_counter() - start
    graph = algo.actor_graph()
    onnx_policy = OnnxPolicy(
        inference_session(model, threads=1), graph.inputs, obs_space, HALFCHEETAH_ACT
    )
    facts = {
        "onnx_bytes": len(model),
        "export_s": round(export_s, 2),
        "max_abs_diff": spec["check"]["max_abs_diff"],
    }
    return algo.policy(), onnx_policy, facts


def _time_calls(policy: Any, observations: list[Any]) -> list[float]:
    """Microseconds per `policy.act(obs)` call."""
    out = []
    for obs in observations:
        start = time.perf_counter_ns()
        policy.act(obs)
        out.append((time.perf_counter_ns() - start) / 1e3)
    return out


def measure(name: str, calls: int, warmup: int, blocks: int = 10) -> dict[str, Any]:
    torch_policy, onnx_policy, facts = _policies(name)
    space = POLICIES[name][1]
    space.seed(0)
    observations = [space.sample() for _ in range(calls)]
    _time_calls(torch_policy, observations[:warmup])
    _time_calls(onnx_policy, observations[:warmup])
    times: dict[str, list[float]] = {"torch": [], "onnxruntime": []}
    per_block = max(1, calls // blocks)
    for b in range(0, calls, per_block):  # alternate, so load changes hit both
        chunk = observations[b : b + per_block]
        times["torch"] += _time_calls(torch_policy, chunk)
        times["onnxruntime"] += _time_calls(onnx_policy, chunk)
    stats = {
        runtime: {
            "p50_us": float(np.percentile(t, 50)),
            "p99_us": float(np.percentile(t, 99)),
            "mean_us": float(np.mean(t)),
            "calls": len(t),
        }
        for runtime, t in times.items()
    }
    return {
        "policy": name,
        **stats,
        "ratio_p50": stats["torch"]["p50_us"] / stats["onnxruntime"]["p50_us"],
        "ratio_p99": stats["torch"]["p99_us"] / stats["onnxruntime"]["p99_us"],
        **facts,
    }


def write_markdown(report: dict[str, Any], path: Path) -> None:
    m = report["machine"]
    lines = [
        "# Policy latency, batch 1: torch vs onnxruntime",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['platform']}; load average "
        f"{m['load_before']:.2f} before, {m['load_after']:.2f} after (other work was running). "
        f"torch {report['versions']['torch']} and onnxruntime "
        f"{report['versions']['onnxruntime']}, one thread each. "
        f"`python benchmarks/onnx_latency.py --calls {report['calls']} "
        f"--warmup {report['warmup']}`, {report['wall_s']:.0f} s.",
        "",
        "Per-call latency of `policy.act(obs)` on one observation (numpy in, numpy out), the "
        "torch `Policy` that `roborl eval`/`deploy` run by default against `OnnxPolicy` "
        "(`runtime=onnx`) on the same weights; ratio = torch / onnxruntime (above 1: "
        "onnxruntime is faster).",
        "",
        "| policy | torch p50 (us) | onnxruntime p50 (us) | ratio p50 | torch p99 (us) | "
        "onnxruntime p99 (us) | ratio p99 | policy.onnx (kB) | export (s) | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        t, o = r["torch"], r["onnxruntime"]
        lines.append(
            f"| {r['policy']} | {t['p50_us']:.0f} | {o['p50_us']:.0f} | {r['ratio_p50']:.2f} | "
            f"{t['p99_us']:.0f} | {o['p99_us']:.0f} | {r['ratio_p99']:.2f} | "
            f"{r['onnx_bytes'] / 1024:.0f} | {r['export_s']:.1f} | {r['max_abs_diff']:.1e} |"
        )
    lines += [
        "",
        "Policies at their algorithm's default sizes, random weights: sac = 256x256 actor on "
        "HalfCheetah's 17-D observation and 6-D action; fisor = 16 diffusion samples x 5 steps "
        "of the 256-wide ResNet noise model plus the Q_h ensemble; drq = 64x64 RGB camera and "
        "a 3-D state through DrQ-v2's 4-layer conv encoder. p99 on a shared 2-core machine "
        "reflects its load as much as the runtime; compare the two columns of one row, which "
        "were measured in alternating blocks of the same run.",
        "",
    ]
    path.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per runtime")
    parser.add_argument("--warmup", type=int, default=100, help="untimed calls first")
    parser.add_argument("--out", default=str(RESULTS / "onnx_latency"), help="path stem")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import onnxruntime

    start = time.perf_counter()
    load_before = _load()
    results = []
    for name in POLICIES:
        results.append(measure(name, args.calls, args.warmup))
        r = results[-1]
        print(
            f"{name}: torch p50 {r['torch']['p50_us']:.0f} us, onnxruntime p50 "
            f"{r['onnxruntime']['p50_us']:.0f} us (x{r['ratio_p50']:.2f})",
            flush=True,
        )
    report = {
        "calls": args.calls,
        "warmup": args.warmup,
        "wall_s": time.perf_counter() - start,
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "load_before": load_before,
            "load_after": _load(),
        },
        "versions": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__},
        "threads": {"torch": torch.get_num_threads(), "onnxruntime": 1},
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    write_markdown(report, out.with_suffix(".md"))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()

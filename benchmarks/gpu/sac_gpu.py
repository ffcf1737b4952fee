"""GPU section of the performance suite: roborl SAC on CUDA, eager, compiled, and compiled with
CUDA graphs, all with the replay buffer on the GPU, against stable-baselines3 SAC on CUDA, on
HalfCheetah-v5 with batch 256 and one update per env step. Made to finish inside one 10-minute
call on an H100 box without network (benchmarks/gpu/run.sh installs the carried wheels first).

    python benchmarks/gpu/sac_gpu.py [--steps 4000] [--warmup 1000] [--budget-s 520]

Each contender runs `roborl train`'s Runner (or SB3's `learn`) in its own process; the figure
is the training-phase env steps/s: the median over windows of `--window` env steps after the
first learning window (which holds the compilation), as LeanRL reports speed during training.
Reference on H100 hosts: LeanRL SAC compile + CUDA graphs 383-469 env steps/s (LeanRL's README
claims 725), SB3 on CUDA 69.5.

Without CUDA it prints one line and exits 0 (the CI dry run). The JSON goes to
$OUT/gpu_sac.json when $OUT is set, else benchmarks/results/gpu_sac.json; it is rewritten after
each contender, so a run stopped by the time limit keeps what finished.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ENV_ID = "HalfCheetah-v5"
BATCH = 256
LEANRL_H100_SPS = (383.0, 469.0)
SB3_CUDA_REFERENCE_SPS = 69.5
CONTENDERS: dict[str, dict[str, Any]] = {
    "roborl_eager": {"name": "sac"},
    "roborl_compile": {"name": "sac", "compile": True},
    "roborl_compile_cudagraphs": {"name": "sac", "compile": True, "cudagraphs": True},
    "roborl_captured": {"name": "sac", "capture": True},  # the whole update as one CUDA graph
    "sb3": {},
}
ORDER = ("roborl_eager", "sb3", "roborl_captured", "roborl_compile_cudagraphs", "roborl_compile")


def default_out() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu_sac.json" if out else ROOT / "benchmarks/results/gpu_sac.json"


def window_sps(marks: Sequence[tuple[int, float]], start: int) -> list[float]:
    """Env steps/s between consecutive (step, time) marks at or after env step `start`."""
    pts = [(s, t) for s, t in marks if s >= start]
    return [(s1 - s0) / (t1 - t0) for (s0, t0), (s1, t1) in itertools.pairwise(pts) if t1 > t0]


def run_roborl(name: str, device: str, steps: int, warmup: int, window: int) -> dict[str, Any]:
    import torch

    from roborl.core.plugins import get_host
    from roborl.core.run_dir import read_metrics
    from roborl.core.runner import Runner

    cfg = {
        "algo": {**CONTENDERS[name], "batch_size": BATCH},
        "env": {"id": ENV_ID},
        "total_steps": warmup + steps,
        "learning_starts": warmup,
        "eval_every": 0,
        "checkpoint_every": 10**9,
        "log_every": window,
        "progress": False,
        "device": device,
        "buffer_device": device,
        "torch_threads": 1,
    }
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(cfg, tmp, get_host())
        t0 = time.perf_counter()
        runner.execute()
        wall = time.perf_counter() - t0
        records = read_metrics(tmp)
        algo = runner.current_algo
        compiled = bool(getattr(getattr(algo, "_loss_call", None), "is_compiled", False))
        capture = getattr(algo, "_capture", None)
        graphs = int(getattr(capture, "captured", 0))
        capture_reason = getattr(capture, "fallback_reason", None)
    sps = [r["time/sps"] for r in records if "time/sps" in r and r["step"] > warmup + window]
    out: dict[str, Any] = {
        "train_sps_median": statistics.median(sps) if sps else None,
        "train_sps_windows": sps,
        "wall_s": wall,
        "compiled": compiled,
        "cuda_graphs_captured": graphs,
        "capture_fallback_reason": capture_reason,
        "buffer_device": device,
    }
    if device.startswith("cuda"):
        out["gpu_peak_mem_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def run_sb3(device: str, steps: int, warmup: int, window: int, updates: int = 0) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    marks: list[tuple[int, float]] = []

    class Marks(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % window == 0:
                marks.append((self.num_timesteps, time.perf_counter()))
            return True

    model = SAC(
        "MlpPolicy", gym.make(ENV_ID), batch_size=BATCH, learning_starts=warmup, train_freq=1,
        gradient_steps=1, policy_kwargs={"net_arch": [256, 256]}, device=device, seed=0,
    )  # fmt: skip
    t0 = time.perf_counter()
    model.learn(total_timesteps=warmup + steps, callback=Marks())
    wall = time.perf_counter() - t0
    sps = window_sps(marks, warmup + window)
    out = {
        "train_sps_median": statistics.median(sps) if sps else None,
        "train_sps_windows": sps,
        "wall_s": wall,
    }
    if updates:  # update-only speed on the filled buffer: `updates` gradient steps at once
        model.train(gradient_steps=10, batch_size=BATCH)  # warm
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.train(gradient_steps=updates, batch_size=BATCH)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        out["updates_per_s"] = updates / (time.perf_counter() - t0)
    return out


def machine(device: str) -> dict[str, Any]:
    import torch

    rec: dict[str, Any] = {
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": str(torch.__version__),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                rec["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if device.startswith("cuda"):
        rec["gpu"] = torch.cuda.get_device_name(0)
        rec["cuda"] = torch.version.cuda
    return rec


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """Ratios to SB3 (same run) and to LeanRL's H100 range (reference, other hosts)."""
    sb3 = (results.get("sb3") or {}).get("train_sps_median")
    out = {}
    for name, r in results.items():
        sps = (r or {}).get("train_sps_median")
        if not sps:
            continue
        out[name] = {
            "train_sps": sps,
            "ratio_to_sb3_same_run": sps / sb3 if sb3 else None,
            "ratio_to_leanrl_h100_low_high": [sps / LEANRL_H100_SPS[0], sps / LEANRL_H100_SPS[1]],
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--steps", type=int, default=4000, help="env steps with updates (UTD 1)")
    ap.add_argument("--warmup", type=int, default=1000, help="random-action steps first")
    ap.add_argument("--window", type=int, default=500, help="env steps per speed window")
    ap.add_argument("--budget-s", type=float, default=520.0, help="stop starting contenders")
    ap.add_argument("--contenders", nargs="+", default=list(ORDER), choices=list(CONTENDERS))
    ap.add_argument("--device", default="cuda", help="cpu only to smoke-test the harness")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--sb3-updates", type=int, default=0, help="also time SB3's train() alone")
    ap.add_argument("--worker", choices=list(CONTENDERS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"benchmarks/gpu: no CUDA device (torch {torch.__version__}): GPU section skipped")
        return 0
    if args.worker:
        torch.set_num_threads(1)  # both contenders: one CPU thread beside the GPU, as in roborl
        if args.worker == "sb3":
            res = run_sb3(args.device, args.steps, args.warmup, args.window, args.sb3_updates)
        else:
            res = run_roborl(args.worker, args.device, args.steps, args.warmup, args.window)
        print(json.dumps(res))
        return 0

    out = args.out or default_out()
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "gpu_sac",
        "command": "python benchmarks/gpu/sac_gpu.py " + " ".join(argv or sys.argv[1:]),
        "env": ENV_ID,
        "batch_size": BATCH,
        "utd": 1,
        "hidden": [256, 256],
        "steps": args.steps,
        "warmup": args.warmup,
        "machine": machine(args.device),
        "reference": {
            "leanrl_sac_compile_cudagraphs_h100_sps": list(LEANRL_H100_SPS),
            "sb3_cuda_sps": SB3_CUDA_REFERENCE_SPS,
            "note": "measured on other H100 hosts, not in this run",
        },
        "results": {},
        "skipped": {},
    }
    for name in args.contenders:
        left = args.budget_s - (time.perf_counter() - start)
        if left < 45:
            report["skipped"][name] = f"time budget spent ({args.budget_s:.0f} s)"
            continue
        cmd = [
            sys.executable, str(Path(__file__).resolve()), "--worker", name, "--device",
            args.device, "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--window", str(args.window),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=left, env=env)
        except subprocess.TimeoutExpired:
            report["skipped"][name] = f"stopped at the time budget after {left:.0f} s"
            continue
        if proc.returncode != 0:
            report["skipped"][name] = f"failed: {proc.stderr[-1500:]}"
        else:
            report["results"][name] = json.loads(proc.stdout.strip().splitlines()[-1])
            report["results"][name]["process_s"] = time.perf_counter() - t0
        print(f"{name}: {report['results'].get(name) or report['skipped'][name]}", flush=True)
        report["summary"] = summarise(report["results"])
        report["wall_s"] = time.perf_counter() - start
        out.write_text(json.dumps(report, indent=1) + "\n")
    report["summary"] = summarise(report["results"])
    report["wall_s"] = time.perf_counter() - start
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["summary"], indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Off-policy speed: roborl SAC vs stable-baselines3 SAC on HalfCheetah-v5, side by side.

Same networks (256x256 actor and twin critics), batch 256, UTD 1, same torch threads. Each
framework runs in its own subprocess (so peak memory is its own), repeatedly and interleaved
(roborl, sb3, roborl, sb3, ...) so that background load hits both alike; the medians are
reported with their ratio to SB3.

- updates/s: gradient updates on a buffer pre-filled with random transitions;
- env steps/s: a whole training run (random warm-up, then one update per env step);
- peak RSS of the process;
- interleaved updates/s: every contender in one process, alternating blocks of updates, so the
  paired per-block ratios to SB3 are robust to background load (the headline ratio on a shared
  machine); with FLOPs per update and the 256^3 sgemm rate, which bound any implementation.

    python benchmarks/offpolicy_speed.py [--device cpu|cuda] [--repeats 3] [--threads 1]

Variants: sac (eager, the default), sac_compiled (algo.compile=true; on CUDA also
algo.cudagraphs=true), dsac_t, dsac_t_compiled. `first_20_updates_s` includes compilation.
Writes benchmarks/results/offpolicy_speed_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
ENV_ID = "HalfCheetah-v5"
BATCH = 256


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


VARIANTS: dict[str, dict[str, Any]] = {
    "sac": {"name": "sac"},
    "sac_compiled": {"name": "sac", "compile": True},
    "dsac_t": {"name": "dsac_t"},
    "dsac_t_compiled": {"name": "dsac_t", "compile": True},
}


def bench_roborl(
    variant: str, device: str, updates: int, steps: int, warmup: int
) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import torch

    from roborl.core.algorithms import resolve_algorithm
    from roborl.core.buffer import ReplayBuffer
    from roborl.core.plugins import get_host
    from roborl.core.runner import Runner

    host = get_host()
    env = gym.make(ENV_ID)
    algo_cfg = {**VARIANTS[variant], "batch_size": BATCH}
    if device.startswith("cuda") and algo_cfg.get("compile"):
        algo_cfg["cudagraphs"] = True
    cls, config = resolve_algorithm(host, dict(algo_cfg))
    algo = cls(env.observation_space, env.action_space, config, device)
    buf = ReplayBuffer(10_000, env.observation_space.shape, env.action_space.shape, device=device)
    rng = np.random.default_rng(0)
    n = 10_000
    buf.add(
        rng.normal(size=(n, 17)), rng.uniform(-1, 1, (n, 6)), rng.normal(size=n),
        rng.normal(size=(n, 17)), np.zeros(n),
    )  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    for _ in range(20):  # warm-up (allocator, lazy init, compilation when enabled)
        algo.update(buf.sample_nstep(BATCH, 1, algo.config.gamma, gen))
    warmup_s = time.perf_counter() - t0
    compiled = bool(getattr(getattr(algo, "_loss_call", None), "is_compiled", False))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(updates):
        metrics = algo.update(buf.sample_nstep(BATCH, 1, algo.config.gamma, gen))
    float(next(iter(metrics.values())))  # wait for the last update
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    ups = updates / (time.perf_counter() - t0)

    cfg = {
        "algo": dict(algo_cfg),
        "env": {"id": ENV_ID},
        "total_steps": warmup + steps,
        "learning_starts": warmup,
        "eval_every": 10**9,
        "eval_episodes": 1,
        "checkpoint_every": 10**9,
        "log_every": 10**9,
        "progress": False,
        "device": device,
        "torch_threads": 0,
    }
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(cfg, tmp, host)
        t0 = time.perf_counter()
        runner.execute()
        total = time.perf_counter() - t0
    return {
        "updates_per_s": ups,
        "train_wall_s": total,
        "peak_rss_mb": _peak_rss_mb(),
        "first_20_updates_s": warmup_s,
        "compiled": compiled,
    }


def bench_sb3(device: str, updates: int, steps: int, warmup: int) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import SAC

    env = gym.make(ENV_ID)
    model = SAC(
        "MlpPolicy", env, batch_size=BATCH, learning_starts=0, train_freq=1, gradient_steps=1,
        policy_kwargs={"net_arch": [256, 256]}, device=device, seed=0, buffer_size=1_000_000,
    )  # fmt: skip
    from stable_baselines3.common.logger import configure

    model.set_logger(configure(None, []))  # train() outside learn() needs a logger
    rng = np.random.default_rng(0)
    for _ in range(10_000):
        model.replay_buffer.add(
            rng.normal(size=(1, 17)), rng.normal(size=(1, 17)), rng.uniform(-1, 1, (1, 6)),
            rng.normal(size=1), np.zeros(1), [{}],
        )  # fmt: skip
    model.train(gradient_steps=20, batch_size=BATCH)
    t0 = time.perf_counter()
    model.train(gradient_steps=updates, batch_size=BATCH)
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    ups = updates / (time.perf_counter() - t0)

    model = SAC(
        "MlpPolicy", env, batch_size=BATCH, learning_starts=warmup, train_freq=1,
        gradient_steps=1, policy_kwargs={"net_arch": [256, 256]}, device=device, seed=0,
    )  # fmt: skip
    t0 = time.perf_counter()
    model.learn(total_timesteps=warmup + steps)
    total = time.perf_counter() - t0
    return {"updates_per_s": ups, "train_wall_s": total, "peak_rss_mb": _peak_rss_mb()}


def interleaved(variants: list[str], device: str, blocks: int, block: int) -> dict[str, Any]:
    """All contenders in one process, alternating blocks of `block` updates on the same
    pre-filled data: background load hits every contender alike within a few seconds, so the
    per-block ratios to SB3 are paired. Also counts FLOPs per update (torch's FlopCounterMode)
    and times a 256x256x256 sgemm, which bound what any implementation can reach here."""
    import warnings

    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3.common.logger import configure
    from torch.utils.flop_counter import FlopCounterMode

    from roborl.core.algorithms import resolve_algorithm
    from roborl.core.buffer import ReplayBuffer
    from roborl.core.plugins import get_host

    warnings.filterwarnings("ignore", category=UserWarning)
    env = gym.make(ENV_ID)
    rng = np.random.default_rng(0)
    n = 10_000
    data = (
        rng.normal(size=(n, 17)), rng.uniform(-1, 1, (n, 6)), rng.normal(size=n),
        rng.normal(size=(n, 17)), np.zeros(n),
    )  # fmt: skip
    model = SB3SAC(
        "MlpPolicy", env, batch_size=BATCH, learning_starts=0, policy_kwargs={"net_arch": [256, 256]},
        device=device, seed=0, buffer_size=n,
    )  # fmt: skip
    model.set_logger(configure(None, []))
    for i in range(n):
        model.replay_buffer.add(
            data[0][i : i + 1], data[3][i : i + 1], data[1][i : i + 1], data[2][i : i + 1],
            data[4][i : i + 1], [{}],
        )  # fmt: skip
    buf = ReplayBuffer(n, (17,), (6,), device=device)
    buf.add(*data)
    gen = torch.Generator().manual_seed(0)
    host = get_host()
    algos = {}
    for name in variants:
        cfg = {**VARIANTS[name], "batch_size": BATCH}
        if device.startswith("cuda") and cfg.get("compile"):
            cfg["cudagraphs"] = True
        cls, config = resolve_algorithm(host, cfg)
        algos[name] = cls(env.observation_space, env.action_space, config, device)
        for _ in range(20):
            algos[name].update(buf.sample_nstep(BATCH, 1, algos[name].config.gamma, gen))
    model.train(gradient_steps=20, batch_size=BATCH)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def run(name: str) -> float:
        sync()
        t0 = time.perf_counter()
        if name == "sb3":
            model.train(gradient_steps=block, batch_size=BATCH)
        else:
            for _ in range(block):
                metrics = algos[name].update(
                    buf.sample_nstep(BATCH, 1, algos[name].config.gamma, gen)
                )
            float(next(iter(metrics.values())))
        sync()
        return block / (time.perf_counter() - t0)

    ups: dict[str, list[float]] = {k: [] for k in [*variants, "sb3"]}
    for _ in range(blocks):
        for name in ups:
            ups[name].append(run(name))
    flops = {}
    for name in variants:
        with FlopCounterMode(display=False) as fc:
            algos[name].update(buf.sample_nstep(BATCH, 1, algos[name].config.gamma, gen))
            algos[name].update(
                buf.sample_nstep(BATCH, 1, algos[name].config.gamma, gen)
            )  # DSAC-T: one critic-only, one full
        flops[name] = fc.get_total_flops() / 2
    with FlopCounterMode(display=False) as fc:
        model.train(gradient_steps=1, batch_size=BATCH)
    flops["sb3"] = fc.get_total_flops()
    a, b = torch.randn(256, 256, device=device), torch.randn(256, 256, device=device)
    for _ in range(20):
        a @ b
    sync()
    t0 = time.perf_counter()
    for _ in range(500):
        a @ b
    sync()
    gflops = 500 * 2 * 256**3 / (time.perf_counter() - t0) / 1e9
    out: dict[str, Any] = {"block_updates": block, "blocks": blocks, "sgemm_256_gflops": gflops}
    for name, v in ups.items():
        ratios = [x / y for x, y in zip(v, ups["sb3"])]
        out[name] = {
            "updates_per_s_median": statistics.median(v),
            "ratio_to_sb3_median_of_paired_blocks": statistics.median(ratios),
            "ratio_to_sb3_min_max": [min(ratios), max(ratios)],
            "mflop_per_update": flops[name] / 1e6,
            "sgemm_bound_updates_per_s": gflops * 1e9 / flops[name],
            "per_block": v,
        }
    return out


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    if args.worker == "interleaved":
        out = interleaved(args.algos, args.device, args.blocks, args.block)
        print(json.dumps(out))
        return
    if args.worker == "sb3":
        out = bench_sb3(args.device, args.updates, args.steps, args.warmup)
    else:
        out = bench_roborl(args.worker, args.device, args.updates, args.steps, args.warmup)
    out["env_steps_per_s"] = (args.warmup + args.steps) / out["train_wall_s"]
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--steps", type=int, default=1500, help="env steps after the warm-up")
    parser.add_argument("--warmup", type=int, default=500, help="random-action steps")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--algos", nargs="+", default=["sac", "sac_compiled", "dsac_t"], choices=list(VARIANTS)
    )
    parser.add_argument("--blocks", type=int, default=12, help="interleaved blocks per contender")
    parser.add_argument("--block", type=int, default=100, help="updates per interleaved block")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    contenders = [*args.algos, "sb3"]
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
    for rep in range(args.repeats):
        for name in contenders:
            cmd = [
                sys.executable, __file__, "--worker", name, "--device", args.device,
                "--threads", str(args.threads), "--updates", str(args.updates),
                "--steps", str(args.steps), "--warmup", str(args.warmup),
            ]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"{name} worker failed:\n{proc.stderr[-3000:]}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            runs[name].append(result)
            print(f"[{rep}] {name}: {result}", file=sys.stderr)

    cmd = [
        sys.executable, __file__, "--worker", "interleaved", "--device", args.device,
        "--threads", str(args.threads), "--blocks", str(args.blocks), "--block",
        str(args.block), "--algos", *args.algos,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"interleaved worker failed:\n{proc.stderr[-3000:]}")
    paired = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"interleaved: { {k: v for k, v in paired.items() if k != 'per_block'} }", file=sys.stderr
    )

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    summary = {}
    for name in contenders:
        summary[name] = {
            key: med(name, key) for key in ("updates_per_s", "env_steps_per_s", "peak_rss_mb")
        }
        summary[name]["updates_per_s_ratio_to_sb3"] = med(name, "updates_per_s") / med(
            "sb3", "updates_per_s"
        )
        summary[name]["env_steps_per_s_ratio_to_sb3"] = med(name, "env_steps_per_s") / med(
            "sb3", "env_steps_per_s"
        )
        summary[name]["peak_rss_ratio_to_sb3"] = med(name, "peak_rss_mb") / med(
            "sb3", "peak_rss_mb"
        )
    import stable_baselines3
    import torch

    for name in args.algos:
        summary[name]["config"] = VARIANTS[name]
        summary[name]["compiled"] = all(r["compiled"] for r in runs[name])
        summary[name]["first_20_updates_s"] = med(name, "first_20_updates_s")
    report = {
        "env": ENV_ID,
        "batch_size": BATCH,
        "hidden": [256, 256],
        "utd": 1,
        "device": args.device,
        "torch_threads": args.threads,
        "repeats": args.repeats,
        "updates_timed": args.updates,
        "env_steps": args.warmup + args.steps,
        "warmup_steps": args.warmup,
        "machine": {"cpu_count": __import__("os").cpu_count(), "platform": platform.platform()},
        "versions": {
            "torch": str(torch.__version__),
            "stable_baselines3": stable_baselines3.__version__,
        },
        "summary": summary,
        "interleaved_updates": paired,
        "runs": runs,
    }
    out = args.out or RESULTS / f"offpolicy_speed_{args.device.split(':')[0]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

"""SAC's CPU update efficiency: updates/s as a share of the sgemm bound, against SB3 (issue 23).

One process holds every contender on the same pre-filled replay data and runs them in
alternating blocks of updates (sgemm, sb3, roborl stages, sgemm, sb3, ...), so background
load on a shared machine hits all of them alike within a few seconds; every figure is a median
over the rounds, and the headline figures are same-round ratios.

- The sgemm bound: a 256x256x256 float32 matmul (the size of the update's hidden-layer GEMMs)
  timed in every round, in GFLOP/s; divided by the FLOPs of one SAC update it gives the
  updates/s no implementation can beat on this machine at this thread count.
- FLOPs of one update: torch's FlopCounterMode over the autograd (before) update: forward and
  backward of the actor, forward and backward of the twin critics, forward of the actor on the
  next state and of the target critics (the work the maths needs; the same count for every
  contender, so shares of the bound compare as updates/s do; each contender's own count is
  recorded too).
- Contenders (cumulative): `sb3` (Stable-Baselines3 SAC, same batch, sizes, UTD 1, its
  `train()`), `roborl_before` (the autograd update of the starting commit: `fast_update=false`
  and `EnsembleLinear.transposed_head = False`), `roborl_head` (+ the one-output critic head
  read in the transposed layout), `roborl_manual` (+ the hand-derived gradients of
  roborl/plugins/sac/fast_update.py, fresh buffers every update), `roborl_workspace` (+ reused
  buffers), `roborl_fast` (+ `fused_adam_step`: the default configuration).

    nice -n 10 python benchmarks/update_efficiency.py            # 1 and 2 threads
    nice -n 10 python benchmarks/update_efficiency.py --quick    # fewer rounds, 1 thread

`run(quick)` returns the rows for benchmarks/suite.py.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from suite import cpu_model  # the suite's machine record: one definition for both

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ENV_ID = "HalfCheetah-v5"
BATCH = 256
HIDDEN = [256, 256]
STAGES = ["roborl_before", "roborl_head", "roborl_manual", "roborl_workspace", "roborl_fast"]
STAGE_DOC = {
    "sb3": "Stable-Baselines3 SAC train(), same sizes",
    "roborl_before": "autograd update of the starting commit",
    "roborl_head": "+ one-output critic head in the transposed layout",
    "roborl_manual": "+ hand-derived gradients, merged 2B-row passes",
    "roborl_workspace": "+ intermediates and grads in reused buffers",
    "roborl_fast": "+ fused Adam kernel called directly (the default)",
}


def machine() -> dict[str, Any]:
    import torch

    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def _contenders(threads: int) -> tuple[dict[str, Callable[[int], None]], dict[str, float]]:
    """Build every contender on the same data; return block runners and FLOPs per update."""
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3.common.logger import configure
    from torch.utils.flop_counter import FlopCounterMode

    from roborl.core.buffer import ReplayBuffer
    from roborl.core.nn import EnsembleLinear
    from roborl.plugins.sac.fast_update import Workspace
    from roborl.plugins.sac.sac import SAC, SACConfig

    torch.set_num_threads(threads)
    env = gym.make(ENV_ID)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    rng = np.random.default_rng(0)
    n = 10_000
    data = (
        rng.normal(size=(n, obs_dim)), rng.uniform(-1, 1, (n, act_dim)), rng.normal(size=n),
        rng.normal(size=(n, obs_dim)), (rng.uniform(size=n) < 0.01).astype(np.float64),
    )  # fmt: skip
    sb3 = SB3SAC(
        "MlpPolicy", env, batch_size=BATCH, learning_starts=0, buffer_size=n, seed=0,
        policy_kwargs={"net_arch": HIDDEN}, device="cpu",
    )  # fmt: skip
    sb3.set_logger(configure(None, []))
    for i in range(n):
        sb3.replay_buffer.add(
            data[0][i : i + 1], data[3][i : i + 1], data[1][i : i + 1], data[2][i : i + 1],
            data[4][i : i + 1], [{}],
        )  # fmt: skip
    buf = ReplayBuffer(n, (obs_dim,), (act_dim,), device="cpu")
    buf.add(*data)
    gen = torch.Generator().manual_seed(0)

    def make(fast: bool) -> SAC:
        torch.manual_seed(0)
        cfg = SACConfig(batch_size=BATCH, hidden_sizes=list(HIDDEN), fast_update=fast)
        return SAC(env.observation_space, env.action_space, cfg, "cpu")

    algos = {name: make(name not in ("roborl_before", "roborl_head")) for name in STAGES}
    algos["roborl_manual"].fast_workspace = Workspace(reuse=False)
    for name in ("roborl_manual", "roborl_workspace"):
        algos[name].direct_adam_step = False
    head_layout = {name: name != "roborl_before" for name in STAGES}

    def roborl_runner(name: str) -> Callable[[int], None]:
        algo = algos[name]

        def block(k: int) -> None:
            EnsembleLinear.transposed_head = head_layout[name]
            for _ in range(k):
                metrics = algo.update(buf.sample_nstep(BATCH, 1, algo.config.gamma, gen))
            float(metrics["critic_loss"])
            EnsembleLinear.transposed_head = True

        return block

    runners: dict[str, Callable[[int], None]] = {
        "sb3": lambda k: sb3.train(gradient_steps=k, batch_size=BATCH)
    }
    runners.update({name: roborl_runner(name) for name in STAGES})
    flops: dict[str, float] = {}
    for name, block in runners.items():
        block(10)  # warm-up (allocator, MKL kernels, Adam state)
        with FlopCounterMode(display=False) as fc:
            block(1)
        flops[name] = float(fc.get_total_flops())
    return runners, flops


def _sgemm_gflops(reps: int = 200) -> float:
    import torch

    a, b = torch.randn(256, 256), torch.randn(256, 256)
    for _ in range(10):
        a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return reps * 2 * 256**3 / (time.perf_counter() - t0) / 1e9


def measure(threads: int, rounds: int, block: int) -> dict[str, Any]:
    """Alternate sgemm and every contender for `rounds` rounds of `block` updates each."""
    import torch

    warnings.filterwarnings("ignore", category=UserWarning)
    runners, flops = _contenders(threads)
    work = flops["roborl_before"]  # FLOPs the maths needs per update (see the module doc)
    load_before = os.getloadavg()
    ups: dict[str, list[float]] = {k: [] for k in runners}
    gflops: list[float] = []
    t_start = time.perf_counter()
    for r in range(rounds):
        gflops.append(_sgemm_gflops())
        order = list(runners) if r % 2 == 0 else list(reversed(runners))
        for name in order:
            t0 = time.perf_counter()
            runners[name](block)
            ups[name].append(block / (time.perf_counter() - t0))
    load_after = os.getloadavg()
    rows: dict[str, Any] = {}
    for name, v in ups.items():
        ratio_sb3 = [x / y for x, y in zip(v, ups["sb3"], strict=True)]
        ratio_before = [x / y for x, y in zip(v, ups["roborl_before"], strict=True)]
        pct = [100 * x * work / (g * 1e9) for x, g in zip(v, gflops, strict=True)]
        rows[name] = {
            "what": STAGE_DOC[name],
            "updates_per_s_median": statistics.median(v),
            "pct_of_sgemm_bound_median": statistics.median(pct),
            "ratio_to_sb3_median": statistics.median(ratio_sb3),
            "ratio_to_sb3_min_max": [min(ratio_sb3), max(ratio_sb3)],
            "ratio_to_roborl_before_median": statistics.median(ratio_before),
            "own_mflop_per_update": flops[name] / 1e6,
            "per_round_updates_per_s": v,
        }
    return {
        "threads": threads,
        "torch_threads": torch.get_num_threads(),
        "rounds": rounds,
        "block_updates": block,
        "sgemm_256_gflops_median": statistics.median(gflops),
        "sgemm_256_gflops_per_round": gflops,
        "mflop_per_update": work / 1e6,
        "sgemm_bound_updates_per_s": statistics.median(gflops) * 1e9 / work,
        "loadavg_1_5_15_before": load_before,
        "loadavg_1_5_15_after": load_after,
        "wall_s": time.perf_counter() - t_start,
        "contenders": rows,
    }


def run(quick: bool = False, threads: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Rows for benchmarks/suite.py: one per (thread count, contender), same-run ratios."""
    threads = threads or ((1,) if quick else (1, 2))
    rounds, block = (5, 30) if quick else (11, 60)
    rows = []
    for t in threads:
        res = measure(t, rounds, block)
        for name, c in res["contenders"].items():
            rows.append(
                {
                    "benchmark": "sac_update_efficiency",
                    "contender": name,
                    "threads": t,
                    "what": c["what"],
                    "updates_per_s": c["updates_per_s_median"],
                    "pct_of_sgemm_bound": c["pct_of_sgemm_bound_median"],
                    "ratio_to_sb3": c["ratio_to_sb3_median"],
                    "ratio_to_roborl_before": c["ratio_to_roborl_before_median"],
                    "sgemm_256_gflops": res["sgemm_256_gflops_median"],
                    "loadavg_1min": res["loadavg_1_5_15_before"][0],
                    "detail": {k: v for k, v in res.items() if k != "contenders"},
                }
            )
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# SAC CPU update efficiency (issue 23)",
        "",
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']['cpu_model']}, {result['machine']['cpu_count']} cores, "
        f"torch {result['machine']['torch']}, SB3 {result['sb3']}  ",
        f"HalfCheetah-v5 sizes (obs 17, act 6), batch {BATCH}, hidden {HIDDEN}, UTD 1. "
        "Contenders alternate in one process; medians over rounds; the ratios are same-round.",
        "",
    ]
    for res in result["runs"]:
        lines += [
            f"## {res['threads']} thread(s)",
            "",
            f"sgemm 256^3: {res['sgemm_256_gflops_median']:.1f} GFLOP/s (median of rounds); "
            f"one update = {res['mflop_per_update']:.1f} MFLOP, bound "
            f"{res['sgemm_bound_updates_per_s']:.1f} updates/s. Load average (1, 5, 15 min) "
            f"before {tuple(round(x, 2) for x in res['loadavg_1_5_15_before'])}, after "
            f"{tuple(round(x, 2) for x in res['loadavg_1_5_15_after'])} on "
            f"{result['machine']['cpu_count']} cores; {res['rounds']} rounds of "
            f"{res['block_updates']} updates each.",
            "",
            "| contender | what | updates/s | % of sgemm bound | x SB3 (min-max) | x before |",
            "|---|---|---|---|---|---|",
        ]
        for name, c in res["contenders"].items():
            lo, hi = c["ratio_to_sb3_min_max"]
            lines.append(
                f"| {name} | {c['what']} | {c['updates_per_s_median']:.1f} | "
                f"{c['pct_of_sgemm_bound_median']:.0f}% | {c['ratio_to_sb3_median']:.2f} "
                f"({lo:.2f}-{hi:.2f}) | {c['ratio_to_roborl_before_median']:.2f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, nargs="*", default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--block", type=int, default=None)
    parser.add_argument("--out", default=str(RESULTS / "update_efficiency_cpu"))
    args = parser.parse_args()
    import stable_baselines3

    threads = args.threads or ([1] if args.quick else [1, 2])
    rounds = args.rounds or (5 if args.quick else 11)
    block = args.block or (30 if args.quick else 60)
    result = {
        "command": "python benchmarks/update_efficiency.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "sb3": stable_baselines3.__version__,
        "runs": [],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for t in threads:
        res = measure(t, rounds, block)
        result["runs"].append(res)
        for name, c in res["contenders"].items():
            print(
                f"threads={t} {name:16s} {c['updates_per_s_median']:7.1f} upd/s "
                f"{c['pct_of_sgemm_bound_median']:5.1f}% of bound  x{c['ratio_to_sb3_median']:.2f} SB3",
                flush=True,
            )
        # Written after every thread count, so a long run that is stopped keeps what it has.
        out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        out.with_suffix(".md").write_text(markdown(result))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()

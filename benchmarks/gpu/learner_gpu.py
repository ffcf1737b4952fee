"""Issue 52's GPU figures in one device call: the learner eager and captured (`algo.capture`).

    bash benchmarks/gpu/run.sh --learner          # on the GPU box (installs, then runs this)
    python benchmarks/gpu/learner_gpu.py          # with roborl installed and CUDA
    python benchmarks/gpu/learner_gpu.py --dry-run   # CPU, tiny counts, writes to a temp dir

Rows (one object per contender in `rows`, with `name`, `algo`, `mode`, `env_steps_per_s`,
`updates_per_s`):

- State SAC on HalfCheetah-v5, batch 256, UTD 1: roborl eager, roborl captured (the whole
  update one CUDA graph) and Stable-Baselines3 SAC, all on CUDA with the replay buffer there.
  `env_steps_per_s` is benchmarks/gpu/sac_gpu.py's figure (its workers run here, one process
  per contender: the training-phase median over windows, `roborl train`'s Runner or SB3's
  `learn`); `updates_per_s` is the update alone on the filled buffer (roborl: `algo.update` on
  batches sampled on the device; SB3: `model.train(gradient_steps=N)`), device-synchronised.
- `algo=serl` on FetchPush from two 32 px views (front and side, EGL rendering) at SERL's
  compute: 256 rows per critic step and 4 critic steps per env step (a batch of 1,024 split
  into `critic_steps` 4; half demo rows, laid out as the loop's symmetric sampling lays them).
  Eager and captured, one seed and eight seeds together. Eight seeds run in ONE process: each
  seed has its own env, replay buffer, demo buffer and algorithm (its own CUDA graph when
  captured), and the process steps them in turn, so their kernels never time-slice the GPU
  across processes. The loop is the off-policy loop's work per env step (act, env step,
  store, sample a mixed batch on the device, update), without logging or evaluation:
  `env_steps_per_s` counts every seed's steps together, `per_seed_env_steps_per_s` each
  one's; `updates_per_s` is update calls (4 critic steps + actor + temperature each) per
  second of the same loop. The demo buffer holds random transitions (the speed does not
  depend on the data; no demo file is carried).

Reference (other hosts, not this run): LeanRL SAC with compile + CUDA graphs 383-469 env
steps/s on an H100, SB3 on CUDA 69.5. Issue 52's targets: state SAC ahead of LeanRL; serl at
least 100 env steps/s for one run.

Writes `gpu.json` and `gpu.md` to `$OUT` when set (and to benchmarks/results/ with `--commit`),
rewritten after every contender so a run stopped by the time limit keeps what finished. The
dry run (`--dry-run`) runs every contender on the CPU with tiny counts into a temporary folder
(never into benchmarks/results): it proves the script end to end, not any speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import sac_gpu  # noqa: E402  (the state SAC contenders: reused, not duplicated)

SERL_ROWS_PER_CRITIC_STEP = 256
SERL_CRITIC_STEPS = 4
SAC_CONTENDERS = (("roborl_eager", "eager"), ("roborl_captured", "captured"), ("sb3", "sb3"))


def versions(device: str) -> dict[str, Any]:
    import torch

    rec = {"torch": str(torch.__version__), "cuda": torch.version.cuda}
    rec["device"] = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu"
    return rec


# -- state SAC: update alone on a filled buffer ----------------------------------------------


def sac_updates_per_s(device: str, mode: str, updates: int) -> dict[str, Any]:
    """roborl SAC's `update` alone, batch 256, on a device buffer of random HalfCheetah-sized
    transitions (the update's cost does not depend on the values)."""
    import gymnasium as gym
    import numpy as np
    import torch

    from roborl.core.buffer import ReplayBuffer
    from roborl.core.config import build_config
    from roborl.plugins.sac.sac import SAC, SACConfig

    obs_space = gym.spaces.Box(-np.inf, np.inf, (17,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
    cfg = build_config(SACConfig, {"batch_size": sac_gpu.BATCH, "capture": mode == "captured"})
    algo = SAC(obs_space, act_space, cfg, device)
    buf = ReplayBuffer(10_000, (17,), (6,), device=device)
    rng = np.random.default_rng(0)
    n = 10_000
    buf.add(
        rng.normal(size=(n, 17)).astype(np.float32), rng.uniform(-1, 1, (n, 6)),
        rng.normal(size=n), rng.normal(size=(n, 17)).astype(np.float32), np.zeros(n),
    )  # fmt: skip
    gen = torch.Generator(device=buf.device).manual_seed(0)
    rate = _time_updates(
        algo, lambda: buf.sample_nstep(sac_gpu.BATCH, 1, cfg.gamma, gen), updates, device
    )
    capture = algo._capture
    return {
        "updates_per_s": rate,
        "cuda_graphs_captured": capture.captured,
        "capture_fallback_reason": capture.fallback_reason,
    }


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time_updates(algo: Any, sample: Any, updates: int, device: str) -> float:
    """Update calls per second after 10 untimed calls (warm-up and capture)."""
    for _ in range(10):
        algo.update(sample())
    _sync(device)
    t0 = time.perf_counter()
    total = None
    for _ in range(updates):
        m = algo.update(sample())
        total = m["critic_loss"] if total is None else total + m["critic_loss"]
    _sync(device)
    return updates / (time.perf_counter() - t0)


# -- serl on FetchPush from two 32 px views --------------------------------------------------


def serl_loop(
    device: str, mode: str, seeds: int, seconds: float, prefill: int, rows: int, px: int
) -> dict[str, Any]:
    """`seeds` SERL learners stepped in turn in this process for `seconds` (see the module
    docstring); returns env steps/s (all seeds), per seed, and update calls/s."""
    import numpy as np
    import torch

    from roborl.core.algorithms import resolve_algorithm
    from roborl.core.buffer import ReplayBuffer, Returns
    from roborl.core.compose import compose_dict
    from roborl.core.demos import sample_mixed
    from roborl.core.plugins import get_host
    from roborl.sim.benchmarks.fetch_pixels import FetchPixelEnv

    batch = rows * SERL_CRITIC_STEPS
    algo_cfg = compose_dict(get_host(), ["algo=serl"], "train")["algo"]
    algo_cfg.update(batch_size=batch, critic_steps=SERL_CRITIC_STEPS, capture=mode == "captured")
    cls, config = resolve_algorithm(get_host(), algo_cfg)
    runs = []
    for seed in range(seeds):
        env = FetchPixelEnv(image_size=px, end_on_success=False, cameras=["front", "side"])
        torch.manual_seed(seed)
        algo = cls(env.observation_space, env.action_space, config, device)
        cap = max(prefill * 4, batch)
        online = ReplayBuffer(cap, env.observation_space, env.action_space.shape, device=device)
        demos = ReplayBuffer(cap, env.observation_space, env.action_space.shape, device=device)
        obs, _ = env.reset(seed=seed)
        for i in range(prefill):  # random actions; the first half doubles as "demos"
            a = env.action_space.sample()
            nxt, r, term, trunc, _ = env.step(a)
            for buf in (online, demos) if i < prefill // 2 or prefill < 4 else (online,):
                buf.add(_row(obs), a[None], np.array([r]), _row(nxt), np.array([float(term)]))
            obs = env.reset()[0] if term or trunc else nxt
        gen = torch.Generator(device=online.device).manual_seed(seed)
        runs.append({"env": env, "algo": algo, "online": online, "demos": demos, "obs": obs,
                     "gen": gen})  # fmt: skip

    def one_step(run: dict[str, Any]) -> None:
        env, algo = run["env"], run["algo"]
        a = algo.act(_row(run["obs"]))[0]
        nxt, r, term, trunc, _ = env.step(a)
        run["online"].add(_row(run["obs"]), a[None], np.array([r]), _row(nxt),
                          np.array([float(term)]))  # fmt: skip
        run["obs"] = env.reset()[0] if term or trunc else nxt
        b = sample_mixed(
            run["online"], run["demos"], batch, 0.5, run["gen"], Returns.of(algo.config)
        )
        m = algo.update(b)
        run["loss"] = m["critic_loss"] if "loss" not in run else run["loss"] + m["critic_loss"]

    for _ in range(6):  # warm-up, and capture on the 4th update of each seed
        for run in runs:
            one_step(run)
    _sync(device)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or steps == 0:
        for run in runs:
            one_step(run)
        steps += 1
    _sync(device)
    wall = time.perf_counter() - t0
    for run in runs:
        run["env"].close()
    capture = runs[0]["algo"]._capture
    return {
        "env_steps_per_s": steps * seeds / wall,
        "per_seed_env_steps_per_s": steps / wall,
        "updates_per_s": steps * seeds / wall,  # one update call per env step and seed
        "critic_rows_per_step": rows,
        "critic_steps": SERL_CRITIC_STEPS,
        "seeds": seeds,
        "timed_s": wall,
        "cuda_graphs_captured": sum(r["algo"]._capture.captured for r in runs),
        "capture_fallback_reason": capture.fallback_reason,
    }


def _row(obs: Any) -> Any:
    """One observation with a leading axis of 1 (a Dict of arrays)."""
    import numpy as np

    return {k: np.asarray(v)[None] for k, v in obs.items()}


# -- driver ----------------------------------------------------------------------------------


def write(report: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gpu.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "gpu.md").write_text(markdown(report))


def markdown(report: dict[str, Any]) -> str:
    def fmt(x: Any) -> str:
        return "-" if x is None else f"{x:,.1f}" if isinstance(x, float) else str(x)

    lines = [
        "# The learner on a GPU (issue 52)",
        "",
        f"Device: {report['device']}; torch {report['torch']}, CUDA {report['cuda']}. "
        f"Command: `{report['command']}`"
        + (" (a CPU dry run: no speed)" if report["dry_run"] else ""),
        "",
        "| name | algo | mode | env steps/s | updates/s | note |",
        "| --- | --- | --- | ---: | ---: | --- |",
    ]
    for r in report["rows"]:
        note = r.get("note") or ""
        if r.get("capture_fallback_reason"):
            note = f"fell back to eager: {r['capture_fallback_reason']}"
        lines.append(
            f"| {r['name']} | {r['algo']} | {r['mode']} | {fmt(r['env_steps_per_s'])} | "
            f"{fmt(r['updates_per_s'])} | {note} |"
        )
    for name, why in report["skipped"].items():
        lines.append(f"| {name} | | | | | skipped: {why[:200]} |")
    lines += ["", report["notes"], ""]
    return "\n".join(lines)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    kind, mode = args.worker.split(":")
    if kind == "sac_updates":
        return sac_updates_per_s(args.device, mode, args.sac_updates)
    seeds = int(kind.removeprefix("serl"))
    return serl_loop(args.device, mode, seeds, args.serl_seconds, args.prefill, args.rows, args.px)


def run_worker(argv: list[str], timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=timeout, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-1500:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny counts, temp folder")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sac-steps", type=int, default=4000, help="state SAC env steps, UTD 1")
    ap.add_argument("--sac-warmup", type=int, default=1000)
    ap.add_argument("--sac-window", type=int, default=500)
    ap.add_argument("--sac-updates", type=int, default=2000, help="timed update-only calls")
    ap.add_argument("--serl-seconds", type=float, default=30.0, help="timed loop per contender")
    ap.add_argument("--prefill", type=int, default=300, help="random steps per seed first")
    ap.add_argument("--rows", type=int, default=SERL_ROWS_PER_CRITIC_STEP)
    ap.add_argument("--px", type=int, default=32)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop starting contenders")
    ap.add_argument("--out", type=Path, default=None, help="folder for gpu.json and gpu.md")
    ap.add_argument("--commit", action="store_true", help="also write benchmarks/results/")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.dry_run:
        args.device, args.commit = "cpu", False
        args.sac_steps, args.sac_warmup, args.sac_window, args.sac_updates = 200, 100, 50, 5
        args.serl_seconds, args.prefill, args.rows = 0.5, 8, 4

    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"benchmarks/gpu: no CUDA device (torch {torch.__version__}): learner skipped")
        return 0
    tmp = tempfile.mkdtemp(prefix="learner_gpu_") if args.dry_run else None
    env_out = os.environ.get("OUT")
    out_dir = args.out or Path(tmp or env_out or ROOT / "benchmarks/results")
    start = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "learner_gpu",
        "issue": 52,
        "command": "python benchmarks/gpu/learner_gpu.py " + " ".join(argv or sys.argv[1:]),
        "dry_run": args.dry_run,
        **versions(args.device),
        "rows": [],
        "skipped": {},
        "reference": {
            "leanrl_sac_h100_sps": list(sac_gpu.LEANRL_H100_SPS),
            "sb3_cuda_sps": sac_gpu.SB3_CUDA_REFERENCE_SPS,
        },
        "notes": (
            "State SAC: HalfCheetah-v5, batch 256, UTD 1, buffer on the device; env steps/s = "
            "training-phase median (benchmarks/gpu/sac_gpu.py), updates/s = update alone. "
            f"serl: FetchPush, two {args.px} px views, {args.rows} rows x "
            f"{SERL_CRITIC_STEPS} critic steps per env step, half demo rows; seeds in one "
            "process; env steps/s of all seeds together (per seed in gpu.json)."
        ),
    }
    me = str(Path(__file__).resolve())
    common = [
        "--device", args.device, "--sac-updates", str(args.sac_updates), "--serl-seconds",
        str(args.serl_seconds), "--prefill", str(args.prefill), "--rows", str(args.rows),
        "--px", str(args.px),
    ]  # fmt: skip

    def left() -> float:
        return args.budget_s - (time.perf_counter() - start)

    def done(name: str, row: dict[str, Any]) -> None:
        report["rows"].append({"name": name, **row})
        report["wall_s"] = time.perf_counter() - start
        print(f"{name}: {row}", flush=True)
        for folder in {out_dir, *([ROOT / "benchmarks/results"] if args.commit else [])}:
            write(report, Path(folder))

    for name, mode in SAC_CONTENDERS:
        if left() < 45:
            report["skipped"][name] = f"time budget spent ({args.budget_s:.0f} s)"
            continue
        try:
            run = run_worker(
                [sac_gpu.__file__, "--worker", name, "--device", args.device, "--steps",
                 str(args.sac_steps), "--warmup", str(args.sac_warmup), "--window",
                 str(args.sac_window), "--sb3-updates", str(args.sac_updates)],
                left(),
            )  # fmt: skip
            if mode == "sb3":
                upd: dict[str, Any] = {"updates_per_s": run.get("updates_per_s")}
            else:
                upd = run_worker([me, "--worker", f"sac_updates:{mode}", *common], left())
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            report["skipped"][name] = f"failed: {exc}"
            continue
        done(
            f"sac_halfcheetah_{mode}",
            {"algo": "sac" if mode != "sb3" else "sb3_sac", "mode": mode,
             "env_steps_per_s": run["train_sps_median"], "updates_per_s": upd["updates_per_s"],
             "capture_fallback_reason": run.get("capture_fallback_reason"),
             "cuda_graphs_captured": run.get("cuda_graphs_captured"), "detail": run},
        )  # fmt: skip
    for seeds in args.seeds:
        for mode in ("eager", "captured"):
            name = f"serl_fetchpush_{seeds}seed_{mode}"
            if left() < args.serl_seconds + 30:
                report["skipped"][name] = f"time budget spent ({args.budget_s:.0f} s)"
                continue
            try:
                row = run_worker([me, "--worker", f"serl{seeds}:{mode}", *common], left())
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                report["skipped"][name] = f"failed: {exc}"
                continue
            done(name, {"algo": "serl", "mode": mode, **row})
    write(report, Path(out_dir))
    print(Path(out_dir / "gpu.md").read_text())
    print(f"wrote {out_dir / 'gpu.json'} and gpu.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

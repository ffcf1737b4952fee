"""Control-loop latency of `roborl deploy` over ROS 2, rclpy and raw DDS side by side.

Starts `roborl sim-robot` (InvertedPendulum-v5 stepped at the control rate, i.e. faster than
real time at 500 Hz) and `roborl deploy` (a SAC policy, 256x256) as separate processes on a
private ROS_DOMAIN_ID, localhost only, for each transport cell and rate (100 and 500 Hz), and
records the achieved loop rate, the observation-to-command latency (JointState received ->
command written; p50/p99) and the policy+safety compute time. Cells:

- `rclpy`: both nodes are rclpy nodes on ROS 2's default RMW (rmw_fastrtps_cpp, Fast DDS 3;
  the PyPI wheels of ROS 2 Kilted);
- `dds`: both nodes use roborl's raw Cyclone DDS transport (no ROS 2 install);
- `dds_vs_rclpy`: the robot is an rclpy node (Fast DDS 3), deploy uses raw Cyclone DDS: the
  cross-vendor path a robot running ROS 2 sees from `pip install roborl[ros2]` without rclpy.

Writes benchmarks/results/control_loop.json and a Markdown table next to it.

    nice -n 10 python benchmarks/control_loop.py [--seconds 10] [--rates 100 500]
        [--cells rclpy dds dds_vs_rclpy]

`--mode training` (issue 21) instead trains SAC (256x256, `utd_ratio` 8: the learner at full
speed) against `sim-robot` over raw DDS and compares today's in-loop robot collector
(`collector=robot`: updates run in the trainer's process while the robot holds between
episodes) with `collector=actor_learner` (a `roborl actor` process steps the robot while the
learner trains). Per mode: the robot's share of wall time spent stepping, the policy latency
per control step (obs handed out -> next command; for the in-loop collector only its
per-log-window maximum is logged) and updates/s. Writes control_loop_training.json/.md.

    nice -n 10 python benchmarks/control_loop.py --mode training [--steps 1500] [--rate 50]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

LOOPBACK = (
    '<CycloneDDS><Domain><General><Interfaces><NetworkInterface address="127.0.0.1"/>'
    "</Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery><Peers>"
    '<Peer address="127.0.0.1"/></Peers><ParticipantIndex>auto</ParticipantIndex>'
    "<MaxAutoParticipantIndex>64</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>"
)


def sac_checkpoint(path: Path) -> None:
    from roborl.core.algorithms import build_algorithm
    from roborl.core.checkpoint import save_checkpoint
    from roborl.core.config import config_to_dict
    from roborl.core.plugins import get_host
    from roborl.core.spaces import space_to_dict

    torch.manual_seed(0)
    obs = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
    act = gym.spaces.Box(-3.0, 3.0, (1,), np.float32)
    algo = build_algorithm(get_host(), {"name": "sac"}, obs, act, "cpu")
    save_checkpoint(
        path,
        {
            "algo": "sac",
            "algo_config": config_to_dict(algo.config),
            "observation_space": space_to_dict(obs),
            "action_space": space_to_dict(act),
            "state": algo.state_dict(),
        },
    )


#: cell -> (sim-robot transport, deploy transport)
CELLS = {"rclpy": ("rclpy", "rclpy"), "dds": ("dds", "dds"), "dds_vs_rclpy": ("rclpy", "dds")}


def run_rate(cell: str, rate: int, seconds: float, ckpt: Path, tmp: Path, domain: int) -> dict:
    sim_transport, deploy_transport = CELLS[cell]
    env = {
        **os.environ,
        "ROS_DOMAIN_ID": str(domain),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp",
        "CYCLONEDDS_URI": LOOPBACK,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("ROS_LOCALHOST_ONLY", None)
    cli = [sys.executable, "-m", "roborl.core.cli"]
    sim = subprocess.Popen(
        [
            *cli,
            "sim-robot",
            "env=inverted_pendulum",
            f"transport={sim_transport}",
            f"rate_hz={rate}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stats = tmp / f"stats_{cell}_{rate}.json"
    try:
        dep = subprocess.run(
            [
                *cli,
                "deploy",
                f"checkpoint={ckpt}",
                "robot=ros2",
                f"robot.transport={deploy_transport}",
                "robot.connect_timeout_s=120",
                f"rate_hz={rate}",
                f"duration_s={seconds}",
                f"stats={stats}",
                "on_watchdog=hold",
                "robot.safety.max_state_age_s=1.0",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=seconds + 300,
        )
        if dep.returncode != 0:
            raise RuntimeError(dep.stderr[-2000:])
    finally:
        sim.terminate()
        sim.wait(timeout=60)
    return json.loads(stats.read_text())


def markdown(out: dict) -> str:
    lines = [
        f"# Control loop: rclpy vs raw DDS ({out['machine']}, {out['seconds']:.0f} s per cell)",
        "",
        f"`roborl deploy` ({out['policy']}) against `roborl sim-robot` ({out['env']}), "
        "separate processes on one host, loopback. Latency: JointState received -> command "
        "written, in deploy. deploy ticks on its own clock, so this includes the wait from a "
        "state's arrival to the next tick (up to one period, phase arbitrary): the p50 at "
        "100 Hz mostly shows that phase; transport costs show in the p99 and at 500 Hz. "
        "Host load average (1 min) before/after: "
        f"{out['loadavg_before'][0]:.1f}/{out['loadavg_after'][0]:.1f}.",
        "",
        "| cell (robot / deploy) | target Hz | achieved Hz | obs->cmd p50 ms | obs->cmd p99 ms "
        "| compute p50 ms | compute p99 ms | commands | states |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for cell, by_rate in out["results"].items():
        robot, dep = CELLS[cell]
        for rate, r in by_rate.items():
            lines.append(
                f"| {cell} ({robot} / {dep}) | {rate} | {r['rate_hz_achieved']:.1f} "
                f"| {r['latency_ms_p50']:.3f} | {r['latency_ms_p99']:.3f} "
                f"| {r['compute_ms_p50']:.3f} | {r['compute_ms_p99']:.3f} "
                f"| {r['commands']} | {r['states_received']} |"
            )
    return "\n".join(lines) + "\n"


def run_training(mode: str, rate: int, steps: int, tmp: Path, domain: int) -> dict:
    """`roborl train` on sim-robot with `collector=robot` (in-loop) or `actor_learner`."""
    env = {
        **os.environ,
        "ROS_DOMAIN_ID": str(domain),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "CYCLONEDDS_URI": LOOPBACK,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("ROS_LOCALHOST_ONLY", None)
    cli = [sys.executable, "-m", "roborl.core.cli"]
    sim = subprocess.Popen(
        [*cli, "sim-robot", "env=inverted_pendulum", "transport=dds", "rate_hz=100",
         "on_terminate=hold"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    run_dir = tmp / f"train_{mode}"
    collector = ["collector=actor_learner", f"actor_learner.port={25000 + domain * 2}"]
    try:
        t0 = time.time()
        train = subprocess.run(
            [*cli, "train", "algo=sac", "algo.batch_size=256", "utd_ratio=8", "robot=ros2",
             "robot.transport=dds", f"robot.rate_hz={rate}", "robot.connect_timeout_s=120",
             "robot.max_episode_steps=100", "robot.terminate={}", f"total_steps={steps}",
             "learning_starts=256", "eval_every=0", "log_every=100",
             f"checkpoint_every={10 * steps}", "progress=false", f"hydra.run.dir={run_dir}",
             *(collector if mode == "actor_learner" else ["collector=robot"])],
            env=env, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        wall = time.time() - t0
        if train.returncode != 0:
            raise RuntimeError(train.stderr[-2000:])
    finally:
        sim.terminate()
        sim.wait(timeout=60)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    out: dict = {"steps": steps, "updates": summary["updates"], "wall_s": wall}
    elapsed = float(summary.get("elapsed_s") or wall)
    out["updates_per_s"] = summary["updates"] / elapsed
    if mode == "actor_learner":
        # The actor's own log: the learner reads statuses only between its update phases.
        stats = run_dir / "actor" / "actor_stats.jsonl"
        actor = [json.loads(x) for x in stats.read_text().splitlines()]
        windows = [r for r in actor if r.get("window_s")]
        w_steps = sum(r["window_steps"] for r in windows)
        w_time = sum(r["window_s"] for r in windows)
        out["rate_hz_achieved"] = w_steps / max(w_time, 1e-9)
        out["latency_ms_p50"] = float(np.median([r["latency_p50_ms"] for r in windows]))
        out["latency_ms_p99"] = float(np.median([r["latency_p99_ms"] for r in windows]))
        out["latency_ms_max"] = float(max(r["latency_max_ms"] for r in windows))
        out["stepping_s"] = w_time
        out["actor_steps"] = int(actor[-1]["steps"])
    else:
        maxima = [
            r["robot/policy_time_max_s"] * 1e3 for r in rows if "robot/policy_time_max_s" in r
        ]
        out["policy_time_max_ms_p50_over_logs"] = float(np.median(maxima))
        out["latency_ms_max"] = float(max(maxima))
        out["stepping_s"] = steps / rate  # whole episodes at the control rate
    out["robot_time_share"] = out["stepping_s"] / elapsed
    out["elapsed_s"] = elapsed
    return out


def training_markdown(out: dict) -> str:
    lines = [
        f"# Control loop while training: in-loop vs actor-learner ({out['machine']})",
        "",
        f"SAC 256x256, batch 256, utd_ratio 8, {out['steps']} robot steps at {out['rate']} Hz "
        "against `sim-robot` (raw DDS, loopback). In-loop (`collector=robot`): updates run in "
        "the trainer while the robot holds between episodes, so the robot idles; "
        "actor-learner: `roborl actor` steps the robot while the learner trains. Latency: "
        "observation handed out -> next command (inference, sends, weight loads); the in-loop "
        "collector logs only its maximum per log window. Robot time share: seconds spent "
        "stepping / the run's wall time; robot steps: steps the robot took (the actor keeps "
        "acting while the learner works through its updates; the learner stores its budget "
        "and drops the rest). Host load average (1 min) "
        f"before/after: {out['loadavg_before'][0]:.1f}/{out['loadavg_after'][0]:.1f}.",
        "",
        "| mode | achieved Hz | latency p50 ms | latency p99 ms | latency max ms "
        "| robot time share | robot steps | updates | updates/s | wall s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode, r in out["results"].items():
        p50 = r.get("latency_ms_p50")
        p99 = r.get("latency_ms_p99")
        lines.append(
            f"| {mode} | {r.get('rate_hz_achieved', float('nan')):.1f} "
            f"| {'n/a' if p50 is None else f'{p50:.2f}'} "
            f"| {'n/a' if p99 is None else f'{p99:.2f}'} | {r['latency_ms_max']:.2f} "
            f"| {r['robot_time_share']:.2f} | {r.get('actor_steps', r['steps'])} "
            f"| {r['updates']} | {r['updates_per_s']:.1f} "
            f"| {r['wall_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main_training(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory() as d:
        domain = 180 + os.getpid() % 20
        for i, mode in enumerate(("in_loop", "actor_learner")):
            r = run_training(mode, args.rate, args.steps, Path(d), domain + i)
            results[mode] = r
            print(mode, json.dumps(r), flush=True)
    out = {
        "benchmark": "control_loop_training",
        "steps": args.steps,
        "rate": args.rate,
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "when": time.time(),
        "results": results,
    }
    path = Path(args.out).with_name("control_loop_training.json")
    path.write_text(json.dumps(out, indent=1))
    path.with_suffix(".md").write_text(training_markdown(out))
    print("wrote", path, "and", path.with_suffix(".md"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["deploy", "training"], default="deploy")
    ap.add_argument("--steps", type=int, default=1500, help="--mode training: robot steps")
    ap.add_argument("--rate", type=int, default=50, help="--mode training: control rate")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rates", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS))
    ap.add_argument("--out", default="benchmarks/results/control_loop.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.mode == "training":
        main_training(args)
        return
    load_before = os.getloadavg()
    results: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ckpt = tmp / "sac.pt"
        sac_checkpoint(ckpt)
        domain = 180 + os.getpid() % 20
        for cell in args.cells:
            for rate in args.rates:
                domain = domain % 230 + 1
                r = run_rate(cell, rate, args.seconds, ckpt, tmp, domain)
                results.setdefault(cell, {})[str(rate)] = r
                print(
                    f"{cell} {rate} Hz: achieved {r['rate_hz_achieved']:.1f} Hz, obs->cmd p50 "
                    f"{r['latency_ms_p50']:.3f} ms p99 {r['latency_ms_p99']:.3f} ms, compute "
                    f"p50 {r['compute_ms_p50']:.3f} ms p99 {r['compute_ms_p99']:.3f} ms",
                    flush=True,
                )
    out = {
        "benchmark": "control_loop",
        "policy": "SAC 256x256 (roborl)",
        "cells": {c: {"robot": CELLS[c][0], "deploy": CELLS[c][1]} for c in args.cells},
        "rclpy": "ros-rclpy 9.1.2 (Kilted wheels), rmw_fastrtps_cpp / Fast DDS 3.2.3",
        "dds": "cyclonedds 11.0.1 (PyPI)",
        "env": "InvertedPendulum-v5 via roborl sim-robot",
        "seconds": args.seconds,
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        # The 1/5/15-min load averages: other work on the host shows in the p99s.
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "when": time.time(),
        "results": results,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    path.with_suffix(".md").write_text(markdown(out))
    print("wrote", path, "and", path.with_suffix(".md"))


if __name__ == "__main__":
    main()

"""Control-loop latency of `roborl deploy` over DDS on loopback, for a SAC policy (256x256).

Starts `roborl sim-robot` (InvertedPendulum-v5 stepped at the control rate, i.e. faster than
real time at 500 Hz) and `roborl deploy` as separate processes on a private ROS_DOMAIN_ID with
a loopback-only Cyclone config, at 100 Hz and 500 Hz, and records observation-to-command
latency (JointState received -> Float64MultiArray written; p50/p99), the policy+safety compute
time, and the achieved loop rate. Writes benchmarks/results/control_loop.json.

    python benchmarks/control_loop.py [--seconds 10] [--rates 100 500]
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


def run_rate(rate: int, seconds: float, ckpt: Path, tmp: Path, domain: int) -> dict:
    env = {
        **os.environ,
        "ROS_DOMAIN_ID": str(domain),
        "CYCLONEDDS_URI": LOOPBACK,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    cli = [sys.executable, "-m", "roborl.core.cli"]
    sim = subprocess.Popen(
        [*cli, "sim-robot", "env=inverted_pendulum", "transport=dds", f"rate_hz={rate}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stats = tmp / f"stats_{rate}.json"
    try:
        dep = subprocess.run(
            [
                *cli,
                "deploy",
                f"checkpoint={ckpt}",
                "robot=ros2",
                "robot.transport=dds",
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rates", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--out", default="benchmarks/results/control_loop.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ckpt = tmp / "sac.pt"
        sac_checkpoint(ckpt)
        for i, rate in enumerate(args.rates):
            results[str(rate)] = run_rate(rate, args.seconds, ckpt, tmp, 180 + i)
            r = results[str(rate)]
            print(
                f"{rate} Hz: achieved {r['rate_hz_achieved']:.1f} Hz, obs->cmd p50 "
                f"{r['latency_ms_p50']:.3f} ms p99 {r['latency_ms_p99']:.3f} ms, compute p50 "
                f"{r['compute_ms_p50']:.3f} ms p99 {r['compute_ms_p99']:.3f} ms",
                flush=True,
            )
    out = {
        "benchmark": "control_loop",
        "policy": "SAC 256x256 (roborl)",
        "transport": "dds",
        "env": "InvertedPendulum-v5 via roborl sim-robot",
        "seconds": args.seconds,
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "when": time.time(),
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()

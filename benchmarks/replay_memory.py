"""Replay memory for image observations: bytes per 100k transitions of 3x64x64 uint8 frames.

Contenders, each holding 100k transitions of a Dict observation {"image": uint8 64x64x3}:

- roborl `ReplayBuffer` (Dict space): uint8 storage, every frame stored once (next obs share the
  obs storage; the final frame of an ended episode and the newest step's next frames live in a
  small side store). Measured FILLED (past wrap-around, so the side store is at its steady
  state) for several episode lengths and env counts: `nbytes()` of all its tensors, and the
  process's resident-memory growth as a cross-check.
- a naive float32 buffer (obs and next_obs as float32, what a Box-only buffer does with
  images): computed from its array shapes.
- stable-baselines3 `DictReplayBuffer` (uint8, obs and next_obs both stored;
  `optimize_memory_usage` is refused for Dict spaces): the `nbytes` of the arrays it allocates
  (NumPy zeros, resident once filled).
- stable-baselines3 `ReplayBuffer` on a Box uint8 image with `optimize_memory_usage=True`
  (the Box-only trick roborl's Dict buffer generalises), for reference.

    python benchmarks/replay_memory.py [--capacity 100000]

Writes benchmarks/results/replay_memory.json and .md.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import psutil
import torch

RESULTS = Path(__file__).parent / "results"
H = W = 64
C = 3
FRAME = H * W * C
MB = 1024**2


def _space() -> gym.spaces.Dict:
    return gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (H, W, C), np.uint8)})


def _rss() -> int:
    return psutil.Process().memory_info().rss


def roborl_filled(capacity: int, episode_len: int, n_envs: int, seed: int = 0) -> dict[str, Any]:
    """Fill a roborl Dict buffer with 1.25 x capacity transitions of fixed-length episodes."""
    from roborl.core.buffer import ReplayBuffer

    gc.collect()
    rss0 = _rss()
    buf = ReplayBuffer(capacity, _space(), (2,))
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (512, H, W, C), dtype=np.uint8)  # distinct frames
    t = np.arange(n_envs) * 7  # per-env step counters, staggered episode ends
    ep = np.arange(n_envs)
    steps = int(1.25 * capacity) // n_envs
    act = np.zeros((n_envs, 2), np.float32)
    t0 = time.perf_counter()

    def frame(e: np.ndarray, k: np.ndarray) -> np.ndarray:
        return pool[(e * 131 + k) % len(pool)]

    obs = frame(ep, t % episode_len)
    for _ in range(steps):
        k = t % episode_len + 1
        done = k >= episode_len
        nxt = frame(ep, k)  # the final frame when done
        term = done.astype(np.float32)
        buf.add({"image": obs}, act, np.zeros(n_envs, np.float32), {"image": nxt}, term)
        t += 1
        ep = np.where(done, ep + n_envs, ep)
        obs = np.where(done[:, None, None, None], frame(ep, np.zeros_like(k)), nxt)
    fill_s = time.perf_counter() - t0
    held = buf.nbytes()
    side_entries = buf._side["image"].shape[0]
    side_live = side_entries - len(buf._free)
    out = {
        "episode_len": episode_len,
        "n_envs": n_envs,
        "capacity": capacity,
        "transitions_added": steps * n_envs,
        "bytes": held,
        "bytes_per_transition": held / capacity,
        "frames_per_transition": (buf.obs["image"].numel() + buf._side["image"].numel())
        / FRAME
        / capacity,
        "side_store_frames_allocated": side_entries,
        "side_store_frames_live": side_live,
        "rss_growth_bytes": _rss() - rss0,
        "fill_s": fill_s,
    }
    del buf
    gc.collect()
    return out


def naive_float32(capacity: int) -> dict[str, Any]:
    obs = capacity * FRAME * 4
    rest = capacity * (2 * 4 + 4 + 4)  # actions, reward, terminated
    return {"bytes": 2 * obs + rest, "bytes_per_transition": (2 * obs + rest) / capacity}


def sb3_dict(capacity: int) -> dict[str, Any]:
    from stable_baselines3.common.buffers import DictReplayBuffer

    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (C, H, W), np.uint8)})
    act = gym.spaces.Box(-1, 1, (2,), np.float32)
    buf = DictReplayBuffer(capacity, space, act, device="cpu")
    arrays = [*buf.observations.values(), *buf.next_observations.values()]
    arrays += [buf.actions, buf.rewards, buf.dones, buf.timeouts]
    total = sum(a.nbytes for a in arrays)
    try:
        DictReplayBuffer(16, space, act, device="cpu", optimize_memory_usage=True)
        refused = False
    except AssertionError:
        refused = True
    return {
        "bytes": total,
        "bytes_per_transition": total / capacity,
        "optimize_memory_usage_refused": refused,
    }


def sb3_box_optimized(capacity: int) -> dict[str, Any]:
    from stable_baselines3.common.buffers import ReplayBuffer

    space = gym.spaces.Box(0, 255, (C, H, W), np.uint8)
    act = gym.spaces.Box(-1, 1, (2,), np.float32)
    buf = ReplayBuffer(
        capacity,
        space,
        act,
        device="cpu",
        optimize_memory_usage=True,
        handle_timeout_termination=False,
    )
    arrays = [buf.observations, buf.actions, buf.rewards, buf.dones, buf.timeouts]
    total = sum(a.nbytes for a in arrays)
    return {"bytes": total, "bytes_per_transition": total / capacity}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--out", default="replay_memory")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cap = args.capacity
    scale = 100_000 / cap
    roborl = [
        roborl_filled(cap, episode_len, n_envs)
        for episode_len, n_envs in [(50, 1), (100, 1), (100, 8), (1000, 1)]
    ]
    peers = {
        "naive_float32": naive_float32(cap),
        "sb3_dict_replay_buffer": sb3_dict(cap),
        "sb3_box_optimize_memory_usage": sb3_box_optimized(cap),
    }
    import stable_baselines3

    result = {
        "what": f"bytes per 100k transitions, {C}x{H}x{W} uint8 image observations",
        "capacity_measured": cap,
        "scale_to_100k": scale,
        "one_frame_bytes": FRAME,
        "roborl": roborl,
        "peers": peers,
        "versions": {
            "torch": torch.__version__,
            "stable_baselines3": stable_baselines3.__version__,
            "numpy": np.__version__,
        },
        "machine": platform.platform(),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=2))
    (RESULTS / f"{args.out}.md").write_text(_markdown(result))
    print(_markdown(result))


def _markdown(r: dict[str, Any]) -> str:
    s = r["scale_to_100k"]
    lines = [
        f"# Replay memory: {r['what']}",
        "",
        f"Measured at capacity {r['capacity_measured']:,}, filled past wrap-around; one frame "
        f"= {r['one_frame_bytes']:,} bytes. `python benchmarks/replay_memory.py`.",
        "",
        "| buffer | episode length | envs | MiB per 100k | frames per transition | "
        "side-store frames live |",
        "|---|---|---|---|---|---|",
    ]
    for row in r["roborl"]:
        lines.append(
            f"| roborl ReplayBuffer (Dict, uint8, shared next obs) | {row['episode_len']} | "
            f"{row['n_envs']} | {row['bytes'] * s / MB:,.0f} | "
            f"{row['frames_per_transition']:.3f} | {row['side_store_frames_live']:,} |"
        )
    names = {
        "naive_float32": "naive float32 obs + next_obs",
        "sb3_dict_replay_buffer": "SB3 DictReplayBuffer (uint8, obs + next_obs)",
        "sb3_box_optimize_memory_usage": "SB3 ReplayBuffer, Box uint8, optimize_memory_usage",
    }
    for key, row in r["peers"].items():
        frames = row["bytes_per_transition"] / r["one_frame_bytes"]
        lines.append(
            f"| {names[key]} | any | any | {row['bytes'] * s / MB:,.0f} | {frames:.3f} | - |"
        )
    dict_sb3 = r["peers"]["sb3_dict_replay_buffer"]
    ref = next(x for x in r["roborl"] if x["episode_len"] == 100 and x["n_envs"] == 1)
    lines += [
        "",
        f"roborl / SB3 DictReplayBuffer at episode length 100: "
        f"{ref['bytes'] / dict_sb3['bytes']:.3f}; roborl / naive float32: "
        f"{ref['bytes'] / r['peers']['naive_float32']['bytes']:.3f}. SB3 refuses "
        f"`optimize_memory_usage` for Dict spaces: "
        f"{dict_sb3['optimize_memory_usage_refused']}.",
        "",
        "Frames per transition above 1 for roborl are the side store: one frame per episode "
        "end held (the final observation, which differs from the reset one) plus one per env "
        "(next frames of the newest step). The columns are tensor bytes; the RSS growth of the "
        "process while filling is in the JSON (`rss_growth_bytes`) as a cross-check.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

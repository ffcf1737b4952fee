"""How often each Fetch pixel camera sees the block while the scripted expert pushes it.

A pushing gripper hides the block from a camera it pushes away from. This counts, per camera of
`FetchPixelEnv` (`CAMERAS`), the frames of scripted pushes where the block is visible
(`FetchPixelEnv.block_pixels`: some pixel changes when the block is made transparent). The
figures are quoted in the docstring of `roborl.sim.benchmarks.fetch_pixels.CAMERAS` and in
docs/envs.md.

    python benchmarks/fetch_camera_visibility.py --episodes 20 --px 32
"""

from __future__ import annotations

import argparse

import numpy as np

from roborl.sim.benchmarks.fetch_pixels import CAMERAS, FetchPixelEnv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--px", type=int, default=32)
    a = p.parse_args()
    names = list(CAMERAS)
    env = FetchPixelEnv("push", image_size=a.px, cameras=names, end_on_success=False)
    frames = []
    for seed in range(a.episodes):
        env.reset(seed=seed)
        for _ in range(env.max_episode_steps):
            env.step(env.expert_action())
            frames.append(np.array(env.block_pixels()) > 0)
    env.close()
    seen = np.array(frames)
    for i, name in enumerate(names):
        print(f"{name}: block visible in {seen[:, i].mean():.0%} of {len(seen)} frames")
    print(f"any of {', '.join(names)}: {seen.any(1).mean():.0%}")


if __name__ == "__main__":
    main()

"""Learning from pixels: success rate against env steps on a RoborlTabletop pixel task.

Three arms with the same env-step budget, learning starts, network sizes and evaluation
protocol (deterministic policy, `--episodes` episodes every `--eval-every` env steps, success
from the env's own `info["success"]`, never from a learned reward):

- ``drq``: pixel SAC from scratch (`algo=drq`), env reward;
- ``rlpd``: `algo=rlpd` with `demos=` (scripted-expert demonstrations, 50/50 batches), env
  reward;
- ``rlpd_learned_reward``: as ``rlpd``, but trained on the reward of a success classifier
  (`reward=classifier`, trained by `roborl reward train` on the demos' frames) instead of the
  env's reward.

Every arm runs `--seeds` seeds through `roborl train` (the Runner, in worker processes); the
final success rates are aggregated with the report plugin's rliable helpers (IQM, 95%
stratified-bootstrap CIs), and the curves are kept per seed. Writes
benchmarks/results/<out>.json and .md. Usage (small budget, a loaded 2-core machine):

    nice -n 10 python benchmarks/pixels.py --steps 2000 --seeds 3 --jobs 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).parent / "results"
ARMS = ("drq", "rlpd", "rlpd_learned_reward")


def env_config(image_size: int, reward_type: str = "sparse") -> dict[str, Any]:
    """Reach the red block, observed through the top camera only (no state, no task id)."""
    return {
        "id": "RoborlTabletop-v0",
        "kwargs": {
            "obs_mode": "pixels",
            "tasks": [0],
            "image_size": image_size,
            "max_episode_steps": 50,
            "reward_type": reward_type,
        },
        "max_episode_steps": 50,
    }


def algo_config(arm: str, a: argparse.Namespace) -> dict[str, Any]:
    name = "drq" if arm == "drq" else "rlpd"
    cfg: dict[str, Any] = {
        "name": name, "batch_size": a.batch_size, "conv_channels": a.conv_channels,
    }  # fmt: skip
    if name == "rlpd":
        cfg["critic_steps"] = a.critic_steps
    return cfg


def record_episodes(
    work: Path, env_cfg: dict[str, Any], episodes: int, policy: str = "expert", seed0: int = 10_000
) -> Path:
    """Episodes on the benchmark's env in roborl's dataset format (NPZ, dict observations with
    uint8 frames, `success_rows` metadata): the scripted expert's (noise 0.1) or uniform random
    actions'. Seeds `seed0`+ (never an evaluation seed)."""
    from roborl.core.datasets import OfflineDataset
    from roborl.sim.tabletop.env import TabletopEnv

    env = TabletopEnv(**env_cfg["kwargs"])
    env.action_space.seed(seed0)
    cols: dict[str, list[Any]] = {k: [] for k in ("obs", "next", "act", "rew", "term", "tout")}
    success_rows = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed0 + ep)
        done = False
        while not done:
            if policy == "expert":
                action = env.expert_action(noise=0.1)
            else:
                action = env.action_space.sample()
            nxt, rew, term, trunc, info = env.step(action)
            if info["success"]:
                success_rows.append(len(cols["rew"]))
            for k, v in zip(cols, (obs["image"], nxt["image"], action, rew, term, trunc)):
                cols[k].append(v)
            obs, done = nxt, term or trunc
    env.close()
    arrays = {
        "observations": {"image": np.stack(cols["obs"])},
        "next_observations": {"image": np.stack(cols["next"])},
        "actions": np.stack(cols["act"]).astype(np.float32),
        "rewards": np.asarray(cols["rew"], np.float32),
        "terminals": np.asarray(cols["term"], bool),
        "timeouts": np.asarray(cols["tout"], bool),
    }
    meta = {"source": f"RoborlTabletop {policy} policy", "success_rows": success_rows}
    ds = OfflineDataset.from_arrays(arrays, meta)
    return ds.save(work / f"{policy}_{episodes}.npz")


def train_classifier(work: Path, data: list[Path], steps: int) -> tuple[Path, dict[str, Any]]:
    """The success classifier of `reward=classifier`, trained by `roborl reward train` on the
    frames of `data` (success = frames after a step whose info said success; the rest and
    each episode's first frame are negatives). Returns the file and its held-out metrics."""
    import torch

    from roborl.core.cli import main as roborl_main

    out = work / "classifier.pt"
    argv = ["reward", "train", f"data=[{','.join(map(str, data))}]", f"out={out}", f"steps={steps}"]
    if roborl_main(argv):
        raise SystemExit(f"roborl {' '.join(argv)} failed")
    return out, torch.load(out, weights_only=True)["config"]["metrics"]


def random_success(env_cfg: dict[str, Any], episodes: int) -> float:
    """Success rate of uniform random actions: the floor every arm must clear (reaching by
    chance within the time limit is common on this task)."""
    from roborl.sim.tabletop.env import TabletopEnv

    env = TabletopEnv(**env_cfg["kwargs"])
    env.action_space.seed(0)
    wins = 0
    for ep in range(episodes):
        env.reset(seed=20_000 + ep)
        done = success = False
        while not done:
            _, _, success, trunc, _ = env.step(env.action_space.sample())
            done = success or trunc
        wins += bool(success)
    env.close()
    return wins / max(episodes, 1)


def run_cell(job: tuple[str, int, dict[str, Any]]) -> dict[str, Any]:
    """One (arm, seed) run through the Runner; returns its success-rate curve."""
    import torch

    from roborl.core.plugins import PluginHost
    from roborl.core.runner import Runner

    arm, seed, cfg = job
    torch.set_num_threads(1)
    host = PluginHost()
    host.load_entry_points()
    run_dir = Path(cfg.pop("_run_dir"))
    t0 = time.time()
    Runner({**cfg, "seed": seed}, run_dir, host).execute()
    return {"arm": arm, "seed": seed, "curve": curve_of(run_dir), "wall_s": time.time() - t0}


def curve_of(run_dir: Path) -> list[tuple[int, float]]:
    """(env step, eval success rate) pairs of one run, from its metrics.jsonl."""
    curve = []
    path = run_dir / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        rec = json.loads(line)
        if "eval/success_rate" in rec:
            curve.append((int(rec["step"]), float(rec["eval/success_rate"])))
    return curve


def aggregate(finals: dict[str, list[float]]) -> dict[str, dict[str, dict[str, float]]]:
    """IQM / mean / median with 95% bootstrap CIs (the report plugin's rliable call)."""
    from roborl.plugins.report.aggregate import interval_estimates

    matrices = {arm: np.asarray(v, dtype=float)[:, None] for arm, v in finals.items() if v}
    return interval_estimates(matrices, reps=2000, ci=0.95, seed=0)


def markdown(result: dict[str, Any]) -> str:
    a = result["args"]
    lines = [
        "# Pixels: success rate from camera images (RoborlTabletop reach, red block)",
        "",
        f"{a['seeds']} seeds per arm, {a['steps']} env steps (finals at step "
        f"{a['final_step']}), learning starts "
        f"{a['learning_starts']}, {a['image_size']}x{a['image_size']} RGB, batch "
        f"{a['batch_size']}, eval {a['episodes']} episodes every {a['eval_every']} steps. "
        f"Wall time {result['wall_s']:.0f} s on {result['machine']}.",
        "",
        "| arm | final success IQM [95% CI] | mean | per seed |",
        "|---|---|---|---|",
    ]
    for arm, stats in result["aggregates"].items():
        iqm, mean = stats["iqm"], stats["mean"]
        seeds = ", ".join(f"{x:.2f}" for x in result["finals"][arm])
        lines.append(
            f"| {arm} | {iqm['point']:.2f} [{iqm['ci_low']:.2f}, {iqm['ci_high']:.2f}] "
            f"| {mean['point']:.2f} | {seeds} |"
        )
    lines += [
        "",
        f"Uniform random actions succeed in {result['random_policy_success']:.2f} of "
        f"{a['random_episodes']} episodes (the floor).",
        "",
    ]
    if m := result.get("classifier_metrics"):
        lines += [
            f"Success classifier of rlpd_learned_reward (`roborl reward train`, "
            f"{a['classifier_steps']} steps, {a['classifier_demos']} expert + "
            f"{a['classifier_random']} random episodes): held-out accuracy "
            f"{m.get('val_accuracy', float('nan')):.2f} (success frames "
            f"{m.get('val_tpr', float('nan')):.2f}, others {m.get('val_tnr', float('nan')):.2f}; "
            f"{m['val_positives']} + {m['val_negatives']} frames).",
            "",
        ]
    lines += [
        "Curves (env step: success rate per seed):",
        "",
    ]
    for arm, curves in result["curves"].items():
        steps = sorted({s for c in curves for s, _ in c})
        rows = [
            f"{s}: " + " ".join(f"{dict(c).get(s, float('nan')):.2f}" for c in curves)
            for s in steps
        ]
        lines.append(f"- {arm}: " + "; ".join(rows))
    lines += ["", result.get("note", ""), ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--learning-starts", type=int, default=200)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--image-size", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--critic-steps", type=int, default=2)
    p.add_argument("--conv-channels", type=int, default=32, help="DrQ-v2: 32")
    p.add_argument(
        "--reward-type", default="sparse", choices=["sparse", "dense"],
        help="the env's reward for the drq and rlpd arms (success is always the env's own)",
    )  # fmt: skip
    p.add_argument("--demo-episodes", type=int, default=20)
    p.add_argument("--classifier-demos", type=int, default=100, help="expert episodes")
    p.add_argument("--classifier-random", type=int, default=50, help="random-action episodes")
    p.add_argument("--classifier-steps", type=int, default=1500)
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--out", default="pixels")
    p.add_argument("--note", default="")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--random-episodes", type=int, default=50, help="episodes of the random floor")
    p.add_argument("--random-floor", type=float, default=None, help="a floor measured before")
    p.add_argument(
        "--collect", action="store_true",
        help="do not train: aggregate the runs already in --work-dir (e.g. stopped ones)",
    )  # fmt: skip
    a = p.parse_args()

    work = Path(a.work_dir or tempfile.mkdtemp(prefix="roborl_pixels_"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    env = env_config(a.image_size, a.reward_type)
    need_demos = a.arms != ["drq"] and not a.collect
    demos = work / f"expert_{a.demo_episodes}.npz"
    if need_demos:
        demos = record_episodes(work, env, a.demo_episodes)
    learned = "rlpd_learned_reward" in a.arms and not a.collect
    classifier, classifier_metrics = work / "classifier.pt", {}
    if learned:  # SERL's classifier data: successful demos plus exploration frames
        data = [
            record_episodes(work, env, a.classifier_demos, seed0=30_000),
            record_episodes(work, env, a.classifier_random, "random", seed0=40_000),
        ]
        classifier, classifier_metrics = train_classifier(work, data, a.classifier_steps)
    base = {
        "env": env, "total_steps": a.steps, "learning_starts": a.learning_starts,
        "eval_every": a.eval_every, "eval_episodes": a.episodes, "checkpoint_every": a.steps,
        "log_every": a.eval_every, "progress": False, "torch_threads": 1,
    }  # fmt: skip
    jobs = []
    for arm in a.arms:
        for seed in range(a.seeds):
            cfg = {**base, "algo": algo_config(arm, a), "_run_dir": str(work / f"{arm}_s{seed}")}
            if arm != "drq":
                cfg["demos"] = str(demos)
            if arm == "rlpd_learned_reward":
                cfg["reward"] = {"name": "classifier", "path": str(classifier)}
            jobs.append((arm, seed, cfg))
    if a.collect:  # runs stopped by a time limit: what their metrics.jsonl hold
        cells = [
            {"arm": arm, "seed": seed, "curve": curve_of(Path(cfg["_run_dir"])), "wall_s": 0.0}
            for arm, seed, cfg in jobs
        ]
    else:
        with mp.get_context("spawn").Pool(a.jobs) as pool:
            cells = pool.map(run_cell, jobs)
    # Finals at the last evaluation step every run reached: the same budget for every arm.
    last = min((c["curve"][-1][0] for c in cells if c["curve"]), default=0)
    a.final_step = last
    curves: dict[str, list[list[tuple[int, float]]]] = {arm: [] for arm in a.arms}
    finals: dict[str, list[float]] = {arm: [] for arm in a.arms}
    for cell in sorted(cells, key=lambda c: (c["arm"], c["seed"])):
        curves[cell["arm"]].append(cell["curve"])
        at = dict(cell["curve"])
        if last in at:
            finals[cell["arm"]].append(at[last])
    result = {
        "args": vars(a),
        "machine": f"{platform.machine()}, {mp.cpu_count()} cores (shared), "
        f"load {Path('/proc/loadavg').read_text().split()[0]} at the end",
        "wall_s": time.time() - t0,
        "cell_wall_s": {f"{c['arm']}_s{c['seed']}": round(c["wall_s"], 1) for c in cells},
        "finals": finals,
        "curves": curves,
        "aggregates": aggregate(finals),
        "random_policy_success": (
            a.random_floor if a.random_floor is not None else random_success(env, a.random_episodes)
        ),
        "classifier_metrics": classifier_metrics,
        "note": a.note,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / f"{a.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    (OUT / f"{a.out}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()

"""roborl's HER beside stable-baselines3's HER (both SAC) on Gymnasium-Robotics Fetch tasks.

Arms, at the same env-step budget, learning starts, network sizes, learning rates, gamma,
batch size, buffer size and HER settings (strategy, n_sampled_goal):

- ``roborl_her``: ``roborl train algo=sac env=<task> her=<strategy>`` (the Runner in-process);
- ``sb3_her``: SB3's `SAC("MultiInputPolicy", replay_buffer_class=HerReplayBuffer)`;
- ``roborl_no_her`` (only with ``--control``): roborl SAC on the concatenated goal Dict
  (``env.concat_obs``, the presets' default), the negative control.

Evaluation is the same for every arm: the deterministic policy, `--episodes` episodes every
`--eval-every` env steps, success = the last step's ``info["is_success"]`` (Fetch's standard,
what roborl logs as ``eval/success_rate``). The final success rates over `--seeds` seeds are
aggregated per task with the report plugin's rliable helpers (IQM, mean, median, 95%
stratified-bootstrap CIs). One process at a time (a shared 2-core machine), one torch thread.
Writes benchmarks/results/<out>.json and .md. What was run for the committed results:

    nice -n 10 python benchmarks/her_vs_sb3.py --envs fetch_reach --steps 10000 --seeds 3 \
        --eval-every 2000 --episodes 20 --control

and for FetchPush at the budget a session could afford (results/her_vs_sb3_push.md; neither arm
learns by 30k steps: both sit at the zero-action success, 0.05 on the evaluation seeds):

    nice -n 10 python benchmarks/her_vs_sb3.py --envs fetch_push --steps 30000 --seeds 3 \
        --eval-every 5000 --episodes 20 --out her_vs_sb3_push

FetchPush needs far more steps (rl-baselines3-zoo trains HER agents on it for about 1e6 steps,
with larger networks); the full comparison, many hours on a 2-core CPU (not run yet):

    nice -n 10 python benchmarks/her_vs_sb3.py --envs fetch_reach fetch_push \
        --steps 20000 1000000 --seeds 3 --eval-every 5000 --hidden 256 256 256 --out her_vs_sb3_full
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).parent / "results"
TASKS = {"fetch_reach": "FetchReach-v4", "fetch_push": "FetchPush-v4"}
ARMS = ("roborl_her", "sb3_her")
CONTROL = "roborl_no_her"
EVAL_SEED = 1_000_003  # roborl's EVAL_SEED_OFFSET: SB3's evaluations use the same env seeds


def roborl_run(arm: str, task: str, seed: int, steps: int, a: argparse.Namespace) -> list:
    """One roborl run through the Runner; its (step, eval success rate) curve."""
    from roborl.core.plugins import get_host
    from roborl.core.runner import Runner

    cfg: dict[str, Any] = {
        "algo": {
            "name": "sac", "hidden_sizes": list(a.hidden), "batch_size": a.batch_size,
            "gamma": a.gamma, "actor_lr": a.lr, "critic_lr": a.lr, "alpha_lr": a.lr,
            "buffer_size": a.buffer_size,
        },
        "env": {"id": task, "kwargs": {}, "max_episode_steps": None, "concat_obs": True},
        "seed": seed, "total_steps": steps, "learning_starts": a.learning_starts,
        "eval_every": a.eval_every, "eval_episodes": a.episodes, "checkpoint_every": steps,
        "log_every": a.eval_every, "progress": False, "torch_threads": 1,
    }  # fmt: skip
    if arm == "roborl_her":
        cfg["her"] = {"strategy": a.strategy, "n_sampled_goal": a.n_sampled_goal}
    run_dir = Path(tempfile.mkdtemp(prefix=f"her_{arm}_{task}_{seed}_"))
    Runner(cfg, run_dir, get_host()).execute()
    curve = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "eval/success_rate" in rec:
            curve.append((int(rec["step"]), float(rec["eval/success_rate"])))
    return curve


def sb3_success(model: Any, env: Any, episodes: int) -> float:
    """roborl's evaluation protocol for an SB3 model: deterministic, seeded, last step's flag."""
    wins = []
    for i in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + i)
        done, info = False, {}
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        wins.append(bool(info.get("is_success")))
    return float(np.mean(wins))


def sb3_run(task: str, seed: int, steps: int, a: argparse.Namespace) -> list:
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback

    from roborl.sim.benchmarks import make_fetch

    env, eval_env = make_fetch(TASKS[task]), make_fetch(TASKS[task])
    curve: list[tuple[int, float]] = []

    class Eval(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % a.eval_every == 0:
                curve.append((self.num_timesteps, sb3_success(self.model, eval_env, a.episodes)))
            return True

    model = SAC(
        "MultiInputPolicy", env, learning_rate=a.lr, buffer_size=min(a.buffer_size, steps),
        learning_starts=a.learning_starts, batch_size=a.batch_size, gamma=a.gamma,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs={
            "n_sampled_goal": a.n_sampled_goal, "goal_selection_strategy": a.strategy,
        },
        policy_kwargs={"net_arch": list(a.hidden)}, seed=seed, device="cpu", verbose=0,
    )  # fmt: skip
    model.learn(steps, callback=Eval())
    env.close()
    eval_env.close()
    return curve


def aggregate(finals: dict[str, list[float]]) -> dict[str, Any]:
    from roborl.plugins.report.aggregate import interval_estimates

    matrices = {arm: np.asarray(v, dtype=float)[:, None] for arm, v in finals.items() if v}
    return interval_estimates(matrices, reps=2000, ci=0.95, seed=0)


def markdown(result: dict[str, Any]) -> str:
    a = result["args"]
    lines = [
        "# HER: roborl beside stable-baselines3 (SAC + HER, Fetch)",
        "",
        f"{a['seeds']} seeds per arm; strategy {a['strategy']}, n_sampled_goal "
        f"{a['n_sampled_goal']}; SAC {a['hidden']} networks, batch {a['batch_size']}, lr "
        f"{a['lr']}, gamma {a['gamma']}, learning starts {a['learning_starts']}; eval "
        f"{a['episodes']} deterministic episodes every {a['eval_every']} steps (success = last "
        f"step's is_success). Machine: {result['machine']}; load average at start "
        f"{result['loadavg_start']}.",
        "",
        "| task | steps | arm | final success IQM [95% CI] | mean | per seed | wall s/run |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, entry in result["tasks"].items():
        for arm, stats in entry["aggregates"].items():
            iqm = stats["iqm"]
            seeds = ", ".join(f"{x:.2f}" for x in entry["finals"][arm])
            wall = np.mean(entry["wall_s"][arm])
            lines.append(
                f"| {task} | {entry['steps']} | {arm} | {iqm['point']:.2f} "
                f"[{iqm['ci_low']:.2f}, {iqm['ci_high']:.2f}] | {stats['mean']['point']:.2f} "
                f"| {seeds} | {wall:.0f} |"
            )
    lines += [
        "",
        "Curves (step: success per seed) are in the JSON. A task missing from the table was not "
        "run at this budget; the full FetchReach + FetchPush command (SB3's rl-zoo budget for "
        "FetchPush, 1e6 steps) is in the script's docstring.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=["fetch_reach"], choices=sorted(TASKS))
    p.add_argument("--steps", nargs="+", type=int, default=[10_000], help="one per env, or one")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--eval-every", type=int, default=2_000)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--learning-starts", type=int, default=500)
    p.add_argument("--hidden", nargs="+", type=int, default=[64, 64])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--gamma", type=float, default=0.95)
    p.add_argument("--buffer-size", type=int, default=1_000_000)
    p.add_argument("--strategy", default="future", choices=["future", "final", "episode"])
    p.add_argument("--n-sampled-goal", type=int, default=4)
    p.add_argument("--control", action="store_true", help=f"also run {CONTROL}")
    p.add_argument("--out", default="her_vs_sb3")
    a = p.parse_args(argv)
    steps = a.steps * len(a.envs) if len(a.steps) == 1 else a.steps
    if len(steps) != len(a.envs):
        p.error("--steps takes one value, or one per --envs entry")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    arms = [*ARMS, CONTROL] if a.control else list(ARMS)
    t0 = time.time()
    result: dict[str, Any] = {
        "args": vars(a),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "python": sys.version.split()[0],
        "tasks": {},
    }
    for task, budget in zip(a.envs, steps, strict=True):
        entry: dict[str, Any] = {"steps": budget, "curves": {}, "finals": {}, "wall_s": {}}
        for arm in arms:
            entry["curves"][arm], entry["finals"][arm], entry["wall_s"][arm] = [], [], []
            for seed in range(a.seeds):
                start = time.time()
                if arm == "sb3_her":
                    curve = sb3_run(task, seed, budget, a)
                else:
                    curve = roborl_run(arm, task, seed, budget, a)
                entry["curves"][arm].append(curve)
                entry["finals"][arm].append(curve[-1][1] if curve else float("nan"))
                entry["wall_s"][arm].append(round(time.time() - start, 1))
                print(f"{task} {arm} seed {seed}: {curve}", flush=True)
        entry["aggregates"] = aggregate(entry["finals"])
        result["tasks"][task] = entry
    result["wall_s"] = round(time.time() - t0, 1)
    OUT.mkdir(exist_ok=True)
    (OUT / f"{a.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    (OUT / f"{a.out}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""VLA-RL at CPU scale: success per task variant after SFT and after RL, with and without the
process reward model, over several seeds.

For each seed the SFT policy (and its PRM) is trained once, then RL runs twice from that same
starting point (PRM on / off), so the comparison isolates the RL stage. Writes
benchmarks/results/vla_rl.json and vla_rl.png.

    MUJOCO_GL=egl python benchmarks/vla_rl.py --seeds 0 1 2 --iterations 20
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch

from roborl.core.plugins import get_host

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rollout-steps", type=int, default=32)
    parser.add_argument("--eval-episodes", type=int, default=10, help="per task variant")
    parser.add_argument("--out", type=Path, default=RESULTS / "vla_rl.json")
    args = parser.parse_args()
    torch.set_num_threads(1)

    host = get_host()
    algo_cls = host.registry.get("algorithms", "vla_rl")
    make_env = host.registry.get("envs", "RoborlTabletop-v0")
    results: dict = {"config": vars(args) | {"out": str(args.out)}, "runs": []}
    t0 = time.time()
    for seed in args.seeds:
        torch.manual_seed(seed)
        env = make_env()
        cfg = algo_cls.Config(
            iterations=args.iterations,
            num_envs=args.num_envs,
            rollout_steps=args.rollout_steps,
            eval_episodes_per_task=args.eval_episodes,
        )
        base = algo_cls(env.observation_space, env.action_space, cfg)
        base.rng = np.random.default_rng(seed)
        base.gen.manual_seed(seed)
        demos = base.collect_demos(env, seed * 100_000)
        from roborl.plugins.vla_rl.tokenizer import ActionTokenizer

        base.setup(list(env.task_instructions), ActionTokenizer.fit(demos["actions"], 1).state())
        base.sft(demos)
        prm_stats = base.train_prm(demos)
        sft_success = base.evaluate_tasks(env, 10_000 + seed)
        print(
            f"seed {seed}: SFT success {sft_success['success/mean']:.2f} ({time.time() - t0:.0f}s)"
        )
        for use_prm in (True, False):
            algo = copy.deepcopy(base)
            algo.config = copy.deepcopy(cfg)
            algo.config.use_prm = use_prm
            from roborl.plugins.vla_rl.curriculum import SuccessCurriculum

            algo.curriculum = SuccessCurriculum(len(algo.instructions), cfg.curriculum_temperature)
            envs = [make_env() for _ in range(args.num_envs)]
            state = {"obs": [algo._reset(e) for e in envs]}
            curve = []
            for it in range(args.iterations):
                m = algo.ppo_iteration(envs, state)
                curve.append({"iteration": it, "rollout_success": m["rollout/success_rate"]})
            rl_success = algo.evaluate_tasks(env, 10_000 + seed)
            print(
                f"seed {seed} prm={use_prm}: RL success {rl_success['success/mean']:.2f} "
                f"({time.time() - t0:.0f}s)"
            )
            results["runs"].append(
                {
                    "seed": seed,
                    "use_prm": use_prm,
                    "sft_success": sft_success,
                    "rl_success": rl_success,
                    "prm": prm_stats,
                    "curve": curve,
                }
            )
            for e in envs:
                e.close()
        env.close()
    results["wall_time_s"] = time.time() - t0
    summarise(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    plot(results, args.out.with_suffix(".png"))
    print(json.dumps(results["summary"], indent=2))


def summarise(results: dict) -> None:
    summary = {}
    for use_prm in (True, False):
        runs = [r for r in results["runs"] if r["use_prm"] == use_prm]
        sft = [r["sft_success"]["success/mean"] for r in runs]
        rl = [r["rl_success"]["success/mean"] for r in runs]
        per_task = {
            k: {
                "sft": float(np.mean([r["sft_success"][k] for r in runs])),
                "rl": float(np.mean([r["rl_success"][k] for r in runs])),
            }
            for k in runs[0]["sft_success"]
            if k != "success/mean"
        }
        summary["prm" if use_prm else "no_prm"] = {
            "sft_mean": float(np.mean(sft)),
            "rl_mean": float(np.mean(rl)),
            "improved_seeds": int(sum(b > a for a, b in zip(sft, rl))),
            "seeds": len(runs),
            "per_task": per_task,
        }
    results["summary"] = summary


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for use_prm, color in ((True, "tab:blue"), (False, "tab:orange")):
        runs = [r for r in results["runs"] if r["use_prm"] == use_prm]
        curves = np.array([[c["rollout_success"] for c in r["curve"]] for r in runs])
        mean, lo, hi = curves.mean(0), curves.min(0), curves.max(0)
        x = np.arange(len(mean))
        label = "VLA-RL with PRM" if use_prm else "VLA-RL without PRM"
        ax.plot(x, mean, color=color, label=label)
        ax.fill_between(x, lo, hi, color=color, alpha=0.2)
        ax.axhline(np.mean([r["sft_success"]["success/mean"] for r in runs]), color="gray", ls="--")
    ax.set_xlabel("PPO iteration")
    ax.set_ylabel("rollout success rate (curriculum tasks)")
    ax.set_title("VLA-RL on roborl tabletop (dashed: SFT greedy success)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()

"""Issue 48's state gate: FetchPush with the block's pose in the state, the true sparse reward,
demos and the scripted person, must reach policy-only success >= 0.9 by 12,000 env steps (IQM
over 5 seeds) before the pixel recipe is worth running: it separates RL from vision.

The task is the pixel benchmark's (`benchmarks/hil_manipulation.py`) without its cameras:
`env=fetch_push_pixels` with `env.kwargs.cameras=[]` and `env.kwargs.privileged_block=true`
(a Dict holding only the state: gripper, fingers, velocities, goal, and the block's position
and its offset from the gripper, in workspace units), episodes of 50 steps that play on after
success, the env's own reward (1 on each step the block is within 5 cm of the goal), the same
4-D end-effector action. The algorithm is the pixel recipe's, `algo=serl` (RLPD with SERL's
values, which then runs without encoder or augmentation), with `demos=` in 50/50 batches and
`scripted_person=`. Each run is one `roborl train`; `--print-command` prints it:

    roborl train env=fetch_push_pixels env.kwargs.cameras=[] env.kwargs.privileged_block=true \
        env.kwargs.normalized_state=true env.kwargs.end_on_success=false algo=serl \
        algo.num_critics=2 algo.critic_subsample=null algo.critic_steps=2 algo.batch_size=256 \
        algo.n_step=3 algo.bc_weight=10 demos=DEMOS.npz \
        'scripted_person={window_s:0.4,max_takeover_s:1.0}' total_steps=12000 \
        learning_starts=500 eval_every=2000 eval_episodes=20

The demos: `roborl demos record policy=expert noise=0.1 successes_only=true` (`--demos`
episodes). Evaluation is policy-only (no person): every `--eval-every` steps, `--eval-episodes`
episodes on the same seeds, success both at the end of the episode (Fetch's standard, the
gate's metric) and at any step (`eval/success_any_rate`). Final = last evaluation; IQM and 95%
stratified-bootstrap CI over seeds (rliable's estimators via `roborl.plugins.report`), the
curves, the person's intervention rate over time (`train/intervention_rate` per `--log-every`
steps) and the machine that ran it go to `benchmarks/results/hil_manipulation_gate.md/.json`,
with a top-level `headline` (gate_iqm, gate_ci, gate_seeds, gate_steps, gate_passed).

Levers (issue 48), each a flag that becomes one override: `--bc-weight` and
`--no-bc-q-filter` (Nair et al.'s Q-filtered behaviour cloning on demo and intervention rows,
`algo.bc_weight`, `algo.bc_q_filter`), `--n-step` (`algo.n_step`), `--taper-episodes` (a
fading person, `scripted_person.taper_episodes`), `--workspace` (HIL-SERL's workspace box,
`env.kwargs.workspace`), the person's done and hand-back distances (`--person-tolerance`,
`--person-recover`), and the compute per env step (`--critics`, `--critic-steps`, `--rows`
per critic step, `--utd-ratio`); `--override KEY=VALUE` adds any other `roborl train`
override (e.g. `algo.gamma=0.98`). The defaults are what the runs in the results file used and
why (its notes). `--failures CHECKPOINT` sorts a trained policy's failed episodes by kind;
`--critic-probe CHECKPOINT` sets the critic's value of the policy's action beside the expert's
where episodes end (does the critic know what a stopped policy misses?).

Run again with the same `--work` after a stop: finished runs are kept, an interrupted one
starts again. `--collect LABEL=DIR,...` writes the report from existing run directories
without running anything (e.g. seeds run by hand or on another machine).

    OMP_NUM_THREADS=1 python benchmarks/hil_manipulation_gate.py --seeds 5 --jobs 2 --work /tmp/gate
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from hil_manipulation import aggregate  # the same IQM + CI as the pixel benchmark

from roborl.hil.scripted_person import ScriptedPersonConfig

OUT = Path(__file__).parent / "results"
PERSON = ScriptedPersonConfig()  # the person's defaults, left out of the override when unchanged
GOAL = 0.9
ENV = [
    "env=fetch_push_pixels", "env.kwargs.cameras=[]", "env.kwargs.privileged_block=true",
    "env.kwargs.normalized_state=true", "env.kwargs.end_on_success=false",
]  # fmt: skip


def env_args(a: argparse.Namespace) -> list[str]:
    box = ["env.kwargs.workspace=" + json.dumps(_workspace())] if a.workspace else []
    return [*ENV, *box]


def _workspace() -> list[float]:
    from roborl.sim.benchmarks.fetch_pixels import WORKSPACE

    return [round(float(v), 4) for v in WORKSPACE]


def person_arg(a: argparse.Namespace) -> str:
    keys = f"window_s:{a.window_s},max_takeover_s:{a.max_takeover_s}"
    if a.person_tolerance != PERSON.tolerance:
        keys += f",tolerance:{a.person_tolerance}"
    if a.person_recover != PERSON.recover:
        keys += f",recover:{a.person_recover}"
    if a.taper_episodes:
        keys += f",taper_episodes:{a.taper_episodes},taper_floor:{a.taper_floor}"
    return f"scripted_person={{{keys}}}"


def train_args(a: argparse.Namespace, demos: Path, seed: int, run_dir: Path) -> list[str]:
    """The `roborl train` overrides of one gate run."""
    person = [person_arg(a)] if a.person else []
    return [
        "train", *env_args(a), f"algo={a.algo}", f"algo.num_critics={a.critics}",
        "algo.critic_subsample=null" if a.critics <= 2 else "algo.critic_subsample=2",
        f"algo.critic_steps={a.critic_steps}", f"algo.batch_size={a.rows * a.critic_steps}",
        f"algo.n_step={a.n_step}", f"algo.bc_weight={a.bc_weight}",
        f"algo.bc_q_filter={str(a.bc_q_filter).lower()}", f"demos={demos}",
        *person, f"utd_ratio={a.utd_ratio}", f"total_steps={a.steps}",
        f"learning_starts={a.learning_starts}",
        f"eval_every={a.eval_every}", f"eval_episodes={a.eval_episodes}",
        f"checkpoint_every={a.steps}", f"log_every={a.log_every}", "progress=false",
        "torch_threads=1", f"seed={seed}", f"hydra.run.dir={run_dir}", *a.override,
    ]  # fmt: skip


def roborl(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "roborl.core.cli", *args],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


def record_demos(a: argparse.Namespace, work: Path) -> Path:
    demos = work / "demos.npz"
    if not demos.exists():
        args = [
            "demos", "record", f"out={demos}", f"episodes={a.demos}", "policy=expert",
            "noise=0.1", "successes_only=true", "seed=10000", *env_args(a),
            *[o for o in a.override if o.lstrip("+~").startswith(("env.", "her"))],  # as runs
        ]  # fmt: skip
        if roborl(args, work / "demos.log").wait():
            raise SystemExit(f"demos record failed:\n{(work / 'demos.log').read_text()[-3000:]}")
    return demos


def run_seeds(a: argparse.Namespace, demos: Path, work: Path) -> list[Path]:
    """`--seeds` runs, `--jobs` at a time; a run with a summary.json is kept."""
    dirs = [work / "runs" / f"seed{s}" for s in range(a.seeds)]
    procs: list[tuple[Path, subprocess.Popen]] = []
    for seed, d in enumerate(dirs):
        if (d / "summary.json").exists():
            continue
        while len([p for _, p in procs if p.poll() is None]) >= a.jobs:
            time.sleep(2.0)
        d.parent.mkdir(parents=True, exist_ok=True)
        procs.append((d, roborl(train_args(a, demos, seed, d), d.parent / f"{d.name}.log")))
    failed = [str(d) for d, p in procs if p.wait()]
    if failed:
        raise SystemExit(f"gate runs failed: {failed} (logs beside them)")
    return dirs


def read_run(run_dir: Path) -> dict[str, Any]:
    """Policy-only success (at the end, at any step) and the intervention rate against env
    steps, the speed and wall time, from the run's metrics.jsonl and summary.json."""
    ends, anys, interventions, sps = [], [], [], []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "eval/success_rate" in row:
            ends.append((row["step"], row["eval/success_rate"]))
            anys.append((row["step"], row.get("eval/success_any_rate")))
        if "train/intervention_rate" in row:
            interventions.append((row["step"], row["train/intervention_rate"]))
        if "time/sps" in row and row.get("updates"):
            sps.append(row["time/sps"])
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return {
        "run_dir": str(run_dir), "success": ends, "success_any": anys,
        "intervention_rate": interventions, "steps": ends[-1][0] if ends else 0,
        "status": summary.get("status", "unfinished"), "wall_s": summary.get("wall_time_s"),
        "median_sps": float(np.median(sps)) if sps else None,
    }  # fmt: skip


def rate_by_window(runs: list[dict[str, Any]], window: int) -> list[tuple[int, float]]:
    """The intervention rate averaged over runs per `window` env steps (step = window end)."""
    buckets: dict[int, list[float]] = {}
    for run in runs:
        for step, rate in run["intervention_rate"]:
            buckets.setdefault(-(-step // window) * window, []).append(rate)
    return [(s, float(np.mean(v))) for s, v in sorted(buckets.items())]


def summarise(
    runs: dict[str, list[dict[str, Any]]], window: int, reps: int = 2000
) -> dict[str, Any]:
    """Per label: finals (end, any step), their aggregates, intervention rate over time."""
    out = {}
    for label, rs in runs.items():
        end = [r["success"][-1][1] if r["success"] else 0.0 for r in rs]
        any_ = [r["success_any"][-1][1] if r["success_any"] else 0.0 for r in rs]
        agg = aggregate({"end": end, "any": [v if v is not None else 0.0 for v in any_]}, reps)
        out[label] = {
            "finals_end": end, "finals_any": any_, "aggregate_end": agg["end"],
            "aggregate_any": agg["any"], "intervention_by_window": rate_by_window(rs, window),
        }  # fmt: skip
    return out


def markdown(result: dict[str, Any]) -> str:
    h = result["headline"]
    lines = ["# Issue 48's state gate: FetchPush, block pose in the state, true reward", ""]
    verdict = "passes" if h["gate_passed"] else "falls short of"
    lines += [
        f"**Gate ({result['gate_label']}): policy-only success at the end IQM "
        f"{h['gate_iqm']:.2f} [{h['gate_ci'][0]:.2f}, {h['gate_ci'][1]:.2f}] over "
        f"{h['gate_seeds']} seed(s) at {h['gate_steps']} env steps: {verdict} the goal "
        f"(>= {GOAL} over 5 seeds by 12,000 steps).**",
        "",
        f"Command: `{result['command']}`  ",
        *[f"Before it (arms kept): `{c}`  " for c in result.get("earlier_commands", [])],
        f"Machine: {result['machine']}.",
        "",
        "| arm | runs | steps | success at the end: IQM [95% CI] | per seed | success at any "
        "step: IQM [95% CI] | per seed | mean intervention rate | median env steps/s | wall "
        "min per run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, s in result["summary"].items():
        rs = result["runs"][label]
        e, y = s["aggregate_end"]["iqm"], s["aggregate_any"]["iqm"]
        rates = [np.mean([r for _, r in run["intervention_rate"]] or [0.0]) for run in rs]
        sps = [run["median_sps"] for run in rs if run["median_sps"]]
        walls = [run["wall_s"] / 60 for run in rs if run["wall_s"]]
        lines.append(
            f"| {label} | {len(rs)} | {', '.join(str(r['steps']) for r in rs)} | "
            f"{e['point']:.2f} [{e['ci_low']:.2f}, {e['ci_high']:.2f}] | "
            f"{', '.join(f'{v:.2f}' for v in s['finals_end'])} | "
            f"{y['point']:.2f} [{y['ci_low']:.2f}, {y['ci_high']:.2f}] | "
            f"{', '.join(f'{v:.2f}' if v is not None else '-' for v in s['finals_any'])} | "
            f"{np.mean(rates):.2f} | {np.median(sps) if sps else float('nan'):.1f} | "
            f"{', '.join(f'{w:.0f}' for w in walls) or '-'} |"
        )
    lines += ["", "Curves (env step: policy-only success at the end / at any step), per run:", ""]
    for label, rs in result["runs"].items():
        for run in rs:
            pts = ", ".join(
                f"{t}: {s:.2f}/{y:.2f}" if y is not None else f"{t}: {s:.2f}"
                for (t, s), (_, y) in zip(run["success"], run["success_any"])
            )
            lines.append(f"- {label} {Path(run['run_dir']).name}: {pts}")
    lines += ["", "Intervention rate over time (mean over the arm's runs, per window):", ""]
    for label, s in result["summary"].items():
        pts = ", ".join(f"{t}: {r:.2f}" for t, r in s["intervention_by_window"])
        lines.append(f"- {label}: {pts}")
    lines += ["", "Overrides of each arm's first run (`roborl train` plus these):", ""]
    for label, args in result.get("overrides", {}).items():
        lines.append(f"- {label}: `{' '.join(args)}`")
    lines += ["", "## Notes", "", *result.get("notes", [])]
    return "\n".join(lines) + "\n"


def trained_algo(checkpoint: Path) -> tuple[Any, dict[str, Any]]:
    """A gate run's algorithm from its checkpoint and the env kwargs the run trained with."""
    import yaml

    from roborl.core.algorithms import algorithm_from_checkpoint
    from roborl.core.cli.common import load_host

    algo, _ = algorithm_from_checkpoint(load_host(), checkpoint, "cpu")
    kwargs = yaml.safe_load((checkpoint.parents[1] / "config.yaml").read_text())["env"]["kwargs"]
    return algo, kwargs


def trained_policy(checkpoint: Path) -> tuple[Any, dict[str, Any]]:
    """A gate run's (deterministic) policy and the env kwargs the run trained with."""
    algo, kwargs = trained_algo(checkpoint)
    return algo.policy(), kwargs


def person_probe(checkpoint: Path, episodes: int, taper_episodes: int) -> dict[str, Any]:
    """A trained gate policy (deterministic) with the scripted person, plain and fading
    (`taper_episodes`), over `episodes` episodes in a row (seeds 50000...): what share of steps
    each person drives, per quarter of the episodes, and the episodes' success. No training:
    it shows what the fading person does on a policy that already succeeds where the plain
    person keeps taking over."""
    from roborl.hil.scripted_person import ScriptedPerson, ScriptedPersonConfig
    from roborl.sim.benchmarks.fetch_pixels import FetchPixelEnv

    policy, kwargs = trained_policy(checkpoint)
    out: dict[str, Any] = {"checkpoint": str(checkpoint), "episodes": episodes}
    for label, taper in (("plain", 0), (f"fading ({taper_episodes})", taper_episodes)):
        env = ScriptedPerson(
            FetchPixelEnv("push", **kwargs), ScriptedPersonConfig(taper_episodes=taper)
        )
        rates, wins = [], []
        for ep in range(episodes):
            obs, _ = env.reset(seed=50000 + ep)
            flags = []
            while True:
                obs, _, terminated, truncated, info = env.step(policy.act(obs))
                flags.append(info["intervened"])
                if terminated or truncated:
                    break
            rates.append(float(np.mean(flags)))
            wins.append(bool(info["success"]))
        quarters = np.array_split(np.asarray(rates), 4)
        out[label] = {
            "intervention_rate": float(np.mean(rates)),
            "intervention_rate_by_quarter": [float(q.mean()) for q in quarters],
            "success": float(np.mean(wins)),
        }
    return out


def failure_probe(checkpoint: Path, episodes: int) -> dict[str, Any]:
    """How a trained gate policy (deterministic, no person) fails, over `episodes` episodes
    (seeds 60000...): per failed episode the block-to-goal distance at the start, its least and
    its last, how far the block moved and whether it left the table. Counts per kind: the
    block never moved (under 2 cm), stopped short (ended within 2 cm outside Fetch's 5 cm),
    passed the goal (was within 5 cm, ended outside), off the table, other."""
    from roborl.sim.benchmarks.fetch_pixels import SUCCESS_DISTANCE, FetchPixelEnv

    policy, kwargs = trained_policy(checkpoint)
    env = FetchPixelEnv("push", **kwargs)
    kinds: dict[str, int] = {k: 0 for k in ("never moved", "stopped short", "passed the goal",
                                             "off the table", "other")}  # fmt: skip
    failed, wins = [], 0
    for ep in range(episodes):
        obs, _ = env.reset(seed=60000 + ep)
        start_block = env._raw["achieved_goal"].copy()
        start, least = env.progress(), env.progress()
        while True:
            obs, _, terminated, truncated, info = env.step(policy.act(obs))
            least = min(least, env.progress())
            if terminated or truncated:
                break
        if info["success"]:
            wins += 1
            continue
        block, last = env._raw["achieved_goal"], env.progress()
        moved = float(np.linalg.norm(block - start_block))
        if block[2] < 0.3:
            kind = "off the table"
        elif moved < 0.02:
            kind = "never moved"
        elif least < SUCCESS_DISTANCE:
            kind = "passed the goal"
        elif last < SUCCESS_DISTANCE + 0.02:
            kind = "stopped short"
        else:
            kind = "other"
        kinds[kind] += 1
        failed.append({"start": round(start, 3), "least": round(least, 3), "last": round(last, 3),
                       "moved": round(moved, 3), "kind": kind})  # fmt: skip
    env.close()
    return {"checkpoint": str(checkpoint), "episodes": episodes, "success": wins / episodes,
            "failures_by_kind": kinds, "failures": failed}  # fmt: skip


def critic_probe(checkpoint: Path, episodes: int, last: int = 10) -> dict[str, Any]:
    """Does the critic know what a stopped policy is missing? Over `episodes` episodes (seeds
    60000..., deterministic policy, no person), the min over the critics of Q(s, policy's
    action) and Q(s, the scripted expert's action) on each episode's last `last` states,
    with both actions' move sizes and the block's end distance. A critic that prefers the
    expert's push where the policy stops points at the actor; one that does not, at the
    critic (it values stopping near the goal like reaching it)."""
    import torch

    from roborl.core.obs import to_torch
    from roborl.plugins.pixel_sac.policy import add_batch_axis, as_numpy_obs
    from roborl.sim.benchmarks.fetch_pixels import FetchPixelEnv

    algo, kwargs = trained_algo(checkpoint)
    env, space = FetchPixelEnv("push", **kwargs), algo.observation_space

    @torch.no_grad()
    def q_min(obs: Any, action: np.ndarray) -> float:
        feat = algo.features(to_torch(add_batch_axis(as_numpy_obs(obs, space)), "cpu"))
        unit = algo.scaler.to_unit(torch.as_tensor(action[None], dtype=torch.float32))
        return float(algo.critic(torch.cat([feat, unit], -1)).squeeze(-1).min(0).values)

    rows = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=60000 + ep)
        steps = []
        while True:
            mine = algo.act(add_batch_axis(as_numpy_obs(obs, space)), deterministic=True)[0]
            expert = env.expert_action()
            steps.append((q_min(obs, mine), q_min(obs, expert), float(np.linalg.norm(mine[:3])),
                          float(np.linalg.norm(expert[:3]))))  # fmt: skip
            obs, _, terminated, truncated, info = env.step(mine)
            if terminated or truncated:
                break
        tail = np.asarray(steps[-last:]).mean(0)
        rows.append({"success": bool(info["success"]), "end_distance": round(env.progress(), 3),
                     "q_policy": round(float(tail[0]), 2), "q_expert": round(float(tail[1]), 2),
                     "move_policy": round(float(tail[2]), 2), "move_expert": round(float(tail[3]), 2)})  # fmt: skip
    env.close()
    failed = [r for r in rows if not r["success"]]
    won = [r for r in rows if r["success"]]
    return {
        "checkpoint": str(checkpoint), "episodes": episodes, "last_steps": last,
        "success": len(won) / episodes,
        "failures_where_critic_prefers_expert_by_1": sum(
            r["q_expert"] > r["q_policy"] + 1.0 for r in failed
        ),
        "failures": len(failed),
        "mean_q_policy_failed": float(np.mean([r["q_policy"] for r in failed])) if failed else None,
        "mean_q_policy_won": float(np.mean([r["q_policy"] for r in won])) if won else None,
        "episodes_detail": rows,
    }  # fmt: skip


def overrides_of(run_dir: Path) -> list[str]:
    """The run's own overrides as Hydra recorded them (.hydra/overrides.yaml), if any."""
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return []
    import yaml

    return [str(o) for o in yaml.safe_load(path.read_text()) or []]


def build_result(
    a: argparse.Namespace,
    arms: dict[str, list[Path]],
    gate_label: str,
    wall_s: float,
    previous: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report of `arms` (run directories per label); with `previous` (a results JSON, for
    `--extend`) its arms are kept as it recorded them (their directories may be gone) and
    `arms` are added beside them."""
    runs = {label: [read_run(d) for d in dirs] for label, dirs in arms.items()}
    overrides = {label: overrides_of(dirs[0]) for label, dirs in arms.items() if dirs}
    if previous is not None:
        runs = {**previous["runs"], **runs}
        overrides = {**previous.get("overrides", {}), **overrides}
    summary = summarise(runs, a.log_every * 4, a.reps)
    gate = summary[gate_label]
    iqm = gate["aggregate_end"]["iqm"]
    steps = [r["steps"] for r in runs[gate_label]]
    return {
        "command": " ".join(["python", *sys.argv]),
        "machine": a.machine or f"{platform.machine()}, {os.cpu_count()} cores, CPU only",
        "wall_s": wall_s,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
        "gate_label": gate_label,
        "headline": {
            "gate_iqm": iqm["point"],
            "gate_ci": [iqm["ci_low"], iqm["ci_high"]],
            "gate_seeds": len(runs[gate_label]),
            "gate_steps": min(steps) if steps else 0,
            "gate_passed": bool(
                iqm["point"] >= GOAL and len(runs[gate_label]) >= 5 and min(steps) <= 12000
            ),
        },
        "summary": summary,
        "runs": runs,
        "overrides": overrides,
        "earlier_commands": [
            *previous.get("earlier_commands", []), previous["command"]
        ] if previous else [],
    }  # fmt: skip


def write(result: dict[str, Any], out_dir: Path, name: str) -> None:
    previous = out_dir / f"{name}.json"
    if previous.exists() and "notes" not in result:  # notes are written into the JSON by hand
        result["notes"] = json.loads(previous.read_text()).get("notes", [])
    previous.write_text(json.dumps(result, indent=1, default=str))
    (out_dir / f"{name}.md").write_text(markdown(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=12000)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--demos", type=int, default=20)
    p.add_argument("--algo", choices=("serl", "rlpd"), default="serl")
    # Compute per env step: SERL's 10 critics and 4 critic steps ran at about 2 env steps/s on
    # the loaded 2-core machine, these at 4-5 (benchmarks/results/hil_manipulation_gate.md).
    p.add_argument("--critics", type=int, default=2)
    p.add_argument("--critic-steps", type=int, default=2)
    p.add_argument(
        "--rows", type=int, default=128,
        help="rows per critic step (half demos); algo.batch_size = rows * critic steps",
    )  # fmt: skip
    p.add_argument("--n-step", type=int, default=3)
    p.add_argument("--utd-ratio", type=float, default=1.0, help="update calls per env step")
    p.add_argument(
        "--bc-weight", type=float, default=10.0,
        help="algo.bc_weight: Nair et al.'s Q-filtered BC on demo and intervention rows",
    )  # fmt: skip
    p.add_argument(
        "--bc-q-filter", action=argparse.BooleanOptionalAction, default=True,
        help="algo.bc_q_filter: clone only demo actions the critics prefer",
    )  # fmt: skip
    p.add_argument("--person", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--window-s", type=float, default=0.4)
    p.add_argument("--max-takeover-s", type=float, default=1.0)
    p.add_argument(
        "--person-recover",
        type=float,
        default=PERSON.recover,
        help="the person hands back once the block-to-goal distance shrank this much",
    )
    p.add_argument(
        "--person-tolerance",
        type=float,
        default=PERSON.tolerance,
        help="block-to-goal distance the person calls done",
    )
    p.add_argument("--taper-episodes", type=int, default=0, help="a fading person; 0: off")
    p.add_argument("--taper-floor", type=float, default=0.1)
    p.add_argument("--workspace", action="store_true", help="HIL-SERL's workspace box")
    p.add_argument("--learning-starts", type=int, default=500)
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one more `roborl train` override for every run (repeatable), e.g. algo.gamma=0.98",
    )
    p.add_argument("--eval-every", type=int, default=2000)
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--log-every", type=int, default=500)
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples of the CIs")
    p.add_argument("--work", type=Path, default=None, help="keep runs here (resumable)")
    p.add_argument("--name", default="hil_manipulation_gate")
    p.add_argument("--machine", default=None, help="the machine, in words, for the report")
    p.add_argument(
        "--collect", action="append", default=[], metavar="LABEL=DIR,DIR",
        help="report existing run directories as an arm (repeat; the first is the gate)",
    )  # fmt: skip
    p.add_argument(
        "--extend", action="store_true",
        help="with --collect: add the arms to results/NAME.json, keeping the arms it has",
    )  # fmt: skip
    p.add_argument(
        "--failures", type=Path, default=None, metavar="CHECKPOINT",
        help="how a trained gate policy fails, by kind (no training)",
    )  # fmt: skip
    p.add_argument(
        "--person-probe", type=Path, default=None, metavar="CHECKPOINT",
        help="only run a trained policy with the plain and the fading person; print the rates",
    )  # fmt: skip
    p.add_argument(
        "--critic-probe", type=Path, default=None, metavar="CHECKPOINT",
        help="the critic's Q of the policy's and the expert's actions where episodes end",
    )  # fmt: skip
    p.add_argument("--probe-episodes", type=int, default=40)
    p.add_argument("--print-command", action="store_true", help="print one run's command")
    p.add_argument("--smoke", action="store_true", help="toy sizes: the pipeline end to end")
    p.add_argument("--render", type=Path, default=None, help="only re-render RESULT.json's .md")
    a = p.parse_args()
    if a.render:
        a.render.with_suffix(".md").write_text(markdown(json.loads(a.render.read_text())))
        return
    if a.smoke:
        a.steps, a.seeds, a.demos, a.learning_starts, a.eval_every = 150, 1, 2, 50, 100
        a.eval_episodes, a.log_every = 2, 50
    if a.critic_probe:
        print(json.dumps(critic_probe(a.critic_probe, a.probe_episodes), indent=1))
        return
    if a.failures:
        print(json.dumps(failure_probe(a.failures, a.probe_episodes), indent=1))
        return
    if a.person_probe:
        taper = a.taper_episodes or 10
        print(json.dumps(person_probe(a.person_probe, a.probe_episodes, taper), indent=1))
        return
    work = a.work or Path(os.environ.get("TMPDIR", "/tmp")) / f"roborl_{a.name}"
    if a.print_command:
        print("roborl " + " ".join(train_args(a, work / "demos.npz", 0, work / "runs/seed0")))
        return
    t0 = time.time()
    if a.collect:
        arms = {}
        for spec in a.collect:
            label, _, dirs = spec.partition("=")
            arms[label] = [Path(d) for d in dirs.split(",") if d]
        gate_label = next(iter(arms))
    else:
        work.mkdir(parents=True, exist_ok=True)
        demos = record_demos(a, work)
        gate_label = "gate"
        arms = {gate_label: run_seeds(a, demos, work)}
    previous = None
    if a.extend:
        previous = json.loads((OUT / f"{a.name}.json").read_text())
        gate_label = previous["gate_label"]
    result = build_result(a, arms, gate_label, time.time() - t0, previous)
    write(result, OUT if not a.smoke else work, a.name)
    print(markdown(result))


if __name__ == "__main__":
    main()

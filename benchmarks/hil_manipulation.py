"""HIL-SERL's recipe on a standard manipulation benchmark (issue 33): FetchPush from pixels.

Task: Gymnasium-Robotics' FetchPush-v4 (MuJoCo 3.3.7; the Fetch envs fail on MuJoCo >= 3.12,
and dm_control's Jaco lift task costs ~57 ms a step here against Fetch's ~13 ms), served by
`env=fetch_push_pixels`: two 32 px cameras (one facing the robot across the table, one from
its left, since the front view loses the block behind the gripper) plus proprioception and
the goal in workspace units, the 4-D end-effector action (dx, dy, dz, gripper), 50-step
episodes. The env's own success check does not end an episode (`end_on_success=false`): in
training the classifier's confirmed verdict does (HIL-SERL), in evaluation the episode runs
its 50 steps and success is Fetch's standard, the block on the goal at the last step.

The recipe, every piece roborl's own:
1. `roborl demos record policy=expert`: `--demos` successful scripted demonstrations, and
   `--classifier-episodes` noisy-expert episodes as labelled frames for the classifier;
2. `roborl reward train`: the success classifier (held-out TPR/TNR at the threshold used),
   then SERL's hard-negative round: a probe run saves the frames the classifier fired on, and
   `roborl reward relabel` retrains with the false ones as negatives (`hard_negatives`);
3. the arms, each `roborl train` with the classifier as the ONLY reward
   (`reward=classifier reward.consecutive=2`), `demos=` with RLPD's 50/50 batches:
   - `rlpd_hil`: RLPD (`--algo`: serl, RLPD with SERL's values, by default) + demos + the
     scripted person (`scripted_person=`: scripted-human's drift rule driving the task's
     expert, roborl/hil/scripted_person.py);
   - `rlpd`: the same + demos, nobody intervening;
   - `bc_hil`: algo=pixel_bc (HG-DAgger: BC on demos + the person's interventions).
   The two RLPD arms run through `roborl compare` (AdaStop, metric = policy-only success), so
   the decision "interventions beat no interventions at equal robot time" is its verdict.
4. Policy-only success: every run's periodic evaluation (no person, no classifier: the env's
   own success), `--eval-episodes` episodes every `--eval-every` steps. Final = last
   evaluation; IQM and 95% bootstrap CIs over seeds (rliable's estimators via roborl report).

Robot time: steps x 0.1 s (HIL-SERL's 10 Hz; 36,000 steps = 1 hour). The sim runs as fast as
it goes. `--smoke` runs the whole pipeline at toy size (CI runs it). At the full budget one
run takes 55-100 min (5-12 env steps/s on the 2-core machines measured, two at a time), so
the 4 + 4 + 3 runs take 5-9 hours. Run again with the same `--work` after a stop: finished
runs are kept, and with `--checkpoint-every` below `--steps` an interrupted one continues from
its last checkpoint (otherwise it starts again). Longer than the machine lives, finished runs
add up in the repository (`--archive`, `--archive-only`: run_archive.py); on x86-64 every
command runs torch's AVX2 kernels, so a new machine prepares the same bytes (and its runs the
same numbers) as the one that made the archive (`run_archive.pin_cpu_kernels`). Issue 48's headline
(the gate's levers, play on after success, five seeds a side, no BC arm):

    OMP_NUM_THREADS=1 python benchmarks/hil_manipulation.py --steps 36000 --seeds 5 --jobs 2 \
        --bc-weight 10 --n-step 3 --play-on --checkpoint-every 4000 --bc-seeds 0 \
        --work /tmp/hil48 --name hil_manipulation_headline
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
import run_archive  # a sibling module (benchmarks/ is no package)

OUT = Path(__file__).parent / "results"
HZ = 10.0  # robot time: HIL-SERL's control rate
ARMS = ("rlpd_hil", "rlpd", "bc_hil")


def roborl(*args: str, log: Path) -> None:
    """One `roborl` command, output to `log`; raises with the log's tail if it fails."""
    with log.open("w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "roborl.core.cli", *args], stdout=f, stderr=subprocess.STDOUT
        )
    if proc.returncode:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"roborl {' '.join(args)} failed ({proc.returncode}):\n{tail}")


def spawn(*args: str, log: Path) -> subprocess.Popen:
    """One `roborl` command started in the background, output to `log`."""
    with log.open("w") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "roborl.core.cli", *args], stdout=f, stderr=subprocess.STDOUT
        )


def env_args(a: argparse.Namespace) -> list[str]:
    """The task for every run: the env's privileged success check never ends an episode (on a
    robot only the classifier's verdict or the time limit can; an env that ended on its first
    success frame would end every episode before `reward.consecutive=2` could confirm it, and
    the demos' last frame would be their only success frame)."""
    return [
        "env=fetch_push_pixels",
        f"env.kwargs.image_size={a.px}",
        "env.kwargs.end_on_success=false",
        f"env.kwargs.normalized_state={str(a.normalized_state).lower()}",
        f"env.kwargs.cameras=[{a.cameras}]",
    ]


def algo_args(a: argparse.Namespace, algo: str) -> list[str]:
    """The arms' algorithm; `--bc-weight` and `--n-step` (the state gate's levers) apply to
    the RL arms only (pixel_bc is behaviour cloning already)."""
    levers = [] if algo == "pixel_bc" else [
        *([f"algo.bc_weight={a.bc_weight}"] if a.bc_weight else []),
        *([f"algo.n_step={a.n_step}"] if a.n_step != 1 else []),
    ]  # fmt: skip
    return [
        f"algo={algo}", f"algo.batch_size={a.batch}", f"algo.conv_channels={a.channels}",
        f"algo.conv_strided={a.strided}", *levers,
    ]  # fmt: skip


def person_arg(a: argparse.Namespace) -> str:
    return f"scripted_person={{window_s:{a.window_s},max_takeover_s:{a.max_takeover_s}}}"


def prepare(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Demos, classifier frames and the classifier; returns their paths and its accuracy.

    The classifier's frames are SERL's: episodes that go on after success (a noisy expert that
    holds still once the block is on the goal: many positives, and near misses where the noise
    knocks it off) plus random-action episodes (the scenes an untrained policy makes)."""
    demos, frames, model = work / "demos.npz", work / "classifier_frames.npz", work / "classifier"
    randoms = work / "classifier_random.npz"
    if not demos.exists():
        roborl(
            "demos", "record", f"out={demos}", f"episodes={a.demos}", "policy=expert",
            "noise=0.1", "successes_only=true", "seed=10000", *env_args(a),
            log=work / "demos.log",
        )  # fmt: skip
    if not frames.exists():
        roborl(
            "demos", "record", f"out={frames}", f"episodes={a.classifier_episodes}",
            "policy=expert", "noise=0.8", "seed=20000", *env_args(a), log=work / "frames.log",
        )  # fmt: skip
    if not randoms.exists():
        roborl(
            "demos", "record", f"out={randoms}", f"episodes={a.random_episodes}",
            "policy=random", "seed=30000", *env_args(a), log=work / "random.log",
        )  # fmt: skip
    if not (model / "config.json").exists():
        roborl(
            "reward", "train", f"data=[{frames},{randoms},{demos}]", f"out={model}",
            f"steps={a.classifier_steps}", f"threshold={a.threshold}",
            log=work / "classifier.log",
        )  # fmt: skip
    card = json.loads((model / "config.json").read_text())["metrics"]
    keys = ("val_tpr", "val_tnr", "val_positives", "val_negatives")
    return {
        "demos": demos, "data": [frames, randoms, demos], "model": model,
        "classifier": {k: card[k] for k in keys},
    }  # fmt: skip


def fired_precision(run_dir: Path) -> dict[str, Any] | None:
    """Of the frames the classifier fired on during a run (`reward_fired/`), how many the
    env's own check calls a success: the reward's precision on the policy's own scenes, over
    the run and per `PART_FRAMES` fired frames in order (a policy that learns the classifier's
    false positives shows as a falling precision)."""
    from roborl.core.fired_frames import PART_FRAMES
    from roborl.plugins.rewards.hard_negatives import load_fired

    def precision(success: np.ndarray) -> float | None:
        labelled = success[success >= 0]  # a robot without a success signal labels none (-1)
        return float(np.mean(labelled == 1)) if len(labelled) else None

    if not (run_dir / "reward_fired").is_dir() or not any((run_dir / "reward_fired").iterdir()):
        return None
    _, success = load_fired(run_dir / "reward_fired")
    parts = np.split(success, range(PART_FRAMES, len(success), PART_FRAMES))
    return {
        "fired_frames": len(success), "labelled": int((success >= 0).sum()),
        "precision": precision(success), "precision_by_part": [precision(p) for p in parts],
    }  # fmt: skip


def hard_negatives(a: argparse.Namespace, prep: dict[str, Any], work: Path) -> dict[str, Any]:
    """SERL's remedy before the arms: a probe run (rlpd + person, `--probe-steps`) with the
    first classifier saves the frames it fired on; `roborl reward relabel` retrains with the
    ones where the env reported no success as hard negatives. The arms use the new model."""
    probe, model = work / "probe", work / "classifier_relabelled"
    if not (probe / "summary.json").exists():
        roborl(
            "train", *algo_args(a, a.algo), person_arg(a),
            *common_overrides(a, prep, steps=a.probe_steps), "seed=999", f"hydra.run.dir={probe}",
            log=work / "probe.log",
        )  # fmt: skip
    if not (model / "config.json").exists():
        roborl(
            "reward", "relabel", f"data=[{','.join(str(d) for d in prep['data'])}]",
            f"fired={probe / 'reward_fired'}", f"model={prep['model']}", "fired_labels=env",
            f"out={model}", f"steps={a.classifier_steps}", f"threshold={a.threshold}",
            log=work / "relabel.log",
        )  # fmt: skip
    card = json.loads((model / "config.json").read_text())["metrics"]
    probe_fired = fired_precision(probe) or {"fired_frames": 0, "precision": float("nan")}
    first = {**prep["classifier"], "precision_on_probe_fired_frames": probe_fired["precision"]}
    keys = ("val_tpr", "val_tnr", "val_positives", "val_negatives")
    return {**prep, "model": model, "first_classifier": first,
            "classifier": {k: card[k] for k in keys}}  # fmt: skip


def common_overrides(
    a: argparse.Namespace, prep: dict[str, Any], steps: int | None = None
) -> list[str]:
    return [
        *env_args(a), f"demos={prep['demos']}",
        f"reward={{name:classifier,path:{prep['model']},consecutive:{a.consecutive},"
        f"threshold:{a.threshold},terminate_on_success:{str(not a.play_on).lower()}}}",
        f"total_steps={steps or a.steps}", f"learning_starts={a.learning_starts}",
        f"eval_every={a.eval_every}", f"eval_episodes={a.eval_episodes}",
        f"checkpoint_every={a.checkpoint_every or steps or a.steps}",
        f"log_every={a.eval_every}", "progress=false",
        "torch_threads=1",
    ]  # fmt: skip


def run_compare(a: argparse.Namespace, prep: dict[str, Any], work: Path) -> dict[str, Any]:
    """The two RLPD arms through `roborl compare` (AdaStop on policy-only success)."""
    rl = algo_args(a, a.algo)
    hil = " ".join(["rlpd_hil:", *rl, person_arg(a)])
    roborl(
        "compare", hil, " ".join(["rlpd:", *rl]), *common_overrides(a, prep),
        f"n={a.seeds}", "max_groups=1", "metric=success_rate", f"jobs={a.jobs}",
        f"out={work / 'compare'}", "report=false", log=work / "compare.log",
    )  # fmt: skip
    return json.loads((work / "compare" / "compare.json").read_text())


def run_bc(a: argparse.Namespace, prep: dict[str, Any], work: Path) -> list[Path]:
    """The BC arm: algo=pixel_bc on demos + interventions, `--seeds` runs, `--jobs` at once."""
    n = a.seeds if a.bc_seeds is None else a.bc_seeds
    dirs = [work / "bc_hil" / f"seed{s}" for s in range(n)]
    todo = [d for d in dirs if not (d / "summary.json").exists()]
    procs: list[subprocess.Popen] = []
    for d in todo:
        while len([p for p in procs if p.poll() is None]) >= a.jobs:
            time.sleep(1.0)
        d.parent.mkdir(parents=True, exist_ok=True)
        args = [
            "train", *algo_args(a, "pixel_bc"), person_arg(a), "demo_fraction=1.0",
            *common_overrides(a, prep), f"seed={100 + dirs.index(d)}", f"hydra.run.dir={d}",
        ]  # fmt: skip
        procs.append(spawn(*args, log=d.parent / f"{d.name}.log"))
    for p in procs:
        if p.wait():
            raise SystemExit(f"a bc_hil run failed; see the logs under {work / 'bc_hil'}")
    return dirs


def read_run(run_dir: Path) -> dict[str, Any]:
    """Policy-only success and intervention rate against robot time, from metrics.jsonl."""
    evals, anys, interventions = [], [], []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "eval/success_rate" in row:
            evals.append((row["step"] / HZ / 60, row["eval/success_rate"]))
            anys.append((row["step"] / HZ / 60, row.get("eval/success_any_rate")))
        if "train/intervention_rate" in row:
            interventions.append((row["step"] / HZ / 60, row["train/intervention_rate"]))
    return {
        "run_dir": str(run_dir), "success": evals, "success_any": anys,
        "intervention_rate": interventions,
        "reward_fired": fired_precision(run_dir)
        or (run_archive.extra_of(run_dir) or {}).get("reward_fired"),
    }  # fmt: skip


def archived_extra(run_dir: Path) -> dict[str, Any]:
    """What an archived run keeps of the files it leaves behind: the fired frames' precision."""
    return {"reward_fired": fired_precision(run_dir)}


def aggregate(finals: dict[str, list[float]], reps: int = 2000) -> dict[str, Any]:
    """IQM and 95% bootstrap CI of each arm's final per-seed scores (rliable's estimates)."""
    from roborl.plugins.report.aggregate import interval_estimates

    matrices = {arm: np.asarray(v, dtype=float)[:, None] for arm, v in finals.items() if v}
    return interval_estimates(matrices, reps=reps, ci=0.95, seed=0)


def collect(a: argparse.Namespace, work: Path, bc_dirs: list[Path]) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for arm in ("rlpd_hil", "rlpd"):
        for d in sorted((work / "compare" / "runs").glob(f"*/{arm}/seed*")):
            runs[arm].append(read_run(d))
    runs["bc_hil"] = [read_run(d) for d in bc_dirs]
    return runs


def headline(
    a: argparse.Namespace,
    finals: dict[str, list[float]],
    agg: dict[str, Any],
    compare: dict[str, Any],
    gate_file: Path,
) -> dict[str, Any]:
    """Issue 48's top-level summary: the state gate's result (read from its own results file)
    beside this run's pixel headline (the person arm, `rlpd_hil`) and AdaStop's verdict on
    person vs no person."""
    gate = json.loads(gate_file.read_text())["headline"] if gate_file.exists() else {}
    iqm = agg.get("rlpd_hil", {}).get("iqm", {"point": None, "ci_low": None, "ci_high": None})
    verdict = next(
        (
            d["decision"]
            for d in compare.get("decisions", [])
            if {d["a"], d["b"]} == {"rlpd_hil", "rlpd"}
        ),
        None,
    )
    return {
        **{k: gate.get(k) for k in ("gate_iqm", "gate_ci", "gate_seeds", "gate_steps", "gate_passed")},
        "pixel_iqm": iqm["point"], "pixel_ci": [iqm["ci_low"], iqm["ci_high"]],
        "pixel_seeds": len(finals.get("rlpd_hil", [])), "pixel_steps": a.steps,
        "adastop_decision": verdict, "adastop_status": compare.get("status"),
    }  # fmt: skip


def adastop_sentence(compare: dict[str, Any]) -> str:
    """AdaStop's status and its decision per pair, as `roborl compare` wrote them."""
    return f"{compare['status']}; decisions: {json.dumps(compare['decisions'])}"


def markdown(result: dict[str, Any]) -> str:
    a, c, f = result["args"], result["classifier"], result["first_classifier"]
    lines = ["# HIL-SERL recipe on FetchPush from pixels (issue 33)", ""]
    if result.get("summary"):  # what later runs found, written into the JSON by hand
        lines += ["## Summary", "", *result["summary"], "", "## This command's runs", ""]
    lines += [
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']}; wall {result['wall_s'] / 60:.1f} min.",
        "",
        f"FetchPush-v4 (`env=fetch_push_pixels`), {a['px']}x{a['px']} camera"
        f"{' views (' + a['cameras'] + ')' if ',' in a.get('cameras', '') else ''} + proprioception "
        f"+ goal{' (state in workspace units)' if a.get('normalized_state') else ''}; RL arms "
        f"`algo={a.get('algo', 'rlpd')}`; {a['steps']} env steps per run = "
        f"{a['steps'] / HZ / 60:.1f} min of robot time at {HZ:.0f} Hz; {a['seeds']} seeds per arm; {a['demos']} scripted demos; reward ="
        f" roborl's classifier only (threshold {a['threshold']}, "
        f"{a.get('consecutive', 2)} consecutive frames; after "
        f"the hard-negative round, held-out TPR {c['val_tpr']:.2f}, TNR {c['val_tnr']:.2f} on "
        f"{c['val_positives']} / {c['val_negatives']} frames; the first classifier: TPR "
        f"{f['val_tpr']:.2f}, TNR {f['val_tnr']:.2f}, and "
        f"{f['precision_on_probe_fired_frames']:.2f} of the frames it fired on in the probe run"
        " were true successes). Success = policy-only evaluation "
        f"({a['eval_episodes']} episodes, no person, the env's own success).",
        "",
        "| arm | final policy-only success IQM [95% CI] | per seed | mean intervention rate "
        "| reward's precision on the run's fired frames (frames) |",
        "|---|---|---|---|---|",
    ]
    for arm in ARMS:
        agg = result["aggregate"].get(arm)
        if not agg:
            continue
        iqm = agg["iqm"]
        finals = ", ".join(f"{v:.2f}" for v in result["finals"][arm])
        rates = [
            np.mean([r for _, r in run["intervention_rate"]] or [0.0])
            for run in result["runs"][arm]
        ]
        fired = [run.get("reward_fired") for run in result["runs"][arm]]
        precision = ", ".join(
            f"{f['precision']:.2f} ({f['fired_frames']})"
            if f and f["precision"] is not None
            else f"- ({f['fired_frames'] if f else 0})"
            for f in fired
        )
        lines.append(
            f"| {arm} | {iqm['point']:.2f} [{iqm['ci_low']:.2f}, {iqm['ci_high']:.2f}] | {finals} | "
            f"{np.mean(rates):.2f} | {precision} |"
        )
    lines += ["", f"AdaStop (`roborl compare`, rlpd_hil vs rlpd): {result['adastop']}", ""]
    if "headline" in result:
        lines += [f"Headline (JSON `headline`): `{json.dumps(result['headline'])}`", ""]
    lines += ["Curves (robot minutes: policy-only success at the end / at any step), per run:", ""]
    for arm in ARMS:
        for run in result["runs"][arm]:
            anys = [y for _, y in run.get("success_any") or []] or [None] * len(run["success"])
            pts = ", ".join(
                f"{t:.1f}: {s:.2f}" + (f"/{y:.2f}" if y is not None else "")
                for (t, s), y in zip(run["success"], anys, strict=True)
            )
            lines.append(f"- {arm} {Path(run['run_dir']).name}: {pts}")
    lines += ["", "Intervention rate over time (robot minutes: rate), per run with a person:", ""]
    for arm in ARMS:
        for run in result["runs"][arm]:
            if run["intervention_rate"]:
                pts = ", ".join(f"{t:.1f}: {r:.2f}" for t, r in run["intervention_rate"])
                lines.append(f"- {arm} {Path(run['run_dir']).name}: {pts}")
    lines += ["", "## Notes", "", *result.get("notes", [])]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=36000)
    p.add_argument("--seeds", type=int, default=4)  # AdaStop needs >= 4 a side at K=1
    p.add_argument(
        "--bc-seeds", type=int, default=None, help="BC arm's seeds (default --seeds; 0: no BC arm)"
    )
    p.add_argument("--jobs", type=int, default=2)
    # The defaults are the recipe that learned (benchmarks/results/hil_manipulation_reward.md):
    # two 32 px views, SERL's values, the state in workspace units. The 6,000-step headline in
    # hil_manipulation.md ran the earlier ones: --px 48 --algo rlpd --cameras front.
    p.add_argument("--px", type=int, default=32)
    p.add_argument(
        "--algo", choices=("rlpd", "serl"), default="serl",
        help="the RL arms' algorithm: serl (RLPD with SERL's values: discount 0.96), or rlpd",
    )  # fmt: skip
    p.add_argument(
        "--normalized-state", action=argparse.BooleanOptionalAction, default=True,
        help="the state in workspace units (env.kwargs.normalized_state=true)",
    )  # fmt: skip
    p.add_argument(
        "--cameras", default="front,side",
        help="the env's cameras, comma-separated: front,side (default, two views) or front",
    )  # fmt: skip
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--channels", type=int, default=16)
    p.add_argument("--strided", type=int, default=2)
    p.add_argument("--demos", type=int, default=20)
    p.add_argument(
        "--bc-weight", type=float, default=0.0, help="algo.bc_weight of the RL arms (gate: 10)"
    )
    p.add_argument("--n-step", type=int, default=1, help="algo.n_step of the RL arms (gate: 3)")
    p.add_argument(
        "--play-on", action=argparse.BooleanOptionalAction, default=False,
        help="training episodes play on after the classifier's success (as the state gate's "
        "and evaluation's do) instead of ending there: reward.terminate_on_success=false",
    )  # fmt: skip
    p.add_argument(
        "--checkpoint-every", type=int, default=None,
        help="checkpoint_every of each run (default: once at the end); a shorter one lets "
        "an interrupted `roborl compare` continue its runs instead of starting them again",
    )  # fmt: skip
    p.add_argument("--classifier-episodes", type=int, default=60)
    p.add_argument("--random-episodes", type=int, default=30)
    p.add_argument("--classifier-steps", type=int, default=1500)
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--consecutive", type=int, default=2)
    p.add_argument("--learning-starts", type=int, default=500)
    p.add_argument("--probe-steps", type=int, default=2000)
    p.add_argument("--eval-every", type=int, default=4000)
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--window-s", type=float, default=0.4)
    p.add_argument("--max-takeover-s", type=float, default=1.0)
    p.add_argument("--work", type=Path, default=None, help="keep runs here (resumable)")
    p.add_argument("--name", default="hil_manipulation")
    p.add_argument("--machine", default=None, help="the machine, in words, for the results file")
    p.add_argument(
        "--gate-results", type=Path, default=OUT / "hil_manipulation_gate.json",
        help="the state gate's results, whose headline goes beside the pixel one",
    )  # fmt: skip
    p.add_argument(
        "--prepare-only", action="store_true",
        help="make the demos and the classifier (both rounds) in --work, then stop",
    )  # fmt: skip
    p.add_argument(
        "--archive", type=Path, default=None,
        help="finished runs kept across machines (default results/NAME_runs/): restored into "
        "--work before the runs, saved after them (run_archive.py)",
    )  # fmt: skip
    p.add_argument(
        "--archive-only", action="store_true",
        help="save the runs finished so far in --work to --archive, then stop (before a "
        "machine goes away: the runs still going are lost, the finished ones kept)",
    )  # fmt: skip
    p.add_argument("--smoke", action="store_true", help="toy sizes: the pipeline end to end")
    p.add_argument("--render", type=Path, default=None, help="only re-render RESULT.json's .md")
    a = p.parse_args()
    if a.render:
        a.render.with_suffix(".md").write_text(markdown(json.loads(a.render.read_text())))
        return
    if a.smoke:
        # Two 50-step episodes per run, one of them learning: every stage runs, in the fewest
        # steps that still leave a run with updates, an evaluation and fired frames (each
        # stage is a `roborl` process: about 5 s of start-up and 40 ms per FetchPush step).
        a.steps, a.seeds, a.demos, a.classifier_episodes, a.classifier_steps = 100, 1, 4, 3, 20
        a.random_episodes, a.threshold = 2, 0.5
        a.learning_starts, a.eval_every, a.eval_episodes, a.px, a.batch = 50, 100, 2, 32, 32
        a.probe_steps = 100
    work = a.work or Path(os.environ.get("TMPDIR", "/tmp")) / f"roborl_{a.name}"
    work.mkdir(parents=True, exist_ok=True)
    kernels = run_archive.pin_cpu_kernels()  # the same bytes on every x86-64 machine
    t0 = time.time()
    prep = hard_negatives(a, prepare(a, work), work)
    if a.prepare_only:
        print(f"demos and classifier in {work}: {json.dumps(prep['classifier'])}")
        return
    archive = a.archive or (work / "archive" if a.smoke else OUT / f"{a.name}_runs")
    inputs = run_archive.fingerprint(
        {"demos": prep["demos"], "classifier": prep["model"] / "model.safetensors"}
    )
    runs_dir = work / "compare" / "runs"
    if a.archive_only:
        saved = run_archive.save(runs_dir, archive, inputs, archived_extra)
        print(f"archived {len(saved)} finished run(s) in {archive}: {[str(d) for d in saved]}")
        return
    for d in run_archive.restore(archive, runs_dir, inputs):
        print(f"restored the finished run {d} from {archive}", flush=True)
    compare = run_compare(a, prep, work)
    run_archive.save(runs_dir, archive, inputs, archived_extra)
    bc_dirs = run_bc(a, prep, work)
    runs = collect(a, work, bc_dirs)
    finals = {
        arm: [r["success"][-1][1] if r["success"] else 0.0 for r in rs] for arm, rs in runs.items()
    }
    agg = aggregate(finals)
    result = {
        "command": " ".join(["python", *sys.argv]),
        "machine": a.machine or f"{platform.machine()}, {os.cpu_count()} cores",
        "cpu_kernels": kernels,
        "wall_s": time.time() - t0,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
        "classifier": prep["classifier"],
        "first_classifier": prep["first_classifier"],
        "adastop": adastop_sentence(compare),
        "compare": compare,
        "finals": finals,
        "aggregate": agg,
        "headline": headline(a, finals, agg, compare, a.gate_results),
        "runs": runs,
    }
    out_dir = OUT if not a.smoke else work
    (out_dir / f"{a.name}.json").write_text(json.dumps(result, indent=1, default=str))
    (out_dir / f"{a.name}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()

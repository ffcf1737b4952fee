"""Issue 33's control runs, summarised from their run directories: what each run was told
(its Hydra overrides, read back from the run), how far it got, and its policy-only success.

The controls take pieces away from the HIL-SERL recipe to find what keeps RLPD at the floor on
FetchPush (`benchmarks/hil_manipulation.py`): the block's position in the state instead of
finding it in the image (`env.kwargs.privileged_block=true`), the env's true reward instead of
the classifier, the state in workspace units (`env.kwargs.normalized_state=true`), no person,
more rows per critic step, and the same arm on a GPU for more steps
(`benchmarks/gpu/hil_manipulation_gpu.sh`). Each run is a plain `roborl train`; this script
only reads them, so a control run anywhere (another machine, a GPU box) can be added.

    python benchmarks/hil_manipulation_controls.py --name hil_manipulation_controls \\
        --notes NOTES.md "privileged, 48 px=/tmp/priv/hil_s0,/tmp/priv/hil_s1" ...

Each positional argument is LABEL=RUN_DIR[,RUN_DIR...]; `--earlier LABEL=RESULT.json#GROUP`
adds a group's runs from an earlier summary (seeds whose directories are gone). The JSON and a
Markdown table go to benchmarks/results/NAME.json/.md, with NOTES.md (what was measured where,
and the reading) appended to the Markdown. `--probe LABEL=CHECKPOINT,DEMOS` adds the critic's
action gap on the demos' states (`action_gap`); `--locate LABEL=CHECKPOINT` how well the
trained encoder's image features give the block's position (`block_locator`);
`--score-reward LABEL=CLASSIFIER,CHECKPOINT` a success classifier's TPR/TNR/precision on a
true-reward run's own scenes (`reward_on_run`). Groups with several finished runs (seeds)
also get their final success's IQM and 95% CI.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results"


def read_run(run_dir: Path) -> dict[str, Any]:
    """One run's overrides, evaluations, speed and intervention rate, from its own files, and
    with a learned reward its precision on the frames it fired on (`fired_precision`)."""
    from hil_manipulation import fired_precision

    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    overrides = [
        line[2:].strip() for line in overrides_file.read_text().splitlines() if line[:2] == "- "
    ]
    evals, evals_any, sps, interventions, last_step = [], [], [], [], 0
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        last_step = max(last_step, int(row.get("step", 0)))
        if "eval/success_rate" in row:
            evals.append((int(row["step"]), float(row["eval/success_rate"])))
            if "eval/success_any_rate" in row:
                evals_any.append(float(row["eval/success_any_rate"]))
        if "time/sps" in row:
            sps.append(float(row["time/sps"]))
        if "train/intervention_rate" in row:
            interventions.append(float(row["train/intervention_rate"]))
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    return {
        "run_dir": str(run_dir),
        "overrides": overrides,
        "steps_reached": last_step,
        "status": summary.get("status", "running"),
        "torch": summary.get("versions", {}).get("torch"),
        "success": evals,
        "success_any": evals_any if len(evals_any) == len(evals) else [],
        "final_success": evals[-1][1] if evals else None,
        "median_sps": statistics.median(sps) if sps else None,
        "intervention_rate": statistics.fmean(interventions) if interventions else 0.0,
        "reward_fired": fired_precision(run_dir),
    }


def summarise(groups: dict[str, list[Path | dict[str, Any]]]) -> dict[str, Any]:
    """Each group's runs, and over its finished runs (the seeds of one control) the final
    policy-only success's IQM with a 95% stratified-bootstrap CI (rliable), as the benchmark
    reports its arms. A run is a directory, or a run already read (`earlier_runs`)."""
    from roborl.plugins.report.aggregate import interval_estimates

    out: dict[str, Any] = {}
    for label, dirs in groups.items():
        runs = [d if isinstance(d, dict) else read_run(d) for d in dirs]
        finals = [r["final_success"] for r in runs if r["final_success"] is not None]
        done = [r["final_success"] for r in runs if r["status"] == "finished" and r["success"]]
        iqm = None
        if len(done) >= 2:
            import numpy as np

            iqm = interval_estimates({label: np.array(done)[:, None]}, reps=2000)[label]["iqm"]
        out[label] = {
            "runs": runs,
            "finals": finals,
            "mean_final": statistics.fmean(finals) if finals else None,
            "best_eval": max((s for r in runs for _, s in r["success"]), default=None),
            "finished_finals": done,
            "iqm_final": iqm,
        }
    return out


def reward_on_run(classifier: Path, checkpoint: Path) -> dict[str, Any]:
    """A success classifier scored on a true-reward run's own scenes: every next frame in the
    checkpoint's replay buffer, labelled by the env's success reward (0/1) stored with it, at
    the classifier's own threshold. The frames the policy chose and the ones the person drove
    (`intervened`) apart: held-out frames from scripted pushes do not show how a classifier
    does on a learning policy's scenes, which are what it pays."""
    import numpy as np
    import torch

    from roborl.core.buffer import ReplayBuffer
    from roborl.core.checkpoint import load_checkpoint
    from roborl.core.spaces import space_from_dict
    from roborl.plugins.rewards.classifier import load

    blob = load_checkpoint(checkpoint)
    state = blob.get("buffer")
    if not state:
        raise SystemExit(f"{checkpoint}: no replay buffer in the checkpoint")
    rewards = state["rewards"].numpy()
    if not np.isin(rewards, (0.0, 1.0)).all():
        raise SystemExit(
            f"{checkpoint}: rewards other than 0/1 in the buffer; --score-reward needs a run "
            "trained on the env's success reward"
        )
    space = space_from_dict(blob["observation_space"])
    buffer = ReplayBuffer(
        int(state["size"]), space, tuple(blob["action_space"]["shape"]),
        extras={"intervened": ((), np.bool_)},
    )  # fmt: skip
    buffer.load_state_dict(state)
    model = load(classifier)  # a folder or a .pt, at the threshold it was trained for
    threshold = model.threshold = float(model.config["threshold"])
    fired, truth = [], rewards[: buffer.size] > 0.5
    for start in range(0, buffer.size, 2048):
        rows = torch.arange(start, min(start + 2048, buffer.size))
        nxt = buffer.next_observation(rows)
        fired.append(model.probability({k: v.numpy() for k, v in nxt.items()}) >= threshold)
    said = np.concatenate(fired)
    person = np.zeros(buffer.size, bool)  # a run with no person stores no `intervened`
    if "intervened" in state.get("extras", {}):
        person = state["extras"]["intervened"].numpy()[: buffer.size].astype(bool)

    def scores(rows: np.ndarray) -> dict[str, float]:
        t, f = truth[rows], said[rows]
        return {
            "frames": int(rows.sum()),
            "successes": int(t.sum()),
            "tpr": float(f[t].mean()) if t.any() else float("nan"),
            "tnr": float((~f[~t]).mean()) if (~t).any() else float("nan"),
            "precision": float(t[f].mean()) if f.any() else float("nan"),
        }

    return {
        "threshold": threshold,
        "all": scores(np.ones_like(truth)),
        "policy": scores(~person),
        "person": scores(person),
    }


def action_gap(checkpoint: Path, demos: Path) -> dict[str, float]:
    """How much a trained pixel critic's Q depends on the action, on the demos' own states: the
    ensemble-mean Q of the expert's action, the policy's deterministic action, a zero action
    and uniform random actions, and how often the critic ranks the expert above the policy.
    A critic whose Q barely moves with the action gives its actor only noise to climb."""
    import numpy as np
    import torch

    from roborl.core.algorithms import algorithm_from_checkpoint
    from roborl.core.cli.common import load_host

    algo, _ = algorithm_from_checkpoint(load_host(), checkpoint, "cpu")
    data = np.load(demos)
    prefix = "observations/"
    obs = {k[len(prefix) :]: torch.as_tensor(data[k]) for k in data.files if k.startswith(prefix)}
    expert = algo.scaler.to_unit(torch.as_tensor(data["actions"]))
    with torch.no_grad():
        feat = algo.features(obs)
        policy = algo.actor.deterministic(feat)

        def q(actions: torch.Tensor) -> torch.Tensor:
            return algo.critic(torch.cat([feat, actions], -1)).squeeze(-1).mean(0)

        q_expert, q_policy, q_zero = q(expert), q(policy), q(torch.zeros_like(policy))
        gen = torch.Generator().manual_seed(0)
        randoms = [q(torch.rand(policy.shape, generator=gen) * 2 - 1) for _ in range(8)]
        cosine = torch.nn.functional.cosine_similarity(policy[:, :3], expert[:, :3], dim=-1)
    return {
        "states": len(expert),
        "q_expert": float(q_expert.mean()),
        "q_policy": float(q_policy.mean()),
        "q_zero": float(q_zero.mean()),
        "q_random": float(torch.stack(randoms).mean()),
        "expert_ranked_above_policy": float((q_expert > q_policy).float().mean()),
        "policy_expert_cosine": float(cosine.mean()),
    }


def block_locator(checkpoint: Path, episodes: int = 60, seed: int = 0) -> dict[str, float]:
    """Does a trained pixel encoder see the block? A ridge regression from its image features
    (the camera trunks' outputs, the state left out) to the block's position on the table,
    fitted on two thirds of `episodes` random-action episodes of the run's own env and scored
    (R^2) on the rest; random actions leave the block where it started and the gripper
    uncorrelated with it, so nothing but the image can give it away. The same encoder with its
    weights re-drawn is the baseline: what the architecture gives before any learning."""
    import copy

    import numpy as np
    import torch
    import yaml

    from roborl.core.algorithms import algorithm_from_checkpoint
    from roborl.core.cli.common import load_host
    from roborl.core.obs import to_torch
    from roborl.sim.benchmarks.fetch_pixels import FetchPixelEnv

    algo, _ = algorithm_from_checkpoint(load_host(), checkpoint, "cpu")
    kwargs = yaml.safe_load((checkpoint.parents[1] / "config.yaml").read_text())["env"]["kwargs"]
    env = FetchPixelEnv(**kwargs)
    env.action_space.seed(seed)
    frames: list[dict[str, np.ndarray]] = []
    blocks: list[np.ndarray] = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        for _ in range(env.max_episode_steps):
            frames.append(obs)
            blocks.append(env._raw["observation"][3:5].copy())
            obs, *_ = env.step(env.action_space.sample())
    env.close()
    batch = to_torch({k: np.stack([f[k] for f in frames]) for k in frames[0]}, "cpu")
    targets = np.stack(blocks)
    split = len(frames) * 2 // 3  # whole episodes: every episode has max_episode_steps frames

    def r2(encoder: torch.nn.Module) -> float:
        with torch.no_grad():
            x = torch.cat(encoder.image_features(encoder.images(batch)), -1).numpy()
        x = np.concatenate([x, np.ones((len(x), 1))], 1)
        fit, test = slice(0, split), slice(split, None)
        w = np.linalg.solve(x[fit].T @ x[fit] + 1e-2 * np.eye(x.shape[1]), x[fit].T @ targets[fit])
        residual = ((x[test] @ w - targets[test]) ** 2).sum()
        return float(1.0 - residual / ((targets[test] - targets[test].mean(0)) ** 2).sum())

    fresh = copy.deepcopy(algo.encoder)
    torch.manual_seed(seed)
    for module in fresh.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    return {"frames": len(frames), "r2_trained": r2(algo.encoder), "r2_untrained": r2(fresh)}


def run_name(run: dict[str, Any]) -> str:
    """A run's directory name, and the summary it was read back from (`--earlier`)."""
    name = Path(run["run_dir"]).name
    return f"{name} (from {run['earlier']})" if run.get("earlier") else name


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Issue 33 controls: what keeps RLPD at the floor on FetchPush",
        "",
        f"Summarised by `{result['command']}` from the runs' own directories.",
        "",
        "| control | runs | steps reached | policy-only success at each evaluation (step: "
        "success at the end, or end/any step where the run logged both) | best | median env "
        "steps/s | intervention rate |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, group in result["groups"].items():
        for run in group["runs"]:
            any_step = run.get("success_any") or [None] * len(run["success"])
            curve = ", ".join(
                f"{step}: {s:.2f}" + ("" if a is None else f"/{a:.2f}")
                for (step, s), a in zip(run["success"], any_step)
            )
            sps = f"{run['median_sps']:.1f}" if run["median_sps"] is not None else "-"
            best = max((s for _, s in run["success"]), default=float("nan"))
            lines.append(
                f"| {label} | {run_name(run)} | {run['steps_reached']} "
                f"({run['status']}) | {curve} | {best:.2f} | {sps} | "
                f"{run['intervention_rate']:.2f} |"
            )
    seeded = {k: g for k, g in result["groups"].items() if g.get("iqm_final")}
    if seeded:
        lines += [
            "",
            "Over seeds (finished runs only): final policy-only success",
            "",
            "| control | seeds | IQM [95% CI] | per seed |",
            "|---|---|---|---|",
        ]
        for label, g in seeded.items():
            iqm = g["iqm_final"]
            per_seed = ", ".join(f"{x:.2f}" for x in g["finished_finals"])
            lines.append(
                f"| {label} | {len(g['finished_finals'])} | {iqm['point']:.2f} "
                f"[{iqm['ci_low']:.2f}, {iqm['ci_high']:.2f}] | {per_seed} |"
            )
    fired = [(label, run) for label, g in result["groups"].items() for run in g["runs"]]
    fired = [(label, run) for label, run in fired if run.get("reward_fired")]
    if fired:
        lines += [
            "",
            "The learned reward on each run's own scenes (the frames it fired on in training, "
            "labelled by the env's success):",
            "",
            "| control | run | frames fired on | precision | precision per 256 fired frames, "
            "in order |",
            "|---|---|---|---|---|",
        ]
        for label, run in fired:
            f = run["reward_fired"]
            shown = [
                f"{x:.2f}" if x is not None else "-"
                for x in [f["precision"], *f.get("precision_by_part", [])]
            ]
            lines.append(
                f"| {label} | {run_name(run)} | {f['fired_frames']} | {shown[0]} | "
                f"{' '.join(shown[1:])} |"
            )
    lines += ["", "Overrides of each control's first run (`roborl train` plus these):", ""]
    for label, group in result["groups"].items():
        first = group["runs"][0]
        shown = [o for o in first["overrides"] if not o.startswith(("seed=", "hydra."))]
        lines.append(f"- {label} (torch {first['torch']}): `{' '.join(shown)}`")
    if result.get("probes"):
        lines += [
            "",
            "The critic's action gap on the demos' states (`--probe`: ensemble-mean Q):",
            "",
            "| run | Q(expert action) | Q(policy action) | Q(zero) | Q(random) | expert ranked "
            "above policy | cos(policy, expert) moves |",
            "|---|---|---|---|---|---|---|",
        ]
        for label, g in result["probes"].items():
            lines.append(
                f"| {label} | {g['q_expert']:.3f} | {g['q_policy']:.3f} | {g['q_zero']:.3f} | "
                f"{g['q_random']:.3f} | {g['expert_ranked_above_policy']:.2f} | "
                f"{g['policy_expert_cosine']:.2f} |"
            )
    if result.get("locators"):
        lines += [
            "",
            "Does the encoder see the block? (`--locate`: R^2 of the block's table position "
            "from the image features, random-action frames, held-out episodes)",
            "",
            "| run | frames | trained encoder | same encoder, weights re-drawn |",
            "|---|---|---|---|",
        ]
        for label, g in result["locators"].items():
            lines.append(
                f"| {label} | {g['frames']} | {g['r2_trained']:.2f} | {g['r2_untrained']:.2f} |"
            )
    if result.get("rewards"):
        lines += [
            "",
            "Success classifiers on a true-reward run's own scenes (`--score-reward`: every "
            "next frame in its buffer, labelled by the env's success, at the classifier's "
            "threshold):",
            "",
            "| classifier on run | threshold | frames (successes) | TPR | TNR | precision | "
            "policy's frames: TPR / TNR / precision | person's: TPR / TNR / precision |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, g in result["rewards"].items():
            a, pol, per = g["all"], g["policy"], g["person"]
            lines.append(
                f"| {label} | {g['threshold']} | {a['frames']} ({a['successes']}) | "
                f"{a['tpr']:.2f} | {a['tnr']:.2f} | {a['precision']:.2f} | "
                f"{pol['tpr']:.2f} / {pol['tnr']:.2f} / {pol['precision']:.2f} | "
                f"{per['tpr']:.2f} / {per['tnr']:.2f} / {per['precision']:.2f} |"
            )
    if result.get("notes"):
        lines += ["", result["notes"].rstrip()]
    return "\n".join(lines) + "\n"


def earlier_runs(spec: str) -> tuple[str, list[dict[str, Any]]]:
    """`LABEL=RESULT.json#GROUP[#RUN]`: the runs an earlier summary recorded for GROUP (only
    the one whose directory is named RUN, if given), so seeds whose directories are gone can
    join new ones in LABEL's IQM. Each keeps the name of the file it came from."""
    label, sep, ref = spec.partition("=")
    path, _, rest = ref.partition("#")
    group, _, run_name = rest.partition("#")
    if not sep or not path or not group:
        raise SystemExit(f"--earlier expects LABEL=RESULT.json#GROUP[#RUN], got {spec!r}")
    try:
        groups = json.loads(Path(path).read_text())["groups"]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(f"--earlier {spec!r}: {path} is not a summary of this script ({e})") from e
    if group not in groups:
        raise SystemExit(
            f"--earlier {spec!r}: {path} has no group {group!r}; it has {list(groups)}"
        )
    runs = [r for r in groups[group]["runs"] if not run_name or Path(r["run_dir"]).name == run_name]
    if not runs:
        raise SystemExit(f"--earlier {spec!r}: group {group!r} has no run named {run_name!r}")
    return label, [{**r, "earlier": Path(path).name} for r in runs]


def labelled_pairs(specs: list[str], flag: str, form: str) -> list[tuple[str, tuple[str, str]]]:
    """`LABEL=A,B` arguments as (label, (a, b)); a malformed one names the flag and its form."""
    out = []
    for spec in specs:
        label, sep, paths = spec.partition("=")
        first, comma, second = paths.partition(",")
        if not sep or not comma:
            raise SystemExit(f"{flag} expects LABEL={form}, got {spec!r}")
        out.append((label, (first, second)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("groups", nargs="+", help="LABEL=RUN_DIR[,RUN_DIR...]")
    p.add_argument("--name", default="hil_manipulation_controls")
    p.add_argument("--notes", type=Path, default=None, help="Markdown appended to the table")
    p.add_argument(
        "--earlier", action="append", default=[], help="LABEL=RESULT.json#GROUP[#RUN]"
    )  # fmt: skip
    p.add_argument("--probe", action="append", default=[], help="LABEL=CHECKPOINT,DEMOS")
    p.add_argument("--locate", action="append", default=[], help="LABEL=CHECKPOINT")
    p.add_argument(
        "--score-reward", action="append", default=[], help="LABEL=CLASSIFIER,CHECKPOINT"
    )
    a = p.parse_args()
    groups: dict[str, list[Path | dict[str, Any]]] = {}
    for spec in a.earlier:
        label, runs = earlier_runs(spec)
        groups.setdefault(label, []).extend(runs)
    for spec in a.groups:
        label, sep, dirs = spec.partition("=")
        if not sep or not dirs:
            raise SystemExit(f"expected LABEL=RUN_DIR[,RUN_DIR...], got {spec!r}")
        new = [Path(d) for d in dirs.split(",")]
        missing = [str(d) for d in new if not (d / "metrics.jsonl").exists()]
        if missing:
            raise SystemExit(f"{label}: no metrics.jsonl in {', '.join(missing)}")
        groups.setdefault(label, []).extend(new)
    probes = {
        label: action_gap(Path(checkpoint), Path(demos))
        for label, (checkpoint, demos) in labelled_pairs(a.probe, "--probe", "CHECKPOINT,DEMOS")
    }
    locators: dict[str, Any] = {}
    for spec in a.locate:
        label, sep, checkpoint = spec.partition("=")
        if not sep or not checkpoint:
            raise SystemExit(f"--locate expects LABEL=CHECKPOINT, got {spec!r}")
        locators[label] = block_locator(Path(checkpoint))
    pairs = labelled_pairs(a.score_reward, "--score-reward", "CLASSIFIER,CHECKPOINT")
    rewards = {label: reward_on_run(Path(clf), Path(ckpt)) for label, (clf, ckpt) in pairs}
    result = {
        "command": shlex.join(["python", *sys.argv]),
        "groups": summarise(groups),
        "probes": probes,
        "locators": locators,
        "rewards": rewards,
        "notes": a.notes.read_text() if a.notes else "",
    }
    (OUT / f"{a.name}.json").write_text(json.dumps(result, indent=1))
    (OUT / f"{a.name}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()

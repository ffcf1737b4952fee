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

Each positional argument is LABEL=RUN_DIR[,RUN_DIR...]; the JSON and a Markdown table go to
benchmarks/results/NAME.json/.md, with NOTES.md (what was measured where, and the reading)
appended to the Markdown.
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
    """One run's overrides, evaluations, speed and intervention rate, from its own files."""
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    overrides = [
        line[2:].strip() for line in overrides_file.read_text().splitlines() if line[:2] == "- "
    ]
    evals, sps, interventions, last_step = [], [], [], 0
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        last_step = max(last_step, int(row.get("step", 0)))
        if "eval/success_rate" in row:
            evals.append((int(row["step"]), float(row["eval/success_rate"])))
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
        "final_success": evals[-1][1] if evals else None,
        "median_sps": statistics.median(sps) if sps else None,
        "intervention_rate": statistics.fmean(interventions) if interventions else 0.0,
    }


def summarise(groups: dict[str, list[Path]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, dirs in groups.items():
        runs = [read_run(d) for d in dirs]
        finals = [r["final_success"] for r in runs if r["final_success"] is not None]
        out[label] = {
            "runs": runs,
            "finals": finals,
            "mean_final": statistics.fmean(finals) if finals else None,
            "best_eval": max((s for r in runs for _, s in r["success"]), default=None),
        }
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Issue 33 controls: what keeps RLPD at the floor on FetchPush",
        "",
        f"Summarised by `{result['command']}` from the runs' own directories.",
        "",
        "| control | runs | steps reached | policy-only success at each evaluation (step: "
        "success) | best | median env steps/s | intervention rate |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, group in result["groups"].items():
        for run in group["runs"]:
            curve = ", ".join(f"{step}: {s:.2f}" for step, s in run["success"])
            sps = f"{run['median_sps']:.1f}" if run["median_sps"] is not None else "-"
            best = max((s for _, s in run["success"]), default=float("nan"))
            lines.append(
                f"| {label} | {Path(run['run_dir']).name} | {run['steps_reached']} "
                f"({run['status']}) | {curve} | {best:.2f} | {sps} | "
                f"{run['intervention_rate']:.2f} |"
            )
    lines += ["", "Overrides of each control's first run (`roborl train` plus these):", ""]
    for label, group in result["groups"].items():
        first = group["runs"][0]
        shown = [o for o in first["overrides"] if not o.startswith(("seed=", "hydra."))]
        lines.append(f"- {label} (torch {first['torch']}): `{' '.join(shown)}`")
    if result.get("notes"):
        lines += ["", result["notes"].rstrip()]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("groups", nargs="+", help="LABEL=RUN_DIR[,RUN_DIR...]")
    p.add_argument("--name", default="hil_manipulation_controls")
    p.add_argument("--notes", type=Path, default=None, help="Markdown appended to the table")
    a = p.parse_args()
    groups: dict[str, list[Path]] = {}
    for spec in a.groups:
        label, sep, dirs = spec.partition("=")
        if not sep or not dirs:
            raise SystemExit(f"expected LABEL=RUN_DIR[,RUN_DIR...], got {spec!r}")
        groups[label] = [Path(d) for d in dirs.split(",")]
        missing = [str(d) for d in groups[label] if not (d / "metrics.jsonl").exists()]
        if missing:
            raise SystemExit(f"{label}: no metrics.jsonl in {', '.join(missing)}")
    result = {
        "command": shlex.join(["python", *sys.argv]),
        "groups": summarise(groups),
        "notes": a.notes.read_text() if a.notes else "",
    }
    (OUT / f"{a.name}.json").write_text(json.dumps(result, indent=1))
    (OUT / f"{a.name}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()

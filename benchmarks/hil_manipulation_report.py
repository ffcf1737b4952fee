"""Issue 48's report: `benchmarks/results/hil_manipulation.md/.json`, from the runs' own files.

The figures come from three places, each written by its own benchmark:

- the state gate and its one-lever controls: `results/hil_manipulation_gate.json`
  (`hil_manipulation_gate.py`);
- the pixel headline, person vs no person at 36,000 steps through `roborl compare` (AdaStop):
  `results/hil_manipulation_headline.json` once all its runs are done
  (`hil_manipulation.py --name hil_manipulation_headline`); until then the finished runs kept
  in `results/hil_manipulation_headline_runs/` (`run_archive.py`), reported as a partial
  result without AdaStop's decision;
- issue 33's record, the report this file held before, kept whole under `issue_33`.

Notes are written into the JSON's `notes` by hand and kept when the report is made again.

The JSON's top-level `headline` is the one a script reads: `gate_iqm`, `gate_ci`,
`gate_seeds`, `gate_steps`, `gate_passed`, `pixel_iqm`, `pixel_ci`, `pixel_seeds`,
`pixel_steps`, `adastop_decision`, `adastop_status`, and `pixel_complete` (false while the
headline's runs are still being added up). Run it again after either benchmark:

    python benchmarks/hil_manipulation_report.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import hil_manipulation as pixels  # the pixel benchmark's run reader and IQM + CI

OUT = pixels.OUT
GOAL = 0.9
PIXEL_ARMS = ("rlpd_hil", "rlpd")  # with the scripted person, without


def pixel_result(headline_file: Path, archive: Path, steps: int, seeds: int) -> dict[str, Any]:
    """The pixel headline: the finished benchmark's result, or the archived runs so far."""
    if headline_file.exists():
        done = json.loads(headline_file.read_text())
        runs = {arm: done["runs"][arm] for arm in PIXEL_ARMS}
        finals = {arm: done["finals"][arm] for arm in PIXEL_ARMS}
        return {
            "complete": True, "source": str(headline_file.name), "runs": runs,
            "finals": finals, "aggregate": done["aggregate"], "adastop": done["adastop"],
            "decision": done["headline"]["adastop_decision"],
            "status": done["headline"]["adastop_status"], "steps": done["args"]["steps"],
            "machine": done["machine"], "command": done["command"],
        }  # fmt: skip
    runs = {
        arm: [pixels.read_run(d) for d in sorted(archive.glob(f"*/{arm}/seed*"))]
        for arm in PIXEL_ARMS
    }
    finals = {arm: [r["success"][-1][1] for r in rs if r["success"]] for arm, rs in runs.items()}
    counts = ", ".join(f"{arm} {len(finals[arm])} of {seeds}" for arm in PIXEL_ARMS)
    return {
        "complete": False, "source": f"{archive.name}/ (finished runs so far)", "runs": runs,
        "finals": finals, "aggregate": pixels.aggregate(finals), "adastop": None,
        "decision": None, "status": f"not decided yet: runs finished {counts}",
        "steps": steps, "machine": None, "command": None,
    }  # fmt: skip


def headline(gate: dict[str, Any], pixel: dict[str, Any]) -> dict[str, Any]:
    iqm = pixel["aggregate"].get("rlpd_hil", {}).get("iqm")
    return {
        **{k: gate["headline"][k] for k in ("gate_iqm", "gate_ci", "gate_seeds", "gate_steps",
                                            "gate_passed")},
        "pixel_iqm": iqm["point"] if iqm else None,
        "pixel_ci": [iqm["ci_low"], iqm["ci_high"]] if iqm else None,
        "pixel_seeds": len(pixel["finals"]["rlpd_hil"]), "pixel_steps": pixel["steps"],
        "adastop_decision": pixel["decision"], "adastop_status": pixel["status"],
        "pixel_complete": pixel["complete"],
    }  # fmt: skip


def controls(gate: dict[str, Any]) -> list[dict[str, Any]]:
    """The gate's arms, one lever each against the gate's recipe, in the file's order."""
    rows = []
    for label, s in gate["summary"].items():
        rows.append({
            "arm": label, "seeds": len(s["finals_end"]), "finals_end": s["finals_end"],
            "iqm_end": s["aggregate_end"]["iqm"], "iqm_any": s["aggregate_any"]["iqm"],
            "overrides": gate.get("overrides", {}).get(label, []),
        })  # fmt: skip
    return rows


def build(gate_file: Path, headline_file: Path, archive: Path, previous: dict[str, Any]) -> dict:
    gate = json.loads(gate_file.read_text())
    issue_33 = previous.get("issue_33", previous)
    pixel = pixel_result(headline_file, archive, steps=36000, seeds=5)
    label = gate["gate_label"]
    return {
        "headline": headline(gate, pixel),
        "gate": {
            "label": label,
            "summary": gate["summary"][label],
            "runs": gate["runs"][label],
            "machine": gate["machine"],
            "source": gate_file.name,
        },
        "controls": controls(gate),
        "pixel": pixel,
        "notes": previous.get("notes", []) if "issue_33" in previous else [],
        "issue_33": issue_33,
    }


def _ci(x: dict[str, float]) -> str:
    return f"{x['point']:.2f} [{x['ci_low']:.2f}, {x['ci_high']:.2f}]"


def markdown(result: dict[str, Any]) -> str:
    h, g, p = result["headline"], result["gate"], result["pixel"]
    lines = [
        "# FetchPush to 0.9: the state gate, the pixel headline, the controls (issue 48)", "",
        f"Headline (JSON `headline`): `{json.dumps(h)}`", "",
        "## The state gate", "",
        f"Block pose in the state, true sparse reward, 20 demos + the scripted person, "
        f"`{g['label']}`: policy-only success at the end IQM **{h['gate_iqm']:.2f} "
        f"[{h['gate_ci'][0]:.2f}, {h['gate_ci'][1]:.2f}]** over {h['gate_seeds']} seeds at "
        f"{h['gate_steps']} env steps; the goal is >= {GOAL} "
        f"({'reached' if h['gate_passed'] else 'not reached'}). Per seed "
        f"{', '.join(f'{v:.2f}' for v in g['summary']['finals_end'])}; at any step "
        f"{_ci(g['summary']['aggregate_any']['iqm'])}. Machine: {g['machine']}. "
        f"From `{g['source']}`.", "",
        "Curves (env step: success at the end / at any step):", "",
    ]  # fmt: skip
    for run in g["runs"]:
        pts = ", ".join(
            f"{t}: {s:.2f}/{y:.2f}" for (t, s), (_, y) in zip(run["success"], run["success_any"])
        )
        lines.append(f"- {Path(run['run_dir']).name}: {pts}")
    rates = ", ".join(f"{t}: {r:.2f}" for t, r in g["summary"]["intervention_by_window"])
    lines += ["", f"Intervention rate over time (env step: rate): {rates}", ""]
    lines += [
        "## Controls: one lever at a time on the gate",
        "",
        "| arm | seeds | success at the end, IQM [95% CI] | per seed | at any step, IQM |",
        "|---|---|---|---|---|",
    ]
    for row in result["controls"]:
        lines.append(
            f"| {row['arm']} | {row['seeds']} | {_ci(row['iqm_end'])} | "
            f"{', '.join(f'{v:.2f}' for v in row['finals_end'])} | {row['iqm_any']['point']:.2f} |"
        )
    state = "complete" if p["complete"] else "partial: AdaStop decides once every run is done"
    lines += [
        "", f"## The pixel headline ({state})", "",
        f"Two 32 px views + proprioception, the classifier as the only reward, 20 demos, "
        f"`algo=serl` with BC weight 10 and n-step 3, training episodes playing on after "
        f"success; {p['steps']} env steps per run; from `{p['source']}`.", "",
        "| arm | runs | final policy-only success IQM [95% CI] | per seed |", "|---|---|---|---|",
    ]  # fmt: skip
    for arm in PIXEL_ARMS:
        finals, agg = p["finals"][arm], p["aggregate"].get(arm)
        iqm = _ci(agg["iqm"]) if agg else "-"
        lines.append(f"| {arm} | {len(finals)} | {iqm} | {', '.join(f'{v:.2f}' for v in finals)} |")
    lines += ["", f"AdaStop (person vs no person): {p['adastop'] or p['status']}", ""]
    lines += ["Curves (robot minutes: success at the end / at any step) and the intervention "
              "rate over time, per run:", ""]  # fmt: skip
    for arm in PIXEL_ARMS:
        for run in p["runs"][arm]:
            pts = ", ".join(
                f"{t:.0f}: {s:.2f}/{y:.2f}" if y is not None else f"{t:.0f}: {s:.2f}"
                for (t, s), (_, y) in zip(run["success"], run["success_any"])
            )
            rate = ", ".join(f"{t:.0f}: {r:.2f}" for t, r in run["intervention_rate"])
            lines.append(f"- {arm} {Path(run['run_dir']).name}: {pts}")
            if rate:
                lines.append(f"  - intervention rate: {rate}")
    lines += ["", "## Notes", "", *result["notes"], ""]
    if result["issue_33"]:
        old = pixels.markdown(result["issue_33"])
        old = old.replace("\n# ", "\n### ").replace("\n## ", "\n#### ")
        lines += ["## Issue 33's record (kept as it was)", "", "##" + old]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--gate", type=Path, default=OUT / "hil_manipulation_gate.json")
    p.add_argument("--headline", type=Path, default=OUT / "hil_manipulation_headline.json")
    p.add_argument("--archive", type=Path, default=OUT / "hil_manipulation_headline_runs")
    p.add_argument("--out", type=Path, default=OUT / "hil_manipulation.json")
    a = p.parse_args()
    previous = json.loads(a.out.read_text()) if a.out.exists() else {}
    result = build(a.gate, a.headline, a.archive, previous)
    a.out.write_text(json.dumps(result, indent=1, default=str))
    a.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result).split("## The state gate")[0])


if __name__ == "__main__":
    main()

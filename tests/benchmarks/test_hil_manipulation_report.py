"""benchmarks/hil_manipulation_report.py: issue 48's file reads the gate from the gate's results,
the pixel headline from the archived runs until the benchmark is done (no AdaStop decision
then) and from its results after, and keeps issue 33's record whole across rebuilds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import hil_manipulation_report as report  # noqa: E402

GATE = report.OUT / "hil_manipulation_gate.json"


def archived_run(archive: Path, arm: str, seed: int, final: float) -> None:
    d = archive / "fetch_push_pixels" / arm / f"seed{seed}"
    d.mkdir(parents=True)
    rows = [{"step": 18000, "eval/success_rate": 0.1, "eval/success_any_rate": 0.2},
            {"step": 36000, "eval/success_rate": final, "eval/success_any_rate": final},
            {"step": 36000, "train/intervention_rate": 0.1}]  # fmt: skip
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (d / "summary.json").write_text(json.dumps({"status": "finished"}))


def test_partial_then_complete_pixel_headline_beside_the_gate(tmp_path: Path) -> None:
    archive = tmp_path / "runs"
    for seed, final in ((0, 0.5), (2, 0.7)):
        archived_run(archive, "rlpd_hil", seed, final)
    archived_run(archive, "rlpd", 1, 0.2)
    issue_33 = json.loads((report.OUT / "hil_manipulation.json").read_text())
    issue_33 = issue_33.get("issue_33", issue_33)
    result = report.build(GATE, tmp_path / "none.json", archive, issue_33)
    h, gate = result["headline"], json.loads(GATE.read_text())["headline"]
    assert {k: h[k] for k in gate} == gate
    assert (h["pixel_seeds"], h["pixel_steps"], h["pixel_complete"]) == (2, 36000, False)
    assert h["pixel_iqm"] == 0.6 and h["adastop_decision"] is None
    assert "rlpd_hil 2 of 5, rlpd 1 of 5" in h["adastop_status"]
    assert result["issue_33"] == issue_33
    md = report.markdown(result)
    assert "(partial" in md and "Issue 33's record" in md and "| rlpd_hil | 2 |" in md
    # once the benchmark is done its own result (AdaStop's decision included) is the headline
    done = {
        "runs": result["pixel"]["runs"], "finals": {"rlpd_hil": [0.5, 0.7, 0.9], "rlpd": [0.2]},
        "aggregate": report.pixels.aggregate({"rlpd_hil": [0.5, 0.7, 0.9], "rlpd": [0.2]}),
        "adastop": "budget spent", "args": {"steps": 36000}, "machine": "m", "command": "c",
        "headline": {"adastop_decision": "larger", "adastop_status": "budget spent"},
    }  # fmt: skip
    (tmp_path / "done.json").write_text(json.dumps(done))
    again = report.build(GATE, tmp_path / "done.json", archive, json.loads(json.dumps(result)))
    assert again["headline"]["pixel_complete"] and again["headline"]["pixel_seeds"] == 3
    assert again["headline"]["adastop_decision"] == "larger"
    assert again["issue_33"] == issue_33  # a rebuild keeps the record it kept

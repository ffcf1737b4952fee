"""benchmarks/hil_manipulation.py --smoke: HIL-SERL's recipe on FetchPush from pixels end to
end at toy size (issue 33), with the two camera views and SERL's values: demos, classifier,
the hard-negative round, the AdaStop pair and the BC arm, and a report whose figures come
from the runs it made."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from cli_server import run_roborl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import hil_manipulation as bench  # noqa: E402


class _Finished:
    """What `bench.spawn` returns, for a command that already ran to completion."""

    def __init__(self, returncode: int) -> None:
        self.returncode = returncode

    def poll(self) -> int:
        return self.returncode

    def wait(self) -> int:
        return self.returncode


def test_smoke_run_reports_every_arm_from_its_own_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The script's `roborl` commands from the test's fork server (tests/cli_server.py): the
    # same `python -m roborl.core.cli ARGS`, without a fresh interpreter's imports per stage.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}

    def served(*args: str, log: Path) -> None:
        proc = run_roborl(args, timeout=900, env=env)
        log.write_text(proc.stdout + proc.stderr)
        assert proc.returncode == 0, f"roborl {' '.join(args)}: {proc.stderr[-3000:]}"

    # The served commands take `env` above: the pin goes to a scratch mapping, not to this
    # worker's environment (tests/benchmarks/test_run_archive.py tests the pin itself).
    pin = bench.run_archive.pin_cpu_kernels
    monkeypatch.setattr(bench.run_archive, "pin_cpu_kernels", lambda: pin({}))
    monkeypatch.setattr(bench, "roborl", served)
    monkeypatch.setattr(bench, "spawn", lambda *args, log: served(*args, log=log) or _Finished(0))
    # The defaults: two views, SERL's values.
    argv = ["hil_manipulation.py", "--smoke", "--jobs", "1", "--work", str(tmp_path), "--play-on"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    result = json.loads((tmp_path / "hil_manipulation.json").read_text())
    for arm in ("rlpd_hil", "rlpd", "bc_hil"):
        (run,) = result["runs"][arm]
        assert Path(run["run_dir"]).is_dir() and run["success"], arm
        assert result["finals"][arm] == [run["success"][-1][1]]
        assert 0.0 <= result["aggregate"][arm]["iqm"]["point"] <= 1.0
        fired = run["reward_fired"]  # the reward's precision on the run's own fired frames
        assert fired is None or (fired["fired_frames"] > 0 and 0.0 <= fired["precision"] <= 1.0)
        if fired:  # and per 256 fired frames in order: a falling precision shows exploitation
            assert len(fired["precision_by_part"]) == -(-fired["fired_frames"] // 256)
    assert sorted(result["compare"]["methods"]) == ["rlpd", "rlpd_hil"]
    assert any("scripted_person" in o for o in result["compare"]["methods"]["rlpd_hil"])
    assert "algo=serl" in result["compare"]["methods"]["rlpd_hil"]
    assert result["adastop"].startswith(result["compare"]["status"])
    classifier = json.loads((tmp_path / "classifier_relabelled" / "config.json").read_text())
    assert classifier["image_keys"] == ["image", "image_side"]  # both views, as the policy's
    assert 0.0 <= result["first_classifier"]["precision_on_probe_fired_frames"] <= 1.0
    # --play-on: training episodes go on after the classifier's success
    config = (Path(result["runs"]["rlpd_hil"][0]["run_dir"]) / "config.yaml").read_text()
    assert "terminate_on_success: false" in config
    # the headline a script reads: this run's person arm beside the state gate's own file
    head, gate = (
        result["headline"],
        json.loads(bench.OUT.joinpath("hil_manipulation_gate.json").read_text()),
    )
    assert head["gate_iqm"] == gate["headline"]["gate_iqm"]
    assert head["pixel_iqm"] == result["aggregate"]["rlpd_hil"]["iqm"]["point"]
    assert (head["pixel_seeds"], head["pixel_steps"]) == (1, 100)
    (decision,) = [d["decision"] for d in result["compare"]["decisions"]]
    assert head["adastop_decision"] == decision
    report = (tmp_path / "hil_manipulation.md").read_text()
    assert "| rlpd_hil |" in report and "AdaStop" in report
    # the finished RL runs are archived (a smoke run's under --work) and come back, on a fresh
    # machine with the same demos and classifier, as the report read them here
    archive = tmp_path / "archive"
    inputs = json.loads((archive / "prep.json").read_text())
    assert sorted(inputs) == ["classifier", "demos"]
    restored = bench.run_archive.restore(archive, tmp_path / "fresh", inputs)
    assert sorted(d.parts[-2] for d in restored) == ["rlpd", "rlpd_hil"]
    for d in restored:
        (original,) = result["runs"][d.parts[-2]]
        again = json.loads(json.dumps(bench.read_run(d)))  # tuples as the JSON holds them
        assert {k: again[k] for k in ("success", "reward_fired")} == {
            k: original[k] for k in ("success", "reward_fired")
        }

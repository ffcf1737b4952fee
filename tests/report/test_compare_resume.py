"""`roborl compare` continues an interrupted run from its checkpoint instead of starting it
again (a 36,000-step pixel run is 75 min here: a stop must not cost the finished part), and
starts again a leftover of another setup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_hooks import Checkpoints, InterruptAtFirstCheckpoint

from roborl.core.checkpoint import load_checkpoint
from roborl.core.plugins import get_host
from roborl.plugins.report.compare_runs import run_job

TOTAL, CUT = 300, 100
OVERRIDES = [
    "env=inverted_pendulum", "algo=sac", "algo.hidden_sizes=[16,16]", "algo.batch_size=16",
    f"total_steps={TOTAL}", "learning_starts=50", f"eval_every={CUT}", "eval_episodes=1",
    f"checkpoint_every={CUT}", f"log_every={CUT}", "progress=false", "seed=2",
]  # fmt: skip


def _checkpoints_of_job(overrides: list[str], run_dir: Path) -> list[int]:
    host, seen = get_host(), Checkpoints()
    host.pm.register(seen)
    try:
        run_job(overrides, str(run_dir))
    finally:
        host.pm.unregister(seen)
    return seen.steps


def _interrupted_run(run_dir: Path) -> list[str]:
    host = get_host()
    interrupt = InterruptAtFirstCheckpoint()
    host.pm.register(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_job(OVERRIDES, str(run_dir))
    finally:
        host.pm.unregister(interrupt)
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["runner"]["step"] == CUT
    return (run_dir / "metrics.jsonl").read_text().splitlines()


def test_an_interrupted_run_continues_from_its_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "seed2"
    before = _interrupted_run(run_dir)
    steps = _checkpoints_of_job(OVERRIDES, run_dir)
    assert steps[0] > CUT  # the first CUT steps were not run again
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == TOTAL
    after = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert after[: len(before)] == before  # and their records were kept


def test_a_leftover_of_another_setup_starts_again(tmp_path: Path) -> None:
    run_dir = tmp_path / "seed2"
    before = _interrupted_run(run_dir)
    other = [o for o in OVERRIDES if not o.startswith("algo.batch_size")] + ["algo.batch_size=8"]
    steps = _checkpoints_of_job(other, run_dir)
    assert steps[0] == CUT  # from step 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == TOTAL
    logged = [json.loads(r)["step"] for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert logged == sorted(logged) and len(logged) > len(before)  # one run, nothing appended

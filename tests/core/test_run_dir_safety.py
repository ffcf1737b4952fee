"""A run directory keeps what its run wrote: a new `roborl train` into it is refused (before
anything there is touched), and a resume that fails during setup leaves its summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host
from roborl.core.runner import Runner

TINY = [
    "total_steps=300",
    "learning_starts=100",
    "eval_every=300",
    "eval_episodes=1",
    "checkpoint_every=300",
    "log_every=100",
    "algo.batch_size=32",
    "algo.hidden_sizes=[16,16]",
    "progress=false",
]
AGAIN = ["total_steps=100", "learning_starts=50", "eval_every=100", "progress=false"]


def _snapshot(root: Path, skip_hydra: bool = False) -> dict[str, tuple[bytes, int]]:
    """Every file under `root` with its bytes and modification time."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not (skip_hydra and ".hydra" in p.parts)
    }


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def _assert_refused(proc, run_dir: Path) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "already holds a previous run" in proc.stderr, proc.stderr
    assert f"roborl resume run_dir={run_dir}" in proc.stderr, proc.stderr
    assert "hydra.run.dir=" in proc.stderr, proc.stderr


def test_train_into_a_finished_run_dir_is_refused_and_touches_nothing(cli, tmp_path) -> None:
    run_dir = tmp_path / "r1"
    cli("train", *TINY, f"hydra.run.dir={run_dir}")
    before = _snapshot(run_dir)
    assert {"metrics.jsonl", "summary.json", "checkpoints/last.pt", "cli.log"} <= set(before)

    proc = cli("train", *AGAIN, f"hydra.run.dir={run_dir}", check=False)
    _assert_refused(proc, run_dir)
    assert _snapshot(run_dir) == before  # .hydra/ and cli.log included: refused before Hydra ran
    assert not (run_dir / "checkpoints" / "previous.pt").exists()

    # `roborl resume` continues the same directory
    cli("resume", f"run_dir={run_dir}", "total_steps=400")
    summary = _summary(run_dir)
    assert summary["status"] == "finished" and summary["steps"] == 400
    steps = [r["step"] for r in cli.read_jsonl(run_dir / "metrics.jsonl")]
    assert steps == sorted(steps) and steps[-1] == 400


def test_a_run_dir_named_by_interpolation_is_checked_by_the_runner(cli, tmp_path) -> None:
    cli("train", *TINY, f"hydra.run.dir={tmp_path}/s${{seed}}")
    run_dir = tmp_path / "s0"
    before = _snapshot(run_dir, skip_hydra=True)
    proc = cli("train", *AGAIN, f"hydra.run.dir={tmp_path}/s${{seed}}", check=False)
    _assert_refused(proc, run_dir)
    assert _snapshot(run_dir, skip_hydra=True) == before


def test_a_sweep_still_runs_and_a_second_one_into_its_dir_is_refused(cli, tmp_path) -> None:
    sweep = tmp_path / "sweep"
    cli("train", "-m", "seed=0,1", *TINY, f"hydra.sweep.dir={sweep}")
    dirs = sorted(p.parent for p in sweep.rglob("summary.json"))
    assert len(dirs) == 2 and all(_summary(d)["status"] == "finished" for d in dirs)
    before = {d: _snapshot(d, skip_hydra=True) for d in dirs}
    proc = cli("train", "-m", "seed=0,1", *AGAIN, f"hydra.sweep.dir={sweep}", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "already holds a previous run" in proc.stderr, proc.stderr
    assert {d: _snapshot(d, skip_hydra=True) for d in dirs} == before


def _cfg(**overrides: Any) -> dict[str, Any]:
    return {
        "algo": {"name": "sac", "batch_size": 32, "hidden_sizes": [16, 16]},
        "env": {"id": "InvertedPendulum-v5"},
        "total_steps": 200,
        "learning_starts": 100,
        "eval_every": 200,
        "eval_episodes": 1,
        "progress": False,
        **overrides,
    }


def test_a_new_runner_refuses_a_used_directory(tmp_path: Path) -> None:
    host = get_host()
    run_dir = tmp_path / "run"
    Runner(_cfg(), run_dir, host).execute()
    before = _snapshot(run_dir)
    with pytest.raises(ConfigError, match=r"already holds a previous run.*roborl resume"):
        Runner(_cfg(total_steps=100), run_dir, host).execute()
    assert _snapshot(run_dir) == before


def test_resume_failing_in_setup_keeps_the_finished_summary(cli, tmp_path) -> None:
    run_dir = tmp_path / "run"
    cli("train", *TINY, f"hydra.run.dir={run_dir}")
    summary = _summary(run_dir)
    assert summary["status"] == "finished" and summary["steps"] == 300
    config = run_dir / "config.yaml"
    saved = yaml.safe_load(config.read_text())
    saved["env"]["id"] = "NoSuchEnv-v0"  # fails when the env is made, before the restore
    config.write_text(yaml.safe_dump(saved))
    before = _snapshot(run_dir)

    proc = cli("resume", f"run_dir={run_dir}", check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "NoSuchEnv-v0" in proc.stderr, proc.stderr
    after = _snapshot(run_dir)
    for name in ("summary.json", "metrics.jsonl", "checkpoints/last.pt"):
        assert after[name][0] == before[name][0], name
    assert _summary(run_dir) == summary


def test_runner_setup_failure_keeps_summary_only_of_a_started_run(tmp_path: Path) -> None:
    host = get_host()
    run_dir = tmp_path / "run"
    Runner(_cfg(), run_dir, host).execute()
    summary = _summary(run_dir)
    last = run_dir / "checkpoints" / "last.pt"
    with pytest.raises(Exception, match="NoSuchEnv-v0"):
        Runner(_cfg(env={"id": "NoSuchEnv-v0"}), run_dir, host).execute(resume_from=last)
    assert _summary(run_dir) == summary

    # a brand-new run that fails the same way still leaves a summary saying so
    fresh = tmp_path / "fresh"
    with pytest.raises(Exception, match="NoSuchEnv-v0"):
        Runner(_cfg(env={"id": "NoSuchEnv-v0"}), fresh, host).execute()
    crashed = _summary(fresh)
    assert crashed["status"] == "crashed" and crashed["steps"] == 0

    # ... and, having taken no step, it does not block the corrected run in its directory
    summary = Runner(_cfg(), fresh, host).execute()
    assert summary["status"] == "finished" and _summary(fresh)["steps"] == 200

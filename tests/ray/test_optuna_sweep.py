"""`roborl tune sampler=optuna`: a study over `roborl train` runs whose median pruner stops a
clearly worse trial at its first evaluation; the pruned run ends cleanly and says so.

Deterministic without timing: on InvertedPendulum every step earns 1, so with
`env.max_episode_steps=1` each evaluation returns exactly 1.0, while the same run with
full-length episodes returns more (the pole cannot fall in one 0.04 s step). With
`startup_trials=1` the median pruner compares the second study's trial against the first,
completed one at the same env step, and 1.0 is below it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roborl.core.checkpoint import load_checkpoint
from roborl.core.errors import ConfigError, MissingExtraError

optuna = pytest.importorskip("optuna")

TINY = [
    "total_steps=400",
    "learning_starts=200",
    "eval_every=200",
    "eval_episodes=2",
    "checkpoint_every=400",
    "log_every=200",
    "algo.batch_size=32",
    "algo.hidden_sizes=[16,16]",
    "torch_threads=1",
]


def _tune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "roborl.core.cli", "tune", "sampler=optuna", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_the_median_pruner_prunes_a_clearly_worse_trial(tmp_path: Path) -> None:
    out = tmp_path / "study"
    keys = [f"out={out}", "n_trials=1", "startup_trials=1", "sampler_seed=0"]
    first = _tune(*keys, *TINY, cwd=tmp_path)
    assert "1 complete, 0 pruned" in first.stdout
    second = _tune(*keys, *TINY, "env.max_episode_steps=1", cwd=tmp_path)  # same study, again
    assert "0 complete, 1 pruned" in second.stdout

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "optuna.journal"))
    )
    trials = optuna.load_study(study_name="roborl", storage=storage).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED"]
    good, pruned = trials
    assert set(good.intermediate_values) == {200, 400} and good.value > 1.0
    assert pruned.intermediate_values == {200: 1.0}  # reported once, pruned at once

    run_dir = out / "1_default"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["steps"] == 200
    assert summary["stop_reason"].startswith("pruned by Optuna's median pruner at step 200")
    record = json.loads((run_dir / "optuna_trial.json").read_text())
    assert record["state"] == "PRUNED" and record["trial"] == 1 and record["value"] == 1.0
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["runner"]["step"] == 200
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    evals = [r for r in map(json.loads, lines) if "eval/return_mean" in r]  # every line parses
    assert [(r["step"], r["eval/return_mean"]) for r in evals] == [(200, 1.0)]
    assert json.loads((out / "0_default" / "optuna_trial.json").read_text())["state"] == "COMPLETE"


def test_sweep_syntax_becomes_optuna_distributions() -> None:
    from roborl.plugins.ray.optuna_sweep import Param, search_space

    fixed, params = search_space(
        ["total_steps=100", "seed=range(0,6,2)", "algo.hidden_sizes=[8],[16,16]",
         "algo.actor_lr=tag(log,interval(1e-4,1e-2))", "algo.tau=interval(0.001,0.01)"]
    )  # fmt: skip
    assert fixed == ["total_steps=100"]
    assert params == [
        Param("seed", "int", low=0, high=4, step=2),
        Param("algo.hidden_sizes", "categorical", choices=("[8]", "[16,16]")),
        Param("algo.actor_lr", "float", low=1e-4, high=1e-2, log=True),
        Param("algo.tau", "float", low=0.001, high=0.01),
    ]
    with pytest.raises(ConfigError, match="empty interval on a log scale"):
        search_space(["algo.actor_lr=tag(log,interval(0,1))"])


def test_keys_of_the_other_sampler_and_a_missing_optuna_are_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from roborl.plugins.ray.sweep import main

    with pytest.raises(ConfigError, match=r"n_trials belong.*sampler=optuna"):
        main(["n_trials=3", "seed=0,1"])
    with pytest.raises(ConfigError, match=r"num_samples belong.*sampler=ray"):
        main(["sampler=optuna", "num_samples=3", "seed=0,1"])
    with pytest.raises(ConfigError, match="metric='eval/retrun_mean' is not an evaluation"):
        main(["sampler=optuna", "metric=eval/retrun_mean", "seed=0,1"])
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"roborl\[sweeps\]"):
        main(["sampler=optuna", "seed=0,1"])

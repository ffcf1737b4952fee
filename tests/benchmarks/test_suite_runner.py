"""Runner-overhead fixes the suite's `runner` rows measure (issue 23): `eval_every=0` turns
evaluations off, and an evaluation of a bit-identical algorithm state (random-action phase)
reuses the last result instead of replaying the same seeded episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import roborl.core.periodic_eval as eval_mod
from roborl.core.plugins import get_host
from roborl.core.run_dir import read_metrics
from roborl.core.runner import Runner


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **over: Any) -> tuple[dict, list, int]:
    calls = []
    real = eval_mod.evaluate

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(eval_mod, "evaluate", counting)
    cfg = {
        "algo": {"name": "sac", "batch_size": 16, "hidden_sizes": [16, 16]},
        "env": {"id": "Pendulum-v1"},
        "total_steps": 90, "learning_starts": 100, "eval_every": 30, "eval_episodes": 1,
        "checkpoint_every": 1000, "log_every": 1000, "progress": False, **over,
    }  # fmt: skip
    summary = Runner(cfg, tmp_path, get_host()).execute()
    evals = [r for r in read_metrics(tmp_path) if "eval/return_mean" in r]
    return summary, evals, len(calls)


def test_unchanged_policy_is_evaluated_once(tmp_path: Path, monkeypatch) -> None:
    summary, evals, calls = run(tmp_path, monkeypatch)
    assert summary["updates"] == 0
    assert [r["step"] for r in evals] == [30, 60, 90]  # the curve keeps every point
    assert calls == 1  # ... but the episodes ran once: the weights never changed
    assert len({r["eval/return_mean"] for r in evals}) == 1
    assert summary["final_eval_return"] == evals[0]["eval/return_mean"]


def test_updated_policy_is_evaluated_again(tmp_path: Path, monkeypatch) -> None:
    summary, evals, calls = run(tmp_path, monkeypatch, learning_starts=20)
    assert summary["updates"] > 0
    assert [r["step"] for r in evals] == [30, 60, 90] and calls == 3


def test_eval_every_zero_runs_no_evaluation(tmp_path: Path, monkeypatch) -> None:
    summary, evals, calls = run(tmp_path, monkeypatch, eval_every=0)
    assert summary["steps"] == 90 and summary["status"] == "finished"
    assert evals == [] and calls == 0 and summary["final_eval_return"] is None
    assert (tmp_path / "checkpoints" / "last.pt").exists()


def test_state_digest_sees_any_weight_change() -> None:
    import gymnasium as gym
    import torch

    from roborl.core.algorithms import build_algorithm

    env = gym.make("Pendulum-v1")
    algo = build_algorithm(
        get_host(), {"name": "sac", "hidden_sizes": [8]}, env.observation_space,
        env.action_space, "cpu",
    )  # fmt: skip
    before = eval_mod.state_digest(algo)
    assert before is not None and before == eval_mod.state_digest(algo)
    with torch.no_grad():
        next(algo.actor.parameters()).view(-1)[0] += 1e-6
    assert eval_mod.state_digest(algo) != before

"""`roborl_should_stop`: a third-party plugin ends a run early after an evaluation, by returning
a reason or by raising `StopRun`, and the run ends as a finished one does (final checkpoint,
summary with `status: stopped` and the reason), its metrics intact."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from roborl.core.checkpoint import load_checkpoint
from roborl.core.compose import compose_dict
from roborl.core.errors import StopRun
from roborl.core.hookspecs import hookimpl
from roborl.core.interfaces import Algorithm, Policy
from roborl.core.plugins import PluginHost
from roborl.core.policies import AlgorithmPolicy
from roborl.core.runner import Runner

TINY = [
    "env=gym",  # Pendulum-v1
    "total_steps=600",
    "learning_starts=100",
    "eval_every=200",
    "eval_episodes=1",
    "checkpoint_every=600",
    "log_every=100",
    "algo.batch_size=16",
    "algo.hidden_sizes=[8,8]",
    "progress=false",
    "torch_threads=1",
]


class StopAtStep:
    """What a third-party plugin writes: stop once an evaluation at `step` or later is in."""

    def __init__(self, step: int, raise_it: bool) -> None:
        self.step, self.raise_it = step, raise_it
        self.seen: list[tuple[int, float]] = []

    @hookimpl
    def roborl_should_stop(self, step: int, metrics: Mapping[str, float]) -> str | None:
        self.seen.append((step, metrics["eval/return_mean"]))
        if step < self.step:
            return None
        if self.raise_it:
            raise StopRun(f"enough at step {step}")
        return f"enough at step {step}"


@pytest.mark.parametrize("raise_it", [False, True], ids=["returns-reason", "raises-StopRun"])
def test_a_plugin_stops_the_run_after_an_evaluation(tmp_path: Path, raise_it: bool) -> None:
    host = PluginHost()
    host.load_entry_points()
    stopper = StopAtStep(400, raise_it)
    host.add_plugin(stopper, "stopper")
    run_dir = tmp_path / "run"
    summary = Runner(compose_dict(host, TINY, "train"), run_dir, host).execute()

    assert [s for s, _ in stopper.seen] == [200, 400]  # asked after each evaluation, then no more
    assert summary["status"] == "stopped" and summary["stop_reason"] == "enough at step 400"
    assert summary["steps"] == 400  # of 600: the loop ended at its next `finished` check
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk["stop_reason"] == "enough at step 400" and on_disk["status"] == "stopped"
    ckpt = load_checkpoint(run_dir / "checkpoints" / "last.pt")  # the final checkpoint
    assert ckpt["runner"]["step"] == 400
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r["step"] for r in records if "eval/return_mean" in r]
    assert evals == [200, 400]  # no second evaluation at the end: the last one is at 400
    assert summary["final_eval_return"] == stopper.seen[-1][1]
    assert max(r["step"] for r in records) == 400


class StopOnMetrics:
    """StopRun raised from another hook (a log event between evaluations), once."""

    def __init__(self) -> None:
        self.raised = False

    @hookimpl
    def roborl_metrics(self, step: int) -> None:
        if step >= 300 and not self.raised:
            self.raised = True
            raise StopRun("cost budget spent")


def test_stoprun_raised_between_evaluations_still_ends_like_a_finished_run(
    tmp_path: Path,
) -> None:
    host = PluginHost()
    host.load_entry_points()
    host.add_plugin(StopOnMetrics(), "budget")
    run_dir = tmp_path / "run"
    summary = Runner(compose_dict(host, TINY, "train"), run_dir, host).execute()

    assert summary["status"] == "stopped" and summary["stop_reason"] == "cost budget spent"
    assert summary["steps"] == 300
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval/return_mean" in r] == [200, 300]  # a final eval
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["runner"]["step"] == 300


def test_an_answer_at_the_evaluation_that_ends_the_budget_changes_nothing(tmp_path: Path) -> None:
    host = PluginHost()
    host.load_entry_points()
    stopper = StopAtStep(600, raise_it=False)  # total_steps=600: the last evaluation
    host.add_plugin(stopper, "late")
    summary = Runner(compose_dict(host, TINY, "train"), tmp_path / "run", host).execute()
    assert [s for s, _ in stopper.seen] == [200, 400, 600]
    assert summary["status"] == "finished" and "stop_reason" not in summary


@dataclass
class _NoConfig:
    pass


class IgnoresFinished(Algorithm):
    """An "own" loop that never looks at `ctx.finished` (e.g. a library's training loop)."""

    name = "test_ignores_finished"
    Config = _NoConfig
    loop = "own"

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        return np.zeros((len(obs), 1), np.float32)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass

    def policy(self) -> Policy:
        return AlgorithmPolicy(self)

    def train(self, ctx: Any) -> None:
        env = ctx.make_env(seed=0)
        env.reset(seed=0)
        for _ in range(ctx.run.total_steps):
            _, _, terminated, truncated, _ = env.step(np.zeros(1, np.float32))
            if terminated or truncated:
                env.reset()
            ctx.advance(env_steps=1)
            if ctx.due("eval"):
                ctx.evaluate(self)
        ctx.finish(self)


class _Provides:
    @hookimpl
    def roborl_algorithms(self) -> dict[str, type]:
        return {"test_ignores_finished": IgnoresFinished}


def test_a_loop_that_ignores_finished_is_ended_at_its_next_evaluation(tmp_path: Path) -> None:
    host = PluginHost()
    host.load_entry_points()
    host.add_plugin(_Provides(), "ignores")
    stopper = StopAtStep(200, raise_it=False)
    host.add_plugin(stopper, "stopper")
    cfg = {
        "algo": {"name": "test_ignores_finished"}, "env": {"id": "Pendulum-v1"}, "seed": 0,
        "total_steps": 800, "eval_every": 200, "eval_episodes": 1, "checkpoint_every": 800,
        "log_every": 200, "progress": False,
    }  # fmt: skip
    run_dir = tmp_path / "run"
    summary = Runner(cfg, run_dir, host).execute()
    assert [s for s, _ in stopper.seen] == [200]
    assert summary["status"] == "stopped" and summary["stop_reason"] == "enough at step 200"
    assert summary["steps"] == 400  # its next evaluation raised StopRun instead
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval/return_mean" in r] == [200, 400]
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["runner"]["step"] == 400

"""VLA-RL follows the run's schedule: evaluations every `eval_every` env steps and checkpoints
every `checkpoint_every` (it used to evaluate only at the end and checkpoint every quarter of
its iterations)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from roborl.core.hookspecs import hookimpl
from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner


class _Checkpoints:
    def __init__(self) -> None:
        self.steps: list[int] = []

    @hookimpl
    def roborl_checkpoint(self, path: str, step: int) -> None:
        if path.endswith("last.pt"):
            self.steps.append(step)


def test_vla_rl_evaluates_and_checkpoints_on_the_schedule(tmp_path: Path) -> None:
    host = PluginHost()
    host.load_entry_points()
    seen = _Checkpoints()
    host.add_plugin(seen, "checkpoints")
    cfg: dict[str, Any] = {
        "algo": {"name": "vla_rl", "demos_per_task": 2, "sft_steps": 10, "prm_steps": 5,
                 "iterations": 4, "num_envs": 2, "rollout_steps": 6,
                 "critic_warmup_iterations": 1, "eval_episodes_per_task": 1},
        "env": {"id": "RoborlTabletop-v0"}, "total_steps": 10_000, "eval_every": 24,
        "eval_episodes": 1, "checkpoint_every": 24, "log_every": 1000, "progress": False,
    }  # fmt: skip
    summary = Runner(cfg, tmp_path / "run", host).execute()
    assert summary["steps"] == 4 * 2 * 6
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval/return_mean" in r] == [24, 48]
    assert seen.steps == [24, 48]

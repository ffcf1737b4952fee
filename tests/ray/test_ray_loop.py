"""distributed=ray on a local 2-CPU Ray: SAC trains end to end from workers' transitions, and a
worker killed mid-run (SIGKILL of its process) is replaced."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray

from roborl.core.hookspecs import hookimpl
from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner

pytestmark = pytest.mark.serial  # a local Ray cluster claims both cores


BASE: dict[str, Any] = {
    "algo": {"name": "sac", "hidden_sizes": [32, 32], "batch_size": 64},
    "env": {"id": "InvertedPendulum-v5"},
    "logger": {"name": "jsonl"},
    "seed": 0,
    "total_steps": 1200,
    "learning_starts": 200,
    "eval_every": 600,
    "eval_episodes": 2,
    "checkpoint_every": 600,
    "log_every": 300,
    "progress": False,
    "distributed": "ray",
}


@pytest.fixture(scope="module")
def local_ray() -> Any:
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


def _host() -> PluginHost:
    host = PluginHost()
    host.load_entry_points()
    return host


def _cfg(**ray_cfg: Any) -> dict[str, Any]:
    return {**BASE, "ray": {"num_workers": 2, "rollout_steps": 25, "sync_every": 200, **ray_cfg}}


def test_two_workers_train_sac_and_learner_gets_their_transitions(
    local_ray: Any, tmp_path: Path
) -> None:
    runner = Runner(_cfg(), tmp_path / "run", _host())
    summary = runner.execute()
    assert summary["status"] == "finished"
    assert summary["steps"] == 1200
    # utd_ratio 1: one update per received env step after learning_starts
    assert summary["updates"] >= 1200 - 200 - 64
    assert summary["final_eval_return"] is not None
    stats = json.loads((tmp_path / "run" / "distributed.json").read_text())
    per_worker = {int(i): w["transitions"] for i, w in stats["workers"].items()}
    assert sum(per_worker.values()) == 1200
    assert set(per_worker) == {0, 1} and all(v >= 100 for v in per_worker.values())
    # the workers are separate processes, not the learner
    pids = {w["pid"] for w in stats["workers"].values()}
    assert len(pids) == 2 and os.getpid() not in pids
    assert stats["weight_pushes"] >= 4
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    sources = {r["dist/worker"] for r in lines if "train/episode_return" in r}
    assert sources == {0, 1}
    assert any("train/critic_loss" in r for r in lines)
    assert (tmp_path / "run" / "checkpoints" / "last.pt").exists()


class _KillOnce:
    """A plugin that SIGKILLs worker 0's process once the learner has 400 steps; it learns
    the process id from the `dist/worker_pid` metric the collector logs."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.killed_pid: int | None = None

    @hookimpl
    def roborl_metrics(self, step: int, metrics: Any) -> None:
        if "dist/worker_pid" in metrics and metrics["dist/worker"] == 0:
            self.pid = int(metrics["dist/worker_pid"])
        if self.killed_pid is None and step >= 400 and self.pid is not None:
            self.killed_pid = self.pid
            os.kill(self.pid, signal.SIGKILL)


def test_killed_worker_is_replaced_and_run_finishes(local_ray: Any, tmp_path: Path) -> None:
    host = _host()
    killer = _KillOnce()
    host.add_plugin(killer, "killer")
    runner = Runner({**_cfg(max_restarts=1), "total_steps": 1000}, tmp_path / "run", host)
    summary = runner.execute()
    assert killer.killed_pid is not None
    assert summary["status"] == "finished" and summary["steps"] == 1000
    stats = json.loads((tmp_path / "run" / "distributed.json").read_text())
    assert stats["failures"] == 1
    w0 = stats["workers"]["0"]
    assert w0["restarts"] == 1 and w0["alive"] and w0["pid"] != killer.killed_pid
    assert stats["transitions_total"] == 1000


def test_without_restarts_the_run_continues_with_fewer_workers(
    local_ray: Any, tmp_path: Path
) -> None:
    host = _host()
    killer = _KillOnce()
    host.add_plugin(killer, "killer")
    cfg = {**_cfg(max_restarts=0), "total_steps": 800, "eval_every": 800}
    runner = Runner(cfg, tmp_path / "run", host)
    summary = runner.execute()
    assert summary["status"] == "finished" and summary["steps"] == 800
    stats = json.loads((tmp_path / "run" / "distributed.json").read_text())
    assert stats["failures"] == 1
    assert not stats["workers"]["0"]["alive"] and stats["workers"]["1"]["alive"]
    # after the kill only worker 1 delivers
    assert stats["workers"]["1"]["transitions"] > stats["workers"]["0"]["transitions"]


def test_unknown_collector_is_a_clear_error(tmp_path: Path) -> None:
    from roborl.core.errors import ConfigError

    for key in ("distributed", "collector"):
        cfg = {**_cfg(), "distributed": None, key: "rayy"}
        with pytest.raises(ConfigError, match=r"unknown collector 'rayy'.*ray"):
            Runner(cfg, tmp_path / "run", _host()).execute()


def test_ray_collector_only_feeds_the_offpolicy_loop(tmp_path: Path) -> None:
    from roborl.core.errors import ConfigError

    cfg = {**_cfg(), "algo": {"name": "iql"}, "distributed": None, "collector": "ray"}
    with pytest.raises(ConfigError, match=r"collector=ray feeds the off-policy loop"):
        Runner(cfg, tmp_path / "run", _host())


class _CostOnEnd(gym.Env):
    """3-step episodes; only the step that ends one costs 1."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(2, self.t, np.float32), 1.0, self.t >= 3, False, {"cost": float(self.t >= 3)}


def test_worker_keeps_the_cost_of_the_step_that_ends_an_episode() -> None:
    """A rollout worker (called in-process here) stores the ending step's own cost, from
    final_info, not the reset's (issue 17)."""
    from roborl.plugins.ray.loop import RolloutWorker

    if "RoborlCostOnEnd-v0" not in gym.envs.registry:
        gym.register("RoborlCostOnEnd-v0", entry_point=_CostOnEnd)
    cfg = {"algo": {"name": "sac", "hidden_sizes": [8]}, "env": {"id": "RoborlCostOnEnd-v0"}}
    worker = RolloutWorker(cfg, index=0, seed=0, num_envs=2)
    data = worker.collect(12, random=True)
    assert data["terminated"].sum() == 8
    np.testing.assert_array_equal(data["costs"], data["terminated"])


def test_bad_ray_option_names_the_key(tmp_path: Path) -> None:
    from roborl.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"ray\.num_wrkers"):
        Runner({**BASE, "ray": {"num_wrkers": 2}}, tmp_path / "run", _host()).execute()

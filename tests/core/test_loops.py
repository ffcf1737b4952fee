"""The built-in loops and the TrainContext: per-step info on done steps, the offline loop's
schedule and counters, BC-safe's `prepare`, and the context's read-only surface."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.checkpoint import load_checkpoint
from roborl.core.config import OffPolicyConfig
from roborl.core.datasets import OfflineDataset
from roborl.core.errors import ConfigError
from roborl.core.hookspecs import hookimpl
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.plugins import PluginHost
from roborl.core.policies import AlgorithmPolicy
from roborl.core.runner import Runner

EPISODE = 3


class CostOnEndEnv(gym.Env):
    """Every episode lasts 3 steps; only the step that ends it costs 1 (info["cost"])."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (4,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}  # the reset's info has no cost

    def step(self, action):
        self.t += 1
        end = self.t >= EPISODE
        obs = np.full(4, self.t, np.float32)
        return obs, 1.0, end, False, {"cost": 1.0 if end else 0.0}


@dataclass
class NullConfig(OffPolicyConfig):
    batch_size: int = field(default=4)


class NullAlgo(Algorithm):
    """Acts 0, learns nothing: only the loop's bookkeeping is under test."""

    name = "test_null"
    Config = NullConfig
    loop = "offpolicy"

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        return np.zeros((len(obs), 1), np.float32)

    def update(self, batch: Batch) -> dict[str, float]:
        return {"seen": float(len(batch))}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass

    def policy(self) -> Policy:
        return AlgorithmPolicy(self)


@dataclass
class PlainConfig:  # not an OffPolicyConfig
    lr: float = 1e-3


class PlainAlgo(NullAlgo):
    name = "test_plain"
    Config = PlainConfig


class _TestPlugin:
    @hookimpl
    def roborl_algorithms(self) -> dict[str, type]:
        return {"test_null": NullAlgo, "test_plain": PlainAlgo}

    @hookimpl
    def roborl_envs(self) -> dict[str, Any]:
        return {"CostOnEnd-v0": CostOnEndEnv}


@pytest.fixture(scope="module")
def host() -> PluginHost:
    host = PluginHost()
    host.load_entry_points()
    host.add_plugin(_TestPlugin(), "test_loops")
    return host


def _offpolicy_cfg(**over: Any) -> dict[str, Any]:
    return {
        "algo": {"name": "test_null"}, "env": {"id": "CostOnEnd-v0"}, "seed": 0,
        "total_steps": 30, "num_envs": 2, "learning_starts": 10, "eval_every": 30,
        "eval_episodes": 1, "checkpoint_every": 30, "log_every": 10, "progress": False, **over,
    }  # fmt: skip


def test_terminal_transition_keeps_its_own_cost(host: PluginHost, tmp_path: Path) -> None:
    """Same-step autoreset puts the reset's info in infos["cost"]: the loop must take the
    ending step's cost from final_info, or a safe-RL learner never sees a violation."""
    summary = Runner(_offpolicy_cfg(), tmp_path / "r", host).execute()
    assert summary["steps"] == 30 and summary["status"] == "finished"
    buf = load_checkpoint(tmp_path / "r" / "checkpoints" / "last.pt")["buffer"]
    n = int(buf["size"])
    term, cost = buf["terminated"][:n].numpy(), buf["costs"][:n].numpy()
    assert term.sum() == 30 // EPISODE
    np.testing.assert_array_equal(cost, term)  # cost 1 exactly on the terminal transitions


def test_replay_loop_needs_an_offpolicy_config(host: PluginHost, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="OffPolicyConfig"):
        Runner(_offpolicy_cfg(algo={"name": "test_plain"}), tmp_path / "p", host).execute()


def test_context_counters_and_config_are_read_only(host: PluginHost, tmp_path: Path) -> None:
    ctx = Runner(_offpolicy_cfg(), tmp_path / "c", host).ctx
    for name in ("step", "updates", "episodes", "run", "config"):
        with pytest.raises(AttributeError):
            setattr(ctx, name, 0)
    with pytest.raises(AttributeError):
        ctx.run.total_steps = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        ctx.config["seed"] = 5  # type: ignore[index]
    with pytest.raises(AttributeError):
        ctx.algo_config.batch_size = 5
    with pytest.raises(ValueError):
        ctx.advance(env_steps=-1)


def test_due_fires_once_per_interval_on_the_phase_clock(host: PluginHost, tmp_path: Path) -> None:
    ctx = Runner(_offpolicy_cfg(eval_every=10, log_every=4), tmp_path / "d", host).ctx
    ctx.begin("updates", total=25)
    fired = []
    for _ in range(25):
        ctx.advance(updates=1)
        fired.append(ctx.due("eval"))
    assert [i + 1 for i, f in enumerate(fired) if f] == [10, 20]
    assert ctx.step == 0 and ctx.updates == 25 and ctx.finished
    ctx.begin("steps", total=12)  # a new phase counts env steps from where they are
    ctx.advance(env_steps=9)  # a chunk crossing two log marks fires once
    assert ctx.due("log") and not ctx.due("log")


# -- the offline loop --------------------------------------------------------------------------


def _bc_dataset(path: Path) -> Path:
    """InvertedPendulum-shaped data: safe episodes act -0.5 (cost 0), unsafe +0.5 (cost 1)."""
    rng = np.random.default_rng(0)
    n_ep, length = 20, 10
    n = n_ep * length
    unsafe = np.repeat(np.arange(n_ep) % 2 == 1, length)
    obs = rng.normal(0.0, 0.1, (n, 4)).astype(np.float32)
    ds = OfflineDataset.from_arrays(
        {
            "observations": obs,
            "actions": np.where(unsafe, 0.5, -0.5)[:, None].astype(np.float32),
            "rewards": np.ones(n, np.float32),
            "next_observations": obs,
            "terminals": np.zeros(n, bool),
            "timeouts": np.tile(np.arange(length) == length - 1, n_ep),
            "costs": unsafe.astype(np.float32),
        },
        metadata={"action_space": {"low": [-3.0], "high": [3.0]}},
    )
    return ds.save(path)


def _bc_cfg(data: Path, safe_only: bool) -> dict[str, Any]:
    return {
        "algo": {"name": "bc", "safe_only": safe_only, "hidden_sizes": [32], "lr": 3e-3},
        "env": {"id": "InvertedPendulum-v5"}, "dataset": str(data), "seed": 0,
        "total_updates": 300, "eval_every": 100, "eval_episodes": 1, "checkpoint_every": 300,
        "log_every": 100, "progress": False,
    }  # fmt: skip


def test_offline_counts_updates_and_evaluates_once_at_the_end(
    host: PluginHost, tmp_path: Path
) -> None:
    data = _bc_dataset(tmp_path / "bc.npz")
    summary = Runner(_bc_cfg(data, False), tmp_path / "r", host).execute()
    assert summary["steps"] == 0 and summary["updates"] == 300
    assert summary["episodes"] is None and summary["eval_episodes"] == 3
    records = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().split("\n")
               if x]  # fmt: skip
    evals = [r["updates"] for r in records if "eval/return_mean" in r]
    assert evals == [100, 200, 300]  # the final evaluation is not written twice
    assert all(r["step"] == 0 for r in records)


@pytest.mark.parametrize("safe_only", [True, False])
def test_bc_safe_only_trains_on_the_safe_episodes(
    host: PluginHost, tmp_path: Path, safe_only: bool
) -> None:
    data = _bc_dataset(tmp_path / "bc.npz")
    runner = Runner(_bc_cfg(data, safe_only), tmp_path / "r", host)
    runner.execute()
    algo = runner.current_algo
    assert algo is not None
    action = float(algo.act(np.zeros((1, 4), np.float32))[0, 0])
    if safe_only:  # only the safe (-0.5) half was seen
        assert action == pytest.approx(-0.5, abs=0.1)
    else:  # both halves: the mean, 0
        assert abs(action) < 0.2
    torch.set_num_threads(1)


# -- checkpoints written before the TrainContext ------------------------------------------------


def _as_format_1(path: Path, step_is_updates: bool) -> None:
    """Rewrite a checkpoint as roborl wrote it before env steps and updates were split."""
    from roborl.core.checkpoint import save_checkpoint

    ckpt = load_checkpoint(path)
    r = ckpt["runner"]
    del r["format"], r["eval_episodes"]
    if step_is_updates:
        r["step"] = r["updates"]
    save_checkpoint(path, ckpt)


def test_format_1_checkpoints_resume(host: PluginHost, tmp_path: Path) -> None:
    # off-policy: the same keys, read as before
    cfg = _offpolicy_cfg(checkpoint_every=20)
    Runner({**cfg, "total_steps": 20}, tmp_path / "on", host).execute()
    last = tmp_path / "on" / "checkpoints" / "last.pt"
    _as_format_1(last, step_is_updates=False)
    summary = Runner(cfg, tmp_path / "on", host).execute(resume_from=last)
    assert summary["steps"] == 30 and summary["status"] == "finished"
    # offline: format 1 counted updates as steps; they resume as updates, with no env steps
    data = _bc_dataset(tmp_path / "bc.npz")
    cfg = _bc_cfg(data, False)
    Runner({**cfg, "total_updates": 200}, tmp_path / "off", host).execute()
    last = tmp_path / "off" / "checkpoints" / "last.pt"
    _as_format_1(last, step_is_updates=True)
    summary = Runner(cfg, tmp_path / "off", host).execute(resume_from=last)
    assert (summary["steps"], summary["updates"]) == (0, 300)


def test_format_1_wsrl_checkpoint_is_refused_with_the_reason(
    host: PluginHost, tmp_path: Path
) -> None:
    from roborl.core.errors import CheckpointError

    cfg = {
        "algo": {"name": "wsrl", "pretrain": "none", "warmup_steps": 10, "hidden_sizes": [16],
                 "num_critics": 2, "batch_size": 8},
        "env": {"id": "InvertedPendulum-v5"}, "total_steps": 20, "eval_every": 20,
        "eval_episodes": 1, "checkpoint_every": 20, "progress": False,
    }  # fmt: skip
    Runner(cfg, tmp_path / "w", host).execute()
    last = tmp_path / "w" / "checkpoints" / "last.pt"
    _as_format_1(last, step_is_updates=False)
    with pytest.raises(CheckpointError, match="pretrained=PATH"):
        Runner({**cfg, "total_steps": 30}, tmp_path / "w", host).execute(resume_from=last)


def test_random_phase_chunks_store_and_log_exactly_what_single_steps_do(
    host: PluginHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One env's random phase runs in chunks of several steps (issue 23); the buffer, the
    episode records' steps and the log/checkpoint marks must equal the one-step-per-call run."""
    from roborl.core.context import TrainContext
    from roborl.core.loops.collectors import VectorCollector

    cfg = _offpolicy_cfg(num_envs=1, total_steps=90, learning_starts=60, checkpoint_every=20)
    calls = {"n": 0}
    step = VectorCollector._step

    def counted(self, algo, random):
        calls["n"] += 1
        return step(self, algo, random)

    monkeypatch.setattr(VectorCollector, "_step", counted)
    chunks = Runner(cfg, tmp_path / "chunks", host)
    assert chunks.ctx.event_stride() == 10  # gcd of 90, 60, 30, 20 and 10
    summary = chunks.execute()
    monkeypatch.setattr(TrainContext, "event_stride", lambda self, limit=256: 1)
    assert Runner(cfg, tmp_path / "single", host).execute()["updates"] == summary["updates"]
    assert calls["n"] == 180  # both runs stepped 90 times; only the chunking differs

    def recorded(run: str) -> tuple[dict[str, np.ndarray], list[tuple]]:
        buf = load_checkpoint(tmp_path / run / "checkpoints" / "last.pt")["buffer"]
        arrays = {k: v.numpy() for k, v in buf.items() if isinstance(v, torch.Tensor)}
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        keep = ("step", "train/episode_return", "train/episode_length")
        return arrays, [tuple(r.get(k) for k in keep) for r in records if keep[1] in r]

    (buf_a, eps_a), (buf_b, eps_b) = recorded("chunks"), recorded("single")
    assert set(buf_a) == set(buf_b) and len(buf_a["rewards"]) == 90
    for k in buf_a:
        np.testing.assert_array_equal(buf_a[k], buf_b[k], err_msg=k)
    assert eps_a == eps_b and [s for s, *_ in eps_a] == list(range(3, 91, 3))


@pytest.mark.parametrize("num_envs", [1, 2])
def test_updates_start_after_learning_starts_steps(
    host: PluginHost, tmp_path: Path, num_envs: int
) -> None:
    """stable-baselines3's rule, `num_timesteps > learning_starts`: a run of exactly
    `learning_starts` steps never updates (the issue-23 benchmark's random-action run), and each
    env step after them owes `utd_ratio` updates, chunked or not."""
    cfg = _offpolicy_cfg(num_envs=num_envs, total_steps=30, learning_starts=30)
    assert Runner(cfg, tmp_path / "none", host).execute()["updates"] == 0
    cfg = _offpolicy_cfg(num_envs=num_envs, total_steps=30, learning_starts=20, utd_ratio=2)
    assert Runner(cfg, tmp_path / "some", host).execute()["updates"] == 2 * 10

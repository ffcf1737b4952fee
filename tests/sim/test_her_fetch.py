"""HER on Gymnasium-Robotics' FetchReach through the user's command line:
`roborl train algo=sac env=fetch_reach her=future` learns (eval success >= 0.9); DSAC-T runs
with it and resumes from its checkpoint; the collector stores the achieved goals that make
the stored rewards `compute_reward(achieved, desired)`; a non-goal env is refused with what
it lacks. The relabelling itself is checked in tests/core/test_buffer_her.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_runner import roborl
from cli_server import run_roborl

from roborl.core.buffer_her import HerReplayBuffer
from roborl.core.envs import make_env, make_vec_env
from roborl.core.errors import ConfigError
from roborl.core.goals import ACHIEVED_GOAL, HerConfig, find_goal_wrapper
from roborl.core.loops.collectors import goal_extras, real_next_obs
from roborl.core.plugins import get_host

FETCH = {"id": "fetch_reach", "kwargs": {}, "max_episode_steps": None, "concat_obs": True}

# The budget, measured on a loaded 2-core machine: with these settings (rl-zoo's FetchReach
# ones: 64x64, lr 1e-3, gamma 0.95) seed 0 reaches eval success 0.3 at 8k steps, 0.95 at 10k
# and 1.0 from 11k to 14k (20 episodes); seed 1: 0.45 at 10k, 1.0 at 12k. Without HER the same
# settings stay at 0.00 at 10k on 3 of 3 seeds, where HER gives 0.95/0.45/0.60
# (benchmarks/results/her_vs_sb3.md): the control is not rerun here, it would double the time.
# The test took 83 s (load average 1.1) and 111 s (load 3-4) on the 2-core machine; fewer
# steps do not reach 0.9 (8k: 0.3 / 0.45).
LEARN = (
    "algo=sac", "env=fetch_reach", "her=future", "seed=0", "learning_starts=500",
    "algo.hidden_sizes=[64,64]", "algo.gamma=0.95", "algo.actor_lr=1e-3",
    "algo.critic_lr=1e-3", "algo.alpha_lr=1e-3",
)  # fmt: skip
LEARN_STEPS = 12_000


def _records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("num_envs", [1, 2])
def test_collected_goals_give_the_stored_rewards(num_envs: int) -> None:
    """Each stored transition's achieved goal (from `final_info` on the step that ended its
    episode) and its desired goal give back the env's reward; relabelled rows get
    compute_reward of theirs."""
    registry = get_host().registry
    envs = make_vec_env(registry, {"env": FETCH, "her": "future"}, num_envs)
    goal_env = find_goal_wrapper(envs.envs[0])
    assert envs.single_observation_space.shape == (13,)  # observation 10 + desired goal 3
    buf = HerReplayBuffer(
        400, envs.single_observation_space, (4,), goal_env.goal_slice,
        goal_env.compute_reward, HerConfig(),
    )  # fmt: skip
    obs, _ = envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(120 // num_envs):
        actions = envs.action_space.sample()
        nxt, rewards, terminated, truncated, infos = envs.step(actions)
        done = terminated | truncated
        extras = goal_extras(infos, done)
        final = real_next_obs(nxt, infos, done)
        expected = goal_env.compute_reward(
            extras[ACHIEVED_GOAL], final[:, goal_env.goal_slice], None
        )
        np.testing.assert_array_equal(rewards, expected)
        buf.add(obs, actions, rewards, final, terminated.astype(np.float32), extras=extras)
        obs = nxt
    envs.close()
    assert buf.can_sample(64)
    batch = buf.sample(256, torch.Generator().manual_seed(0))
    achieved = buf.extras[ACHIEVED_GOAL][: buf.size].numpy()
    # find each row's slot (its observation without the goal, and its action)
    same = (buf.obs[None, : buf.size, :10] == batch.obs[:, None, :10]).all(-1)
    same &= (buf.actions[None, : buf.size] == batch.actions[:, None]).all(-1)
    assert (same.sum(1) == 1).all()
    slots = same.int().argmax(1).numpy()
    goals = batch.obs[:, goal_env.goal_slice].numpy()
    expected = goal_env.compute_reward(achieved[slots], goals, None)
    np.testing.assert_array_equal(batch.rewards.numpy(), expected)
    relabelled = int(0.8 * 256)
    assert (batch.rewards[:relabelled] == 0).float().mean() > 0.1  # hindsight successes
    assert np.isin(goals[:relabelled], achieved).all()  # goals that were achieved


def test_a_non_goal_env_is_refused(tmp_path: Path) -> None:
    proc = run_roborl(
        ["train", "algo=sac", "env=inverted_pendulum", "her=future", "total_steps=10",
         "progress=false", "hydra.run.dir=run"],
        cwd=tmp_path, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode != 0
    assert "her needs a goal-conditioned env" in proc.stderr
    assert "'InvertedPendulum-v5'" in proc.stderr and "not a Dict" in proc.stderr
    assert "Traceback" not in proc.stderr
    with pytest.raises(ConfigError, match=r"unknown config key 'her\.k'"):
        make_env(get_host().registry, {"env": FETCH, "her": {"strategy": "future", "k": 1}})


def test_dsac_t_with_her_runs_and_resumes(tmp_path: Path) -> None:
    """DSAC-T on the same path; the checkpoint's buffer (with its episode bookkeeping) resumes."""
    roborl(
        "train", "algo=dsac_t", "env=fetch_reach", "her=future", "total_steps=300",
        "learning_starts=100", "eval_every=300", "eval_episodes=1", "checkpoint_every=150",
        "log_every=100", "algo.batch_size=32", "algo.hidden_sizes=[32,32]", "progress=false",
        "seed=0", "hydra.run.dir=run", cwd=tmp_path,
    )  # fmt: skip
    run = tmp_path / "run"
    ckpt = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["observation_space"]["shape"] == [13]  # (observation, desired goal)
    assert ckpt["buffer"]["her"]["length"].max() == 50  # finished Fetch episodes
    roborl("resume", f"run_dir={run}", "total_steps=400", cwd=tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 400
    assert any("train/critic_loss" in r for r in _records(run))


def test_sac_with_her_learns_fetch_reach(tmp_path: Path) -> None:
    """The issue's command with a small budget reaches eval success >= 0.9 (10 episodes) at
    10k or 12k steps. Both count: a policy at 1.0 can dip for an evaluation (seed 1 with these
    settings: 0.45 at 10k, 1.0 at 12k, 0.6 at 14k), so the best of the last two is asserted."""
    roborl(
        "train", *LEARN, f"total_steps={LEARN_STEPS}", "eval_every=2000", "eval_episodes=10",
        "checkpoint_every=100000", "log_every=2000", "progress=false", "hydra.run.dir=run",
        cwd=tmp_path,
    )  # fmt: skip
    evals = [r for r in _records(tmp_path / "run") if "eval/success_rate" in r]
    assert evals[-1]["step"] == LEARN_STEPS
    late = [r["eval/success_rate"] for r in evals if r["step"] >= 10_000]
    assert len(late) == 2 and max(late) >= 0.9, evals

"""The robot collector's episode is one stream of successive steps: the buffer stores it so
n-step returns walk it in order (before, it was stored as N parallel envs of one step each,
and n_step > 1 silently became 1-step)."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.robots.training.collector import RobotCollector

GAMMA, N_STEP = 0.9, 3


class PausableEnv(gym.Wrapper):
    """A MuJoCo env with the one robot-env call the collector makes beyond gym's: `pause`."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.pauses = 0

    def pause(self) -> None:
        self.pauses += 1


def _collector(total_steps: int) -> RobotCollector:
    env = PausableEnv(gym.make("Pendulum-v1"))  # no termination: one 60-step stream
    run = SimpleNamespace(seed=0, total_steps=total_steps)
    ctx = SimpleNamespace(robot_env=env, run=run, step=0, np_rng=np.random.default_rng(0))
    collector = RobotCollector(ctx)  # type: ignore[arg-type]
    collector.start(algo=None)  # type: ignore[arg-type]
    return collector


def test_robot_episode_chunks_give_n_step_returns() -> None:
    collector = _collector(total_steps=60)
    chunk = collector.collect(algo=None, random=True)  # type: ignore[arg-type]
    assert chunk.consecutive and len(chunk) == 60  # cut at the run's budget
    assert collector.env.pauses == 1  # the robot holds once the episode is in
    buffer = ReplayBuffer(1000, (3,), (1,))
    store = buffer.extend if chunk.consecutive else buffer.add  # as the off-policy loop does
    store(
        obs=chunk.obs, actions=chunk.actions, rewards=chunk.rewards, next_obs=chunk.next_obs,
        terminated=chunk.terminated, extras=chunk.extras,
    )  # fmt: skip
    batch = buffer.sample_nstep(256, N_STEP, GAMMA, torch.Generator().manual_seed(0))
    # Every row but the newest two has N_STEP successors: gamma^3, and the return summed
    # over the chunk's own next rewards, in order.
    rows = [int(np.flatnonzero((chunk.obs == o).all(axis=1))[0]) for o in batch.obs.numpy()]
    for row, discount, ret in zip(rows, batch.discount.numpy(), batch.rewards.numpy()):
        m = min(N_STEP, len(chunk) - row)
        assert np.isclose(discount, GAMMA**m), (row, discount)
        expected = sum(GAMMA**k * chunk.rewards[row + k] for k in range(m))
        assert np.isclose(ret, expected, rtol=1e-5), (row, ret, expected)
    assert sum(r < len(chunk) - N_STEP for r in rows) > 200  # most samples are 3-step

"""n-step sampling from the replay buffer against a hand-rolled per-sample reference."""

from __future__ import annotations

import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer


def _fill(buf: ReplayBuffer, steps: int, n_envs: int) -> None:
    """Envs whose obs is a counter; episodes end by termination (t%7==6) or truncation (t%5==4)."""
    obs = np.zeros((n_envs, 1), dtype=np.float32) + np.arange(n_envs)[:, None] * 1000
    for t in range(steps):
        nxt = obs + 1
        term = np.array([(t + e) % 7 == 6 for e in range(n_envs)], dtype=np.float32)
        trunc = np.array([(t + e) % 5 == 4 for e in range(n_envs)])
        rew = np.arange(n_envs, dtype=np.float32) + t
        buf.add(obs, np.zeros((n_envs, 1)), rew, nxt, term)
        reset = (term > 0) | trunc
        obs = np.where(reset[:, None], nxt + 100, nxt)  # a reset obs never equals next_obs


def _reference(buf: ReplayBuffer, i: int, n: int, gamma: float):
    ret, disc, j = 0.0, 1.0, i
    oldest = buf.pos if buf.size == buf.capacity else 0
    for k in range(n):
        ret += disc * float(buf.rewards[j])
        disc *= gamma
        last = j
        nxt = (j + buf.stride) % buf.capacity
        logical_next = (i - oldest) % buf.capacity + (k + 1) * buf.stride
        if (
            buf.terminated[j] > 0
            or logical_next >= buf.size
            or not torch.equal(buf.next_obs[j], buf.obs[nxt])
        ):
            break
        j = nxt
    return ret, disc, last


def test_nstep_matches_reference_across_terminals_truncations_and_wraparound() -> None:
    buf = ReplayBuffer(50, (1,), (1,))
    _fill(buf, 37, n_envs=2)  # 74 transitions into 50 slots: wrapped
    gen = torch.Generator().manual_seed(0)
    n, gamma = 3, 0.9
    state = gen.get_state()
    batch = buf.sample_nstep(64, n, gamma, gen)
    gen.set_state(state)
    starts = torch.randint(0, buf.size, (64,), generator=gen)
    seen_short = 0
    for b, i in enumerate(starts.tolist()):
        ret, disc, last = _reference(buf, i, n, gamma)
        assert abs(float(batch.rewards[b]) - ret) < 1e-4
        assert abs(float(batch.discount[b]) - disc) < 1e-6
        assert torch.equal(batch.next_obs[b], buf.next_obs[last])
        assert float(batch.terminated[b]) == float(buf.terminated[last])
        torch.testing.assert_close(batch.obs[b], buf.obs[i])
        seen_short += disc > gamma**n + 1e-9
    assert seen_short > 0  # the batch exercised early stops, not only full n-step chains


def test_one_step_equals_plain_sample() -> None:
    buf = ReplayBuffer(100, (1,), (1,))
    _fill(buf, 30, n_envs=1)
    a = buf.sample_nstep(16, 1, 0.99, torch.Generator().manual_seed(3))
    b = buf.sample(16, torch.Generator().manual_seed(3))
    torch.testing.assert_close(a.rewards, b.rewards)
    torch.testing.assert_close(a.next_obs, b.next_obs)

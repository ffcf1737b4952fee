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


def _stall_then_takeover() -> ReplayBuffer:
    """One episode of 6 steps: the policy stalls (steps 0-2, reward 0), a person takes over and
    pushes the block in (steps 3-4, reward 1), then the policy holds it there (step 5, 1)."""
    buf = ReplayBuffer(16, (1,), (1,), extras={"intervened": ((), np.bool_)})
    for t in range(6):
        buf.add(
            np.array([[t]], np.float32),
            np.zeros((1, 1)),
            np.array([1.0 if t >= 3 else 0.0], np.float32),
            np.array([[t + 1]], np.float32),
            np.zeros(1, np.float32),
            extras={"intervened": np.array([t in (3, 4)])},
        )
    return buf


def _rows(batch, gamma: float) -> dict[int, tuple[float, int, int]]:
    """First step -> (return, steps used, bootstrap obs)."""
    steps = np.rint(np.log(batch.discount.numpy()) / np.log(gamma)).astype(int)
    return {
        int(o): (round(float(r), 6), int(m), int(nx))
        for o, r, m, nx in zip(batch.obs[:, 0], batch.rewards, steps, batch.next_obs[:, 0])
    }


def test_n_step_returns_stop_before_a_person_took_over_when_asked() -> None:
    """Closed form, gamma 0.5, n 3. Without the stop, the stall at step 1 earns the person's
    push (0 + 0 + 0.25); with it, its return ends before step 3 (two policy steps, 0, bootstrap
    from step 3's obs), and the person's own rows keep their first reward only."""
    buf, gamma = _stall_then_takeover(), 0.5
    plain = _rows(buf.sample_nstep(200, 3, gamma, torch.Generator().manual_seed(0)), gamma)
    assert plain[1] == (0.25, 3, 4)
    assert plain[3] == (1.75, 3, 6)
    cut = _rows(
        buf.sample_nstep(200, 3, gamma, torch.Generator().manual_seed(0), "intervened"), gamma
    )
    assert set(cut) == set(range(6))
    assert cut[0] == (0.0, 3, 3)  # steps 0-2 are the policy's: a whole window
    assert cut[1] == (0.0, 2, 3)  # stops before step 3, the person's
    assert cut[2] == (0.0, 1, 3)
    assert cut[3] == (1.0, 1, 4)  # the person's row: its own reward, then the policy's value
    assert cut[4] == (1.5, 2, 6)  # step 5 is the policy's again: the window goes on
    assert cut[5] == (1.0, 1, 6)  # the newest data


def test_the_stop_is_the_configs_and_needs_the_flag_in_the_buffer() -> None:
    """`algo.n_step_stops_at_person` reaches the sampler through `Returns.of`; a buffer without
    the `intervened` extra (nobody but the policy acted) samples as before."""
    from roborl.core.buffer import INTERVENED, Returns
    from roborl.core.config import OffPolicyConfig

    assert Returns.of(OffPolicyConfig(n_step=3)).stop_at is None
    assert Returns.of(OffPolicyConfig(n_step=3, n_step_stops_at_person=True)).stop_at == INTERVENED
    buf = ReplayBuffer(100, (1,), (1,))
    _fill(buf, 30, n_envs=1)
    a = buf.sample_nstep(32, 3, 0.9, torch.Generator().manual_seed(3), INTERVENED)
    b = buf.sample_nstep(32, 3, 0.9, torch.Generator().manual_seed(3))
    torch.testing.assert_close(a.rewards, b.rewards)
    torch.testing.assert_close(a.discount, b.discount)

"""A replay buffer restored into another capacity, as `roborl resume ... total_steps=N` does.

A run sizes its buffer `min(buffer_size, total_steps)`: a 250-step run holds 250 rows and, full,
its `pos` has wrapped to 0. Resumed with total_steps=400, the buffer is rebuilt with 400 rows.
Before the fix the flat (Box) branch kept `pos = 0`, so the next 150 transitions overwrote the
oldest rows (which an uninterrupted run keeps), and rows 250..399 stayed zero yet were sampled
once the size reached 400. These tests pin the restore for Box and Dict observations alike and
for every per-transition field: rows come back oldest-first, `pos`/`size` follow, the resumed
buffer equals the uninterrupted one slot for slot, and sampling never returns an unwritten row.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.errors import CheckpointError

EPISODE = 5  # every env's episode ends after 5 steps (terminal frame != the next reset frame)
EXTRAS = {"intervened": ((), np.bool_)}


def _space(kind: str) -> Any:
    if kind == "box":
        return gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    return gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (2, 2, 1), np.uint8),
            "state": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        }
    )


def _frame(kind: str, value: float) -> Any:
    """One observation that encodes `value` exactly (negative values: terminal frames)."""
    state = np.array([value, 2 * value], np.float32)
    if kind == "box":
        return state
    v = int(abs(value) * 2)
    image = np.array([v % 256, v // 256 % 256, value < 0, 7], np.uint8).reshape(2, 2, 1)
    return {"image": image, "state": state}


def _stack(kind: str, frames: list[Any]) -> Any:
    if kind == "box":
        return np.stack(frames)
    return {k: np.stack([f[k] for f in frames]) for k in frames[0]}


def _transition(kind: str, env: int, k: int, n_envs: int) -> dict[str, Any]:
    """Step k of env `env`: every field a function of the transition's id t (t + 1 > 0)."""
    t = k * n_envs + env
    s = 1000.0 * env + k + 1
    ends = k % EPISODE == EPISODE - 1
    return {
        "obs": _frame(kind, s),
        "action": np.array([t + 1, -(t + 1)], np.float32),
        "reward": float(t + 1),
        "next_obs": _frame(kind, -(s + 0.5) if ends else s + 1),
        "terminated": float(ends),
        "cost": 0.5 * (t + 1),
        "intervened": t % 3 == 0,
    }


def _steps(kind: str, n_envs: int, start: int, stop: int) -> list[list[dict[str, Any]]]:
    return [[_transition(kind, e, k, n_envs) for e in range(n_envs)] for k in range(start, stop)]


def _feed(buf: ReplayBuffer, kind: str, steps: list[list[dict[str, Any]]]) -> None:
    for rows in steps:
        buf.add(
            _stack(kind, [r["obs"] for r in rows]),
            np.stack([r["action"] for r in rows]),
            np.array([r["reward"] for r in rows], np.float32),
            _stack(kind, [r["next_obs"] for r in rows]),
            np.array([r["terminated"] for r in rows], np.float32),
            np.array([r["cost"] for r in rows], np.float32),
            {"intervened": np.array([r["intervened"] for r in rows])},
        )


def _buffer(kind: str, capacity: int) -> ReplayBuffer:
    return ReplayBuffer(capacity, _space(kind), (2,), with_costs=True, extras=EXTRAS)


def _as_np(x: Any) -> Any:
    return {k: v.numpy() for k, v in x.items()} if isinstance(x, dict) else x.numpy()


def _assert_row(buf: ReplayBuffer, slot: int, want: dict[str, Any]) -> None:
    idx = torch.tensor([slot])
    obs = {k: v[slot] for k, v in buf.obs.items()} if buf.dict_obs else buf.obs[slot]
    nxt = buf.next_observation(idx)
    nxt = {k: v[0] for k, v in nxt.items()} if buf.dict_obs else nxt[0]
    for got, ref in ((_as_np(obs), want["obs"]), (_as_np(nxt), want["next_obs"])):
        if isinstance(ref, dict):
            for k in ref:
                np.testing.assert_array_equal(got[k], ref[k], err_msg=f"slot {slot} {k}")
        else:
            np.testing.assert_array_equal(got, ref, err_msg=f"slot {slot}")
    np.testing.assert_array_equal(buf.actions[slot].numpy(), want["action"])
    assert float(buf.rewards[slot]) == want["reward"], slot
    assert float(buf.terminated[slot]) == want["terminated"], slot
    assert float(buf.costs[slot]) == want["cost"], slot
    assert bool(buf.extras["intervened"][slot]) == want["intervened"], slot


def _assert_rows(buf: ReplayBuffer, rows: list[dict[str, Any]]) -> None:
    """Slots 0.. hold `rows` in this order, and nothing else counts as data."""
    assert buf.size == len(rows)
    for slot, want in enumerate(rows):
        _assert_row(buf, slot, want)


def _assert_samples_written(buf: ReplayBuffer, written: set[float]) -> None:
    """Every sampled row (1- and 3-step) is a written transition: rewards identify them."""
    gen = torch.Generator().manual_seed(0)
    batch = buf.sample(4096, gen)
    assert set(batch.rewards.tolist()) <= written
    assert len(set(batch.rewards.tolist())) == len(written)  # and every one is reachable
    ids = batch.actions[:, 0]
    assert torch.equal(ids, batch.rewards) and torch.equal(batch.costs, 0.5 * batch.rewards)
    first = buf.sample_nstep(4096, 3, 1.0, gen)
    assert set(first.actions[:, 0].tolist()) <= written  # the start row of each n-step sample


def _flat(steps: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [row for rows in steps for row in rows]


KINDS = ["box", "dict"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n_envs", [1, 2])
def test_full_wrapped_buffer_into_larger_one_equals_the_uninterrupted_buffer(kind, n_envs):
    """The issue's case: a 250-step run (full, pos wrapped to 0) resumed to 400 steps."""
    short, total = 250 // n_envs, 400 // n_envs
    first, rest = _steps(kind, n_envs, 0, short), _steps(kind, n_envs, short, total)
    cut = _buffer(kind, short * n_envs)
    _feed(cut, kind, first)
    assert cut.pos == 0 and cut.size == cut.capacity  # the saved ring has wrapped
    resumed = _buffer(kind, total * n_envs)
    resumed.load_state_dict(cut.state_dict())
    assert (resumed.pos, resumed.size) == (short * n_envs, short * n_envs)
    _assert_rows(resumed, _flat(first))
    _assert_samples_written(resumed, {r["reward"] for r in _flat(first)})

    _feed(resumed, kind, rest)
    straight = _buffer(kind, total * n_envs)
    _feed(straight, kind, first + rest)
    assert (resumed.pos, resumed.size) == (straight.pos, straight.size) == (0, total * n_envs)
    _assert_rows(resumed, _flat(first + rest))  # the oldest rows kept, no zero rows
    ga, gb = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    sa, sb = resumed.sample(256, ga), straight.sample(256, gb)
    for name in ("actions", "rewards", "terminated", "costs"):
        assert torch.equal(getattr(sa, name), getattr(sb, name)), name
    assert torch.equal(sa.extras["intervened"], sb.extras["intervened"])
    na, nb = resumed.sample_nstep(256, 3, 0.9, ga), straight.sample_nstep(256, 3, 0.9, gb)
    assert torch.equal(na.rewards, nb.rewards) and torch.equal(na.discount, nb.discount)
    for x, y in ((sa.next_obs, sb.next_obs), (na.next_obs, nb.next_obs)):
        if kind == "box":
            assert torch.equal(x, y)
        else:
            assert all(torch.equal(x[k], y[k]) for k in x)
    _assert_samples_written(resumed, {r["reward"] for r in _flat(first + rest)})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n_envs", [1, 2])
def test_wrapped_mid_ring_into_larger_one_keeps_chronological_order(kind, n_envs):
    """A ring wrapped to pos != 0 unrolls oldest-first, and new rows go after the newest."""
    cap, steps = 30, 47 // n_envs  # n_envs=2: 46 rows through 30 slots, pos 16
    first = _steps(kind, n_envs, 0, steps)
    saved = _buffer(kind, cap)
    _feed(saved, kind, first)
    assert saved.size == cap and saved.pos != 0
    big = _buffer(kind, 80)
    big.load_state_dict(saved.state_dict())
    kept = _flat(first)[-cap:]
    assert (big.pos, big.size) == (cap, cap)
    _assert_rows(big, kept)
    more = _steps(kind, n_envs, steps, steps + 10)
    _feed(big, kind, more)
    _assert_rows(big, kept + _flat(more))
    _assert_samples_written(big, {r["reward"] for r in kept + _flat(more)})


@pytest.mark.parametrize("kind", KINDS)
def test_partly_full_buffer_into_larger_and_smaller_ones(kind):
    """Not wrapped: rows stay where they are, `pos = size`; a smaller buffer with room for
    them takes them too."""
    first = _steps(kind, 2, 0, 12)  # 24 rows of 40
    saved = _buffer(kind, 40)
    _feed(saved, kind, first)
    for capacity in (64, 40, 24):
        buf = _buffer(kind, capacity)
        buf.load_state_dict(saved.state_dict())
        assert (buf.pos, buf.size) == (24 % capacity, 24)
        _assert_rows(buf, _flat(first))
        _assert_samples_written(buf, {r["reward"] for r in _flat(first)})
        more = _steps(kind, 2, 12, 14)
        _feed(buf, kind, more)
        rows = _flat(first + more)
        if capacity > 24:
            _assert_rows(buf, rows)
        else:  # full at 24: the 4 new rows replaced the 4 oldest, as in any ring
            assert buf.size == 24 and buf.pos == 4
            for slot, want in enumerate(rows[24:] + rows[4:24]):
                _assert_row(buf, slot, want)


@pytest.mark.parametrize("kind", KINDS)
def test_wrapped_buffer_into_same_capacity_is_slot_for_slot(kind):
    first, rest = _steps(kind, 2, 0, 23), _steps(kind, 2, 23, 40)
    straight = _buffer(kind, 30)
    _feed(straight, kind, first)
    resumed = _buffer(kind, 30)
    resumed.load_state_dict(straight.state_dict())
    assert (resumed.pos, resumed.size) == (straight.pos, straight.size) == (16, 30)
    _feed(resumed, kind, rest)
    _feed(straight, kind, rest)
    rows = _flat(first + rest)
    for t in range(len(rows) - 30, len(rows)):
        _assert_row(resumed, t % 30, rows[t])
        _assert_row(straight, t % 30, rows[t])
    ga, gb = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(resumed.sample(128, ga).rewards, straight.sample(128, gb).rewards)


@pytest.mark.parametrize("kind", KINDS)
def test_more_transitions_than_the_new_capacity_is_a_clear_error(kind):
    saved = _buffer(kind, 30)
    _feed(saved, kind, _steps(kind, 2, 0, 20))
    small = _buffer(kind, 20)
    with pytest.raises(CheckpointError, match=r"holds 30 transitions.*room for 20.*at least 30"):
        small.load_state_dict(saved.state_dict())

"""Exact tests of the replay buffer's n-step sampling (roborl/core/buffer.py), written against
the mutants that `make mutants` found alive there (tests/mutants-report.md): every sampled row
is checked against a plain-Python n-step reference (rewards, costs, discount, terminal, next
observation), on a partly filled and on a wrapped buffer, with terminals, time-limit ends and
the newest transition inside the window."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roborl.core.buffer import ReplayBuffer

GAMMA = 0.9
TERMINALS = {4, 11}  # terminated: the next observation is the terminal one
LINKED_TERMINALS = {14, 22}  # terminated, yet the next row happens to start where it ended
TIMEOUTS = {7, 16}  # truncated: the next row starts a new episode elsewhere


def transitions(n: int, capacity: int) -> list[dict]:
    """Observation t at step t (so a sampled row names its step), episode ends by a
    terminal or a time limit, where the next row's observation is not this row's next one,
    and terminals where it is (only the terminal flag may stop the sum there). The newest
    row's next observation equals the observation in the slot after it (an empty slot's 0, or
    the oldest row held), so only the buffer's own bookkeeping stops a window at the newest."""
    rows = []
    for t in range(n):
        ends = t in TERMINALS or t in TIMEOUTS
        rows.append(
            {
                "obs": float(t),
                "next_obs": 1000.0 + t if ends else float(t + 1),
                "reward": 1.0 + t,
                "cost": 0.5 * t,
                "terminated": float(t in TERMINALS or t in LINKED_TERMINALS),
            }
        )
    rows[-1]["next_obs"] = float(max(0, n - capacity))
    return rows


def filled(capacity: int, n: int, with_costs: bool = True) -> ReplayBuffer:
    buf = ReplayBuffer(capacity, (1,), (1,), with_costs=with_costs)
    for row in transitions(n, capacity):
        buf.add(
            np.array([[row["obs"]]], np.float32),
            np.zeros((1, 1), np.float32),
            np.array([row["reward"]], np.float32),
            np.array([[row["next_obs"]]], np.float32),
            np.array([row["terminated"]], np.float32),
            costs=np.array([row["cost"]], np.float32) if with_costs else None,
        )
    return buf


def reference(rows: list[dict], held: list[int], start: int, n_step: int) -> dict:
    """The n-step return from step `start`, within the steps the buffer still holds."""
    pos = held.index(start)
    total = cost = 0.0
    m = 0
    for k in range(n_step):
        if pos + k >= len(held):
            break  # the newest data
        row = rows[held[pos + k]]
        if k > 0:
            prev = rows[held[pos + k - 1]]
            if prev["terminated"] or prev["next_obs"] != row["obs"]:
                break
        total += GAMMA**k * row["reward"]
        cost += GAMMA**k * row["cost"]
        m = k + 1
    last = rows[held[pos + m - 1]]
    return {
        "reward": total,
        "cost": cost,
        "discount": GAMMA**m,
        "terminated": last["terminated"],
        "next_obs": last["next_obs"],
    }


@pytest.mark.parametrize(
    ("capacity", "n"),
    # partly filled, wrapped, exactly full, many wraps
    [(32, 20), (12, 20), (20, 20), (7, 30), (40, 25), (16, 25)],
)
@pytest.mark.parametrize("n_step", [2, 3, 5])
def test_every_n_step_row_equals_the_reference(capacity, n, n_step) -> None:
    buf = filled(capacity, n)
    rows = transitions(n, capacity)
    held = list(range(max(0, n - capacity), n))  # oldest first
    batch = buf.sample_nstep(256, n_step, GAMMA, torch.Generator().manual_seed(0))
    starts = [int(x) for x in batch.obs[:, 0].tolist()]
    assert set(starts) <= set(held) and len(set(starts)) > len(held) // 2
    for i, start in enumerate(starts):
        want = reference(rows, held, start, n_step)
        assert batch.rewards[i].item() == pytest.approx(want["reward"], rel=1e-5), start
        assert batch.costs[i].item() == pytest.approx(want["cost"], rel=1e-5, abs=1e-6), start
        assert batch.discount[i].item() == pytest.approx(want["discount"], rel=1e-6), start
        assert batch.terminated[i].item() == want["terminated"], start
        assert batch.next_obs[i, 0].item() == want["next_obs"], start


def test_one_transition_can_be_sampled_n_step() -> None:
    batch = filled(8, 1).sample_nstep(4, 3, GAMMA, torch.Generator().manual_seed(0))
    assert batch.rewards.tolist() == [1.0] * 4
    assert batch.discount.tolist() == pytest.approx([GAMMA] * 4)


def test_without_costs_an_n_step_batch_has_none() -> None:
    batch = filled(8, 6, with_costs=False).sample_nstep(4, 3, GAMMA)
    assert batch.costs is None


def test_bad_n_step_and_an_empty_buffer_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^n_step must be >= 1, got 0$"):
        filled(8, 3).sample_nstep(4, 0, GAMMA)
    empty = ReplayBuffer(8, (1,), (1,))
    for sample in (lambda: empty.sample_nstep(4, 3, GAMMA), lambda: empty.sample(4)):
        with pytest.raises(RuntimeError, match=r"^cannot sample from an empty replay buffer$"):
            sample()


def test_an_n_step_row_carries_the_extras_of_its_first_step() -> None:
    buf = ReplayBuffer(8, (1,), (1,), extras={"flag": ((), np.float32)})
    for t in range(6):
        buf.add(
            np.array([[float(t)]], np.float32),
            np.zeros((1, 1), np.float32),
            np.ones(1, np.float32),
            np.array([[float(t + 1)]], np.float32),
            np.zeros(1, np.float32),
            extras={"flag": np.array([10.0 * t], np.float32)},
        )
    batch = buf.sample_nstep(16, 3, GAMMA, torch.Generator().manual_seed(0))
    assert set(batch.extras) == {"flag"}
    assert batch.extras["flag"].tolist() == [10.0 * x for x in batch.obs[:, 0].tolist()]


def test_a_buffer_can_sample_once_it_holds_exactly_one_batch() -> None:
    """The loop's first update comes as soon as the buffer holds `batch_size` rows."""
    buf = filled(8, 4)
    assert buf.can_sample(4) and buf.can_sample(3) and not buf.can_sample(5)

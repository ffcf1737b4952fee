"""N-step sampling from a vector-env replay buffer (roborl/core/buffer.py), written against the
mutant `make mutants` left open in `sample_nstep` (tests/mutants-report.md): with two envs per
`add` (stride 2) an env's next step sits two slots later, so the window's "still in the data"
cut must count `k * stride` slots, not `k / stride`. Every sampled row is checked against a
plain-Python n-step reference walked per env."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roborl.core.buffer import ReplayBuffer

GAMMA = 0.9
ENVS = 2
TIMEOUTS = {(0, 3)}  # (env, step): truncated, the next step starts a new episode elsewhere
TERMINALS = {(1, 5)}  # terminated, though the next step's observation happens to link


def obs_of(env: int, t: int) -> float:
    return 1.0 + t + 100.0 * env  # never 0, the value of an empty slot


def transitions(steps: int, capacity: int) -> list[list[dict]]:
    """Per env, its rows in order. The newest row's next observation equals the observation
    in the slot the env's next step would take (an empty slot's 0, or the env's oldest row
    held), so only the buffer's count of held data stops a window there."""
    per_env = []
    oldest = max(0, steps - capacity // ENVS)
    for env in range(ENVS):
        rows = []
        for t in range(steps):
            rows.append(
                {
                    "obs": obs_of(env, t),
                    "next_obs": -obs_of(env, t) if (env, t) in TIMEOUTS else obs_of(env, t + 1),
                    "reward": 1.0 + t + 10.0 * env,
                    "terminated": float((env, t) in TERMINALS),
                }
            )
        rows[-1]["next_obs"] = obs_of(env, oldest) if steps * ENVS >= capacity else 0.0
        per_env.append(rows)
    return per_env


def filled(capacity: int, steps: int) -> ReplayBuffer:
    buf = ReplayBuffer(capacity, (1,), (1,))
    per_env = transitions(steps, capacity)
    for t in range(steps):
        rows = [per_env[env][t] for env in range(ENVS)]
        buf.add(
            np.array([[r["obs"]] for r in rows], np.float32),
            np.zeros((ENVS, 1), np.float32),
            np.array([r["reward"] for r in rows], np.float32),
            np.array([[r["next_obs"]] for r in rows], np.float32),
            np.array([r["terminated"] for r in rows], np.float32),
        )
    assert buf.stride == ENVS
    return buf


def reference(rows: list[dict], held: range, start: int, n_step: int) -> dict:
    """The n-step return of one env from its step `start`, within the steps still held."""
    total, m = 0.0, 0
    for k in range(n_step):
        if start + k not in held:
            break  # the env's newest data
        if k > 0:
            prev = rows[start + k - 1]
            if prev["terminated"] or prev["next_obs"] != rows[start + k]["obs"]:
                break
        total += GAMMA**k * rows[start + k]["reward"]
        m = k + 1
    last = rows[start + m - 1]
    return {"reward": total, "discount": GAMMA**m, "next_obs": last["next_obs"], "m": m}


@pytest.mark.parametrize(("capacity", "steps"), [(24, 8), (12, 9), (16, 8)])  # part, wrap, full
@pytest.mark.parametrize("n_step", [2, 3])
def test_every_two_env_n_step_row_equals_the_per_env_reference(capacity, steps, n_step) -> None:
    """Each env's window walks its own rows (two slots apart) and stops at that env's newest
    row; a row at the newest step uses one step (discount gamma), one before it at most two."""
    buf = filled(capacity, steps)
    per_env = transitions(steps, capacity)
    held = range(max(0, steps - capacity // ENVS), steps)
    batch = buf.sample_nstep(256, n_step, GAMMA, torch.Generator().manual_seed(0))
    seen = set()
    for i, value in enumerate(batch.obs[:, 0].tolist()):
        env, t = int(value) // 100, int(value) % 100 - 1
        seen.add((env, t))
        want = reference(per_env[env], held, t, n_step)
        got = (batch.rewards[i].item(), batch.discount[i].item(), batch.next_obs[i, 0].item())
        assert got[0] == pytest.approx(want["reward"], rel=1e-5), (env, t)
        assert got[1] == pytest.approx(want["discount"], rel=1e-6), (env, t)
        assert got[2] == want["next_obs"], (env, t)
    newest = {(env, steps - 1) for env in range(ENVS)}
    assert newest <= seen and len(seen) == ENVS * len(held)  # every held row was checked

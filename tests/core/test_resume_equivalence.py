"""An interrupted and resumed run equals an uninterrupted one exactly (issue 37).

Off-policy (SAC): a run of K env steps, then `resume` to N steps (the issue's case: the resumed
run's buffer is larger, `min(buffer_size, total_steps)`), against a straight run of N steps.
Offline (IQL): a run of N updates interrupted (KeyboardInterrupt, as Ctrl-C) at update K, then
resumed, against a straight run of N updates. Both compare every tensor of the final
`algo.state_dict()` (weights, optimiser, temperature), the replay buffer, the final evaluation
and the metrics, bit for bit.

What is equal by design and what is not, and why the configurations are as they are:
- An episode in progress at the checkpoint restarts on resume (README): the env's MuJoCo state
  is not checkpointed. K is therefore an episode boundary of the straight run (found from its
  metrics, not hard-coded). The env RNG saved is the one at the start of the last reset
  (`roborl.core.envs.ResetRecorder`), so the resumed reset draws the very initial state the
  straight run's autoreset drew; `test_mid_episode_resume_restarts_the_cut_episode` pins what
  holds mid-episode instead.
- The K-step run evaluates at its last step (`ctx.finish`), off the eval_every schedule; the
  straight run does not. Evaluation uses its own seeded env and a deterministic policy and
  draws from none of the training generators (torch's global RNG, `ctx.torch_gen`,
  `ctx.np_rng`, the env RNG), so it changes nothing else: the metrics equal once that one
  record is set aside, and the test asserts it is the only extra one.
- Training metrics are averages since the previous log record, and the averages restart on
  resume, so log_every divides K (it would otherwise differ by design, not by a bug).
- `time/...` metrics are wall-clock rates and are left out.
- IQL's actor learning rate follows a cosine over `total_updates`, so a shorter run is not a
  prefix of a longer one: the offline case interrupts a run of N updates instead of
  resuming a shorter run with a larger budget.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from run_hooks import InterruptAtFirstCheckpoint

from roborl.core.checkpoint import load_checkpoint
from roborl.core.plugins import get_host
from roborl.core.runner import Runner

N, LEARNING_STARTS, EVAL_EVERY, LOG_EVERY = 400, 100, 200, 10


def _sac(total: int) -> dict[str, Any]:
    return {
        "algo": {"name": "sac", "batch_size": 32, "hidden_sizes": [16, 16]},
        "env": {"id": "InvertedPendulum-v5"},
        "total_steps": total,
        "learning_starts": LEARNING_STARTS,
        "eval_every": EVAL_EVERY,
        "eval_episodes": 2,
        "checkpoint_every": 100_000,
        "log_every": LOG_EVERY,
        "progress": False,
        "seed": 3,
    }


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _assert_same_tensors(a: Any, b: Any, path: str = "") -> None:
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _assert_same_tensors(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same_tensors(x, y, f"{path}[{i}]")
    elif torch.is_tensor(a):
        assert torch.equal(a, b), f"{path} differs"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _episode_ends(metrics: list[dict[str, Any]]) -> list[int]:
    return [r["step"] for r in metrics if "train/episode_length" in r]


def _boundary(metrics: list[dict[str, Any]]) -> int:
    """An episode end of the straight run after learning_starts, on the log schedule and off
    the eval schedule (so the interrupted run's closing eval is an extra one)."""
    for k in _episode_ends(metrics):
        if LEARNING_STARTS + 50 <= k <= N - 50 and k % LOG_EVERY == 0 and k % EVAL_EVERY:
            return k
    pytest.fail(f"no usable episode boundary in {_episode_ends(metrics)}")


def test_offpolicy_resume_at_an_episode_boundary_equals_the_straight_run(tmp_path: Path):
    host = get_host()
    straight = Runner(_sac(N), tmp_path / "straight", host).execute()
    want = _metrics(tmp_path / "straight")
    k = _boundary(want)

    cut = tmp_path / "cut"
    Runner(_sac(k), cut, host).execute()
    assert load_checkpoint(cut / "checkpoints" / "last.pt")["buffer"]["pos"] == 0  # full, wrapped
    resumed = Runner(_sac(N), cut, host).execute(resume_from=cut / "checkpoints" / "last.pt")

    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    b = load_checkpoint(cut / "checkpoints" / "last.pt")
    _assert_same_tensors(a["state"], b["state"])
    _assert_same_tensors(a["buffer"], b["buffer"])  # no row overwritten, no zero row
    for key in ("step", "updates", "episodes", "last_eval_return", "best_eval_return"):
        assert a["runner"][key] == b["runner"][key], key
    _assert_same_tensors(a["runner"]["torch_gen"], b["runner"]["torch_gen"])
    _assert_same_tensors(a["runner"]["torch_rng"], b["runner"]["torch_rng"])
    assert a["runner"]["np_rng"] == b["runner"]["np_rng"]
    for key in ("steps", "updates", "episodes", "final_eval_return", "best_eval_return"):
        assert straight[key] == resumed[key], key

    got = _metrics(cut)
    extra = [r for r in got if r["step"] == k and "eval/return_mean" in r]
    assert len(extra) == 1 and not any(r["step"] == k and "eval/return_mean" in r for r in want)
    assert [r for r in got if r is not extra[0]] == want


def test_mid_episode_resume_restarts_the_cut_episode(tmp_path: Path):
    """Cut mid-episode, a resumed run restarts that episode from the initial state it began
    with (the env RNG at its last reset is what checkpoints keep), and everything before the
    cut is the straight run's. After it the runs differ by design (the restarted episode
    replays the start of the cut one), which is the README's "an episode in progress
    restarts"; nothing stronger holds."""
    host = get_host()
    Runner(_sac(N), tmp_path / "straight", host).execute()
    ends = _episode_ends(_metrics(tmp_path / "straight"))
    start = next(e for e in ends if e >= LEARNING_STARTS + 50)  # an episode starts here...
    k = start + 2  # ...and is cut two steps in
    assert k not in ends
    cut = tmp_path / "cut"
    Runner(_sac(k), cut, host).execute()
    Runner(_sac(N), cut, host).execute(resume_from=cut / "checkpoints" / "last.pt")
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")["buffer"]
    b = load_checkpoint(cut / "checkpoints" / "last.pt")["buffer"]
    for name in ("obs", "actions", "rewards", "next_obs", "terminated", "costs"):
        assert torch.equal(a[name][:k], b[name][:k]), name
    # the first step after the resume starts from the cut episode's initial observation
    assert torch.equal(b["obs"][k], a["obs"][start])
    assert not torch.equal(b["obs"][k], a["obs"][k])


# -- offline ---------------------------------------------------------------------------------

U, K_UPDATES = 60, 40


def _dataset(path: Path, n: int = 600) -> Path:
    """InvertedPendulum transitions of an eps-random linear controller (tests/offline)."""
    import gymnasium as gym

    gain = np.array([1.0, 10.0, 1.0, 1.0])
    env = gym.make("InvertedPendulum-v5")
    rng = np.random.default_rng(0)
    cols: dict[str, list] = {k: [] for k in ("o", "a", "r", "o2", "d", "t")}
    o, _ = env.reset(seed=0)
    for _ in range(n):
        a = rng.uniform(-3, 3, 1) if rng.random() < 0.5 else np.clip([gain @ o], -3, 3)
        o2, r, term, trunc, _ = env.step(a)
        for key, v in zip(cols, (o, a, r, o2, term, trunc), strict=True):
            cols[key].append(v)
        o = o2
        if term or trunc:
            o, _ = env.reset()
    env.close()
    cols["t"][-1] = True
    names = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts")
    np.savez(path, **{name: np.array(cols[c]) for name, c in zip(names, cols, strict=True)})
    return path


def _iql(dataset: Path) -> dict[str, Any]:
    return {
        "algo": {"name": "iql", "batch_size": 32, "hidden_sizes": [16, 16]},
        "env": {"id": "InvertedPendulum-v5"},
        "dataset": str(dataset),
        "total_updates": U,
        "eval_every": 30,
        "eval_episodes": 1,
        "checkpoint_every": K_UPDATES,
        "log_every": LOG_EVERY,
        "progress": False,
        "seed": 5,
    }


def test_offline_resume_after_an_interrupt_equals_the_straight_run(tmp_path: Path):
    data = _dataset(tmp_path / "data.npz")
    host = get_host()
    straight = Runner(_iql(data), tmp_path / "straight", host).execute()

    cut = tmp_path / "cut"
    interrupt = InterruptAtFirstCheckpoint()
    host.pm.register(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            Runner(_iql(data), cut, host).execute()
    finally:
        host.pm.unregister(interrupt)
    saved = load_checkpoint(cut / "checkpoints" / "last.pt")
    assert saved["runner"]["updates"] == K_UPDATES
    resumed = Runner(_iql(data), cut, host).execute(resume_from=cut / "checkpoints" / "last.pt")

    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    b = load_checkpoint(cut / "checkpoints" / "last.pt")
    _assert_same_tensors(a["state"], b["state"])
    _assert_same_tensors(a["runner"]["torch_gen"], b["runner"]["torch_gen"])
    for key in ("updates", "final_eval_return", "best_eval_return"):
        assert straight[key] == resumed[key] and straight["updates"] == U, key
    assert _metrics(cut) == _metrics(tmp_path / "straight")

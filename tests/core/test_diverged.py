"""A run whose weights turn NaN stops as "diverged" and never overwrites a good checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from roborl.core.checkpoint import first_nonfinite, load_checkpoint, save_checkpoint
from roborl.core.errors import DivergedError
from roborl.core.plugins import get_host
from roborl.core.runner import Runner


def test_first_nonfinite_names_the_tensor() -> None:
    state = {"actor": {"w": torch.ones(2), "b": torch.tensor([0.0, float("inf")])}, "n": 3}
    assert first_nonfinite(state) == "state.actor.b"
    assert first_nonfinite({"opt": [{"lr": float("nan")}]}) == "state.opt.0.lr"
    assert first_nonfinite({"a": torch.ones(3), "i": torch.tensor([1, 2])}) is None


def test_nan_state_is_refused_before_touching_last_pt(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    good = {"algo": "a", "algo_config": {}, "observation_space": {}, "action_space": {}}
    save_checkpoint(path, {**good, "state": {"w": torch.ones(2)}})
    before = path.read_bytes()
    with pytest.raises(DivergedError, match=r"state\.w holds NaN"):
        save_checkpoint(path, {**good, "state": {"w": torch.tensor([1.0, float("nan")])}})
    assert path.read_bytes() == before and not (tmp_path / "previous.pt").exists()


def test_diverged_run_keeps_its_last_good_checkpoints(tmp_path: Path) -> None:
    cfg = {
        "algo": {"name": "sac", "batch_size": 32, "hidden_sizes": [16, 16]},
        "env": {"id": "InvertedPendulum-v5"},
        "total_steps": 600,
        "learning_starts": 100,
        "eval_every": 10_000,
        "eval_episodes": 1,
        "checkpoint_every": 150,
        "log_every": 10_000,
        "progress": False,
    }
    run = tmp_path / "run"
    runner = Runner(cfg, run, get_host())
    original = runner.algo_cls.update
    calls = {"n": 0}

    def poisoned_update(self, batch):
        metrics = original(self, batch)
        calls["n"] += 1
        if calls["n"] == 250:  # between the checkpoints of steps 300 and 450
            module = next(m for m in vars(self).values() if isinstance(m, torch.nn.Module))
            with torch.no_grad():
                next(module.parameters()).fill_(float("nan"))
        return metrics

    mp = pytest.MonkeyPatch()
    mp.setattr(runner.algo_cls, "update", poisoned_update)
    try:
        with pytest.raises(DivergedError, match="holds NaN or infinity") as err:
            runner.execute()
    finally:
        mp.undo()
    assert "previous checkpoint is left as it was" in str(err.value)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "diverged"
    ckpts = run / "checkpoints"
    assert {p.name for p in ckpts.iterdir()} == {"last.pt", "previous.pt"}
    steps = []
    for name in ("last.pt", "previous.pt"):
        ckpt = load_checkpoint(ckpts / name)
        assert first_nonfinite(ckpt["state"]) is None, name
        steps.append(ckpt["runner"]["step"])
    assert steps == [300, 150]
    assert all(
        math.isfinite(v)
        for v in torch.load(ckpts / "last.pt", weights_only=True)["state"]["log_alpha"].view(-1)
    )

"""A crash, a torn last.pt or a missing GPU never costs a run its last readable checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from roborl.core.checkpoint import PREVIOUS_NAME, load_checkpoint, save_checkpoint
from roborl.core.errors import CheckpointError, ConfigError

PAYLOAD = {"algo": "a", "algo_config": {}, "observation_space": {}, "action_space": {}}


def _save(path: Path, step: int) -> None:
    save_checkpoint(path, {**PAYLOAD, "state": {"w": torch.ones(2)}, "step": step})


def _step(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=True)["step"])


class _Crash(BaseException):
    """Stands for a SIGKILL/power loss between two filesystem calls."""


def test_unreadable_last_pt_is_never_rotated_into_previous_pt(tmp_path: Path) -> None:
    """The audit's case: resuming falls back from a torn last.pt to previous.pt, and the
    resumed run's next save used to move the torn file onto previous.pt, the only good one."""
    last = tmp_path / "last.pt"
    _save(last, 1)
    _save(last, 2)
    torn = last.read_bytes()[:500]
    last.write_bytes(torn)
    with pytest.warns(UserWarning, match="could not be read"):
        assert load_checkpoint(tmp_path)["step"] == 1  # the fallback, as before
    with pytest.warns(UserWarning, match=r"moved it aside to .*last\.pt\.unreadable"):
        _save(last, 3)
    assert _step(tmp_path / PREVIOUS_NAME) == 1, "previous.pt must stay the readable one"
    assert _step(last) == 3
    assert (tmp_path / "last.pt.unreadable").read_bytes() == torn, "the evidence is kept"
    _save(last, 4)  # a readable last.pt rotates as usual
    assert (_step(last), _step(tmp_path / PREVIOUS_NAME)) == (4, 3)


def test_a_crash_at_any_step_of_a_save_leaves_a_readable_last_pt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rename/link of the rotation in turn is the last call before a crash: last.pt is
    there and readable (the old or the new one) after every one of them."""
    real_replace, real_link = os.replace, os.link
    for crash_at in range(1, 6):
        run = tmp_path / f"crash{crash_at}" / "checkpoints"
        _save(run / "last.pt", 1)
        _save(run / "last.pt", 2)
        calls = {"n": 0}

        def counted(real, *args, crash_at=crash_at, calls=calls):
            calls["n"] += 1
            if calls["n"] == crash_at:
                raise _Crash
            return real(*args)

        monkeypatch.setattr(os, "replace", lambda *a, c=counted: c(real_replace, *a))
        monkeypatch.setattr(os, "link", lambda *a, c=counted: c(real_link, *a))
        try:
            _save(run / "last.pt", 3)
        except _Crash:
            pass
        finally:
            monkeypatch.undo()
        assert _step(run / "last.pt") in (2, 3), f"crash at call {crash_at}"
        assert _step(run / PREVIOUS_NAME) in (1, 2), f"crash at call {crash_at}"


def test_missing_last_pt_falls_back_to_previous_pt(tmp_path: Path) -> None:
    """A save interrupted between its renames (older roborl) left previous.pt but no last.pt."""
    ckpts = tmp_path / "checkpoints"
    _save(ckpts / "last.pt", 1)
    _save(ckpts / "last.pt", 2)
    (ckpts / "last.pt").unlink()
    for target in (tmp_path, ckpts / "last.pt"):
        with pytest.warns(UserWarning, match=r"last\.pt.*missing.*previous\.pt"):
            assert load_checkpoint(target)["step"] == 1
    _save(ckpts / "last.pt", 3)  # nothing to rotate: previous.pt stays
    assert (_step(ckpts / "last.pt"), _step(ckpts / PREVIOUS_NAME)) == (3, 1)
    (ckpts / PREVIOUS_NAME).unlink()
    (ckpts / "last.pt").unlink()
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path)


def test_unavailable_device_is_a_device_error_not_corruption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    """`eval device=cuda` without a GPU used to call last.pt, then previous.pt, corrupt."""
    _save(tmp_path / "last.pt", 1)
    _save(tmp_path / "last.pt", 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"device='cuda'") as err:
        load_checkpoint(tmp_path, map_location="cuda")
    message = str(err.value)
    assert "cpu" in message and "could not be read" not in message and "corrupt" not in message
    assert not [w for w in recwarn if "could not be read" in str(w.message)]
    assert load_checkpoint(tmp_path, map_location="cpu")["step"] == 2  # the files are fine


def test_resume_survives_a_torn_then_a_missing_last_pt(cli, tmp_path: Path) -> None:
    """End to end: resume after a torn last.pt keeps previous.pt readable; resume with no
    last.pt at all continues from previous.pt instead of asking for a new run."""
    run = tmp_path / "run"
    cli("train", *cli.FAST, f"hydra.run.dir={run}")
    ckpts = run / "checkpoints"
    last, previous = ckpts / "last.pt", ckpts / PREVIOUS_NAME
    kept = load_checkpoint(previous)["runner"]["step"]
    last.write_bytes(last.read_bytes()[:500])
    proc = cli("resume", f"run_dir={run}", "total_steps=900", "checkpoint_every=100000")
    assert "could not be read" in proc.stderr, proc.stderr
    steps = [load_checkpoint(p)["runner"]["step"] for p in (last, previous)]
    assert steps == [900, kept], "previous.pt is the readable checkpoint, not the torn last.pt"
    assert (ckpts / "last.pt.unreadable").stat().st_size == 500
    last.unlink()
    proc = cli("resume", f"run_dir={run}", "total_steps=1200", "checkpoint_every=100000")
    assert "missing" in proc.stderr and PREVIOUS_NAME in proc.stderr, proc.stderr
    assert load_checkpoint(last)["runner"]["step"] == 1200

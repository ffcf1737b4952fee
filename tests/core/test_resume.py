"""Interrupted runs: SIGKILL leaves the previous checkpoint intact and resume continues from
it with the same counters; SIGINT writes a final checkpoint first; restored state is exact."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import torch

from roborl.core.checkpoint import load_checkpoint, save_checkpoint
from roborl.core.plugins import get_host
from roborl.core.runner import Runner

SLOW = [
    "total_steps=1500",
    "learning_starts=100",
    "eval_every=500",
    "eval_episodes=1",
    "checkpoint_every=100",
    "log_every=100",
    "algo.batch_size=64",
    "algo.hidden_sizes=[64,64]",
    "progress=false",
]


def _wait_for_checkpoint(root: Path, min_step: int, proc=None, timeout: float = 240) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"training exited early: {proc.communicate()[1][-2000:]}")
        for last in root.rglob("checkpoints/last.pt"):
            try:
                if load_checkpoint(last)["runner"]["step"] >= min_step:
                    return last.parent.parent
            except Exception:
                pass
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint at step >= {min_step} within {timeout}s")


def _wait_for_metrics(root: Path, min_step: int, timeout: float = 240) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for metrics in root.rglob("metrics.jsonl"):
            lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.endswith("}")]
            if lines and lines[-1]["step"] >= min_step:
                return metrics.parent
        time.sleep(0.2)
    raise AssertionError(f"no metrics at step >= {min_step} within {timeout}s")


def test_sigkill_then_resume_continues_same_step_count(cli) -> None:
    proc = cli.popen("train", *SLOW)
    run_dir = _wait_for_checkpoint(cli.cwd, 300, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    ckpt = load_checkpoint(run_dir / "checkpoints" / "last.pt")  # intact, loads weights_only
    killed_at = ckpt["runner"]["step"]
    assert 300 <= killed_at < 1500

    cli("resume", f"run_dir={run_dir}")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 1500
    final = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert final["runner"]["step"] == 1500
    assert final["state"]["updates"] > ckpt["state"]["updates"]
    steps = [r["step"] for r in cli.read_jsonl(run_dir / "metrics.jsonl")]
    assert steps == sorted(steps), "events after the checkpoint must be replaced, not duplicated"
    assert not list((run_dir / "checkpoints").glob(".*.tmp")), "no temp files left behind"


def test_sigint_writes_final_checkpoint_and_summary(cli) -> None:
    # A long run, so that the signal always arrives mid-training.
    proc = cli.popen("train", *SLOW, "total_steps=100000", "checkpoint_every=100000")
    run_dir = _wait_for_metrics(cli.cwd, 300)  # before the first periodic checkpoint
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    ckpt = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert ckpt["runner"]["step"] == summary["steps"] < 100000


def test_kill_during_checkpoint_write_keeps_previous(tmp_path: Path) -> None:
    """A writer killed mid-write (simulated by an exception inside the write) leaves the
    previous file loadable and no temp file."""
    path = tmp_path / "last.pt"
    save_checkpoint(
        path,
        {
            "algo": "a",
            "algo_config": {},
            "observation_space": {},
            "action_space": {},
            "state": {"w": torch.ones(3)},
        },
    )

    class Boom(BaseException):
        pass

    big = {"w": torch.zeros(1_000_000)}
    original = torch.save

    def exploding_save(obj, f, *a, **k):  # writes part of the data, then dies
        f.write(b"partial")
        raise Boom

    torch.save = exploding_save
    try:
        try:
            save_checkpoint(
                path,
                {
                    "algo": "b",
                    "algo_config": {},
                    "observation_space": {},
                    "action_space": {},
                    "state": big,
                },
            )
        except Boom:
            pass
    finally:
        torch.save = original
    assert load_checkpoint(path)["algo"] == "a"
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_restore_is_exact(tmp_path: Path) -> None:
    """Step counter, optimiser and alpha state, replay buffer and RNG come back identical."""
    cfg = {
        "algo": {"name": "sac", "batch_size": 32, "hidden_sizes": [16, 16]},
        "env": {"id": "InvertedPendulum-v5"},
        "total_steps": 400,
        "learning_starts": 100,
        "eval_every": 1000,
        "eval_episodes": 1,
        "checkpoint_every": 1000,
        "log_every": 1000,
        "progress": False,
    }
    host = get_host()
    Runner(cfg, tmp_path / "a", host).execute()
    ckpt = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.pt")

    runner = Runner(cfg, tmp_path / "a", host)
    envs = runner.make_vec_env()
    algo = runner.build_algorithm(envs.single_observation_space, envs.single_action_space)
    from roborl.core.buffer import ReplayBuffer

    buf = ReplayBuffer(
        400, envs.single_observation_space.shape, envs.single_action_space.shape, with_costs=True
    )
    runner.restore(algo, buf, ckpt)
    assert runner.step == 400 and runner.updates == ckpt["runner"]["updates"] > 0
    state = algo.state_dict()
    assert torch.equal(state["log_alpha"], ckpt["state"]["log_alpha"])
    for k, v in ckpt["state"]["optimizer"]["state"].items():
        assert torch.equal(state["optimizer"]["state"][k]["exp_avg"], v["exp_avg"])
    assert torch.equal(buf.obs[: buf.size], ckpt["buffer"]["obs"]) and buf.size == 400
    assert torch.equal(runner.torch_gen.get_state(), ckpt["runner"]["torch_gen"])
    assert runner.np_rng.bit_generator.state == ckpt["runner"]["np_rng"]

"""`roborl train` end to end: the run-directory contract, vector envs, sweeps, wandb, eval."""

from __future__ import annotations

import json
import re

import torch


def test_train_writes_complete_run_directory(cli) -> None:
    proc = cli("train", *cli.FAST, "num_envs=2", "seed=3")
    assert "final eval return" in proc.stdout
    (run_dir,) = cli.run_dirs()
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "learning_curve.png"):
        assert (run_dir / name).is_file(), name
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["algo"] == "sac" and ckpt["runner"]["step"] == 600

    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("algo", "env", "seed", "steps", "final_eval_return", "wall_time_s", "versions"):
        assert key in summary, key
    assert summary["seed"] == 3 and summary["steps"] == 600 and summary["status"] == "finished"
    assert set(summary["versions"]) >= {"roborl", "torch", "mujoco", "gymnasium"}

    records = cli.read_jsonl(run_dir / "metrics.jsonl")
    assert all("step" in r for r in records)
    assert any("eval/return_mean" in r for r in records)
    assert any("train/critic_loss" in r for r in records)
    assert any("time/sps" in r for r in records)
    assert any("train/episode_return" in r for r in records)
    assert summary["episodes"] > 0
    steps = [r["step"] for r in records]
    assert steps == sorted(steps)


def test_multirun_sweep_creates_one_run_per_seed(cli) -> None:
    cli("train", "-m", "seed=0,1", *cli.FAST, "total_steps=300", "checkpoint_every=300")
    dirs = cli.run_dirs()
    assert len(dirs) == 2
    seeds = sorted(json.loads((d / "summary.json").read_text())["seed"] for d in dirs)
    assert seeds == [0, 1]


def test_wandb_logger_runs_offline(cli) -> None:
    cli("train", *cli.FAST, "total_steps=300", "logger=wandb")
    (run_dir,) = cli.run_dirs()
    offline_runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert offline_runs, "wandb should write an offline run inside the run directory"


def test_env_by_gymnasium_id_and_eval_command(cli) -> None:
    cli("train", *cli.FAST, "total_steps=300", "env.id=Pendulum-v1")
    (run_dir,) = cli.run_dirs()
    assert json.loads((run_dir / "summary.json").read_text())["env"] == "Pendulum-v1"
    proc = cli("eval", f"checkpoint={run_dir / 'checkpoints' / 'last.pt'}", "episodes=2")
    assert "+-" in proc.stdout
    report = json.loads((run_dir / "eval.json").read_text())
    assert report["episodes"] == 2 and len(report["returns"]) == 2
    assert report["env"] == "Pendulum-v1"


def test_plugins_command_lists_sac_with_distribution(cli) -> None:
    out = cli("plugins").stdout
    assert re.search(r"algorithms: .*\bsac\b", out), out
    listing = json.loads(cli("plugins", "json=true").stdout)
    sac = next(p for p in listing if p["name"] == "sac")
    assert sac["distribution"] == "roborl" and sac["error"] is None

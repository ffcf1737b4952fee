"""stable-baselines3 through the host: train, checkpoint, resume, evaluate on MuJoCo."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from cli_runner import roborl


def test_sb3_sac_trains_checkpoints_resumes_and_evaluates(tmp_path: Path) -> None:
    roborl(
        "train", "algo=sb3/sac", "env=inverted_pendulum", "total_steps=800", "eval_every=400",
        "checkpoint_every=400", "eval_episodes=2", "algo.kwargs.learning_starts=200",
        "algo.kwargs.batch_size=64", "progress=false", cwd=tmp_path,
    )  # fmt: skip
    (summary_path,) = tmp_path.rglob("summary.json")
    run_dir = summary_path.parent
    assert json.loads(summary_path.read_text())["steps"] == 800
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["algo"] == "sb3/sac"
    # SB3 drops the transition of the step on which a callback stops training.
    assert ckpt["state"]["replay_buffer"]["observations"].shape[0] in (799, 800)
    before = ckpt["state"]["parameters"]["policy"]

    roborl("resume", f"run_dir={run_dir}", "total_steps=1000", "progress=false", cwd=tmp_path)
    summary = json.loads(summary_path.read_text())
    assert summary["steps"] == 1000 and summary["status"] == "finished"
    after = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert after["state"]["num_timesteps"] > ckpt["state"]["num_timesteps"]
    assert any(
        not torch.equal(before[k], v) for k, v in after["state"]["parameters"]["policy"].items()
    )

    out = roborl("eval", f"checkpoint={run_dir}", "episodes=3", cwd=tmp_path).stdout
    assert "over 3 episodes" in out
    assert len(json.loads((run_dir / "eval.json").read_text())["returns"]) == 3


def test_sb3_ppo_and_dqn_through_the_host(tmp_path: Path) -> None:
    roborl("train", "algo=sb3/ppo", "total_steps=512", "+algo.kwargs.n_steps=256",
           "eval_every=512", "eval_episodes=1", "progress=false", cwd=tmp_path)  # fmt: skip
    roborl("train", "algo=sb3/dqn", "env.id=CartPole-v1", "total_steps=300",
           "eval_every=300", "eval_episodes=1", "progress=false", cwd=tmp_path)  # fmt: skip
    summaries = [json.loads(p.read_text()) for p in tmp_path.rglob("summary.json")]
    assert sorted(s["algo"] for s in summaries) == ["sb3/dqn", "sb3/ppo"]
    assert all(s["final_eval_return"] is not None for s in summaries)

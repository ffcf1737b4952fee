"""`roborl train algo=drq` end to end on RoborlTabletop from pixels, frame-stacked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from cli_runner import roborl


def test_train_drq_on_stacked_camera_frames_then_eval_from_the_checkpoint(tmp_path: Path) -> None:
    roborl(
        "train", "algo=drq", "env=tabletop_reach_pixels", "env.kwargs.image_size=16",
        "+env.frame_stack=2", "algo.batch_size=16", "algo.hidden_sizes=[32,32]",
        "total_steps=120", "learning_starts=60", "eval_every=120", "eval_episodes=2",
        "checkpoint_every=120", "log_every=60", "progress=false", "seed=0",
        "hydra.run.dir=run", cwd=tmp_path,
    )  # fmt: skip
    run = tmp_path / "run"
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/critic_loss"] for r in records if "train/critic_loss" in r]
    assert losses and all(math.isfinite(x) for x in losses)
    assert any("eval/success_rate" in r for r in records)
    ckpt = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    convs = [k for k in ckpt["state"]["encoder"] if k.startswith("convs.image.0.weight")]
    # two stacked RGB frames -> 6 input channels of the first conv
    assert ckpt["state"]["encoder"][convs[0]].shape[1] == 6
    out = roborl(
        "eval", f"checkpoint={run / 'checkpoints' / 'last.pt'}", "episodes=2", cwd=tmp_path
    )
    assert "success" in out.stdout + out.stderr

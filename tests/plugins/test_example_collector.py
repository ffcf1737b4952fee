"""A third-party collector (examples/roborl-example-plugin, `collector=example_episodes`)
trains roborl's SAC end to end through the public TrainContext only."""

from __future__ import annotations

import json
from pathlib import Path

from cli_server import run_roborl

from roborl.core.checkpoint import load_checkpoint

RANDOM_RETURN = 10.0  # random play on InvertedPendulum-v5 balances for about 5-10 steps


def test_sac_trains_from_the_example_collector(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = [
        "train", "algo=sac", "env=inverted_pendulum",
        "collector=example_episodes", "total_steps=3000", "learning_starts=500",
        "eval_every=3000", "eval_episodes=5", "checkpoint_every=3000", "log_every=500",
        "algo.hidden_sizes=[64,64]", "algo.batch_size=128", "seed=0", "progress=false",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    res = run_roborl(cmd, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    chunks = [r for r in records if "example/chunks" in r]
    # the collector delivered every transition the loop counted, in its own chunks
    assert chunks and chunks[-1]["example/transitions"] == 3000 == chunks[-1]["step"]
    assert chunks[-1]["example/chunks"] >= 3000 / 50
    ckpt = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert ckpt["runner"]["extra"]["example_episodes"]["transitions"] == 3000
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 3000 and summary["updates"] > 2000
    assert summary["final_eval_return"] > 5 * RANDOM_RETURN, summary

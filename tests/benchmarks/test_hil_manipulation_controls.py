"""benchmarks/hil_manipulation_controls.py reads control runs back from the directories
`roborl train` writes: each run's own overrides, its policy-only evaluations and its speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import hil_manipulation_controls as controls  # noqa: E402


def train(run_dir: Path, seed: int) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run(
        [sys.executable, "-m", "roborl.core.cli", "train", "algo=drq", "algo.batch_size=16",
         "algo.conv_channels=8", "env=tabletop_reach_pixels_state", "env.kwargs.image_size=32",
         "total_steps=300", "learning_starts=100", "eval_every=150", "eval_episodes=2",
         "progress=false", "log_every=100", f"seed={seed}", f"hydra.run.dir={run_dir}"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_controls_are_read_from_the_runs_own_files(tmp_path: Path) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    for seed, run in enumerate(runs):
        train(run, seed)
    result = controls.summarise({"reach": runs})["reach"]
    for seed, run in enumerate(result["runs"]):
        assert "total_steps=300" in run["overrides"] and f"seed={seed}" in run["overrides"]
        assert run["steps_reached"] == 300 and run["status"] == "finished"
        rows = [json.loads(x) for x in (runs[seed] / "metrics.jsonl").read_text().splitlines()]
        logged = [(r["step"], r["eval/success_rate"]) for r in rows if "eval/success_rate" in r]
        assert run["success"] == logged and len(logged) == 2
        assert run["final_success"] == logged[-1][1]
        assert run["median_sps"] > 0
    assert result["finals"] == [r["final_success"] for r in result["runs"]]
    table = controls.markdown({"command": "test", "groups": {"reach": result}})
    assert table.count("| reach |") == 2 and "env=tabletop_reach_pixels_state" in table


def test_action_gap_of_a_critic_on_its_own_policys_actions_is_zero(tmp_path: Path) -> None:
    """Demos whose actions are the policy's own (in env units): the probe must find Q(expert)
    equal to Q(policy) and the two actions parallel, else it mixes up units or rows."""
    import numpy as np

    from roborl.core.algorithms import algorithm_from_checkpoint
    from roborl.core.cli.common import load_host

    run = tmp_path / "run"
    train(run, 0)
    checkpoint = run / "checkpoints" / "last.pt"
    algo, _ = algorithm_from_checkpoint(load_host(), checkpoint, "cpu")
    rng = np.random.default_rng(0)
    obs = {
        "image": rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8),
        "state": rng.uniform(-1, 1, (64, 4)).astype(np.float32),
    }
    actions = algo.act(obs, deterministic=True)
    demos = tmp_path / "demos.npz"
    np.savez(demos, **{f"observations/{k}": v for k, v in obs.items()}, actions=actions)
    gap = controls.action_gap(checkpoint, demos)
    assert gap["states"] == 64
    assert abs(gap["q_expert"] - gap["q_policy"]) < 1e-4 and gap["expert_ranked_above_policy"] == 0
    assert gap["policy_expert_cosine"] > 0.999
    assert all(np.isfinite(v) for v in gap.values())


def test_block_locator_scores_the_runs_encoder_against_the_same_one_redrawn(tmp_path: Path) -> None:
    """`--locate` on a FetchPush pixel run: frames from the run's own env (whole random-action
    episodes), a held-out R^2 for the trained encoder and one for its re-drawn copy; a copy
    that kept the trained weights would give the same figure twice."""
    import numpy as np

    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    run = tmp_path / "push"
    proc = subprocess.run(
        [sys.executable, "-m", "roborl.core.cli", "train", "algo=drq", "algo.batch_size=16",
         "algo.conv_channels=8", "env=fetch_push_pixels", "env.kwargs.image_size=32",
         "env.kwargs.cameras=[front,side]", "total_steps=150", "learning_starts=100",
         "eval_every=150", "eval_episodes=1", "progress=false", f"hydra.run.dir={run}"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    located = controls.block_locator(run / "checkpoints" / "last.pt", episodes=6)
    assert located["frames"] == 6 * 50
    assert np.isfinite(located["r2_trained"]) and located["r2_trained"] <= 1.0
    assert np.isfinite(located["r2_untrained"]) and located["r2_untrained"] <= 1.0
    assert located["r2_trained"] != located["r2_untrained"]
    table = controls.markdown({"command": "t", "groups": {}, "locators": {"push": located}})
    assert "| push | 300 |" in table

"""benchmarks/hil_manipulation_controls.py reads control runs back from the directories
`roborl train` writes: each run's own overrides, its policy-only evaluations and its speed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_runner import roborl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import hil_manipulation_controls as controls  # noqa: E402


def train(run_dir: Path, seed: int, *overrides: str) -> None:
    roborl(
        "train", "algo=drq", "algo.batch_size=16", "algo.conv_channels=8",
        "env=tabletop_reach_pixels_state", "env.kwargs.image_size=32", "total_steps=200",
        "learning_starts=50", "eval_every=100", "eval_episodes=2", "progress=false",
        "log_every=100", f"seed={seed}", f"hydra.run.dir={run_dir}", *overrides,
        cwd=run_dir.parent,
    )  # fmt: skip


@pytest.fixture(scope="module")
def dense_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three short seeds of one control, trained once for the module (dense reward: the
    reward-scoring check needs a run without 0/1 success labels; the rest reads any run)."""
    root = tmp_path_factory.mktemp("controls")
    runs = [root / f"s{seed}" for seed in range(3)]
    for seed, run in enumerate(runs):
        train(run, seed, "env.kwargs.reward_type=dense")
    return runs


def test_controls_are_read_from_the_runs_own_files(dense_runs: list[Path]) -> None:
    runs = dense_runs[:2]
    result = controls.summarise({"reach": runs})["reach"]
    for seed, run in enumerate(result["runs"]):
        assert "total_steps=200" in run["overrides"] and f"seed={seed}" in run["overrides"]
        assert run["steps_reached"] == 200 and run["status"] == "finished"
        rows = [json.loads(x) for x in (runs[seed] / "metrics.jsonl").read_text().splitlines()]
        logged = [(r["step"], r["eval/success_rate"]) for r in rows if "eval/success_rate" in r]
        assert run["success"] == logged and len(logged) == 2
        assert run["final_success"] == logged[-1][1]
        assert run["median_sps"] > 0
    assert result["finals"] == [r["final_success"] for r in result["runs"]]
    table = controls.markdown({"command": "test", "groups": {"reach": result}})
    assert table.count("| reach |") == 3 and "env=tabletop_reach_pixels_state" in table
    assert "| reach | 2 |" in table  # the two seeds' IQM row
    assert result["runs"][0]["reward_fired"] is None and "frames fired on" not in table
    fired = {
        "fired_frames": 300,
        "labelled": 300,
        "precision": 0.3,
        "precision_by_part": [0.4, 0.1],
    }
    group = {**result, "runs": [{**result["runs"][0], "reward_fired": fired}]}
    table = controls.markdown({"command": "t", "groups": {"reach": group}})
    assert "| reach | s0 | 300 | 0.30 | 0.40 0.10 |" in table


def test_action_gap_of_a_critic_on_its_own_policys_actions_is_zero(
    tmp_path: Path, dense_runs: list[Path]
) -> None:
    """Demos whose actions are the policy's own (in env units): the probe must find Q(expert)
    equal to Q(policy) and the two actions parallel, else it mixes up units or rows."""
    import numpy as np

    from roborl.core.algorithms import algorithm_from_checkpoint
    from roborl.core.cli.common import load_host

    checkpoint = dense_runs[0] / "checkpoints" / "last.pt"
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

    run = tmp_path / "push"
    roborl(
        "train", "algo=drq", "algo.batch_size=16", "algo.conv_channels=8",
        "env=fetch_push_pixels", "env.kwargs.image_size=32", "env.kwargs.cameras=[front,side]",
        "total_steps=150", "learning_starts=100", "eval_every=150", "eval_episodes=1",
        "progress=false", f"hydra.run.dir={run}", cwd=tmp_path,
    )  # fmt: skip
    located = controls.block_locator(run / "checkpoints" / "last.pt", episodes=6)
    assert located["frames"] == 6 * 50
    assert np.isfinite(located["r2_trained"]) and located["r2_trained"] <= 1.0
    assert np.isfinite(located["r2_untrained"]) and located["r2_untrained"] <= 1.0
    assert located["r2_trained"] != located["r2_untrained"]
    table = controls.markdown({"command": "t", "groups": {}, "locators": {"push": located}})
    assert "| push | 300 |" in table

    # --score-reward on the same run's buffer (150 next frames, the env's 0/1 success): a
    # classifier saved with threshold 0 fires on every frame, one with threshold 1 on none.
    from roborl.core.checkpoint import load_checkpoint
    from roborl.plugins.rewards.classifier import SuccessNet, save

    truth = load_checkpoint(run / "checkpoints" / "last.pt")["buffer"]["rewards"].numpy()
    shape = {"height": 32, "width": 32, "channels": 6, "hidden": 8, "conv_strides": [2, 1, 1, 1]}
    cams = {"image_keys": ["image", "image_side"], "frame_shapes": {"image": [32, 32, 3],
            "image_side": [32, 32, 3]}}  # fmt: skip
    net = SuccessNet(32, 32, 6, 8, [2, 1, 1, 1])
    for threshold in (0.0, 1.0):
        save(net, {**cams, **shape, "threshold": threshold}, tmp_path / f"clf{threshold}")
    always = controls.reward_on_run(tmp_path / "clf0.0", run / "checkpoints" / "last.pt")
    never = controls.reward_on_run(tmp_path / "clf1.0", run / "checkpoints" / "last.pt")
    assert always["all"]["frames"] == never["all"]["frames"] == 150
    assert always["all"]["successes"] == int(truth.sum())
    assert always["all"]["tnr"] == 0.0 and never["all"]["tnr"] == 1.0
    assert always["all"]["precision"] == pytest.approx(truth.mean())
    assert np.isnan(never["all"]["precision"]) and never["person"]["frames"] == 0


def test_seeds_of_a_control_get_an_iqm_and_a_dense_reward_is_not_scored(
    tmp_path: Path, dense_runs: list[Path]
) -> None:
    """Three finished seeds: the IQM of three values is their mean (rliable trims none), inside
    its CI; a run trained on a dense reward has no success labels to score a classifier by; a
    seed read back from an earlier summary (`--earlier`) counts as its directory did."""
    import numpy as np

    runs = dense_runs
    group = controls.summarise({"reach": runs})["reach"]
    iqm = group["iqm_final"]
    assert iqm["point"] == pytest.approx(np.mean(group["finished_finals"]))
    assert iqm["ci_low"] <= iqm["point"] <= iqm["ci_high"]
    assert "| reach | 3 |" in controls.markdown({"command": "t", "groups": {"reach": group}})
    with pytest.raises(SystemExit, match="rewards other than 0/1"):
        controls.reward_on_run(tmp_path / "unused", runs[0] / "checkpoints" / "last.pt")
    # --earlier: a seed whose directory is gone joins the others from the summary that read it
    summary = tmp_path / "earlier.json"
    summary.write_text(json.dumps({"groups": {"reach": group}}))
    label, (kept,) = controls.earlier_runs(f"merged={summary}#reach#s0")
    assert label == "merged" and kept["earlier"] == "earlier.json"
    merged = controls.summarise({"merged": [kept, runs[1], runs[2]]})["merged"]
    assert merged["finished_finals"] == group["finished_finals"]
    assert merged["iqm_final"]["point"] == pytest.approx(iqm["point"])
    table = controls.markdown({"command": "t", "groups": {"merged": merged}})
    assert "| merged | s0 (from earlier.json) |" in table
    with pytest.raises(SystemExit, match="no group 'pushes'"):
        controls.earlier_runs(f"merged={summary}#pushes")
    with pytest.raises(SystemExit, match="no run named 's9'"):
        controls.earlier_runs(f"merged={summary}#reach#s9")

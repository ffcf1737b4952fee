"""`reward.relabel_every=N`: hard-negative rounds of the success classifier during a run
(`roborl.core.reward_rounds`), what `roborl reward relabel` does between runs, done by the run
every N env steps with the new model swapped into the training env.

The setup is the smallest the reward tests use: RoborlTabletop from 32 px frames, a classifier
trained 100 steps on 20 noisy expert episodes, and a run of uniform random actions
(`learning_starts = total_steps`, so the tiny DrQ agent never updates): random frames are far
from the demos, so the classifier fires on many of them, and the env's own success says which
were false.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from roborl.core.envs import make_env
from roborl.core.errors import ConfigError
from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner
from roborl.plugins.demos.record import record
from roborl.plugins.rewards.classifier import load
from roborl.plugins.rewards.hard_negatives import false_positive_rate, hard_negatives
from roborl.plugins.rewards.train import train_classifier
from roborl.sim.tabletop.env import TabletopEnv

SMALL = {"obs_mode": "pixels", "tasks": [0], "image_size": 32, "max_episode_steps": 50}
EVERY, TOTAL = 100, 200
TINY_DRQ = {"name": "drq", "hidden_sizes": [8, 8], "feature_dim": 8, "conv_channels": 4,
            "conv_layers": 2, "batch_size": 8}  # fmt: skip


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("relabel_every")
    env = TabletopEnv(**SMALL)
    ds, _ = record(env, lambda o: env.expert_action(noise=0.3), 20, seed=0, log=lambda m: None)
    env.close()
    demos = ds.save(root / "demos.npz")
    out = root / "clf.pt"
    train_classifier(str(demos), str(out), steps=100, seed=0, log=lambda m: None)
    return out


def _run(
    run_dir: Path, clf: Path, total: int = TOTAL, resume: bool = False, **reward: object
) -> list[dict]:
    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "algo": TINY_DRQ,
        "env": {"id": "RoborlTabletop-v0", "kwargs": SMALL},
        "reward": {"name": "classifier", "path": str(clf), "terminate_on_success": False,
                   **reward},
        "total_steps": total, "learning_starts": total, "eval_every": 0, "log_every": EVERY,
        "progress": False, "seed": 0,
    }  # fmt: skip
    last = run_dir / "checkpoints" / "last.pt"
    Runner(cfg, run_dir, host).execute(resume_from=last if resume else None)
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_rounds_in_a_run_retrain_on_the_fired_frames_and_lower_their_false_positive_rate(
    classifier: Path, tmp_path: Path
) -> None:
    metrics = _run(tmp_path / "on", classifier, relabel_every=EVERY)
    rounds = [m for m in metrics if "reward/relabel_round" in m]
    assert [(m["step"], m["reward/relabel_round"]) for m in rounds] == [(100, 1.0), (200, 2.0)]
    for m in rounds:  # measured on the false fired frames so far, before and after the round
        before = m["reward/fired_false_positive_rate_before"]
        after = m["reward/fired_false_positive_rate_after"]
        assert m["reward/hard_negatives"] >= 10 and after < before, m
    # Round 1: every false fired frame was one the model fired on; most no longer fire.
    assert rounds[0]["reward/fired_false_positive_rate_before"] == 1.0
    assert rounds[0]["reward/fired_false_positive_rate_after"] <= 0.6, rounds[0]

    # Recomputed from the files the run wrote: the fired frames of steps 1-100 (the part the
    # first round flushed) against the original model and the first round's.
    fired_dir, models = tmp_path / "on" / "reward_fired", tmp_path / "on" / "reward_model"
    parts = sorted(fired_dir.glob("fired-*.npz"))
    assert len(parts) == 2  # flushed by each round (the second at the run's last step)
    first = tmp_path / "first_part"
    first.mkdir()
    (first / parts[0].name).write_bytes(parts[0].read_bytes())
    negatives, _ = hard_negatives(first)
    assert len(negatives["image"]) == rounds[0]["reward/hard_negatives"]
    assert false_positive_rate(classifier, negatives) == 1.0
    assert false_positive_rate(models / "round_001.pt", negatives) < 1.0
    report = json.loads((models / "round_001.pt_hard_negatives.json").read_text())
    assert report["count"] == rounds[0]["reward/hard_negatives"]
    base = torch.load(models / "round_002.pt", weights_only=True)["config"]["base_data"]
    assert len(base) == 1 and base[0].endswith("demos.npz")  # round 2 retrains from the demos

    # The swap: the frames of steps 101-200 were fired by round 1's model, which fires on all.
    with np.load(parts[1]) as z:
        frames = z["frames/image"]
    p = load(models / "round_001.pt").probability({"image": frames})
    assert len(frames) and (p >= 0.5 - 1e-4).all()


def test_a_resumed_run_keeps_the_last_rounds_model(classifier: Path, tmp_path: Path) -> None:
    """Cut after round 1 (step 100) and resumed to 200: the envs rebuilt from reward.path get
    round 1's model back from the checkpoint, so the frames fired after the resume are ones
    it fires on, and round 2 measures its "before" on that model."""
    run = tmp_path / "cut"
    _run(run, classifier, total=EVERY, relabel_every=EVERY)
    cut_parts = set((run / "reward_fired").glob("fired-*.npz"))
    metrics = _run(run, classifier, resume=True, relabel_every=EVERY)
    rounds = [m for m in metrics if "reward/relabel_round" in m]
    assert [(m["step"], m["reward/relabel_round"]) for m in rounds] == [(100, 1.0), (200, 2.0)]
    report = json.loads((run / "reward_model" / "round_002.pt_hard_negatives.json").read_text())
    # "before" is measured on round 1's model (the original fired on all of them: 1.0); that a
    # round lowers the rate is the uninterrupted run's test: here, at a few per cent already,
    # round 2 may keep it (0.064 both before and after on an AMD EPYC, lower on others)
    assert report["fp_rate_after"] <= report["fp_rate_before"] < 1.0
    (later,) = set((run / "reward_fired").glob("fired-*.npz")) - cut_parts
    with np.load(later) as z:
        frames = z["frames/image"]
    p = load(run / "reward_model" / "round_001.pt").probability({"image": frames})
    assert len(frames) and (p >= 0.5 - 1e-4).all()


def test_without_relabel_every_no_round_happens(classifier: Path, tmp_path: Path) -> None:
    metrics = _run(tmp_path / "off", classifier)
    assert not any(k.startswith("reward/") for m in metrics for k in m)
    assert not (tmp_path / "off" / "reward_model").exists()
    assert any((tmp_path / "off" / "reward_fired").glob("fired-*.npz"))  # it did fire


@pytest.mark.parametrize("bad", [-1, 1.5, "100", True])
def test_relabel_every_must_be_a_whole_number_of_steps(bad: object) -> None:
    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "env": {"id": "RoborlTabletop-v0", "kwargs": SMALL},
        "reward": {"name": "classifier", "path": "unused", "relabel_every": bad},
    }
    with pytest.raises(ConfigError, match=r"reward\.relabel_every=.* whole number of env steps"):
        make_env(host.registry, cfg)


def test_relabel_every_needs_the_fired_frames() -> None:
    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "env": {"id": "RoborlTabletop-v0", "kwargs": SMALL},
        "reward": {"name": "classifier", "path": "unused", "relabel_every": 10,
                   "save_fired": None},
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"reward\.relabel_every needs .*reward\.save_fired"):
        make_env(host.registry, cfg)

"""Several loggers at once: `logger=[tensorboard,wandb]` writes both, and TensorBoard's own
event reader gets back exactly the scalars of metrics.jsonl (the source of truth)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_runner import roborl
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from roborl.core.compose import compose_dict
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host
from roborl.core.run_log import logger_options

TINY = [
    "total_steps=400",
    "learning_starts=200",
    "eval_every=200",
    "eval_episodes=2",
    "checkpoint_every=400",
    "log_every=100",
    "algo.batch_size=32",
    "algo.hidden_sizes=[16,16]",
    "progress=false",
]


def test_tensorboard_and_wandb_together_carry_the_scalars_of_metrics_jsonl(tmp_path: Path) -> None:
    roborl("train", *TINY, "logger=[tensorboard,wandb]", "logger.wandb.tags=[both]", cwd=tmp_path)
    (summary,) = tmp_path.rglob("summary.json")
    run_dir = summary.parent

    expected: dict[str, list[tuple[int, float]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                expected.setdefault(key, []).append((record["step"], float(value)))
    assert {"eval/return_mean", "train/critic_loss", "train/episode_return", "time/sps"} <= set(
        expected
    )

    (events,) = (run_dir / "tensorboard").glob("events.out.tfevents.*")
    acc = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == sorted(expected)
    for tag, points in expected.items():
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert [s for s, _ in got] == [s for s, _ in points], tag
        for (_, value), (_, want) in zip(got, points):  # TensorBoard stores float32
            assert math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-6), (tag, value, want)

    (wandb_run,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = wandb_run.read_bytes()
    for key in expected:  # every metric name went into wandb's offline run as well
        assert key.encode() in data, key
    saved = (run_dir / "config.yaml").read_text()
    assert "tensorboard:" in saved and "wandb:" in saved


def test_logger_selection_composes_by_name_and_old_configs_still_load() -> None:
    host = get_host()
    both = compose_dict(
        host, ["logger=[wandb,tensorboard]", "logger.tensorboard.flush_secs=5"], "train"
    )
    assert [name for name, _ in logger_options(both["logger"])] == ["wandb", "tensorboard"]
    assert dict(logger_options(both["logger"]))["tensorboard"]["flush_secs"] == 5
    assert logger_options(compose_dict(host, [], "train")["logger"]) == []  # jsonl only
    # run directories written before logger=[...] existed saved one logger with `name`
    assert logger_options({"name": "wandb", "project": "p"}) == [("wandb", {"project": "p"})]
    assert logger_options({"name": "jsonl"}) == []
    with pytest.raises(ConfigError, match="Did you mean 'tensorboard'"):
        compose_dict(host, ["logger=[wandb,tensorbord]"], "train")
    with pytest.raises(ConfigError, match="options are a mapping"):
        logger_options({"tensorboard": 3})

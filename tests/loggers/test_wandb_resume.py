"""`roborl resume` continues the same W&B run (real wandb, offline): the id saved in the run
directory is the id of both offline runs, read back from wandb's own run records."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import roborl

pytest.importorskip("wandb")
from wandb.proto import wandb_internal_pb2 as pb

TINY = [
    "total_steps=400",
    "learning_starts=200",
    "eval_every=200",
    "eval_episodes=2",
    "checkpoint_every=200",
    "log_every=100",
    "algo.batch_size=32",
    "algo.hidden_sizes=[16,16]",
    "torch_threads=1",
    "progress=false",
]


def _records(path: Path) -> Iterator[pb.Record]:
    """The protobuf records of an offline `.wandb` file: a 7-byte header, then LevelDB's log
    format (32 KiB blocks of records: crc32, length, type 1 full / 2 first / 3 middle / 4 last)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, part = 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(part)
            yield record


def _run_ids_and_steps(path: Path) -> tuple[list[str], list[int]]:
    ids, steps = [], []
    for record in _records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            ids.append(record.run.run_id)
        elif kind == "history":
            items = {i.key or "/".join(i.nested_key): i.value_json for i in record.history.item}
            steps.append(int(json.loads(items["_step"])))
    return ids, steps


def test_resume_continues_the_same_wandb_run_offline(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    roborl("train", *TINY, "logger=wandb", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    run_id = (run_dir / "wandb" / "run_id").read_text().strip()
    assert run_id
    (first,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")

    roborl("resume", f"run_dir={run_dir}", "total_steps=600", cwd=tmp_path)
    runs = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 2 and first in runs
    (second,) = [r for r in runs if r != first]
    assert (run_dir / "wandb" / "run_id").read_text().strip() == run_id  # kept, not replaced
    for path in runs:  # the folder, the file and wandb's run record all carry the one id
        assert path.name == f"run-{run_id}.wandb" and path.parent.name.endswith(f"-{run_id}")
    first_ids, first_steps = _run_ids_and_steps(first)
    second_ids, second_steps = _run_ids_and_steps(second)
    assert first_ids == [run_id] and second_ids == [run_id]
    assert max(first_steps) == 400 and max(second_steps) == 600  # the resumed part went on
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 600

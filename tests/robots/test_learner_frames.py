"""The learner's parse path under crafted actor messages (issue 47): numbers too large for a
float, metrics named like the fields of the learner's status record and messages spread over
many frames are dropped or ignored, counted and logged, never raised; a message is capped
over all its frames, and none of a rejected message is copied into Python.

The learner is a real `ActorLearnerCollector` on loopback (no actor process, no ROS): crafted
messages go straight into its `_take`, or through a real ZeroMQ socket into `_receive`.
Waits are hang guards only; assertions are on counters, records and traced allocations.
"""

from __future__ import annotations

import json
import logging
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import zmq
from robot_helpers import wait_until
from safetensors.numpy import load as np_load
from safetensors.numpy import save as np_save

from roborl.core.loops.collectors import Chunk
from roborl.robots.nodes.processes import free_port_pair
from roborl.robots.training.actor_learner import wire
from roborl.robots.training.actor_learner.learner import ActorLearnerCollector
from roborl.robots.training.actor_learner.settings import ActorLearnerConfig, learner_spaces

ROBOT = {
    "name": "ros2",
    "transport": "dds",
    "joints": ["slider", "hinge"],
    "command": {"joints": ["slider"], "interface_name": "velocity"},
    "safety": {"low": [-3.0], "high": [3.0], "max_policy_time_s": 5.0},
    "rate_hz": 50.0,
    "max_episode_steps": 20,
    "terminate": {},
    "reset": {"mode": "wait", "wait_s": 0.0},
}
MAX_MB = 1.0
HANG_GUARD_S = 60.0
HUGE = 10**400  # a JSON integer that parses, but overflows float(): OverflowError


def _spaces() -> dict[str, Any]:
    return wire.spaces_record(*learner_spaces(ROBOT, ActorLearnerConfig()))


def _status(**fields: Any) -> bytes:
    return json.dumps({"pid": 1, "spaces": _spaces(), **fields}).encode()


def _chunk(n: int = 4, reward: float = 1.0) -> Chunk:
    rng = np.random.default_rng(0)
    return Chunk(
        rng.normal(size=(n, 4)),
        rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        np.full(n, reward, np.float32),
        rng.normal(size=(n, 4)),
        np.zeros(n, np.float32),
        None,
        [],
        {"intervened": np.zeros(n, bool)},
    )


def _chunk_with_meta(episodes: str = "[]", weights_version: str = "3") -> bytes:
    """A valid chunk whose metadata text is crafted (`encode_chunk` could not write it)."""
    arrays = np_load(wire.encode_chunk(_chunk(), 0))
    return np_save(arrays, metadata={"weights_version": weights_version, "episodes": episodes})


@pytest.fixture
def learner(tmp_path: Path) -> Iterator[tuple[ActorLearnerCollector, zmq.Socket]]:
    """A learner on loopback that has heard one valid status, and the actor-side socket."""
    port = free_port_pair()
    config = {
        "robot": ROBOT,
        "actor_learner": {
            "spawn": False, "timeout_s": HANG_GUARD_S, "port": port, "max_message_mb": MAX_MB,
        },
    }  # fmt: skip
    ctx = SimpleNamespace(
        config=config, run=SimpleNamespace(eval_every=0), run_dir=tmp_path,
        config_dict=lambda: config, step=7, updates=5, resume_checkpoint=None,
    )  # fmt: skip
    zctx = zmq.Context()
    push = zctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.setsockopt(zmq.SNDHWM, 0)
    push.connect(f"tcp://127.0.0.1:{port}")
    push.send_multipart([wire.STATUS, _status(metrics={"rate_hz": 50.0})])
    collector = ActorLearnerCollector(ctx)
    try:
        yield collector, push
    finally:
        collector.close()
        push.close(0)
        zctx.term()


def _records(collector: ActorLearnerCollector) -> list[dict[str, Any]]:
    collector.metrics_file.flush()
    lines = (collector.actor_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


# -- numbers too large for a float -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("episodes", "version", "reason"),
    [
        (f"[[{HUGE}, 3]]", "3", "nonfinite"),  # float(HUGE): OverflowError
        ("[[1e400, 3]]", "3", "nonfinite"),  # JSON's 1e400 is inf
        ("[[1.5, 1e400]]", "3", "malformed"),  # int(inf): OverflowError
        ("[[1.5, 3]]", str(HUGE), "malformed"),  # the lag sum overflowed in `collect`
        ('[["1.5", 3]]', "3", "malformed"),  # a string is not a number
        ("[[1.5, 3], [1.5, 3], [1.5, 3], [1.5, 3], [1.5, 3]]", "3", "malformed"),  # 5 ends, 4 steps
    ],
    ids=["huge-int-return", "inf-return", "inf-length", "huge-version", "text-return", "too-many"],
)
def test_chunk_metadata_out_of_bounds_is_dropped_never_raised(
    learner: tuple[ActorLearnerCollector, zmq.Socket], episodes: str, version: str, reason: str
) -> None:
    collector, _ = learner
    collector._take([wire.CHUNK, _chunk_with_meta(episodes, version)])
    collector._take([wire.CHUNK, _chunk_with_meta("[[12.5, 40]]", "3")])
    assert collector.counters()[f"actor/dropped_{reason}"] == 1
    chunk = collector.collect(None, False)  # the loop gets the valid chunk only
    assert len(chunk) == 4 and chunk.episodes == [(12.5, 40, {})]
    assert collector.metrics()["actor/policy_lag_updates"] == 2.0  # updates 5 - version 3


def test_status_numbers_too_large_for_a_float_are_ignored_and_counted(
    learner: tuple[ActorLearnerCollector, zmq.Socket], caplog: pytest.LogCaptureFixture
) -> None:
    collector, _ = learner
    status = _status(
        rate_hz_target=HUGE,
        weights_version=HUGE,
        metrics={"rate_hz": 49.0, "big": HUGE, "small": -HUGE, "nan": float("nan"), "ok": 2},
    )
    with caplog.at_level(logging.WARNING, "roborl.robots.actor_learner"):
        collector._take([wire.STATUS, status])
    assert collector.status is not None
    assert collector.status["metrics"] == {"rate_hz": 49.0, "ok": 2.0}
    assert collector.status["rate_hz_target"] is None
    assert collector.status["weights_version"] is None
    counters = collector.counters()
    assert counters["actor/ignored_status_values"] == 5
    assert all(counters[f"actor/dropped_{r}"] == 0 for r in wire.DROP_REASONS)
    assert collector.metrics()["actor/rate_hz"] == 49.0
    record = _records(collector)[-1]
    assert record["rate_hz_target"] is None and record["ok"] == 2.0
    assert "big" not in record and "nan" not in record
    # One log line per kind (a bad field, a bad number), naming what was wrong.
    logged = [r.getMessage() for r in caplog.records if "ignored a status value" in r.getMessage()]
    assert len(logged) == 2, logged
    assert "field 'rate_hz_target'" in logged[0] and "not a finite float64" in logged[0]
    assert "metric 'big'" in logged[1] and "not a finite float64" in logged[1]


# -- metric names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rate_hz_target", "step", "updates", "time", "pid"])
def test_a_metric_named_like_a_record_field_is_ignored_never_merged(
    learner: tuple[ActorLearnerCollector, zmq.Socket], name: str
) -> None:
    collector, _ = learner
    collector._take(
        [wire.STATUS, _status(rate_hz_target=50.0, metrics={"rate_hz": 48.0, name: 1e9})]
    )
    assert collector.status is not None and collector.status["metrics"] == {"rate_hz": 48.0}
    assert collector.counters()["actor/ignored_status_values"] == 1
    record = _records(collector)[-1]
    assert record["rate_hz"] == 48.0 and record["rate_hz_target"] == 50.0
    assert (record["step"], record["updates"], record["pid"]) == (7, 5, 1)
    assert record["time"] != 1e9


def test_learner_figures_win_over_actor_metrics_of_the_same_name(
    learner: tuple[ActorLearnerCollector, zmq.Socket],
) -> None:
    collector, _ = learner
    spoofed = {"rate_hz": 50.0, "policy_lag_updates": -1.0, "weight_pushes": 99.0}
    collector._take([wire.STATUS, _status(metrics=spoofed)])
    logged = collector.metrics()
    assert "actor/policy_lag_updates" not in logged  # no chunk yet: no lag to report
    assert logged["actor/weight_pushes"] == 0.0


@pytest.mark.parametrize("name", ["", "a" * 65, "new\nline", "sp ace", "{json}"])
def test_metric_names_are_plain_and_short(name: str) -> None:
    ignored: list[tuple[str, str]] = []
    status = wire.decode_status(_status(metrics={name: 1.0, "rate_hz": 50.0}), None, ignored)
    assert status["metrics"] == {"rate_hz": 50.0}
    assert [kind for kind, _ in ignored] == ["name"]


# -- the per-message cap ---------------------------------------------------------------------------


def test_a_message_is_capped_over_all_its_frames_and_never_copied(
    learner: tuple[ActorLearnerCollector, zmq.Socket],
) -> None:
    """libzmq's MAXMSGSIZE caps each frame; 20 frames each under the cap make a message of 18
    caps. It is dropped as oversized, and the learner copies none of it into Python (the old
    `recv_multipart` copied all 18 MiB before checking the total)."""
    collector, push = learner
    limit = collector.cfg.max_message_bytes
    frame = np.random.default_rng(0).bytes(int(0.9 * limit))
    push.send_multipart([wire.CHUNK, *[frame] * 20])
    push.send_multipart([wire.CHUNK, b"{}", b"{}"])  # three frames under the cap: malformed
    push.send_multipart([wire.CHUNK, wire.encode_chunk(_chunk(reward=2.0), 3)])
    tracemalloc.start()
    try:
        wait_until(
            lambda: collector._receive(0.05) is not None and bool(collector.pending),
            HANG_GUARD_S,
            "the valid chunk after the oversized message",
            interval=0.01,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    counters = collector.counters()
    assert counters["actor/dropped_oversized"] == 1
    assert counters["actor/dropped_malformed"] == 1
    assert [float(r) for c, _ in collector.pending for r in c.rewards] == [2.0] * 4
    assert peak < limit // 2, f"{peak} bytes traced while receiving"


@pytest.mark.parametrize(
    ("frames", "error"),
    [
        ([b"chunk", b"x" * 10, b"y" * 10], "malformed"),  # more than two frames
        ([b"chunk", b"x" * 1001], "oversized"),
        ([b"chunk", b"x" * 600] + [b"y" * 600] * 5, "oversized"),
        ([b"x" * 1001], "oversized"),
        ([b"chunk", b"x" * 990], None),
        ([b"chunk"], None),  # one frame: the learner's `_take` drops it as malformed
    ],
)
def test_recv_message_bounds_frames_and_bytes(frames: list[bytes], error: str | None) -> None:
    zctx = zmq.Context()
    a, b = zctx.socket(zmq.PAIR), zctx.socket(zmq.PAIR)
    try:
        b.bind("inproc://frames")
        a.connect("inproc://frames")
        a.send_multipart(frames)
        a.send_multipart([b"status", b"{}"])
        if error is None:
            assert wire.recv_message(b, 1000) == frames
        else:
            with pytest.raises(wire.FrameError) as info:
                wire.recv_message(b, 1000)
            assert info.value.reason == error
            assert f"{len(frames)} frames" in str(info.value) or len(frames) <= 2
        assert wire.recv_message(b, 1000) == [b"status", b"{}"]  # the next message is whole
    finally:
        a.close(0)
        b.close(0)
        zctx.term()

"""The run's scheduled evaluations: their env, video, reuse of unchanged results, and scores.

`roborl.core.evaluate` plays episodes with a policy; this module is what a training run
keeps around those episodes from one evaluation to the next: the separately seeded eval env
(a recording one with `video_every`), the last result and the best return, and the memo that
skips replaying the same seeded episodes for a bit-identical policy.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.evaluate import evaluate
from roborl.core.interfaces import Algorithm
from roborl.core.run_log import RunLog
from roborl.core.video import EpisodeRecorder, make_recording_env

if TYPE_CHECKING:
    from roborl.core.plugins import PluginHost

log = logging.getLogger("roborl.run")
EVAL_SEED_OFFSET = 1_000_003


def state_digest(algo: Algorithm) -> bytes | None:
    """A hash of everything in `algo.state_dict()` (weights, optimiser and normaliser state),
    or None when some entry cannot be hashed. Equal digests mean an unchanged policy, so an
    evaluation on the same seeds can be reused instead of run again (a few ms for SAC-sized
    networks, against seconds of evaluation episodes)."""
    h = hashlib.blake2b(digest_size=20)

    def feed(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().to("cpu").contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(obj.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(obj, np.ndarray):
            h.update(f"A{obj.dtype}{obj.shape}".encode())
            h.update(np.ascontiguousarray(obj).tobytes())
        elif isinstance(obj, Mapping):
            h.update(b"{")
            for key in sorted(obj, key=repr):
                h.update(repr(key).encode())
                feed(obj[key])
            h.update(b"}")
        elif isinstance(obj, list | tuple):
            h.update(b"[")
            for item in obj:
                feed(item)
            h.update(b"]")
        elif obj is None or isinstance(obj, bool | int | float | str | bytes):
            h.update(repr(obj).encode())
        else:
            raise TypeError(type(obj).__name__)

    try:
        feed(algo.state_dict())
    except Exception:  # an algorithm whose state cannot be hashed is simply evaluated again
        return None
    return h.digest()


def reference_score(cfg: Mapping[str, Any], extra: Mapping[str, Any], ret: float) -> float | None:
    """D4RL-style score when reference returns are known (dataset or env.ref_*)."""
    from roborl.core.datasets import normalized_score

    env_cfg = cfg.get("env") or {}
    refs = {"random": env_cfg.get("ref_min_score"), "expert": env_cfg.get("ref_max_score")}
    refs.update(extra.get("reference_returns") or {})
    return normalized_score(ret, refs)


class Evaluations:
    """What a run keeps between its evaluations."""

    def __init__(self, host: PluginHost, cfg: Mapping[str, Any]) -> None:
        self._host = host
        self._cfg = cfg
        self.env: gym.Env | None = None
        self.last: dict[str, Any] | None = None
        self.best_return: float | None = None
        # (digest of the algorithm's state, episodes, result) of the last evaluation that ran
        self._memo: tuple[bytes, int, dict[str, Any]] | None = None

    def ensure_env(self, recording: bool, seed: int, make_env: Callable[[int], gym.Env]) -> None:
        """Make the eval env on first use: one that renders when `recording` (video_every),
        else `make_env(seed)` (the task's own reward and success, not reward='s model)."""
        if self.env is None and recording:  # renders only when recording
            self.env = make_recording_env(self._host.registry, self._cfg, seed)
        if self.env is None:
            self.env = make_env(seed)

    def start_video(self, path: Path) -> None:
        assert isinstance(self.env, EpisodeRecorder)
        self.env.start(path, episodes=1)

    def finish_video(self, run_log: RunLog, step: int) -> None:
        """Finish the evaluation's MP4 and hand it to the loggers that show videos."""
        assert isinstance(self.env, EpisodeRecorder)
        written = self.env.finish()
        if written is None:
            return
        path, frames = written
        log.info("video %s (%d frames)", path, frames)
        run_log.video("eval/video", str(path), step)

    def episodes(
        self,
        algo: Algorithm,
        n: int,
        seed: int,
        memoize: bool,
    ) -> dict[str, Any]:
        """`n` deterministic episodes of `algo`'s policy from `seed`; with `memoize`, the last
        result again when the algorithm's state is bit-identical to that of the last run."""
        assert self.env is not None
        digest = state_digest(algo) if memoize else None
        memo = self._memo
        if digest is not None and memo is not None and memo[:2] == (digest, n):
            # Same weights, same eval seeds, deterministic policy: the episodes would repeat
            # the last evaluation exactly (e.g. every evaluation before learning_starts).
            return copy.deepcopy(memo[2])
        policy = algo.policy()
        result = evaluate(policy.act, self.env, n, seed=seed, reset_policy=policy.reset)
        self._memo = None if digest is None else (digest, n, copy.deepcopy(result))
        return result

    def record(self, result: dict[str, Any]) -> None:
        """`result` is the latest evaluation; it may be the best so far."""
        self.last = result
        ret = result["return_mean"]
        if self.best_return is None or ret > self.best_return:
            self.best_return = ret

    def close(self) -> None:
        if self.env is not None:
            with contextlib.suppress(Exception):
                self.env.close()
            self.env = None

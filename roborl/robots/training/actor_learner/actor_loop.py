"""The actor's loop (`Actor`): the robot env stepped at the control rate with the newest
weights, transitions and status sent to the learner without blocking, and the robot held when
the learner goes silent. `actor.py` is the `roborl actor` command around it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roborl.core.config import build_config
from roborl.core.errors import ConfigError, RobotError
from roborl.core.loops.collectors import Chunk
from roborl.core.obs import add_batch_axis, stack_obs
from roborl.core.spaces import space_to_dict
from roborl.robots.nodes.common import emit_event
from roborl.robots.training.actor_learner import keys as keyring
from roborl.robots.training.actor_learner import wire
from roborl.robots.training.actor_learner.settings import ActorLearnerConfig

STATS_EVERY_S = 1.0


def learner_endpoints(address: str) -> tuple[str, str]:
    """(transitions endpoint, weights endpoint) of a learner at HOST:PORT (weights: PORT+1)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"learner={address!r}: expected HOST:PORT, e.g. 127.0.0.1:5555.")
    return f"tcp://{host}:{port}", f"tcp://{host}:{int(port) + 1}"


class Latency:
    """Samples since the last report; percentiles in milliseconds."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, seconds: float) -> None:
        self.values.append(seconds)

    def take(self, name: str) -> dict[str, float]:
        if not self.values:
            return {}
        ms = np.asarray(self.values) * 1e3
        self.values = []
        return {
            f"{name}_p50_ms": float(np.percentile(ms, 50)),
            f"{name}_p99_ms": float(np.percentile(ms, 99)),
            f"{name}_max_ms": float(ms.max()),
        }


class LearnerLostError(RobotError):
    """Nothing from the learner for `learner_timeout_s`: the robot was held, the actor stops."""


class Actor:
    """The control loop; see the module docstring. `env` replaces the robot env the config
    describes (tests pass a robot env over a fake transport)."""

    def __init__(
        self,
        cfg: dict[str, Any],
        learner: str,
        send_every: int,
        log_dir: str,
        keys: str = "",
        env: Any = None,
    ) -> None:
        import zmq

        from roborl.core.algorithms import build_algorithm
        from roborl.core.envs import make_env
        from roborl.core.plugins import get_host

        torch.set_num_threads(1)
        self.cfg = cfg
        self.link = build_config(
            ActorLearnerConfig, cfg.get("actor_learner") or {}, prefix="actor_learner."
        )
        push_at, weights_at = learner_endpoints(learner)
        side = None
        if keys:
            side = keyring.load_side(keys, keyring.ACTOR, "roborl actor keys")
        elif not keyring.is_loopback(learner.rpartition(":")[0]):
            raise ConfigError(
                f"roborl actor learner={learner}: the learner is on another machine, so the "
                "link must be authenticated (weights from an impostor would drive the robot), "
                "but no keys=DIR was given. Make a pair with `roborl actor keys dir=DIR`, pass "
                "actor_learner.keys=DIR to the learner and keys=DIR/actor here."
            )
        self.seed = int(cfg.get("seed", 0))
        host = get_host((cfg.get("plugins") or {}).get("disable") or [])
        self.env = env if env is not None else make_env(host.registry, cfg, seed=self.seed)
        self.obs_space, self.act_space = self.env.observation_space, self.env.action_space
        self.algo = build_algorithm(host, cfg["algo"], self.obs_space, self.act_space, "cpu")
        self.rate_hz = float(getattr(self.env.unwrapped, "rate_hz", 0.0))
        self.send_every = max(1, send_every)
        self.version = -1
        self.digest = self._digest()
        self._warm_up()
        self.zmq = zmq
        self.ctx = zmq.Context()
        self.push = self.ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDHWM, 1000)
        self.push.setsockopt(zmq.LINGER, 0)
        self.sub = self.ctx.socket(zmq.SUB)
        # Not CONFLATE: heartbeats share the socket and must not replace weights; each tick
        # drains it and loads only the newest weights (the learner queues at most 8).
        self.sub.setsockopt(zmq.RCVHWM, 8)
        self.sub.setsockopt(zmq.MAXMSGSIZE, 2 * self.link.max_message_bytes)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.LINGER, 0)
        if side is not None:
            keyring.secure_client([self.push, self.sub], side)
        self.push.connect(push_at)
        self.sub.connect(weights_at)
        self.heard_at: float | None = None  # monotonic time of the learner's last message
        self.log_file = None
        if log_dir:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            self.log_file = open(Path(log_dir) / "actor_stats.jsonl", "a")  # noqa: SIM115
        self.stop = False
        self.totals = {
            "steps": 0, "episodes": 0, "sent": 0, "dropped": 0, "weight_loads": 0,
            "rejected_weights": 0, "dropped_malformed": 0, "dropped_oversized": 0,
            "learner_lost": 0,
        }  # fmt: skip

    def _warm_up(self) -> None:
        """One inference and one weight load before the first tick: torch's first calls are
        slow (lazy initialisation), which would otherwise stall the control loop for up to
        seconds when the first weights arrive."""
        state = self.algo.state_dict()
        self.algo.load_state_dict(wire.merged_state(state, wire.policy_tensors(state)))
        sample = self.obs_space.sample()
        self.algo.act(add_batch_axis(sample), deterministic=False)

    # -- messages ------------------------------------------------------------------------------

    def _send(self, kind: bytes, payload: bytes) -> bool:
        try:
            self.push.send_multipart([kind, payload], flags=self.zmq.NOBLOCK, copy=False)
            return True
        except self.zmq.Again:  # the learner is gone or far behind: never wait for it
            return False

    def _poll_weights(self) -> float:
        """Drain the learner's socket: every heartbeat or weights message proves the learner
        alive; load the newest weights if any arrived and they are finite. Returns the
        seconds it took."""
        newest = None
        for _ in range(64):
            try:
                frames = self.sub.recv_multipart(flags=self.zmq.NOBLOCK)
            except self.zmq.Again:
                break
            if len(frames) != 2 or frames[0] not in wire.LEARNER_KINDS:
                self.totals["dropped_malformed"] += 1
                continue
            if len(frames[1]) > self.link.max_message_bytes:
                self.totals["dropped_oversized"] += 1
                continue
            self.heard_at = time.monotonic()
            if frames[0] == wire.WEIGHTS:
                newest = frames[1]
        if newest is None:
            return 0.0
        t0 = time.perf_counter()
        try:
            tensors, version = wire.decode_weights(newest)
        except wire.FrameError as exc:
            self.totals["dropped_malformed"] += 1
            emit_event(event="actor_weights_dropped", error=str(exc))
            return time.perf_counter() - t0
        bad = wire.nonfinite_tensors(tensors)
        if bad:
            self.totals["rejected_weights"] += 1
            emit_event(
                event="actor_weights_rejected", version=version, nonfinite=bad[:5],
                kept_version=self.version, rejected=self.totals["rejected_weights"],
            )  # fmt: skip
        elif version != self.version:
            self.algo.load_state_dict(wire.merged_state(self.algo.state_dict(), tensors))
            self.digest = self._digest()
            self.totals["weight_loads"] += 1
            self.version = version  # last: a reader that sees the version sees the rest
        return time.perf_counter() - t0

    def _silent_s(self) -> float:
        return time.monotonic() - self.heard_at if self.heard_at is not None else 0.0

    def _check_learner(self) -> None:
        """Past `learner_timeout_s` without a word from the learner: hold the robot now,
        then stop (raise `LearnerLostError`); the final stop in `close` repeats the hold."""
        silent = self._silent_s()
        if silent <= self.link.learner_timeout_s:
            return
        hold = getattr(self.env.unwrapped, "hold", None)
        if callable(hold):
            hold()
        self.totals["learner_lost"] = 1
        emit_event(
            event="actor_learner_lost", silent_s=round(silent, 3),
            learner_timeout_s=self.link.learner_timeout_s, steps=self.totals["steps"],
            commands_sent=getattr(getattr(self.env.unwrapped, "driver", None), "sent", None),
        )  # fmt: skip
        raise LearnerLostError(
            f"no weights or heartbeat from the learner for {silent:.1f} s "
            f"(actor_learner.learner_timeout_s={self.link.learner_timeout_s:g}): the robot "
            "holds and the actor stopped. It does not resume by itself: start `roborl actor` "
            "again (or resume the learner, which starts one) once the learner runs."
        )

    def _wait_for_learner(self) -> None:
        """Before the first reset (which may move the robot): report, and wait until the
        learner is heard. Nothing is commanded meanwhile."""
        emit_event(event="actor_waiting", learner_timeout_s=self.link.learner_timeout_s)
        last_report = time.monotonic()
        while not self.stop and self.heard_at is None:
            if self.sub.poll(200):
                self._poll_weights()
            if time.monotonic() - last_report >= STATS_EVERY_S:
                self._report({})
                last_report = time.monotonic()

    def _flush(self, rows: dict[str, list[Any]], episodes: list) -> None:
        if not rows["rew"]:
            return
        chunk = Chunk(
            stack_obs(rows["obs"]),
            np.asarray(rows["act"], dtype=self.act_space.dtype),
            np.asarray(rows["rew"], np.float32),
            stack_obs(rows["next"]),
            np.asarray(rows["term"], np.float32),
            None,
            [(r, n, {}) for r, n in episodes],
            {"intervened": np.asarray(rows["human"], bool)},
        )
        if self._send(wire.CHUNK, wire.encode_chunk(chunk, self.version)):
            self.totals["sent"] += len(chunk)
        else:
            self.totals["dropped"] += len(chunk)
        for value in rows.values():
            value.clear()
        episodes.clear()

    def _report(self, stats: dict[str, float]) -> None:
        status = {
            "pid": os.getpid(),
            "rate_hz_target": self.rate_hz,
            "weights_version": self.version,
            "policy_digest": self.digest,
            "spaces": {
                "observation": space_to_dict(self.obs_space),
                "action": space_to_dict(self.act_space),
            },
            "metrics": {**stats, **{k: float(v) for k, v in self.totals.items()}},
        }
        self._send(wire.STATUS, wire.encode_status(status))
        event = {"event": "actor_stats", "time": time.time(), **status["metrics"]}
        event["weights_version"] = self.version
        emit_event(**event)
        if self.log_file is not None:
            self.log_file.write(json.dumps(event) + "\n")
            self.log_file.flush()

    def _digest(self) -> str:
        """A short hash of the acting policy's tensors: shows when new weights took effect."""
        h = hashlib.blake2b(digest_size=8)
        for key, value in sorted(wire.policy_tensors(self.algo.state_dict()).items()):
            h.update(key.encode())
            h.update(value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())
        return h.hexdigest()

    # -- the control loop ----------------------------------------------------------------------

    def run(self) -> None:
        env, space = self.env, self.act_space
        space.seed(self.seed)
        rng = np.random.default_rng(self.seed)
        keys = ("obs", "act", "rew", "next", "term", "human")
        rows: dict[str, list[Any]] = {k: [] for k in keys}
        episodes: list[tuple[float, int]] = []
        periods, latency = Latency(), Latency()
        window_steps, window_time = 0, 0.0
        self._report({})
        self._wait_for_learner()
        emit_event(event="actor_start", pid=os.getpid(), rate_hz=self.rate_hz)
        last_report = time.monotonic()
        seed: int | None = self.seed
        while not self.stop:
            self._poll_weights()
            self._check_learner()
            obs, _ = env.reset(seed=seed)
            seed = None
            ret, length, t_prev = 0.0, 0, None
            while not self.stop:
                self._check_learner()  # before the action: a lost learner gets no more steps
                t_obs = time.perf_counter()
                if self.version < 0:
                    action = rng.uniform(space.low, space.high).astype(space.dtype)
                else:
                    action = np.asarray(self.algo.act(add_batch_axis(obs), deterministic=False))[0]
                if len(rows["rew"]) >= self.send_every:
                    self._flush(rows, episodes)
                self._poll_weights()
                latency.add(time.perf_counter() - t_obs)
                next_obs, reward, terminated, truncated, info = env.step(action)
                t_now = time.perf_counter()
                if t_prev is not None:
                    periods.add(t_now - t_prev)
                    window_steps, window_time = window_steps + 1, window_time + (t_now - t_prev)
                t_prev = t_now
                executed = info.get("executed_action")
                if executed is not None:  # what the robot did (a person's command, clamped)
                    action = np.asarray(executed, dtype=space.dtype)
                values = (obs, action, reward, next_obs, terminated, info.get("intervened", 0))
                for key, value in zip(keys, values):
                    rows[key].append(value)
                ret, length = ret + float(reward), length + 1
                self.totals["steps"] += 1
                obs = next_obs
                if time.monotonic() - last_report >= STATS_EVERY_S:
                    stats = {**periods.take("period"), **latency.take("latency")}
                    if window_time > 0:
                        stats["rate_hz"] = window_steps / window_time
                        stats["window_steps"], stats["window_s"] = window_steps, window_time
                    window_steps, window_time = 0, 0.0
                    self._report(stats)
                    last_report = time.monotonic()
                if terminated or truncated:
                    episodes.append((ret, length))
                    self.totals["episodes"] += 1
                    break
            self._flush(rows, episodes)  # the episode's tail goes before the reset routine

    def close(self) -> None:
        try:
            self.env.close()  # the robot holds
        finally:
            self.push.close(0)
            self.sub.close(0)
            self.ctx.term()
            if self.log_file is not None:
                self.log_file.close()

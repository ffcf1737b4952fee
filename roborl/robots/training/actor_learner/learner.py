"""`ActorLearnerCollector`: the learner's end of `collector=actor_learner`.

`roborl train robot=... collector=actor_learner eval_every=0` is the learner. It binds two
ZeroMQ sockets (transitions in on `actor_learner.port`, weights out on the next port), starts
`roborl actor` beside the robot for a local run (`actor_learner.spawn: true`; on a robot
machine you start the actor yourself with the learner's address). The spaces come from the
learner's own robot config (the joints, fields and cameras it observes, the safety limits it
commands within; `actor_learner.spaces` for a robot plugin other than `ros2`), never from a
message, so the learner never opens the robot and no peer can redefine what goes into the
buffer. Then the off-policy loop runs as usual:

- `collect` returns everything that arrived since the last call as one `Chunk` (waiting up to
  `actor_learner.timeout_s` when nothing has), so the loop's `utd_ratio` updates per received
  step run at the learner's own pace while the actor keeps the control rate;
- `sync` publishes the policy's weights after every `sync_every` updates (and on start when
  the run resumed from a checkpoint), tagged with the update count; a chunk's lag behind the
  learner is logged as `actor/policy_lag_updates`;
- the actor's status (control rate, latency percentiles, drops) is logged under `actor/` in
  metrics.jsonl and, one line per status, in `<run_dir>/actor/metrics.jsonl`.

The link is hardened because the learner listens on the network (see `keys.py`):

- CURVE authentication with one pinned actor key: always for a spawned actor (an ephemeral
  pair in `<run_dir>/actor/keys`), with `actor_learner.keys` otherwise, and required whenever
  `actor_learner.bind` is not a loopback address;
- `actor_learner.max_message_mb` caps every message, over all its frames: a larger one is
  dropped and counted without a frame of it copied into Python (`wire.recv_message`), and a
  frame over twice the cap is never even buffered (libzmq's MAXMSGSIZE closes the sender's
  connection; counted as `actor/disconnects`);
- a frame that is malformed, whose shapes disagree with the learner's spaces, or that holds
  NaN/inf is dropped and counted (`actor/dropped_<reason>`, see `wire.DROP_REASONS`) and
  logged, never raised: one bad message must not end a run that has a robot attached; a
  status value out of bounds (an integer too large for a float, a metric named like a field
  of the status record) is left out, counted as `actor/ignored_status_values` and logged;
- a thread publishes a heartbeat every `actor_learner.heartbeat_s` beside the weights, so
  the actor holds the robot and stops when it hears nothing for `learner_timeout_s`, however
  long a gradient step of a live learner takes.

Deviations from the in-process robot collector: the loop's `random` flag is not used (the
actor draws random actions until the first weights arrive, i.e. until the learner has passed
`learning_starts` and made `sync_every` updates); the learner does not evaluate (`eval_every`
must be 0: evaluation episodes need the robot, which the actor owns; the actor's training
episode returns are logged as `train/episode_return`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from roborl.core.config import build_config
from roborl.core.errors import ConfigError, RobotError
from roborl.core.interfaces import Algorithm
from roborl.core.loops.collectors import Chunk, Collector
from roborl.core.obs import concat_obs
from roborl.robots.training.actor_learner import keys as keyring
from roborl.robots.training.actor_learner import wire
from roborl.robots.training.actor_learner.actor_process import running_actor, terminate
from roborl.robots.training.actor_learner.publisher import WeightsPublisher
from roborl.robots.training.actor_learner.settings import (
    ActorLearnerConfig,
    check_bind,
    learner_spaces,
)

if TYPE_CHECKING:
    from roborl.core.context import TrainContext

log = logging.getLogger("roborl.robots.actor_learner")
MAX_MESSAGES_PER_RECEIVE = 2000  # a flooding peer cannot keep `collect` from returning


class ActorLearnerCollector(Collector):
    """See the module docstring."""

    def __init__(self, ctx: TrainContext) -> None:
        import zmq

        self.ctx = ctx
        self.cfg = build_config(
            ActorLearnerConfig, ctx.config.get("actor_learner") or {}, prefix="actor_learner."
        )
        if not ctx.config.get("robot"):
            raise ConfigError("collector=actor_learner needs a robot: pass robot=NAME.")
        if ctx.run.eval_every:
            raise ConfigError(
                f"collector=actor_learner with eval_every={ctx.run.eval_every}: the learner "
                "cannot evaluate, the actor process owns the robot. Pass eval_every=0 (the "
                "actor's episode returns are logged as train/episode_return)."
            )
        cfg = self.cfg
        if cfg.learner_timeout_s <= cfg.heartbeat_s:
            raise ConfigError(
                f"actor_learner.learner_timeout_s={cfg.learner_timeout_s:g} must exceed "
                f"actor_learner.heartbeat_s={cfg.heartbeat_s:g} (a few heartbeats per timeout)."
            )
        check_bind(cfg)
        self.observation_space, self.action_space = learner_spaces(ctx.config["robot"], cfg)
        self.spaces = wire.spaces_record(self.observation_space, self.action_space)
        self.actor_dir = ctx.run_dir / "actor"
        self.actor_dir.mkdir(parents=True, exist_ok=True)
        self.keys_dir, self.actor_keys_dir = self._keys()
        side = None
        if self.keys_dir is not None:
            side = keyring.load_side(self.keys_dir, keyring.LEARNER, "actor_learner.keys")
        self.zmq = zmq
        self.zctx = zmq.Context()
        self.auth: Any = None
        self.pinned: keyring.PinnedActor | None = None
        self.pull = self.zctx.socket(zmq.PULL)
        self.pub = self.zctx.socket(zmq.PUB)
        for sock in (self.pull, self.pub):
            sock.setsockopt(zmq.LINGER, 0)
        self.pull.setsockopt(zmq.MAXMSGSIZE, 2 * cfg.max_message_bytes)
        self.pub.setsockopt(zmq.SNDHWM, 8)
        if side is not None:
            self.auth, self.pinned = keyring.secure_server(self.zctx, [self.pull, self.pub], side)
        events = zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        events |= zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        self.monitors = [s.get_monitor_socket(events) for s in (self.pull, self.pub)]
        self.publisher: WeightsPublisher | None = None
        try:
            self.pull.bind(f"tcp://{cfg.bind}:{cfg.port}")
            self.pub.bind(f"tcp://{cfg.bind}:{cfg.port + 1}")
        except zmq.ZMQError as exc:
            self._close_sockets()
            raise ConfigError(
                f"actor_learner: cannot bind {cfg.bind}:{cfg.port}/{cfg.port + 1} ({exc}); "
                "pick another actor_learner.port."
            ) from exc
        self.publisher = WeightsPublisher(self.pub, cfg.heartbeat_s)
        self.publisher.start()
        self.metrics_file = open(self.actor_dir / "metrics.jsonl", "a")  # noqa: SIM115
        self.proc: subprocess.Popen | None = None
        self.adopted: int | None = None
        (self.actor_dir / "config.json").write_text(
            json.dumps({"config": ctx.config_dict()}, indent=1, default=str)
        )  # what `roborl actor config=...` reads, here or copied to the robot machine
        self.pending: list[tuple[Chunk, int]] = []
        self.status: dict[str, Any] | None = None
        self.last_push_updates: int | None = None
        self.pushes = 0
        self.lag_sum, self.lag_n, self.received = 0.0, 0, 0
        self.actor_metrics: dict[str, float] = {}
        self.dropped = dict.fromkeys(wire.DROP_REASONS, 0)
        self.ignored = dict.fromkeys(wire.IGNORED_KINDS, 0)
        self.last_drop: str | None = None
        self.disconnects = self.handshake_failures = 0
        try:
            if cfg.spawn:
                self._spawn()
            self._wait_for_status()
        except BaseException:
            self.close()
            raise

    def _keys(self) -> tuple[Path | None, Path | None]:
        """(learner's key folder, actor's key folder or None): `actor_learner.keys` when set,
        else for a spawned actor an ephemeral pair in `<run_dir>/actor/keys` (kept, so a
        resumed learner can adopt the actor still running with it), else none (loopback)."""
        if self.cfg.keys:
            root = Path(self.cfg.keys).expanduser()
            actor = root / keyring.ACTOR
            return root, actor if (actor / f"{keyring.ACTOR}.key_secret").is_file() else None
        if not self.cfg.spawn:
            log.warning(
                "actor_learner: no keys on loopback %s: any local process can connect; set "
                "actor_learner.keys (roborl actor keys dir=DIR) to pin the actor",
                self.cfg.bind,
            )
            return None, None
        root = self.actor_dir / "keys"
        if not (root / keyring.LEARNER / f"{keyring.LEARNER}.key_secret").is_file():
            keyring.make_keys(root)
        return root, root / keyring.ACTOR

    def _spawn(self) -> None:
        """`roborl actor` in its own session: it outlives a learner that dies (the test kills
        one), and `close` stops it on an orderly end. A resumed run adopts the actor its
        previous learner started when that one still runs (a robot has one driver)."""
        config = self.actor_dir / "config.json"
        pid_file = self.actor_dir / "actor.pid"
        pid = running_actor(pid_file, config)
        if pid is not None:
            self.adopted = pid
            return
        if self.keys_dir is not None and self.actor_keys_dir is None:
            raise ConfigError(
                f"actor_learner.keys={self.cfg.keys!r} with spawn=true: the local actor needs "
                f"its keys in {Path(self.cfg.keys) / keyring.ACTOR} (as `roborl actor keys "
                "dir=DIR` writes them), or leave actor_learner.keys unset for ephemeral keys."
            )
        host = self.cfg.bind if keyring.is_loopback(self.cfg.bind) else "127.0.0.1"
        args = [
            sys.executable, "-m", "roborl.core.cli", "actor", f"config={config}",
            f"learner={host}:{self.cfg.port}", f"log_dir={self.actor_dir}",
            f"send_every={self.cfg.send_every}",
        ]  # fmt: skip
        if self.actor_keys_dir is not None:
            args.append(f"keys={self.actor_keys_dir}")
        out = open(self.actor_dir / "actor.log", "a")  # noqa: SIM115
        self.proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        pid_file.write_text(str(self.proc.pid))

    def _receive(self, timeout_s: float) -> bool:
        """Take every waiting message (waiting up to `timeout_s` for the first, taking at
        most `MAX_MESSAGES_PER_RECEIVE`); a bad one is dropped and counted, never raised."""
        got = 0
        while got < MAX_MESSAGES_PER_RECEIVE and self.pull.poll(
            int(timeout_s * 1000) if not got else 0
        ):
            try:
                frames = wire.recv_message(self.pull, self.cfg.max_message_bytes)
            except wire.FrameError as exc:
                self._drop(
                    exc.reason, f"{exc}; actor_learner.max_message_mb={self.cfg.max_message_mb:g}"
                )
            else:
                self._take(frames)
            got += 1
        self._poll_monitors()
        return got > 0

    def _take(self, frames: list[bytes]) -> None:
        try:
            size = sum(len(f) for f in frames)
            if size > self.cfg.max_message_bytes:
                raise wire.FrameError(
                    "oversized",
                    f"a {size}-byte message (actor_learner.max_message_mb="
                    f"{self.cfg.max_message_mb:g})",
                )
            if len(frames) != 2 or frames[0] not in wire.KINDS:
                raise wire.FrameError(
                    "malformed",
                    f"unexpected message ({len(frames)} frames, kind {frames[0][:16]!r})",
                )
            kind, payload = frames
            # parse_guard: a decoder's unforeseen failure on a peer's bytes is a dropped
            # `malformed` frame too, never an exception that ends the run.
            if kind == wire.STATUS:
                ignored: list[tuple[str, str]] = []
                status = wire.parse_guard(
                    lambda p: wire.decode_status(p, self.spaces, ignored), "actor status", payload
                )
                self._on_status(status)
                for why_kind, why in ignored:
                    self._ignore(why_kind, why)
            else:
                self.pending.append(
                    wire.parse_guard(
                        lambda p: wire.decode_chunk(p, self.observation_space, self.action_space),
                        "actor chunk",
                        payload,
                    )
                )
        except wire.FrameError as exc:
            self._drop(exc.reason, str(exc))

    def _drop(self, reason: str, why: str) -> None:
        """Count a dropped frame; log the first of each reason and then every power of 10."""
        self.dropped[reason] += 1
        self.last_drop = f"{reason}: {why}"
        n = self.dropped[reason]
        if str(n).rstrip("0") == "1":
            log.warning(
                "actor_learner: dropped a frame on port %d (%s), %d dropped as %s so far",
                self.cfg.port, why, n, reason,
            )  # fmt: skip

    def _ignore(self, kind: str, why: str) -> None:
        """Count a status value left out; log the first of each kind, then every power of 10
        (as `_drop`: a peer repeating it every second must not flood the log)."""
        self.ignored[kind] += 1
        n = self.ignored[kind]
        if str(n).rstrip("0") == "1":
            log.warning(
                "actor_learner: ignored a status value on port %d (%s), %d ignored as %s so far",
                self.cfg.port, why, n, kind,
            )  # fmt: skip

    def _poll_monitors(self) -> None:
        """Count peers cut off by libzmq: disconnects (an actor restart, or a frame over
        max_message_mb) and failed handshakes (a peer without the CURVE keys)."""
        from zmq.utils.monitor import recv_monitor_message

        zmq = self.zmq
        for mon in self.monitors:
            while mon.poll(0):
                event = recv_monitor_message(mon)["event"]
                if event == zmq.EVENT_DISCONNECTED:
                    self.disconnects += mon is self.monitors[0]
                else:
                    self.handshake_failures += 1

    def _on_status(self, status: dict[str, Any]) -> None:
        self.status = status
        metrics = dict(status["metrics"])
        if "rate_hz" in metrics:
            self.actor_metrics = metrics
        record = {"step": self.ctx.step, "updates": self.ctx.updates, "time": time.time()}
        for key in wire.STATUS_FIELDS:
            record[key] = status.get(key)
        # No metric overwrites the learner's fields (decode_status already leaves out metrics
        # under these names, wire.RESERVED_METRICS; a duplicate keyword raised TypeError).
        record.update({k: v for k, v in metrics.items() if k not in record})
        self.metrics_file.write(json.dumps(record) + "\n")
        self.metrics_file.flush()

    def _wait_for_status(self) -> None:
        deadline = time.monotonic() + self.cfg.timeout_s
        while self.status is None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RobotError(
                    f"the actor process exited (code {self.proc.returncode}) before it "
                    f"reported; see {self.actor_dir / 'actor.log'}."
                )
            left = deadline - time.monotonic()
            if left <= 0:
                dropped = f" Last dropped frame: {self.last_drop}." if self.last_drop else ""
                raise RobotError(
                    f"no actor reported to {self.cfg.bind}:{self.cfg.port} within "
                    f"{self.cfg.timeout_s:g} s (actor_learner.timeout_s); start `roborl actor "
                    f"config=... learner=HOST:PORT [keys=DIR]` beside the robot.{dropped}"
                )
            self._receive(min(left, 0.5))

    # -- the collector API -----------------------------------------------------------------------

    def start(self, algo: Algorithm) -> None:
        if self.ctx.resume_checkpoint is not None:
            self._publish(algo)  # a resumed learner's policy reaches the actor right away

    def collect(self, algo: Algorithm, random: bool) -> Chunk:
        deadline = time.monotonic() + self.cfg.timeout_s
        self._receive(0.0)
        while not self.pending:
            if self.proc is not None and self.proc.poll() is not None:
                raise RobotError(
                    f"the actor process exited (code {self.proc.returncode}); see "
                    f"{self.actor_dir / 'actor.log'}."
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise RobotError(
                    f"no transitions from the actor for {self.cfg.timeout_s:g} s "
                    "(actor_learner.timeout_s)."
                )
            self._receive(min(left, 0.5))
        parts, self.pending = self.pending, []
        for chunk, version in parts:
            if version >= 0:
                self.lag_sum += (self.ctx.updates - version) * len(chunk)
                self.lag_n += len(chunk)
        chunks = [c for c, _ in parts]
        self.received += sum(len(c) for c in chunks)
        if len(chunks) == 1:
            return dataclasses.replace(chunks[0], consecutive=True)
        extras_keys = set.intersection(*(set(c.extras) for c in chunks))
        return Chunk(
            concat_obs([c.obs for c in chunks]),
            _cat([c.actions for c in chunks]),
            _cat([c.rewards for c in chunks]),
            concat_obs([c.next_obs for c in chunks]),
            _cat([c.terminated for c in chunks]),
            None,
            [e for c in chunks for e in c.episodes],
            {k: _cat([c.extras[k] for c in chunks]) for k in sorted(extras_keys)},
            consecutive=True,  # the actor's successive steps (a gap reads as an episode end)
        )

    def sync(self, algo: Algorithm) -> None:
        last = self.last_push_updates
        if last is None or self.ctx.updates - last >= self.cfg.sync_every:
            self._publish(algo)

    def _publish(self, algo: Algorithm) -> None:
        assert self.publisher is not None
        self.publisher.updates = self.ctx.updates
        self.publisher.send_weights(wire.encode_weights(algo.state_dict(), self.ctx.updates))
        self.last_push_updates = self.ctx.updates
        self.pushes += 1

    def counters(self) -> dict[str, float]:
        """What the link refused so far: dropped frames by reason, refused and failed peers."""
        out = {f"actor/dropped_{k}": float(v) for k, v in self.dropped.items()}
        refused = self.pinned.refused if self.pinned is not None else 0
        out["actor/rejected_peers"] = float(refused + self.handshake_failures)
        out["actor/disconnects"] = float(self.disconnects)
        out["actor/ignored_status_values"] = float(sum(self.ignored.values()))
        return out

    def metrics(self) -> dict[str, float]:
        self._poll_monitors()
        own: dict[str, float | None] = {**self.counters()}
        own["actor/weight_pushes"] = float(self.pushes)
        own["actor/received_steps"] = float(self.received)
        own["actor/policy_lag_updates"] = self.lag_sum / self.lag_n if self.lag_n else None
        self.lag_sum, self.lag_n = 0.0, 0
        # The learner's own figures win over an actor metric of the same name.
        out = {f"actor/{k}": v for k, v in self.actor_metrics.items() if f"actor/{k}" not in own}
        out.update({k: v for k, v in own.items() if v is not None})
        return out

    def state(self) -> dict[str, Any]:
        return {"weight_pushes": self.pushes, "received_steps": self.received}

    def _close_sockets(self) -> None:
        if self.publisher is not None:
            self.publisher.stop()  # it closes the PUB socket from its own thread
        else:
            self.pub.close(0)
        for sock, mon in zip((self.pull, self.pub), self.monitors):
            if not sock.closed:
                sock.disable_monitor()
            mon.close(0)
        self.pull.close(0)
        if self.auth is not None:
            self.auth.stop()
        self.zctx.term()

    def close(self) -> None:
        """Stop a spawned actor (SIGTERM: it finishes the step, the robot holds), then the
        sockets. An actor started by hand keeps running and waits for the next learner."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.adopted is not None:
            terminate(self.adopted)
            self.adopted = None
        if not self.metrics_file.closed:
            self.metrics_file.close()
        if not self.zctx.closed:
            self._close_sockets()


def _cat(parts: list[Any]) -> Any:

    return np.concatenate(parts, axis=0)

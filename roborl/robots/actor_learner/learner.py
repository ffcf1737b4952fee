"""`ActorLearnerCollector`: the learner's end of `collector=actor_learner`.

`roborl train robot=... collector=actor_learner eval_every=0` is the learner. It binds two
ZeroMQ sockets (transitions in on `actor_learner.port`, weights out on the next port), starts
`roborl actor` beside the robot for a local run (`actor_learner.spawn: true`; on a robot
machine you start the actor yourself with the learner's address), and learns the spaces from
the actor's first status message, so the learner never opens the robot. Then the off-policy
loop runs as usual:

- `collect` returns everything that arrived since the last call as one `Chunk` (waiting up to
  `actor_learner.timeout_s` when nothing has), so the loop's `utd_ratio` updates per received
  step run at the learner's own pace while the actor keeps the control rate;
- `sync` publishes the policy's weights after every `sync_every` updates (and on start when
  the run resumed from a checkpoint), tagged with the update count; a chunk's lag behind the
  learner is logged as `actor/policy_lag_updates`;
- the actor's status (control rate, latency percentiles, drops) is logged under `actor/` in
  metrics.jsonl and, one line per status, in `<run_dir>/actor/metrics.jsonl`.

Deviations from the in-process robot collector: the loop's `random` flag is not used (the
actor draws random actions until the first weights arrive, i.e. until the learner has passed
`learning_starts` and made `sync_every` updates); the learner does not evaluate (`eval_every`
must be 0: evaluation episodes need the robot, which the actor owns; the actor's training
episode returns are logged as `train/episode_return`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError, RobotError
from roborl.core.interfaces import Algorithm
from roborl.core.loops.collectors import Chunk, Collector
from roborl.core.obs import concat_obs
from roborl.core.spaces import space_from_dict
from roborl.robots.actor_learner import wire

if TYPE_CHECKING:
    from roborl.core.context import TrainContext


@dataclass
class ActorLearnerConfig:
    """The `actor_learner:` section of the config."""

    port: int = field(default=5555, metadata=rng(1, 65534, "transitions in; weights on port+1"))
    bind: str = field(default="127.0.0.1", metadata={"help": "0.0.0.0 for a remote actor"})
    spawn: bool = field(default=True, metadata={"help": "start `roborl actor` locally"})
    sync_every: int = field(default=50, metadata=rng(1, None, "updates between weight pushes"))
    send_every: int = field(default=10, metadata=rng(1, None, "actor steps per chunk"))
    timeout_s: float = field(default=300.0, metadata=rng(0.1, None, "wait for the actor"))


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
        self.zmq = zmq
        self.zctx = zmq.Context()
        self.pull = self.zctx.socket(zmq.PULL)
        self.pub = self.zctx.socket(zmq.PUB)
        for sock in (self.pull, self.pub):
            sock.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, 2)
        cfg = self.cfg
        try:
            self.pull.bind(f"tcp://{cfg.bind}:{cfg.port}")
            self.pub.bind(f"tcp://{cfg.bind}:{cfg.port + 1}")
        except zmq.ZMQError as exc:
            self._close_sockets()
            raise ConfigError(
                f"actor_learner: cannot bind {cfg.bind}:{cfg.port}/{cfg.port + 1} ({exc}); "
                "pick another actor_learner.port."
            ) from exc
        self.actor_dir = ctx.run_dir / "actor"
        self.actor_dir.mkdir(parents=True, exist_ok=True)
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
        try:
            if cfg.spawn:
                self._spawn()
            self._wait_for_status()
        except BaseException:
            self.close()
            raise

    def _spawn(self) -> None:
        """`roborl actor` in its own session: it outlives a learner that dies (the test kills
        one), and `close` stops it on an orderly end. A resumed run adopts the actor its
        previous learner started when that one still runs (a robot has one driver)."""
        config = self.actor_dir / "config.json"
        pid_file = self.actor_dir / "actor.pid"
        pid = _running_actor(pid_file, config)
        if pid is not None:
            self.adopted = pid
            return
        address = f"{'127.0.0.1' if self.cfg.bind == '0.0.0.0' else self.cfg.bind}:{self.cfg.port}"
        log = open(self.actor_dir / "actor.log", "a")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "roborl.core.cli", "actor", f"config={config}",
                f"learner={address}", f"log_dir={self.actor_dir}",
                f"send_every={self.cfg.send_every}",
            ],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        pid_file.write_text(str(self.proc.pid))

    def _receive(self, timeout_s: float) -> bool:
        """Take every waiting message (waiting up to `timeout_s` for the first)."""
        got = False
        while self.pull.poll(int(timeout_s * 1000) if not got else 0):
            frames = self.pull.recv_multipart()
            if len(frames) != 2 or frames[0] not in wire.KINDS:
                raise RobotError(
                    f"actor_learner: unexpected message on port {self.cfg.port} "
                    f"({len(frames)} frames, kind {frames[0][:16]!r}); is another program "
                    "sending to it?"
                )
            kind, payload = frames
            if kind == wire.STATUS:
                self._on_status(wire.decode_status(payload))
            elif self.status is None:
                continue  # a chunk before any status (a restarted learner): spaces unknown
            else:
                self.pending.append(
                    wire.decode_chunk(payload, self.observation_space, self.action_space)
                )
            got = True
        return got

    def _on_status(self, status: dict[str, Any]) -> None:
        if self.status is not None and status["spaces"] != self.status["spaces"]:
            raise RobotError(
                "actor_learner: the actor's spaces changed mid-run (another robot config?): "
                f"{status['spaces']} != {self.status['spaces']}."
            )
        if self.status is None:
            spaces = status["spaces"]
            try:
                self.observation_space = space_from_dict(spaces["observation"])
                self.action_space = space_from_dict(spaces["action"])
            except (KeyError, TypeError, ValueError) as exc:
                raise RobotError(f"actor status: unreadable spaces {spaces!r} ({exc}).") from exc
        self.status = status
        metrics = {k: float(v) for k, v in (status.get("metrics") or {}).items()}
        if "rate_hz" in metrics:
            self.actor_metrics = metrics
        record = {"step": self.ctx.step, "updates": self.ctx.updates, "time": time.time()}
        for key in ("pid", "weights_version", "policy_digest"):
            record[key] = status.get(key)
        record.update(rate_hz_target=status.get("rate_hz_target"), **metrics)
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
                raise RobotError(
                    f"no actor reported to {self.cfg.bind}:{self.cfg.port} within "
                    f"{self.cfg.timeout_s:g} s (actor_learner.timeout_s); start `roborl actor "
                    "config=... learner=HOST:PORT` beside the robot."
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
            return chunks[0]
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
        )

    def sync(self, algo: Algorithm) -> None:
        last = self.last_push_updates
        if last is None or self.ctx.updates - last >= self.cfg.sync_every:
            self._publish(algo)

    def _publish(self, algo: Algorithm) -> None:
        self.pub.send(wire.encode_weights(algo.state_dict(), self.ctx.updates), copy=False)
        self.last_push_updates = self.ctx.updates
        self.pushes += 1

    def metrics(self) -> dict[str, float]:
        out = {f"actor/{k}": v for k, v in self.actor_metrics.items()}
        out["actor/weight_pushes"] = float(self.pushes)
        out["actor/received_steps"] = float(self.received)
        if self.lag_n:
            out["actor/policy_lag_updates"] = self.lag_sum / self.lag_n
        self.lag_sum, self.lag_n = 0.0, 0
        return out

    def state(self) -> dict[str, Any]:
        return {"weight_pushes": self.pushes, "received_steps": self.received}

    def _close_sockets(self) -> None:
        self.pull.close(0)
        self.pub.close(0)
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
            _terminate(self.adopted)
            self.adopted = None
        if not self.metrics_file.closed:
            self.metrics_file.close()
        if not self.zctx.closed:
            self._close_sockets()


def _running_actor(pid_file: Path, config: Path) -> int | None:
    """The pid in `pid_file` if it is a live `roborl actor` for `config` (Linux /proc)."""
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    args = [a.decode(errors="replace") for a in cmdline]
    return pid if "actor" in args and f"config={config}" in args else None


def _terminate(pid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM an adopted actor (not our child) and wait for it to exit, then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            if _is_zombie(pid):  # exited, waiting for its new parent to reap it
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _cat(parts: list[Any]) -> Any:
    import numpy as np

    return np.concatenate(parts, axis=0)

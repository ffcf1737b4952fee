"""Drive roborl's nodes (and plain robot nodes) as subprocesses by their JSON events.

Every roborl node prints one JSON object per line for what happens (`deploy_start`, `estop`,
`done`, ...), and so do the independent robots in `benchmarks/peers/`. Tests, benchmarks and
launch scripts all need the same thing: start the process, collect those events on a thread,
wait for one (an event, never a sleep), talk to it on stdin, and stop it cleanly. This module is
that one helper.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any


class EventProcess:
    """A subprocess whose JSON stdout lines are collected as events; stdin stays open."""

    def __init__(
        self, args: Sequence[str], env: Mapping[str, str] | None = None, process: Any = None
    ) -> None:
        """Start `args` with text pipes, or follow `process`, one already started that way
        (anything with Popen's pipes, `poll`, `wait`, `terminate` and `kill`: roborl's tests
        fork their `roborl` commands from a pre-imported server)."""
        self.proc = process or subprocess.Popen(
            list(args), env=dict(env) if env is not None else None, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.events: list[dict[str, Any]] = []
        self._err: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=lambda: self._err.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                try:
                    self.events.append(json.loads(line))
                except json.JSONDecodeError:
                    pass

    def named(self, name: str) -> list[dict[str, Any]]:
        """Every event called `name` so far, oldest first."""
        return [e for e in list(self.events) if e.get("event") == name]

    def wait(self, pred: Callable[[], Any], what: str, timeout: float) -> None:
        """Return once `pred()` holds; raise AssertionError naming `what` (with the last
        events and stderr) at the deadline, or as soon as the process has exited without it."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)  # every line it printed is in
                break
            time.sleep(0.02)
        if not pred():
            raise AssertionError(
                f"{what}; exit={self.proc.poll()} events={self.events[-8:]} "
                f"stderr={self.stderr()[-3000:]}"
            )

    def wait_event(self, name: str, timeout: float) -> dict[str, Any]:
        """The first event called `name`, waiting for it up to `timeout` seconds."""
        self.wait(lambda: self.named(name), f"no {name!r} event", timeout)
        return self.named(name)[0]

    def send(self, line: str) -> None:
        """One line on the process's stdin (the peers' commands: `estop`, `quit`, ...)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        return "".join(self._err)

    def stop(self, timeout: float = 30.0) -> None:
        """Close stdin (the peers end on EOF: rclpy keeps SIGTERM for its own shutdown), then
        SIGTERM, then SIGKILL after `timeout`."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A port `p` with `p` and `p + 1` both free on `host` now (the actor-learner link uses
    two sockets)."""
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind((host, 0))
            port = a.getsockname()[1]
            try:
                b.bind((host, port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port pair on {host}")

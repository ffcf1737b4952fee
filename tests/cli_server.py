"""`roborl ...` for tests from a pre-imported interpreter: a fork server.

Every `roborl` a test runs used to start a fresh Python that imported torch, Gymnasium, MuJoCo,
Hydra, matplotlib and the plugins again: about 2.5 s of CPU before the command did anything,
paid a few hundred times per suite. Here one server process per pytest worker imports them
once and then forks a child per command. The child is the command as users run it
(`python -m roborl.core.cli ARGS`, run by `runpy` exactly as `-m` does, in the test's cwd, with
the test's environment, stdin/stdout/stderr and signals); only the imports came before the fork
instead of after the start. Two ways in:
- `run_roborl(args, ...)`: to completion, like `subprocess.run(capture_output=True)`;
- `popen_roborl(args, ...)`: a running process with pipes, like `subprocess.Popen` (the nodes
  robot tests talk to, signal and stop).

A server serves one start-up environment: what Python, the dynamic loader or a preloaded
module reads at start-up (`OMP_NUM_THREADS`, `MUJOCO_GL`, `LD_LIBRARY_PATH`, ...:
`STARTUP_PREFIXES`, `STARTUP_KEYS`) must match, and a command with another one gets a server
of its own. The rest is read when used and may differ per command; `PYTHONPATH` and
`PYTHONUNBUFFERED` are applied in the child as Python would at start.
`ROBORL_TEST_FRESH_PROCESS=1` runs every command in a fresh interpreter instead, so no test
depends on the server.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

# What a `roborl` command imports anyway. The child pays for anything not here, as before.
PRELOAD = (
    "torch",
    "numpy",
    "gymnasium",
    "mujoco",
    "hydra",
    "omegaconf",
    "matplotlib.figure",  # the learning curve at a run's end
    "roborl.core.cli",
    "roborl.core.runner",
    "roborl.core.compose",
)
# Read by Python, the dynamic loader, OpenMP or the preloaded modules at start-up: a server
# serves commands whose values of these match its own. Anything else (ROS and DDS settings,
# since the server never imports rclpy; W&B and Minari paths; a test plugin's switches) is
# read when used, and may differ per command.
STARTUP_PREFIXES = (
    "PYTHON", "LD_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "TORCH", "CUDA", "MUJOCO_",
    "PYOPENGL", "MPL", "XDG_", "MALLOC", "GLIBC",
)  # fmt: skip
STARTUP_KEYS = frozenset({"DISPLAY", "HOME", "TMPDIR", "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"})
APPLIED_IN_CHILD = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED"})  # as Python does at start
MAIN_FILE = str(Path(__file__).resolve().parents[1] / "roborl" / "core" / "cli" / "__main__.py")
MAX_MESSAGE = 1 << 20


def _read_at_startup(key: str) -> bool:
    if key in APPLIED_IN_CHILD:
        return False
    return key in STARTUP_KEYS or key.startswith(STARTUP_PREFIXES)


def _send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], list(fds))


def _receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
    if not data:
        raise ConnectionError("the roborl test server closed the connection")
    return json.loads(data), fds


# -- the server ---------------------------------------------------------------------------------


def _run_child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become `python -m roborl.core.cli ARGS` and exit with its code."""
    import runpy
    import traceback

    os.setpgid(0, 0)  # its own group, so a timeout kills everything it started
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd, target in zip(fds, (0, 1, 2)):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    env = request["env"]
    added = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    started = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ.clear()
    os.environ.update(env)
    rest = [p for p in sys.path[1:] if p not in started]
    sys.path[:] = [request["cwd"], *added, *rest]  # what `python -m` would have built
    if env.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]
    sys.argv = [MAIN_FILE, *request["args"]]
    code = 0
    try:
        runpy.run_module("roborl.core.cli", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # what Python prints and returns for an uncaught exception
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()  # logging.shutdown, wandb, ... as at a normal exit
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def serve(path: str) -> None:
    """Import what commands need, then fork one child per request; each request's connection
    gets the child's pid, then its exit code. Single-threaded, so forking is safe."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    waiting: dict[int, socket.socket] = {}  # pid -> the connection that asked for it
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener], [], [], 0.02)
        if readable:
            conn, _ = listener.accept()
            try:
                request, fds = _receive(conn)
            except (ConnectionError, OSError, json.JSONDecodeError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in [conn, *waiting.values()]:
                    other.close()
                _run_child(request, fds)
            for fd in fds:
                os.close(fd)
            waiting[pid] = conn
            with contextlib.suppress(OSError):
                _send(conn, {"pid": pid})
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid)
            with contextlib.suppress(OSError):
                _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
            conn.close()


# -- the client ---------------------------------------------------------------------------------


class _Server:
    """One server process, started with `env`; stopped at exit."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.dir = tempfile.mkdtemp(prefix="roborl-cli-server-")
        self.path = os.path.join(self.dir, "socket")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.path],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the roborl test server did not start")
        atexit.register(self.stop)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        Path(self.path).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)

    def serves(self, env: Mapping[str, str]) -> bool:
        keys = {k for k in set(env) | set(self.env) if _read_at_startup(k)}
        return all(env.get(k) == self.env.get(k) for k in keys)

    def start(
        self, args: Sequence[str], cwd: Path | str, env: Mapping[str, str], fds: Sequence[int]
    ) -> tuple[socket.socket, int]:
        """Fork `roborl ARGS` with `fds` as its stdin, stdout, stderr: (connection, pid)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(self.path)
        request = {"args": list(args), "cwd": str(Path(cwd).resolve()), "env": dict(env)}
        _send(sock, request, fds)
        reply, _ = _receive(sock)
        return sock, int(reply["pid"])


# Newest last. A worker's own environment changes as libraries load (vLLM sets LD_PRELOAD,
# rclpy LD_LIBRARY_PATH) while some tests keep an earlier copy: a few start-up environments
# alternate, and each switch without a server for it would cost a server start.
_servers: list[_Server] = []
MAX_SERVERS = 4


def _server_for(env: Mapping[str, str]) -> _Server | None:
    """A live server for `env` (a new one if none is: a test process's own environment can
    change mid-run, e.g. an import that sets `PYOPENGL_PLATFORM`); None when turned off."""
    if os.environ.get("ROBORL_TEST_FRESH_PROCESS") == "1":
        return None
    for server in [s for s in _servers if not s.alive()]:
        server.stop()
        _servers.remove(server)
    for server in _servers:
        if server.serves(env):
            _servers.remove(server)
            _servers.append(server)  # least recently used first: the one to stop
            return server
    if len(_servers) == MAX_SERVERS:
        _servers.pop(0).stop()
    _servers.append(_Server(env))
    return _servers[-1]


def _argv(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "roborl.core.cli", *args]


def run_roborl(
    args: Sequence[str],
    *,
    timeout: float,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m roborl.core.cli ARGS` to completion, like `subprocess.run(...,
    capture_output=True, text=True, timeout=timeout)` (the test's cwd and environment by
    default), from a server when it can."""
    cwd = os.getcwd() if cwd is None else cwd
    env = dict(os.environ) if env is None else env
    argv = _argv(args)
    server = _server_for(env)
    if server is None:
        return subprocess.run(
            argv, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout
        )
    with (
        open(os.devnull, "rb") as stdin,
        tempfile.TemporaryFile("w+") as out,
        tempfile.TemporaryFile("w+") as err,
    ):
        sock, pid = server.start(args, cwd, env, [stdin.fileno(), out.fileno(), err.fileno()])
        with sock:
            sock.settimeout(timeout)
            try:
                code = _receive(sock)[0]["returncode"]
            except TimeoutError:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                sock.settimeout(None)
                _receive(sock)
                raise subprocess.TimeoutExpired(argv, timeout, _read(out), _read(err)) from None
        return subprocess.CompletedProcess(argv, code, _read(out), _read(err))


def _read(file: IO[str]) -> str:
    file.seek(0)
    return file.read()


class ServedProcess:
    """A forked `roborl` with text pipes: the part of `subprocess.Popen` tests use (`pid`,
    `stdin`, `stdout`, `stderr`, `poll`, `wait`, `returncode`, `send_signal`, `terminate`,
    `kill`). Its exit code comes from the server, which is its parent."""

    def __init__(
        self, server: _Server, args: Sequence[str], cwd: Path | str, env: Mapping[str, str]
    ) -> None:
        self.args = _argv(args)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            self._sock, self.pid = server.start(args, cwd, env, [in_r, out_w, err_w])
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        self.stdin: IO[str] | None = open(in_w, "w")  # noqa: SIM115 - lives as long as the process
        self.stdout: IO[str] | None = open(out_r)  # noqa: SIM115
        self.stderr: IO[str] | None = open(err_r)  # noqa: SIM115
        self.returncode: int | None = None
        self._done = threading.Event()
        threading.Thread(target=self._await_exit, daemon=True).start()

    def _await_exit(self) -> None:
        try:
            self.returncode = int(_receive(self._sock)[0]["returncode"])
        except (ConnectionError, OSError, KeyError, ValueError):
            self.returncode = -signal.SIGKILL  # the server died, and its children with it
        finally:
            self._sock.close()
            self._done.set()

    def poll(self) -> int | None:
        return self.returncode if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if not self._done.is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def popen_roborl(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | str | None = None
) -> ServedProcess | subprocess.Popen[str]:
    """`python -m roborl.core.cli ARGS` running, with text pipes on stdin, stdout and stderr
    (`subprocess.Popen(..., stdin=PIPE, stdout=PIPE, stderr=PIPE, text=True)`), from a server
    when it can."""
    cwd = os.getcwd() if cwd is None else cwd
    env = dict(os.environ) if env is None else env
    server = _server_for(env)
    if server is None:
        return subprocess.Popen(
            _argv(args), cwd=cwd, env=dict(env), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    return ServedProcess(server, args, cwd, env)


def event_process(argv: Sequence[str], env: Mapping[str, str]) -> Any:
    """`EventProcess(argv, env)`, with a `python -m roborl.core.cli ...` argv forked from a
    server when it can (any other command starts as usual)."""
    from roborl.robots.nodes.processes import EventProcess

    argv = list(argv)
    if argv[:3] != _argv([]):
        return EventProcess(argv, env)
    return EventProcess(argv, env, process=popen_roborl(argv[3:], env=env))


if __name__ == "__main__":
    serve(sys.argv[1])

"""`roborl ...` for tests from a pre-imported interpreter: a fork server.

Every `roborl` a test runs used to start a fresh Python that imported torch, Gymnasium, MuJoCo,
Hydra, matplotlib and the plugins again: about 2.5 s of CPU before the command did anything,
paid a few hundred times per suite. Here one server process per pytest worker imports them
once and then forks a child per command. The child is the command as users run it
(`python -m roborl.core.cli ARGS`, run by `runpy` exactly as `-m` does, in the test's cwd, with
the test's environment, its own stdout/stderr files and exit code); only the imports came
before the fork instead of after the start.

A server serves one environment (`PYTHONPATH`, `MUJOCO_GL`, `OMP_NUM_THREADS`, ... are read
at import time; only `IGNORED_ENV` may differ): a command with another one gets a server of its
own. `ROBORL_TEST_FRESH_PROCESS=1` turns the servers off for a whole run (every command in a
fresh interpreter, as before), so no test depends on them.

Commands that need a live process (stdin, streamed events, signals) keep `subprocess.Popen`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

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
# Set per test (tests/conftest.py) and read when used, never at import.
IGNORED_ENV = frozenset({"PYTEST_CURRENT_TEST", "WANDB_DIR", "MINARI_DATASETS_PATH"})


def _send(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _receive(sock: socket.socket) -> dict:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the roborl test server closed the connection")
            out += chunk
        return out

    (size,) = struct.unpack("!I", exactly(4))
    return json.loads(exactly(size))


# -- the server ---------------------------------------------------------------------------------


def _run_child(request: dict) -> None:
    """In the forked child: become `python -m roborl.core.cli ARGS` and exit with its code."""
    import runpy
    import traceback

    os.setpgid(0, 0)  # its own group, so a timeout kills everything it started
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY)
    err = os.open(request["stderr"], os.O_WRONLY)
    for fd, target in ((stdin, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.argv = [request["main_file"], *request["args"]]
    sys.path[0] = request["cwd"]  # what `python -m` puts first
    code: int = 0
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
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve(path: str) -> None:
    """Import what commands need, then fork one child per request, one at a time."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        with conn:
            try:
                request = _receive(conn)
            except (ConnectionError, json.JSONDecodeError):
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                _run_child(request)
            _send(conn, {"pid": pid})
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            try:
                _send(conn, {"returncode": code})
            except OSError:
                pass


# -- the client ---------------------------------------------------------------------------------


class _Server:
    """This process's server: started on first use, stopped at exit."""

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
        keys = (set(env) | set(self.env)) - IGNORED_ENV
        return all(env.get(k) == self.env.get(k) for k in keys)


_servers: list[_Server] = []  # newest last; at most two environments at once
MAIN_FILE = str(Path(__file__).resolve().parents[1] / "roborl" / "core" / "cli" / "__main__.py")


def _server_for(env: Mapping[str, str]) -> _Server | None:
    """The live server started with `env` (a new one if none was: a test process's own
    environment can change mid-run, e.g. an import that sets `PYOPENGL_PLATFORM`)."""
    if os.environ.get("ROBORL_TEST_FRESH_PROCESS") == "1":
        return None
    for server in [s for s in _servers if not s.alive()]:
        server.stop()
        _servers.remove(server)
    for server in _servers:
        if server.serves(env):
            return server
    if len(_servers) == 2:
        _servers.pop(0).stop()
    _servers.append(_Server(env))
    return _servers[-1]


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
    argv = [sys.executable, "-m", "roborl.core.cli", *args]
    server = _server_for(env)
    if server is None:
        return subprocess.run(
            argv, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout
        )
    with tempfile.TemporaryDirectory(prefix="roborl-cli-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        request = {
            "args": list(args), "cwd": str(Path(cwd).resolve()), "env": dict(env),
            "stdout": str(out), "stderr": str(err), "main_file": MAIN_FILE,
        }  # fmt: skip
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(server.path)
            _send(sock, request)
            pid = _receive(sock)["pid"]
            sock.settimeout(timeout)
            try:
                code = _receive(sock)["returncode"]
            except TimeoutError:
                with contextlib.suppress(OSError):
                    os.killpg(pid, 9)
                sock.settimeout(None)
                _receive(sock)
                raise subprocess.TimeoutExpired(
                    argv, timeout, output=out.read_text(), stderr=err.read_text()
                ) from None
        return subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())


if __name__ == "__main__":
    serve(sys.argv[1])

"""Shared pieces of roborl's ROS 2 nodes (`sim_robot.py`: `roborl sim-robot`; `deploy.py`:
`roborl deploy`): JSON events, config composition, --help text and the error guard.

Both take `--ros-args ...` (and `--params-file FILE`) after their key=value overrides: the
overrides set the parameters' defaults, the ROS arguments override those. With transport=dds
there is no ROS node, and ROS arguments are refused with a clear error.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import threading
from typing import Any, Protocol, TypeVar

from roborl.core.config import build_config
from roborl.core.errors import RoborlError, RobotError
from roborl.core.stop_signals import STOP_SIGNALS

T = TypeVar("T")


class LogSink(Protocol):
    """Where a node's log lines go: a ROS 2 transport (/rosout) or a `Robot`."""

    def log(self, level: int, message: str) -> None: ...


_EVENT_LOCK = threading.Lock()


def emit_event(**fields: Any) -> None:
    """One JSON line on stdout, whole: written in one call under a lock, because `print`
    writes the text and the newline apart, and a line another thread (a watchdog, a service
    callback) printed in between made both unreadable to a script reading the events."""
    line = json.dumps(fields) + "\n"
    with _EVENT_LOCK:
        sys.stdout.write(line)
        sys.stdout.flush()


def announce(transport: LogSink | None, level: int, **fields: Any) -> None:
    """A JSON event on stdout (what scripts and tests read) and a log line on the node's
    logger (what /rosout and `ros2 topic echo /rosout` show; a robot's own log without ROS)."""
    emit_event(**fields)
    if transport is not None:
        rest = " ".join(f"{k}={v}" for k, v in fields.items() if k != "event")
        transport.log(level, f"{fields.get('event')}: {rest}")


SIM_ROBOT_CONFIG = "roborl_sim_robot"
DEPLOY_CONFIG = "roborl_deploy"


def compose_options(
    argv: list[str], cls: type[T], config: str, command: str
) -> tuple[T, dict[str, Any]]:
    """The command's options and its composed config (Hydra's compose, as every subcommand)."""
    from roborl.core.compose import compose_dict
    from roborl.core.plugins import get_host

    cfg = compose_dict(get_host(), argv, command, config)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return build_config(cls, {k: cfg[k] for k in names}), cfg


def command_help(usage: str, cls: type, groups: str) -> str:
    from roborl.core.cli import logs
    from roborl.core.help import field_lines, section

    return f"{usage}\n\n{section('Keys', field_lines(cls))}\n{groups}\n{logs.HELP}"


ROS_ARGS_HELP = (
    "ROS 2 arguments go last: --ros-args -p NAME:=VALUE [-r __ns:=/NS] [--params-file FILE]\n"
    "(or --params-file FILE alone). key=value overrides set the parameters' defaults; ROS\n"
    "arguments override them. transport=dds has no node and refuses ROS arguments."
)


def guard_command(fn: Any, command: str, summary: str) -> Any:
    def run(argv: list[str]) -> int:
        from roborl.core.cli import error_line

        try:
            return fn(argv)
        except (RoborlError, RobotError) as exc:
            print(error_line(command, exc), file=sys.stderr)
            return 2  # transports still open are closed by their atexit hook

    run.__doc__ = fn.__doc__
    run.summary = summary  # type: ignore[attr-defined]  # shown by `roborl --help`
    return run


def stop_on_signals() -> list[bool]:
    """A flag that any stop signal (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) sets, so a node's loop ends and closes its transport
    cleanly instead of dying mid-publish: ``while not stop[0]: ...``."""
    stop = [False]

    def on_signal(signum: int, frame: Any) -> None:
        stop[0] = True

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)
    return stop

"""`-v/--verbose` and `-q/--quiet` for every `roborl` command, and the logging they configure.

`roborl.core.cli.main` takes the flags off the arguments (before or after the command name)
and calls `configure` before the command runs, so built-in and plugin commands log the same
way: one stderr handler; roborl's loggers at INFO (DEBUG with -v, WARNING with -q); other
libraries' loggers at WARNING (INFO with -v). A run (`train`, `resume`) shows its progress
bar instead of its INFO lines, which go to RUN_DIR/cli.log at every verbosity; -v puts them
(and DEBUG) on the console too, -q also hides the bar. `train` runs under Hydra, which
configures logging itself: `hydra_overrides` says the same in Hydra's terms.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from roborl.core.errors import ConfigError

VERBOSE_FLAGS = ("-v", "--verbose")
QUIET_FLAGS = ("-q", "--quiet")
# Arguments after these belong to ROS 2 (`roborl deploy ... --ros-args -p x:=1`), not to us.
STOP_AT = ("--ros-args", "--params-file")
FORMAT = "%(levelname)s %(name)s: %(message)s"
RUN_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's, for cli.log

HELP = (
    "Logging (every command): -v/--verbose DEBUG, -q/--quiet warnings only "
    "(default: INFO on stderr)."
)

_level = logging.INFO
_HANDLER_FLAG = "_roborl_cli"


def split_verbosity(args: Sequence[str], command: str = "") -> tuple[int, list[str]]:
    """The log level the arguments ask for (INFO, DEBUG with -v, WARNING with -q) and the
    arguments without those flags."""
    verbose = quiet = False
    rest: list[str] = []
    for i, arg in enumerate(args):
        if arg in STOP_AT:
            rest += args[i:]
            break
        if arg in VERBOSE_FLAGS:
            verbose = True
        elif arg in QUIET_FLAGS:
            quiet = True
        else:
            rest.append(arg)
    if verbose and quiet:
        name = f"roborl {command}" if command else "roborl"
        raise ConfigError(f"{name}: give -v/--verbose or -q/--quiet, not both.")
    return (logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO), rest


def level() -> int:
    """The level the last `configure` set (INFO before any)."""
    return _level


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time (pytest swaps it between tests)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def _remove_ours() -> None:
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, _HANDLER_FLAG, False)]:
        root.removeHandler(h)
        h.close()


def configure(new_level: int = logging.INFO) -> None:
    """One stderr handler on the root logger: roborl's loggers at `new_level`, other
    libraries' at WARNING (INFO when `new_level` is DEBUG). Calling it again replaces it."""
    global _level
    _level = new_level
    root = logging.getLogger()
    _remove_ours()
    handler = _Stderr()
    handler.setFormatter(logging.Formatter(FORMAT))
    setattr(handler, _HANDLER_FLAG, True)
    root.addHandler(handler)
    root.setLevel(logging.INFO if new_level <= logging.DEBUG else logging.WARNING)
    logging.getLogger("roborl").setLevel(new_level)


@contextlib.contextmanager
def configured(new_level: int) -> Iterator[None]:
    """`configure(new_level)` for the length of one command; the logging as it was before
    afterwards (`main` called in-process, by tests or notebooks, leaves nothing behind)."""
    global _level
    root, ours = logging.getLogger(), logging.getLogger("roborl")
    saved = (_level, root.level, ours.level)
    configure(new_level)
    try:
        yield
    finally:
        _remove_ours()
        _level = saved[0]
        root.setLevel(saved[1])
        ours.setLevel(saved[2])


def configure_run(run_dir: str | Path) -> None:
    """Logging of a run outside Hydra (`resume`), as Hydra's job logging does it for `train`:
    the run's INFO lines appended to RUN_DIR/cli.log, the console at WARNING unless -v."""
    root = logging.getLogger()
    for h in root.handlers:
        if getattr(h, _HANDLER_FLAG, False):
            h.setLevel(_level if _level <= logging.DEBUG else logging.WARNING)
    log_file = logging.FileHandler(Path(run_dir) / "cli.log")
    log_file.setFormatter(logging.Formatter(RUN_FORMAT))
    setattr(log_file, _HANDLER_FLAG, True)
    root.addHandler(log_file)
    logging.getLogger("roborl").setLevel(min(_level, logging.INFO))


def hydra_overrides(args: Sequence[str]) -> list[str]:
    """`configure_run` for `train`, whose logging Hydra's job logging configures (config.yaml:
    the console at WARNING, INFO to cli.log): roborl's loggers at INFO or below, and the Hydra
    overrides for -v (console at DEBUG) and -q (Hydra's own lines at WARNING, no progress bar
    unless `progress=` is given)."""
    logging.getLogger("roborl").setLevel(min(_level, logging.INFO))
    if _level <= logging.DEBUG:
        return ["hydra.job_logging.handlers.console.level=DEBUG"]
    if _level >= logging.WARNING:
        out = ["hydra.hydra_logging.root.level=WARNING"]  # "Launching N jobs locally"
        if not any(a.lstrip("+").startswith("progress=") for a in args):
            out.append("progress=false")
        return out
    return []

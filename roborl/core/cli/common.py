"""What every `roborl` command shares: help flags, option parsing, the plugin host, error lines.

Plugin commands use `command_options` and `error_line` too (through `roborl.core.cli`), so a
plugin's `roborl X` parses `key=value` and prints its errors the way the built-in ones do.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, TypeVar

from roborl.core.compose import split_overrides
from roborl.core.config import build_config
from roborl.core.errors import ConfigError, did_you_mean

T = TypeVar("T")

HELP_FLAGS = ("-h", "--help")


def wants_help(args: Sequence[str]) -> bool:
    """`-h` or `--help` anywhere among a command's arguments."""
    return any(a in HELP_FLAGS for a in args)


def command_options(
    cls: type[T], args: Sequence[str], command: str, passthrough: Sequence[str] = ()
) -> tuple[T, list[str]]:
    """A command's own options (dataclass `cls`) from `key=value` args, typed and checked.

    Overrides whose top-level key is in `passthrough` (config sections such as `env`) are
    returned for composition; any other key is an error with a did-you-mean.
    """
    from roborl.core.compose import override_key, parse_overrides

    keys = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    own, rest = split_overrides(args, keys, command)
    for ov in parse_overrides(rest, command):
        top = override_key(ov).split(".")[0].split("/")[0]
        if top not in passthrough:
            accepted = sorted([*keys, *passthrough])
            raise ConfigError(
                f"roborl {command}: unknown argument {override_key(ov)!r}."
                f"{did_you_mean(top, accepted)} Accepted: {', '.join(accepted)} "
                f"(roborl {command} --help lists them)."
            )
    return build_config(cls, own), rest


def disabled_from_args(args: Sequence[str]) -> list[str]:
    """`plugins.disable=[a,b]` is needed before composition (it decides what loads)."""
    from roborl.core.compose import override_value, parse_overrides

    given = [a for a in args if a.startswith(("plugins.disable=", "+plugins.disable="))]
    for ov in parse_overrides(given[-1:], "train"):
        value = override_value(ov)
        return [str(v) for v in (value if isinstance(value, list) else [value])]
    return []


def load_host(args: Sequence[str] = (), disable: Sequence[str] = ()) -> Any:
    """The plugin host (minus `plugins.disable=` and `disable`), its load problems warned."""
    from roborl.core.plugins import get_host

    host = get_host([*disabled_from_args(args), *disable])
    for info in host.failures():
        print(f"roborl: warning: {host.format_failure(info)}", file=sys.stderr)
    for key in host.registry.conflicts:
        print(f"roborl: warning: {host.registry.conflict_message(*key)}", file=sys.stderr)
    return host


def error_line(command: str, exc: BaseException) -> str:
    """`roborl X: error: ...`, the form argparse-based plugin commands print too."""
    message = str(exc)
    prefix = f"roborl {command}: "
    if message.startswith(prefix):  # messages that already name their command
        message = message[len(prefix) :]
    return f"{prefix}error: {message}" if command else f"roborl: error: {message}"


def summary_line(run_dir: str, summary: dict[str, Any]) -> str:
    """The one line `train` and `resume` print when a run ends."""
    ret = summary.get("final_eval_return")
    ret_s = "n/a" if ret is None else f"{ret:.1f}"
    # An offline run steps no env: its budget is gradient updates, so count those instead.
    steps, updates = summary.get("steps") or 0, summary.get("updates") or 0
    work = f"{steps} steps" if steps else f"{updates} updates (offline)"
    if steps and updates:
        work += f", {updates} updates"
    return (
        f"roborl: {summary['status']}: {summary['algo']} on {summary['env']}, "
        f"{work} in {summary['wall_time_s']:.0f}s, final eval return {ret_s}; "
        f"run directory: {run_dir}"
    )


def algo_prefix_to_algo(args: Sequence[str]) -> list[str]:
    """`NAME.key=v` is `algo.key=v` when `algo=NAME` is given (`algo=llm llm.model=PATH`)."""
    name = next((a.split("=", 1)[1] for a in args if a.startswith("algo=")), None)
    if not name:
        return list(args)
    return [f"algo.{a[len(name) + 1 :]}" if a.startswith(name + ".") else a for a in args]

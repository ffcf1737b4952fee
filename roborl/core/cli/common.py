"""What every `roborl` command shares: help flags, option parsing, the plugin host, error lines.

Plugin commands use `command_options` and `error_line` too (through `roborl.core.cli`), so a
plugin's `roborl X` parses `key=value` and prints its errors the way the built-in ones do.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping, Sequence
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
    cls: type[T], args: Sequence[str], command: str, passthrough: Sequence[str] | None = ()
) -> tuple[T, list[str]]:
    """A command's own options (dataclass `cls`) from `key=value` args, typed and checked.

    Overrides whose top-level key is in `passthrough` (config sections such as `env`) are
    returned for composition; any other key is an error with a did-you-mean.
    `passthrough=None` returns every other override, for a caller that composes them (and so
    refuses unknown keys itself).
    """
    from roborl.core.compose import override_key, parse_overrides

    keys = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for arg in args:  # `out=` with nothing after it: a forgotten value, not ''
        key = arg[:-1].lstrip("+")
        if arg.endswith("=") and key in keys:
            meta = next(f.metadata for f in dataclasses.fields(cls) if f.name == key)  # type: ignore[arg-type]
            what = f" ({meta['help']})" if meta.get("help") else ""
            raise ConfigError(
                f"roborl {command}: {arg!r} has no value; give {key}=VALUE{what}, or drop it "
                f"for the default (roborl {command} --help lists the keys)."
            )
    own, rest = split_overrides(args, keys, command)
    for ov in parse_overrides(rest if passthrough is not None else [], command):
        top = override_key(ov).split(".")[0].split("/")[0]
        if top not in passthrough:
            accepted = sorted([*keys, *(passthrough or ())])
            raise ConfigError(
                f"roborl {command}: unknown argument {override_key(ov)!r}."
                f"{did_you_mean(top, accepted)} Accepted: {', '.join(accepted)} "
                f"(roborl {command} --help lists them)."
            )
    return build_config(cls, own), rest


def deprecated_flags(args: Sequence[str], flags: Mapping[str, str], command: str) -> list[str]:
    """`args` with the older `--flag value` spellings rewritten as `key=value`, each with a
    one-line deprecation warning on stderr naming the new spelling.

    `flags` maps a flag to its key (`{"--out": "out"}`: `--out DIR` and `--out=DIR` become
    `out=DIR`) or, for a flag without a value, to the whole argument (`{"--no-plots":
    "plots=false"}`). Every flag kept this way goes away in the release after the one that
    deprecated it (see CHANGELOG.md).
    """
    out: list[str] = []
    it = iter(args)
    for arg in it:
        name, eq, inline = arg.partition("=")
        target = flags.get(name) if name.startswith("--") else None
        if target is None:
            out.append(arg)
            continue
        if "=" in target:  # a switch: `--check` -> `check=true`
            if eq:
                raise ConfigError(f"roborl {command}: {name} takes no value; write {target}.")
            new, old = target, name
        else:
            value = inline if eq else next(it, None)
            if value is None or (not eq and value.startswith("-")):
                raise ConfigError(f"roborl {command}: {name} needs a value; write {target}=VALUE.")
            new, old = f"{target}={_quoted(value)}", (arg if eq else f"{name} {value}")
        print(
            f"roborl {command}: warning: {old!r} is deprecated and goes in the next release; "
            f"write {new!r}.",
            file=sys.stderr,
        )
        out.append(new)
    return out


def _quoted(value: str) -> str:
    """`value` as one Hydra override value: quoted where the grammar would split or read it."""
    if re.fullmatch(r"[\w./:@+~-]+", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


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
    elif command and message.startswith(f"roborl {command} "):  # ... or its subcommand
        head, sep, rest = message.partition(": ")
        if sep and " " not in head[len(prefix) :]:
            return f"{head}: error: {rest}"
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

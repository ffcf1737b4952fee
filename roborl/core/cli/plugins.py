"""`roborl plugins`: list the loaded plugins and what each provides; `check=true` validates them."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from roborl.core.cli import logs
from roborl.core.cli.common import command_options, deprecated_flags, wants_help


@dataclass
class PluginsOptions:
    """`roborl plugins [check=true] [json=true]`."""

    check: bool = field(
        default=False,
        metadata={"help": "validate hooks, names and types; exit 1 on a problem"},
    )
    json: bool = field(default=False, metadata={"help": "machine-readable listing"})


DEPRECATED = {"--check": "check=true", "--json": "json=true"}


def plugins_help() -> str:
    from roborl.core.help import field_lines, section

    return (
        "usage: roborl plugins [check=true] [json=true]\n\n"
        "List the loaded plugins (entry points of group roborl.plugins) with what each\n"
        "provides and its config dirs.\n\n"
        + section("Keys", field_lines(PluginsOptions))
        + "Environment: ROBORL_DISABLE_PLUGINS=a,b skips plugins by name.\n"
        "Older spellings still work for one release: --check, --json.\n" + logs.HELP
    )


def cmd_plugins(args: list[str]) -> int:
    from roborl.core.hookspecs import HOOKSPEC_VERSION
    from roborl.core.plugins import get_host

    if wants_help(args):
        print(plugins_help())
        return 0
    opts, _ = command_options(
        PluginsOptions, deprecated_flags(args, DEPRECATED, "plugins"), "plugins"
    )
    as_json, check = opts.json, opts.check
    host = get_host()
    infos = list(host.infos.values())
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "name": i.name,
                        "distribution": i.distribution,
                        "version": i.version,
                        "provides": i.provides,
                        "config_dirs": i.config_dirs,
                        "error": i.error,
                        "disabled": i.disabled,
                    }
                    for i in infos
                ],
                indent=2,
            )
        )
    else:
        print(f"roborl plugins (hookspec {HOOKSPEC_VERSION}):")
        for i in infos:
            state = "disabled" if i.disabled else ("FAILED" if i.error else "ok")
            print(f"  {i.name:<16} {i.distribution} {i.version}  [{state}]")
            for kind, names in sorted(i.provides.items()):
                print(f"      {kind}: {', '.join(sorted(names))}")
            if i.config_dirs:
                print(f"      configs: {', '.join(i.config_dirs)}")
            if i.error:
                print(f"      error: {i.error}")
    if check:
        problems = host.check()
        if problems:
            print("\nproblems:", file=sys.stderr)
            for p in problems:
                print(f"  - {p}", file=sys.stderr)
            return 1
        print("\nall plugins valid")
    return 0

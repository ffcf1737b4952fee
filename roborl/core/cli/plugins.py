"""`roborl plugins`: list the loaded plugins and what each provides; `--check` validates them."""

from __future__ import annotations

import json
import sys

from roborl.core.cli.common import wants_help
from roborl.core.errors import ConfigError


def cmd_plugins(args: list[str]) -> int:
    from roborl.core.hookspecs import HOOKSPEC_VERSION
    from roborl.core.plugins import get_host

    if wants_help(args):
        print(
            "usage: roborl plugins [--check] [--json]\n\n"
            "List the loaded plugins (entry points of group roborl.plugins) with what each\n"
            "provides and its config dirs.\n\n"
            "Keys:\n"
            "  --check                         validate hooks, names and types; exit 1 on a problem\n"
            "  --json                          machine-readable listing\n"
            "  ROBORL_DISABLE_PLUGINS=a,b      (environment) skip plugins by name"
        )
        return 0
    as_json = "--json" in args
    check = "--check" in args
    unknown = [a for a in args if a not in ("--json", "--check")]
    if unknown:
        raise ConfigError(
            f"roborl plugins: unknown option(s) {' '.join(unknown)}; accepted: --check, --json."
        )
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

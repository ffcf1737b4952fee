"""The `roborl` console script: finds the command and turns errors into one line each.

Every subcommand takes Hydra-style overrides (`key=value`, parsed by Hydra's grammar in
`roborl.core.compose`) and composes its config there; `train` runs through `@hydra.main` for
`-m` sweeps, launchers and run directories. `roborl X --help` lists X's keys with defaults and
meanings from the config dataclasses. Plugins add subcommands (`dataset`, `deploy`,
`sim-robot`, `report`, ...) through the `roborl_cli_commands` hook; `roborl --help` shows
each one's `summary` attribute or the first line of its docstring.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from roborl.core.cli import logs
from roborl.core.cli.common import command_options, deprecated_flags, error_line, load_host
from roborl.core.cli.eval import cmd_eval
from roborl.core.cli.plugins import cmd_plugins
from roborl.core.cli.resume import cmd_resume
from roborl.core.cli.train import cmd_train
from roborl.core.errors import ConfigError, RoborlError, did_you_mean, missing_extra

__all__ = ["command_options", "deprecated_flags", "error_line", "logs", "main"]
"""`command_options`, `deprecated_flags` and `error_line` are for plugin commands
(`roborl_cli_commands`); `logs` is the -v/-q logging every command gets from `main`."""

USAGE = """\
usage: roborl [-v|-q] <command> [key=value ...]   (roborl <command> --help: its keys, defaults)

{commands}
Examples:
  roborl train algo=sac env=halfcheetah seed=3 total_steps=50000 num_envs=4 logger=wandb
  roborl train -m seed=0,1,2
  roborl train algo=iql --cfg job          (print the composed config, every key)
  roborl -v eval checkpoint=runs/.../checkpoints/last.pt     (DEBUG log lines)

-v/--verbose (DEBUG) and -q/--quiet (warnings only) work with every command, before or
after its name.
"""

BUILTIN_SUMMARIES = {
    "train": "train an algorithm (default: SAC on InvertedPendulum-v5); -m for sweeps",
    "eval": "evaluate a checkpoint (or a checkpoint-free algo=NAME), writes eval.json",
    "resume": "continue an interrupted run from its checkpoints/last.pt",
    "plugins": "list loaded plugins; check=true validates them",
}

BUILTIN_COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "train": cmd_train,
    "eval": cmd_eval,
    "resume": cmd_resume,
    "plugins": cmd_plugins,
}


def main_help() -> str:
    from roborl.core.help import summary_of

    lines = [f"  {name:<12} {text}" for name, text in BUILTIN_SUMMARIES.items()]
    try:
        from roborl.core.plugins import get_host

        cmds = get_host().registry.commands
        lines += [f"  {name:<12} {summary_of(fn)}" for name, fn in sorted(cmds.items())]
    except RoborlError:
        pass
    return USAGE.format(commands="commands:\n" + "\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    running = ""  # the command, once it is known to exist (names it in error lines)
    try:
        level, args = logs.split_verbosity(args)  # -v/-q before or after the command
        with logs.configured(level):
            if not args or args[0] in ("-h", "--help", "help"):
                print(main_help())
                return 0
            command, rest = args[0], args[1:]
            if command in BUILTIN_COMMANDS:
                running = command
                return BUILTIN_COMMANDS[command](rest)
            host = load_host()
            commands = host.registry.commands
            if command in commands:
                running = command
                return int(commands[command](rest) or 0)
            known = sorted([*BUILTIN_COMMANDS, *commands])
            raise ConfigError(
                f"unknown command {command!r}.{did_you_mean(command, known)} "
                f"Commands: {', '.join(known)}."
            )
    except RoborlError as exc:
        print(error_line(running, exc), file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:  # a feature whose extra is not installed
        if (missing := missing_extra(exc)) is None:
            raise
        print(error_line(running, missing), file=sys.stderr)
        return missing.exit_code
    except KeyboardInterrupt:
        print(
            "roborl: interrupted; the last checkpoint and summary.json were written.",
            file=sys.stderr,
        )
        return 130
    except BrokenPipeError:  # `roborl train --help | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

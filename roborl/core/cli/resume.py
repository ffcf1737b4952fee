"""`roborl resume run_dir=PATH`: continue an interrupted run from its checkpoints/last.pt.

A missing or unreadable last.pt falls back to previous.pt (`load_checkpoint` warns).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from roborl.core.cli import logs
from roborl.core.cli.common import command_options, load_host, summary_line, wants_help
from roborl.core.config import RunConfig
from roborl.core.errors import ConfigError


@dataclass
class ResumeOptions:
    """`roborl resume run_dir=PATH [RUN_KEY=VALUE ...]`."""

    run_dir: str | None = field(
        default=None, metadata={"help": "run directory of an interrupted run (required)"}
    )


def resume_help(args: Sequence[str]) -> str:
    """Run keys with the run's saved values when `run_dir=` is given, else RunConfig's."""
    from roborl.core.help import field_lines, section

    given = [a for a in args if a.startswith("run_dir=")]
    saved_cfg = Path(given[-1].split("=", 1)[1]) / "config.yaml" if given else None
    saved: dict[str, Any] = {}
    if saved_cfg is not None and saved_cfg.is_file():
        saved = dict(yaml.safe_load(saved_cfg.read_text()) or {})
    title = (
        "Run keys (the run's saved values)"
        if saved
        else "Run keys (RunConfig defaults; a resumed run keeps its saved values, which "
        "roborl resume run_dir=PATH --help shows)"
    )
    values = {k: v for k, v in saved.items() if k in RunConfig.__dataclass_fields__}
    return (
        "usage: roborl resume run_dir=PATH [RUN_KEY=VALUE ...]\n\n"
        "Continue a run from RUN_DIR/checkpoints/last.pt (previous.pt where last.pt is missing\n"
        "or unreadable) with its saved config.yaml; run-level keys may be changed (e.g.\n"
        "total_steps=50000 to extend it), the algorithm may not.\n\n"
        + section("Keys", field_lines(ResumeOptions))
        + "\n"
        + section(title, field_lines(RunConfig, values=values))
        + logs.HELP[:-1]
        + "; the run's INFO lines are appended to RUN_DIR/cli.log, the console shows the\n"
        "progress bar (-v: INFO and DEBUG there too; -q: no progress bar)."
    )


def cmd_resume(args: list[str]) -> int:
    from roborl.core.checkpoint import PREVIOUS_NAME
    from roborl.core.compose import compose_saved
    from roborl.core.runner import Runner

    run_keys = sorted(RunConfig.__dataclass_fields__)
    if wants_help(args):
        print(resume_help(args))
        return 0
    opts, rest = command_options(ResumeOptions, args, "resume", passthrough=run_keys)
    if not opts.run_dir:
        raise ConfigError(
            "roborl resume: run_dir=PATH is required (a run directory of a previous run)."
        )
    run_dir = Path(opts.run_dir)
    config_path = run_dir / "config.yaml"
    last = run_dir / "checkpoints" / "last.pt"
    previous = last.with_name(PREVIOUS_NAME)
    if not config_path.exists():
        raise ConfigError(
            f"roborl resume: {str(run_dir)!r} has no config.yaml; is it a roborl run directory?"
        )
    if not last.exists() and not previous.exists():  # load_checkpoint falls back to previous.pt
        raise ConfigError(
            f"roborl resume: {str(run_dir)!r} has no checkpoints/last.pt yet (the run stopped "
            "before its first checkpoint); start it again with roborl train."
        )
    saved = yaml.safe_load(config_path.read_text()) or {}
    host = load_host(disable=(saved.get("plugins") or {}).get("disable") or [])
    cfg = compose_saved(host, saved, rest, "resume")
    logs.configure_run(run_dir)  # as train's Hydra job logging: INFO to cli.log
    if logs.level() >= logging.WARNING and not any(a.startswith("progress=") for a in rest):
        cfg["progress"] = False  # -q: warnings only, no progress bar
    summary = Runner(cfg, run_dir, host).execute(resume_from=last)
    print(summary_line(str(run_dir), summary))
    return 0

"""`roborl report RUN_DIRS...`: aggregate runs across seeds and methods (rliable)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roborl.core.hookspecs import hookimpl


def _cmd_report(argv: list[str]) -> int:
    """aggregate run directories across seeds and methods: IQM, CIs, profiles, curves"""
    from roborl.plugins.report.cli import main

    return main(argv)


def aggregate(*args: Any, **kwargs: Any) -> Any:
    """See `roborl.plugins.report.aggregate.aggregate`."""
    from roborl.plugins.report.aggregate import aggregate as _aggregate

    return _aggregate(*args, **kwargs)


@hookimpl
def roborl_cli_commands() -> dict[str, Callable[[list[str]], int]]:
    return {"report": _cmd_report}

"""`roborl report RUN_DIRS...` (rliable aggregates) and `roborl compare` (AdaStop decisions).

Also registers `algo=random`, the baseline both need (`roborl.plugins.report.baselines`).
"""

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


def _cmd_compare(argv: list[str]) -> int:
    """run two or more configs seed group by seed group until AdaStop decides every pair"""
    from roborl.plugins.report.compare import main

    return main(argv)


@hookimpl
def roborl_cli_commands() -> dict[str, Callable[[list[str]], int]]:
    return {"report": _cmd_report, "compare": _cmd_compare}


@hookimpl
def roborl_algorithms() -> dict[str, type]:
    from roborl.plugins.report.baselines import RandomAgent

    return {"random": RandomAgent}

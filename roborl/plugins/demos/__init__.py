"""`roborl demos record`: demonstrations for `demos=` (RLPD/SERL) and for reward classifiers."""

from __future__ import annotations

from collections.abc import Callable

from roborl.core.hookspecs import hookimpl


def _cmd_demos(argv: list[str]) -> int:
    """record demonstrations into roborl's dataset format: roborl demos record ..."""
    from roborl.plugins.demos.cli import main

    return main(argv)


@hookimpl
def roborl_cli_commands() -> dict[str, Callable[[list[str]], int]]:
    return {"demos": _cmd_demos}

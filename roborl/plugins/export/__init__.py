"""`roborl export checkpoint=PATH out=DIR [push=REPO_ID]`: a policy folder that is safe to share.

The folder (safetensors weights, config.json, a model card) is described in
`roborl.core.model_dir`; `roborl eval model=DIR` and `roborl deploy model=DIR` load it.
"""

from __future__ import annotations

from collections.abc import Callable

from roborl.core.hookspecs import hookimpl


def _cmd_export(argv: list[str]) -> int:
    """write a checkpoint's policy as safetensors + config.json + model card; push= uploads"""
    from roborl.plugins.export.cli import main

    return main(argv)


@hookimpl
def roborl_cli_commands() -> dict[str, Callable[[list[str]], int]]:
    return {"export": _cmd_export}

"""Distributed collection on Ray: `roborl train distributed=ray ray.num_workers=N`.

Rollout workers are Ray actors, each with its own vector env and a copy of the policy; one
learner (this process) owns the replay buffer and the algorithm, takes transitions from the
workers as they arrive and pushes weights back every `ray.sync_every` env steps. See
`roborl.plugins.ray.loop` and docs/scaling.md. `ray` is imported only when the loop runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from roborl.core.hookspecs import hookimpl


def _ray_loop(runner: Any, ckpt: Any) -> Any:
    from roborl.plugins.ray.loop import ray_loop

    return ray_loop(runner, ckpt)


def _cmd_tune(argv: list[str]) -> int:
    from roborl.plugins.ray.sweep import main

    return main(argv)


@hookimpl
def roborl_cli_commands() -> dict[str, Callable[[list[str]], int]]:
    return {"tune": _cmd_tune}


@hookimpl
def roborl_loops() -> dict[str, Callable[..., Any]]:
    return {"ray": _ray_loop}

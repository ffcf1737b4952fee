"""Distributed collection on Ray: `roborl train collector=ray ray.num_workers=N`
(`distributed=ray` is the older spelling of the same thing).

Rollout workers are Ray actors, each with its own vector env and a copy of the policy; the
off-policy loop in this process owns the replay buffer and the algorithm, takes transitions
from the workers as they arrive, and pushes weights back every `ray.sync_every` env steps.
See `roborl.plugins.ray.loop` and docs/scaling.md. `ray` is imported only when collection
starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from roborl.core.hookspecs import hookimpl

if TYPE_CHECKING:
    from roborl.core.context import TrainContext
    from roborl.core.loops.collectors import Collector


def _ray_collector(ctx: TrainContext) -> Collector:
    if ctx.config.get("robot"):
        from roborl.core.errors import ConfigError

        raise ConfigError(
            "collector=ray (distributed=ray) cannot drive a real robot: each Ray rollout worker "
            "would open its own driver on the one robot, and nothing would keep the learner's "
            "updates out of the control loop. Use the actor-learner split, collector=actor_learner "
            "(an actor process beside the robot; docs/robots.md), or drop collector=ray / "
            "distributed=ray: with robot= roborl uses the robot collector (whole episodes at "
            "the control rate, updates while the robot holds between episodes)."
        )
    from roborl.plugins.ray.loop import RayCollector

    return RayCollector(ctx)


def _cmd_tune(argv: list[str]) -> int:
    """sweep `roborl train` runs as Ray Tune trials (a,b / range() / glob() / interval())"""
    from roborl.plugins.ray.sweep import main

    return main(argv)


@hookimpl
def roborl_cli_commands() -> dict[str, Callable[[list[str]], int]]:
    return {"tune": _cmd_tune}


@hookimpl
def roborl_collectors() -> dict[str, Callable[..., Any]]:
    return {"ray": _ray_collector}

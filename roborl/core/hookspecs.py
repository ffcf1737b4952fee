"""roborl's hook specifications (pluggy), version `HOOKSPEC_VERSION`.

A plugin is any module or object, exposed under the entry-point group ``roborl.plugins``,
that implements some of these hooks with `@hookimpl`. Provider hooks return a mapping of
names to things; event hooks observe a run. pluggy checks every implementation's signature
against these specs when the plugin is registered, so a typo is reported with the plugin's name.

Version 2 (issue 18): a loop is ``loop(ctx: TrainContext)`` (it was ``loop(runner, ckpt)``),
`Algorithm.loop` names it, and `roborl_collectors` was added. 2.1 (issue 20): `roborl_rewards`.
2.2 (issue 36): `roborl_dataset_writers`. 2.3 (issue 50): `roborl_should_stop`.
2.4 (issue 49): `roborl_training_wrappers`. 2.5 (issue 49): `roborl_config_sections`.

Versioning: the major number changes when a hook is removed or its arguments change; a plugin
may declare ``ROBORL_HOOKSPEC_VERSION = "2"`` and is refused (with its name) on a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from roborl.core.context import TrainContext
    from roborl.core.interfaces import Algorithm
    from roborl.core.loops.collectors import Collector

PROJECT_NAME = "roborl"
HOOKSPEC_VERSION = "2.5"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -- providers ---------------------------------------------------------------------------------


@hookspec
def roborl_algorithms() -> Mapping[str, type]:
    """Algorithm classes by name (`algo.name=`); subclasses of `roborl.core.interfaces.Algorithm`."""


@hookspec
def roborl_envs() -> Mapping[str, Callable[..., Any]]:
    """Env factories by id (`env.id=`): ``factory(**env.kwargs) -> gymnasium.Env``."""


@hookspec
def roborl_robots() -> Mapping[str, Callable[..., Any]]:
    """Real-robot backends by name (`robot=`): ``factory(robot_config) -> gymnasium.Env``,
    already wrapped in the safety layer."""


@hookspec
def roborl_loggers() -> Mapping[str, type]:
    """Logger classes by name (`logger=`); subclasses of `roborl.core.interfaces.Logger`."""


@hookspec
def roborl_dataset_sources() -> Mapping[str, Callable[..., Any]]:
    """Dataset loaders by format name: ``loader(path, **options) -> dataset``."""


@hookspec
def roborl_dataset_writers() -> Mapping[str, Callable[..., Any]]:
    """Dataset writers by scheme: ``writer(dataset, target) -> Path`` writes an `out=` of the
    form ``SCHEME:TARGET`` (``minari:ID``, ``lerobot:DIR``); plain ``*.npz``/``*.hdf5`` paths
    are core's own. Why a hook: `roborl demos record` and `roborl dataset` reach a format
    that a plugin provides by name, without importing that plugin."""


@hookspec
def roborl_config_dirs() -> list[str]:
    """Hydra config search-path entries (``pkg://module.path`` or a directory) so that
    `algo=theirs`, `env=theirs` resolve once the plugin is installed."""


@hookspec
def roborl_loops() -> Mapping[str, Callable[[TrainContext], Algorithm]]:
    """Training loops by name, chosen by `Algorithm.loop`: ``loop(ctx) -> Algorithm``.

    The built-in "offpolicy", "offline" and "own" loops register through this same hook
    (`roborl.core.loops`). A loop builds the algorithm with `ctx.build_algorithm`, calls
    `ctx.resume` and `ctx.begin`, moves the counters with `ctx.advance`, asks `ctx.due` when
    to log, evaluate and checkpoint, and ends with `ctx.finish`."""


@hookspec
def roborl_collectors() -> Mapping[str, Callable[[TrainContext], Collector]]:
    """Experience sources of the off-policy loop by name (`collector=`, e.g. ``ray``):
    ``factory(ctx) -> roborl.core.loops.collectors.Collector``. The built-in "vector"
    collector (an in-process vector env) registers through this same hook."""


@hookspec
def roborl_rewards() -> Mapping[str, Callable[..., Any]]:
    """Reward models by name (`reward=`): ``factory(**options) -> RewardModel``, where the
    options are the `reward.*` keys other than the wrapper's (`roborl.core.rewards`) and the
    model maps one observation to ``(reward, success)``. The run wraps every env (sim or
    `robot=`) in `roborl.core.rewards.LearnedReward` with it."""


@hookspec
def roborl_training_wrappers() -> Mapping[str, Callable[..., Any]]:
    """Wrappers that only training envs get, by the top-level config key that turns each on
    (e.g. ``scripted_person``, from `roborl.hil`): ``wrap(cfg, maker) -> maker``, applied by
    `roborl.core.envs.make_vec_env` when ``cfg[key]`` is set (not null or false). Evaluation
    envs never get them: a person in the loop belongs to training, not to the score."""


@hookspec
def roborl_config_sections() -> Mapping[str, str]:
    """Top-level config sections the plugin reads, by name, each with a one-line description
    of what it configures (e.g. ``{"ray": "Ray rollout workers for collector=ray"}``).

    Why a hook: a run refuses a top-level key that is neither a run-level key nor a section,
    so that a typo (``totl_steps=``) is caught; core names only its own sections (algo, env,
    robot, logger, plugins, hydra), and a plugin's own section (``+myplugin.rate=3``, or one
    from its `roborl_config_dirs`) is accepted once the plugin declares it here."""


@hookspec
def roborl_cli_commands() -> Mapping[str, Callable[[list[str]], int]]:
    """Extra `roborl <command>` subcommands: ``fn(argv) -> exit code``."""


# -- run events --------------------------------------------------------------------------------


@hookspec
def roborl_run_start(run_dir: str, config: Mapping[str, Any]) -> None:
    """A run (new or resumed) is about to start collecting."""


@hookspec
def roborl_metrics(step: int, metrics: Mapping[str, float]) -> None:
    """A metrics event was written to `metrics.jsonl`."""


@hookspec
def roborl_checkpoint(path: str, step: int) -> None:
    """A checkpoint was written atomically to `path`."""


@hookspec
def roborl_should_stop(
    run_dir: str, step: int, updates: int, metrics: Mapping[str, float]
) -> str | bool | None:
    """After each evaluation (its `eval/...` `metrics`, already logged): return a reason (a
    string, or True) to end the run early, None to let it go on; raising
    `roborl.core.errors.StopRun(reason)` does the same.

    Why a hook: a sweep's pruner (`roborl tune sampler=optuna`) or a plugin's own criterion
    (a target return reached, a cost budget spent) ends a run without its loop knowing. The
    run ends as a finished one does, at the loop's next `ctx.finished` check (a loop that
    does not check it, at its next evaluation): its final evaluation and `last.pt` are written, `summary.json` says `status: stopped` and the
    `stop_reason`. Once one implementation asks, the later evaluations (if any) ask no one;
    an answer at the evaluation that ends the budget changes nothing (the run is over)."""


@hookspec
def roborl_run_end(run_dir: str, summary: Mapping[str, Any]) -> None:
    """The run finished (or was interrupted) and `summary.json` was written."""


PROVIDER_HOOKS = {
    "roborl_algorithms": "algorithms",
    "roborl_envs": "envs",
    "roborl_robots": "robots",
    "roborl_loggers": "loggers",
    "roborl_dataset_sources": "dataset_sources",
    "roborl_dataset_writers": "dataset_writers",
    "roborl_cli_commands": "commands",
    "roborl_loops": "loops",
    "roborl_collectors": "collectors",
    "roborl_rewards": "rewards",
    "roborl_training_wrappers": "training_wrappers",
    "roborl_config_sections": "config_sections",
}

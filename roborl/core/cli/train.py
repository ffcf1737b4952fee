"""`roborl train`: one run, or a Hydra sweep with `-m`, and its `--help`."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from roborl.core.cli import logs
from roborl.core.cli.common import HELP_FLAGS, error_line, load_host, summary_line, wants_help
from roborl.core.config import RunConfig
from roborl.core.errors import ConfigError, RoborlError, missing_extra
from roborl.core.help import first_line
from roborl.core.secrets import redact_hydra_dir

BUDGETS = """\
Budgets: total_steps counts env steps (SAC, DSAC-T, SAC-Lagrangian, SB3),
total_updates counts gradient updates of offline methods (IQL, RIQL, BC, FISOR); an
offline-to-online method (WSRL) pre-trains for algo.pretrain_steps updates, then runs
total_steps online env steps. eval_every/checkpoint_every/log_every use the same clock."""


LOOP_BUDGETS = {
    "offpolicy": "runs total_steps env steps (utd_ratio updates per env step after "
    "learning_starts)",
    "offline": "trains for total_updates gradient updates on dataset=PATH; total_steps is "
    "not used, and eval_every/checkpoint_every/log_every count updates",
    "own": "runs total_steps env steps inside the library's own training loop",
}


def _budget_line(name: str, loop: str) -> str:
    if name.startswith("wsrl"):
        return (
            f"algo={name} pre-trains for algo.pretrain_steps gradient updates (offline), then runs "
            "total_steps online env steps; both are logged under their own names."
        )
    text = LOOP_BUDGETS.get(
        loop,
        f"drives its own loop ({loop}): its budget is among the algo.* keys below "
        "(where it counts env steps, total_steps is the name)",
    )
    return f"algo={name} {text}."


def train_help(host: Any, args: Sequence[str]) -> str:
    """`roborl train --help`: run keys, the chosen algorithm's keys, config groups."""
    from omegaconf import OmegaConf

    from roborl.core.compose import compose, group_options
    from roborl.core.help import field_lines, section

    overrides = [a for a in args if a not in HELP_FLAGS and "=" in a and not a.startswith("-")]
    cfg = OmegaConf.to_container(compose(host, overrides, "train"), resolve=False)
    assert isinstance(cfg, dict)
    algo = dict(cfg.get("algo") or {})
    name = str(algo.pop("name", "sac"))
    cls = host.registry.get("algorithms", name)
    loop = cls.loop
    doc = first_line(cls.__doc__).rstrip(".")
    run_values = {k: v for k, v in cfg.items() if not isinstance(v, dict)}
    algos = sorted({*host.registry.algorithms, *group_options(host, "algo")})
    text = [
        "usage: roborl train [-m] [key=value ...] [--cfg job|hydra|all] [--hydra-help]",
        "",
        "Train one run (or a sweep with -m: seed=0,1,2, seed=range(5), algo=glob(*sac*)).",
        "Overrides use Hydra's grammar: key=value, +new_key=value, ~key, group=option.",
        "",
        section("Run keys (top level; RunConfig)", field_lines(RunConfig, values=run_values)),
        BUDGETS,
        _budget_line(name, str(loop)),
        "",
        section(
            f"algo={name} keys ({doc or cls.__name__}; loop: {loop}; algo=NAME shows another's)",
            field_lines(cls.Config, "algo.", algo),
        )
        if dataclasses.is_dataclass(getattr(cls, "Config", None))
        else "",
        section(
            "Config groups",
            [
                f"  algo=  {', '.join(algos)}",
                f"  env=   {', '.join(group_options(host, 'env'))} (or env.id=ANY_GYMNASIUM_ID)",
                f"  logger={', '.join(group_options(host, 'logger'))}",
                f"  robot= {', '.join(group_options(host, 'robot'))}",
            ],
        ),
        "Hydra flags: --cfg job (print the composed config), --info, --hydra-help, -m.",
        logs.HELP[:-1] + "; the run's INFO lines go to RUN_DIR/cli.log, the console shows",
        "the progress bar (-v: INFO and DEBUG there too; -q: no progress bar).",
    ]
    return "\n".join(text)


def _train_overrides(args: Sequence[str]) -> list[str]:
    """The override arguments among Hydra's flags (`--cfg job`, `-m`, ...)."""
    return [a for a in args if not a.startswith("-") and ("=" in a or a.startswith("~"))]


def _given_run_dir(args: Sequence[str], overrides: Sequence[str]) -> str | None:
    """The `hydra.run.dir=` of a single run, when given literally (no `${...}`)."""
    from roborl.core.compose import parse_overrides

    parsed = parse_overrides(overrides, "train")
    if any(a in ("-m", "--multirun") for a in args) or any(
        ov.key_or_group == "hydra.mode" for ov in parsed
    ):
        return None  # a sweep: each job has its own directory, which the runner checks
    for ov in parsed:
        if ov.key_or_group == "hydra.run.dir" and not ov.is_sweep_override():
            value = ov.value()
            if isinstance(value, str) and "${" not in value:
                return value
    return None


def cmd_train(args: list[str]) -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from omegaconf import DictConfig

    from roborl.core.compose import (
        PRIMARY,
        first_point,
        parse_overrides,
        register_configs,
        tuned_overrides,
    )
    from roborl.core.run_dir import refuse_previous_run
    from roborl.core.runner import Runner

    host = load_host(args)
    if wants_help(args):
        print(train_help(host, args))
        return 0
    # Compose once before Hydra runs, so a bad key or option is roborl's one-paragraph error
    # (a sweep is checked at its first point).
    overrides = _train_overrides(args)
    # `~tuned` when a tuned preset was picked for another env id (`env.id=` given): Hydra's own
    # composition below would apply it (a sweep is decided at its first point).
    untuned = tuned_overrides(host, first_point(overrides, "train"))
    sampled = [o.input_line for o in parse_overrides(overrides, "train") if o.is_interval_sweep()]
    if sampled and not any(a.startswith("hydra/sweeper=") for a in overrides):
        raise ConfigError(
            f"roborl train: {sampled[0]!r} is an interval, which a grid sweep cannot enumerate; "
            "sample it with `roborl tune ... num_samples=N` (Ray Tune), or give a sampling "
            "sweeper (hydra/sweeper=optuna, if installed)."
        )
    if (given := _given_run_dir(args, overrides)) is not None:
        # Before Hydra writes .hydra/ and cli.log there; the runner checks every run again.
        refuse_previous_run(given)
    register_configs(host)

    @hydra.main(config_path="../../configs", config_name=PRIMARY, version_base="1.3")
    def train_job(cfg: DictConfig) -> float | None:
        run_dir = HydraConfig.get().runtime.output_dir
        redact_hydra_dir(run_dir)  # Hydra saved the overrides, secrets included
        try:
            summary = Runner(cfg, run_dir, host).execute()
        except RoborlError as exc:
            print(error_line("train", exc), file=sys.stderr)
            sys.exit(exc.exit_code)
        except ModuleNotFoundError as exc:  # a feature whose extra is not installed
            if (missing := missing_extra(exc)) is None:
                raise
            print(error_line("train", missing), file=sys.stderr)
            sys.exit(missing.exit_code)
        print(summary_line(run_dir, summary))
        return summary.get("final_eval_return")

    saved = sys.argv
    sys.argv = ["roborl train", *untuned, *args, *logs.hydra_overrides(overrides)]
    try:
        train_job()
    except (ValueError, HydraException) as exc:  # Hydra's flag and sweep checks
        raise ConfigError(f"roborl train: {exc}") from None
    finally:
        sys.argv = saved
    return 0

"""`roborl tune sampler=optuna ...`: an Optuna study over `roborl train` runs, with pruning.

Each trial is one `roborl train` process, exactly the run `roborl train` would make (Hydra
composition, plugins, run directory under `out=`), as with Ray Tune. The sweep syntax is the
same, read as a search space the way Hydra's Optuna sweeper reads it: a comma list, `choice()`
and `glob()` are categorical, an integer `range()` is an integer, `interval(lo, hi)` a float
(`tag(log, interval(...))` on a log scale). Optuna's sampler (TPE by default) proposes
`n_trials=` points.

Pruning from intermediate evaluations: the trial's process reports every evaluation's
`metric=` (default `eval/return_mean`) at the schedule's clock (env steps; updates for offline
runs) to the study, through this plugin's `roborl_should_stop` hook, and asks the study's
pruner (`pruner=median` by default). When the pruner says so, the hook stops the run: it ends
as a finished run does (final checkpoint, summary.json with `status: stopped` and a
`stop_reason` that says it was pruned), and the trial is recorded as PRUNED. Every run
directory gets `optuna_trial.json` (study, trial number, params, state, value).

The study lives in `storage=` (default: a journal file `OUT/optuna.journal`, which parallel
trials share safely; or an RDB URL such as ``sqlite:///study.db``): running the same command
again continues the study, trial numbers and pruning statistics included. Optuna is imported
only here, when `sampler=optuna` runs (the `sweeps` extra).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from roborl.core.errors import ConfigError, MissingExtraError

log = logging.getLogger("roborl.tune")

#: Set in a trial's environment: how its process reports to the study (JSON, see `_trial_spec`).
TRIAL_ENV = "ROBORL_OPTUNA_TRIAL"
PRUNED = "pruned by Optuna"  # how a pruned trial's summary.json `stop_reason` starts
TRIAL_FILE = "optuna_trial.json"
INTERRUPT_GRACE_S = 60.0  # how long a Ctrl-C'd sweep waits for its trial's final checkpoint
PRUNERS = ("median", "hyperband", "successive_halving", "none")
#: What `roborl_should_stop` receives after an evaluation (`roborl.core.evaluate.eval_metrics`).
EVAL_METRICS = (
    "eval/return_mean", "eval/return_std", "eval/length_mean", "eval/cost_mean",
    "eval/success_rate", "eval/success_any_rate",
)  # fmt: skip
SAMPLERS = ("tpe", "random")


def import_optuna() -> Any:
    """`optuna`, or the one-line error naming the extra that installs it."""
    try:
        import optuna
    except ModuleNotFoundError as exc:
        raise MissingExtraError(
            "roborl tune sampler=optuna needs the optional package 'optuna': install it with "
            '`pip install "roborl[sweeps]"` (or `pip install "optuna>=4,<6"`), or use the '
            "default sampler=ray."
        ) from exc
    return optuna


@dataclass(frozen=True)
class Param:
    """One swept key as an Optuna distribution."""

    key: str  # the override's key as written (`algo.actor_lr`, `algo`, `+x`)
    kind: Literal["categorical", "int", "float"]
    choices: tuple[str, ...] = ()
    low: float = 0.0
    high: float = 0.0
    step: int = 1
    log: bool = False

    def first(self) -> str:
        """One valid override, to check the config before any trial runs."""
        if self.kind == "categorical":
            return f"{self.key}={self.choices[0]}"
        return f"{self.key}={int(self.low)}" if self.kind == "int" else f"{self.key}={self.low!r}"

    def suggest(self, trial: Any) -> str:
        """Ask `trial` for a value; the `key=value` override for `roborl train`."""
        if self.kind == "categorical":
            return f"{self.key}={trial.suggest_categorical(self.key, list(self.choices))}"
        if self.kind == "int":
            value = trial.suggest_int(self.key, int(self.low), int(self.high), step=self.step)
            return f"{self.key}={value}"
        value = trial.suggest_float(self.key, self.low, self.high, log=self.log)
        return f"{self.key}={value!r}"


def search_space(overrides: list[str]) -> tuple[list[str], list[Param]]:
    """Hydra sweep syntax -> (fixed overrides, swept keys as Optuna distributions)."""
    from hydra.core.override_parser.types import Glob, RangeSweep

    from roborl.core.compose import override_key, parse_overrides
    from roborl.plugins.ray.sweep import _group_options

    fixed: list[str] = []
    params: list[Param] = []
    for arg, ov in zip(overrides, parse_overrides(overrides, "tune"), strict=True):
        key = arg.split("=", 1)[0]
        value = ov.value()
        if not ov.is_sweep_override():
            fixed.append(arg)
        elif ov.is_interval_sweep():
            lo, hi, log = float(value.start), float(value.end), "log" in value.tags
            if not lo < hi or (log and lo <= 0):
                raise ConfigError(
                    f"roborl tune: {arg!r} is an empty interval{' on a log scale' if log else ''};"
                    f" give interval(lo, hi) with lo < hi{' and lo > 0' if log else ''}."
                )
            params.append(Param(key, "float", low=lo, high=hi, log=log))
        elif isinstance(value, RangeSweep) and all(
            isinstance(v, int) for v in (value.start, value.stop, value.step)
        ):
            values = list(range(int(value.start), int(value.stop), int(value.step)))
            if not values:
                raise ConfigError(f"roborl tune: {arg!r} is an empty range.")
            step = abs(int(value.step))
            params.append(Param(key, "int", low=min(values), high=max(values), step=step))
        elif isinstance(value, Glob):
            options = value.filter(_group_options(override_key(ov)))
            if not options:
                raise ConfigError(f"roborl tune: {arg!r} matches no {override_key(ov)} option.")
            params.append(Param(key, "categorical", choices=tuple(options)))
        else:
            params.append(Param(key, "categorical", choices=tuple(ov.sweep_string_iterator())))
    return fixed, params


def open_storage(storage: str) -> Any:
    """An RDB URL as it is; anything else is a journal file (safe for parallel trials)."""
    if "://" in storage:
        return storage
    optuna = import_optuna()
    from optuna.storages.journal import JournalFileBackend

    Path(storage).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(storage)))


def make_pruner(name: str, startup_trials: int, warmup_steps: int) -> Any:
    """Optuna's pruner `name` (`startup_trials`/`warmup_steps` are the median pruner's)."""
    optuna = import_optuna()
    if name == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=startup_trials, n_warmup_steps=warmup_steps
        )
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner()
    if name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ConfigError(f"roborl tune: pruner={name!r} is not accepted: expected one of {PRUNERS}.")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Atomically (temp file + rename): a killed sweep leaves the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def last_value(run_dir: Path, metric: str) -> float | None:
    """The last value of `metric` in the run's metrics.jsonl (None if never logged)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    value = None
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a torn last line of a killed run
            continue
        if isinstance(record.get(metric), int | float):
            value = float(record[metric])
    return value


def _run_trial(cmd: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    """Run one trial's `roborl train`; (exit code, stderr).

    On Ctrl-C the trial got the same SIGINT from the terminal: wait for it to write its final
    checkpoint and summary (subprocess.run would kill it after 0.25 s), then re-raise.
    """
    with subprocess.Popen(
        cmd, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            _, stderr = proc.communicate()
        except KeyboardInterrupt:
            try:
                proc.wait(timeout=INTERRUPT_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise
    return proc.returncode, stderr


def run_optuna_sweep(
    overrides: list[str],
    out: str | Path,
    n_trials: int = 20,
    metric: str = "eval/return_mean",
    direction: str = "maximize",
    sampler: str = "tpe",
    sampler_seed: int | None = None,
    pruner: str = "median",
    startup_trials: int = 5,
    warmup_steps: int = 0,
    study: str = "roborl",
    storage: str | None = None,
    max_concurrent: int = 0,
) -> list[dict[str, Any]]:
    """Run `n_trials` more trials of the study; one record per trial run here (in order)."""
    from roborl.core.compose import compose
    from roborl.core.plugins import get_host
    from roborl.plugins.ray.sweep import _slug

    if metric not in EVAL_METRICS and not metric.startswith("eval/normalized_"):
        raise ConfigError(
            f"roborl tune: metric={metric!r} is not an evaluation metric, which is what a trial "
            f"reports for pruning; use one of {', '.join(EVAL_METRICS)} or eval/normalized_*."
        )
    optuna = import_optuna()
    out = Path(out).resolve()
    fixed, params = search_space(overrides)
    # A typo fails here, once, with roborl's error, not in every trial.
    compose(get_host(), [*fixed, *(p.first() for p in params)], "tune")
    out.mkdir(parents=True, exist_ok=True)
    storage = storage or str(out / "optuna.journal")
    if "://" not in storage:  # the trials may run elsewhere (cwd): an absolute path
        storage = str(Path(storage).resolve())
    samplers = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}
    the_study = optuna.create_study(
        study_name=study,
        storage=open_storage(storage),
        sampler=samplers[sampler](seed=sampler_seed),
        pruner=make_pruner(pruner, startup_trials, warmup_steps),
        direction=direction,
        load_if_exists=True,
    )
    records: list[dict[str, Any]] = []

    def objective(trial: Any) -> float:
        point = [p.suggest(trial) for p in params]
        run_dir = out / f"{trial.number}_{_slug(point)}"
        spec = {
            "storage": storage, "study": study, "trial_id": trial._trial_id,
            "trial": trial.number, "metric": metric, "pruner": pruner,
            "startup_trials": startup_trials, "warmup_steps": warmup_steps,
        }  # fmt: skip
        env = {**os.environ, "RAY_ADDRESS": "", TRIAL_ENV: json.dumps(spec)}
        cmd = [sys.executable, "-m", "roborl.core.cli", "train", *fixed, *point]
        cmd += [f"hydra.run.dir={run_dir}", "progress=false"]
        returncode, stderr = _run_trial(cmd, env)
        summary_path = run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        value = last_value(run_dir, metric)
        record: dict[str, Any] = {
            "study": study, "trial": trial.number, "params": dict(trial.params),
            "overrides": [*fixed, *point], "run_dir": str(run_dir),
            "returncode": returncode, "value": value, "metric": metric,
        }  # fmt: skip
        reason = str(summary.get("stop_reason") or "")
        if returncode != 0 or value is None:
            errors = out / f"{run_dir.name}.stderr.txt"
            errors.write_text(stderr[-20000:])
            record["state"] = "FAIL"
            record["error"] = (
                f"exit {returncode}; its stderr is in {errors}"
                if returncode
                else f"the run logged no {metric!r} (does this task log it? e.g. eval/cost_mean "
                "needs a safe task)"
            )
        elif summary.get("status") == "stopped" and reason.startswith(PRUNED):
            record["state"], record["stop_reason"] = "PRUNED", reason
        else:
            record["state"] = "COMPLETE"
        records.append(record)
        _write_json(run_dir / TRIAL_FILE, record)
        if record["state"] == "FAIL":  # NaN: Optuna records FAIL, without a traceback
            log.warning("trial %d failed (%s): %s", trial.number, run_dir, record["error"])
            return math.nan
        if record["state"] == "PRUNED":
            raise optuna.TrialPruned(reason)
        assert value is not None
        return value

    the_study.optimize(objective, n_trials=n_trials, n_jobs=max(1, max_concurrent))
    return sorted(records, key=lambda r: r["trial"])


# -- inside a trial's `roborl train` process ---------------------------------------------------

_trials: dict[str, Any] = {}  # the spec (JSON) -> its optuna Trial, loaded once per process


def report_and_prune(spec_json: str, step: int, metrics: Mapping[str, float]) -> str | None:
    """Report this evaluation's metric to the trial; a stop reason when the pruner prunes it."""
    spec = json.loads(spec_json)
    value = metrics.get(spec["metric"])
    if value is None or not math.isfinite(float(value)):
        return None  # no such metric here (the sweep records the trial as failed at its end)
    trial = _trials.get(spec_json)
    if trial is None:
        optuna = import_optuna()
        pruner = make_pruner(spec["pruner"], spec["startup_trials"], spec["warmup_steps"])
        study = optuna.load_study(
            study_name=spec["study"], storage=open_storage(spec["storage"]), pruner=pruner
        )
        trial = _trials[spec_json] = optuna.trial.Trial(study, int(spec["trial_id"]))
    trial.report(float(value), int(step))
    if not trial.should_prune():
        return None
    return (
        f"{PRUNED}'s {spec['pruner']} pruner at step {step} ({spec['metric']}={float(value):g}; "
        f"study {spec['study']!r}, trial {spec['trial']})"
    )

"""`roborl compare`'s jobs: train the runs a group still lacks and read their scores.

Split from `compare.py`: runs go in this process or in `jobs=N` spawned processes, a finished
run directory is reused (so a repeated command continues), an interrupted one continues from
its last checkpoint when its saved config is the one the job composes (long runs survive a
stop: set checkpoint_every= below total_steps), and a score is read back from the run
directory as `roborl report` reads it.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from roborl.core.errors import ConfigError
from roborl.plugins.report.compare_sequential import Job, ScoreFn

if TYPE_CHECKING:
    from roborl.core.plugins import PluginHost
    from roborl.plugins.report.compare import CompareOptions


def _finished(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status") == "finished"
    except (OSError, json.JSONDecodeError):
        return False


def resume_point(run_dir: Path, cfg: Mapping[str, Any], host: PluginHost) -> Path | None:
    """The checkpoint an interrupted run continues from: its last.pt (`load_checkpoint` falls
    back to previous.pt), if it has one and its saved config.yaml is `cfg` (a run of another
    setup, or one that stopped before its first checkpoint, starts again)."""
    from roborl.core.checkpoint import PREVIOUS_NAME
    from roborl.core.runner import config_yaml, run_config

    last = run_dir / "checkpoints" / "last.pt"
    if not (last.exists() or last.with_name(PREVIOUS_NAME).exists()):
        return None
    try:
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    ours = yaml.safe_load(config_yaml(run_config(cfg, run_dir, host)[1]))
    return last if saved == ours else None


def run_job(overrides: Sequence[str], run_dir: str) -> None:
    """One training run as `roborl train` would compose it, in this process; an interrupted
    run of the same config continues from its checkpoint, any other leftover is removed."""
    from roborl.core.compose import compose_dict
    from roborl.core.plugins import get_host
    from roborl.core.runner import Runner

    host = get_host()
    cfg = compose_dict(host, list(overrides), "compare")
    checkpoint = resume_point(Path(run_dir), cfg, host)
    if checkpoint is None and Path(run_dir).exists():
        shutil.rmtree(run_dir)
    Runner(cfg, run_dir, host).execute(resume_from=checkpoint)


def _job_overrides(job: Job, common: Sequence[str]) -> list[str]:
    return [*common, *job.overrides, f"seed={job.seed}", "progress=false"]


def make_scorer(common: Sequence[str], opts: CompareOptions) -> ScoreFn:
    """Run each job not finished yet (in-process, or `opts.jobs` processes) and read its
    score from its run directory."""
    from roborl.plugins.report.runs import load_run

    def score(jobs: Sequence[Job]) -> list[float]:
        todo = [j for j in jobs if not _finished(Path(j.run_dir))]
        t0 = time.time()
        if opts.jobs == 1 or len(todo) <= 1:
            for j in todo:
                run_job(_job_overrides(j, common), j.run_dir)
                _progress(j, time.time() - t0, opts)
        else:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor, as_completed

            pool = ProcessPoolExecutor(opts.jobs, mp_context=mp.get_context("spawn"))
            try:
                futures = {
                    pool.submit(run_job, _job_overrides(j, common), j.run_dir): j for j in todo
                }
                for fut in as_completed(futures):
                    fut.result()
                    _progress(futures[fut], time.time() - t0, opts)
            except BaseException:  # Ctrl-C or a failed run: queued runs must not start
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown()
        values = []
        for j in jobs:
            rec = load_run(j.run_dir)
            vals = rec.final if opts.which == "final" else rec.best
            if opts.metric not in vals:
                raise ConfigError(
                    f"roborl compare: the run {j.run_dir} logged no {opts.metric!r} "
                    f"(it has: {', '.join(sorted(vals)) or 'no evaluation'}); choose metric= "
                    "from those, or make the runs evaluate (eval_every=)."
                )
            values.append(vals[opts.metric])
        return values

    return score


def _progress(job: Job, elapsed: float, opts: CompareOptions) -> None:
    from roborl.plugins.report.runs import load_run

    rec = load_run(job.run_dir)
    value = (rec.final if opts.which == "final" else rec.best).get(opts.metric)
    shown = "n/a" if value is None else f"{value:.2f}"
    task = job.task.split("=", 1)[-1] or rec.env
    print(
        f"roborl compare: {job.method} on {task} seed {job.seed}: {opts.which} {opts.metric} "
        f"{shown} ({elapsed:.0f}s)",
        flush=True,
    )

"""The runner: one run's lifecycle, from setup to summary.json.

It validates the config, resolves the algorithm, builds the `TrainContext`, installs the
signal handlers, hands the context to the loop the algorithm names (`Algorithm.loop`, a
`roborl_loops` entry) and, however the loop ends, writes the final checkpoint (on an
interrupt), `summary.json` and the learning curve. The loops (`roborl.core.loops`), the
schedule and the counters (`roborl.core.context`) and the config/algorithm resolution
(`roborl.core.algorithms`) live elsewhere.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import OmegaConf

from roborl.core.algorithms import (  # re-exported: code written before they moved here still imports them from the runner
    RUN_KEYS,
    SECTION_KEYS,
    algorithm_from_checkpoint,
    build_algorithm,
    resolve_algorithm,
    split_config,
)
from roborl.core.buffer import ReplayBuffer
from roborl.core.checkpoint import load_checkpoint
from roborl.core.context import TrainContext
from roborl.core.errors import ConfigError, DivergedError, StopRun
from roborl.core.interfaces import Algorithm
from roborl.core.plugins import PluginHost
from roborl.core.rewards import with_fired_frames_dir
from roborl.core.run_dir import (
    CONFIG_FILE,
    SUMMARY_FILE,
    git_sha,
    plot_learning_curve,
    refuse_previous_run,
    versions,
    write_summary,
)
from roborl.core.secrets import redact
from roborl.core.stop_signals import STOP_SIGNALS

log = logging.getLogger("roborl.run")
__all__ = [
    "RUN_KEYS",
    "SECTION_KEYS",
    "Interrupted",
    "Runner",
    "algorithm_from_checkpoint",
    "build_algorithm",
    "resolve_algorithm",
    "split_config",
]


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM, SIGHUP or SIGQUIT: checkpoint, summarise, stop."""


def run_config(
    cfg: Mapping[str, Any], run_dir: str | Path, host: PluginHost
) -> tuple[Any, dict[str, Any]]:
    """The run's settings and the config it runs with (and saves as config.yaml): `cfg` with
    the defaults that depend on the run directory filled in."""
    return split_config(with_fired_frames_dir(cfg, Path(run_dir)), host)


def config_yaml(cfg: Mapping[str, Any]) -> str:
    """config.yaml's text for the config a run runs with (`run_config`), secrets redacted."""
    return OmegaConf.to_yaml(OmegaConf.create(redact(cfg)))


class Runner:
    """Drives one run. Loops and algorithms get `runner.ctx`, never the runner itself."""

    def __init__(self, cfg: Mapping[str, Any], run_dir: str | Path, host: PluginHost) -> None:
        self.host = host
        self.run_dir = Path(run_dir)
        self.run, self.cfg = run_config(cfg, self.run_dir, host)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.run.torch_threads > 0:
            torch.set_num_threads(self.run.torch_threads)
        self.algo_cls, self.algo_config = resolve_algorithm(host, self.cfg.get("algo") or {})
        if self.run.pretrained and not self.algo_cls.accepts_pretrained:
            raise ConfigError(
                f"pretrained={self.run.pretrained!r} given, but algo={self.algo_cls.name} does "
                "not start from a pre-trained checkpoint; use an algorithm that does (e.g. "
                "algo=wsrl), or `roborl resume RUN_DIR` to continue a run."
            )
        collector = self.run.collector_name
        if collector != "vector" and self.algo_cls.loop != "offpolicy":
            raise ConfigError(
                f"collector={collector} feeds the off-policy loop, but algo={self.algo_cls.name} "
                f"uses loop={self.algo_cls.loop!r}. Use an off-policy algorithm (e.g. algo=sac) "
                "or drop the collector/distributed setting."
            )
        self.status = "running"
        # Network initialisation and policy sampling draw from torch's global generator:
        # seeding it makes `run.seed` reproduce a run, not only its env and buffer.
        torch.manual_seed(self.run.seed)
        self.ctx = self._new_context(None)

    def _new_context(self, resume: Mapping[str, Any] | None) -> TrainContext:
        return TrainContext(
            self.host, self.run, self.cfg, self.algo_cls, self.algo_config, self.run_dir, resume
        )

    # -- read-only views of the run's state (tests, benchmarks) --------------------------------

    @property
    def step(self) -> int:
        return self.ctx.step

    @property
    def updates(self) -> int:
        return self.ctx.updates

    @property
    def np_rng(self) -> np.random.Generator:
        return self.ctx.np_rng

    @property
    def torch_gen(self) -> torch.Generator:
        return self.ctx.torch_gen

    @property
    def current_algo(self) -> Algorithm | None:
        return self.ctx.algorithm

    def make_vec_env(self, num_envs: int | None = None) -> gym.vector.VectorEnv:
        return self.ctx.make_vec_env(num_envs)

    def build_algorithm(self, observation_space: gym.Space, action_space: gym.Space) -> Algorithm:
        return self.ctx.build_algorithm(observation_space, action_space)

    def restore(
        self, algo: Algorithm, buffer: ReplayBuffer | None, ckpt: Mapping[str, Any]
    ) -> None:
        """Load `ckpt` into `algo`/`buffer` and this run's counters and RNGs."""
        self.ctx = self._new_context(ckpt)
        self.ctx.resume(algo, buffer)

    # -- the run -------------------------------------------------------------------------------

    def execute(self, resume_from: str | Path | None = None) -> dict[str, Any]:
        """Run the algorithm's loop (or resume it), always leaving summary.json and last.pt.

        A new run (no `resume_from`) refuses a directory that already holds a run, before
        writing anything: it would append to that run's metrics and replace its summary and
        checkpoints."""
        if not resume_from:
            refuse_previous_run(self.run_dir)
        ckpt = load_checkpoint(resume_from) if resume_from else None
        self.ctx = ctx = self._new_context(ckpt)
        if ckpt is None:
            (self.run_dir / CONFIG_FILE).write_text(config_yaml(self.cfg))
        ctx._open()
        log.info(
            "%s run of algo=%s (loop %s) in %s",
            "resumed" if ckpt else "new", self.algo_cls.name, self.algo_cls.loop, self.run_dir,
        )  # fmt: skip
        self.host.pm.hook.roborl_run_start(run_dir=str(self.run_dir), config=redact(self.cfg))
        previous = _install_signal_handlers()
        try:
            loop = self.host.registry.get("loops", self.algo_cls.loop)
            loop(ctx)
            self.status = "stopped" if ctx.stop_reason else "finished"
        except StopRun as exc:  # raised past the loop: still a normal end (final eval, last.pt)
            ctx.request_stop(str(exc) or "a plugin raised StopRun")
            self.status = "stopped"
        except KeyboardInterrupt:
            self.status = "interrupted"
            raise
        except DivergedError:  # NaN/inf weights: stop, keep last.pt/previous.pt as they are
            self.status = "diverged"
            raise
        except BaseException:
            self.status = "crashed"
            raise
        finally:
            _restore_signal_handlers(previous)
            summary = self._finish()
        return summary

    def _finish(self) -> dict[str, Any]:
        ctx = self.ctx
        algo = ctx.algorithm
        final = self.status not in ("finished", "diverged", "stopped")
        if algo is not None and self.status == "stopped" and (ctx.step or ctx.updates):
            try:  # as the loop's own end: final eval and last.pt, each unless already there
                ctx.finish(algo, ctx.buffer)
            except Exception as exc:  # then at least the checkpoint, as for an interrupt
                print(f"roborl: warning: final evaluation failed: {exc}", file=sys.stderr)
                final = True
        if algo is not None and final and (ctx.step or ctx.updates):
            try:
                ctx.checkpoint(algo, ctx.buffer)
            except Exception as exc:  # the previous checkpoint is intact; keep the real error
                print(f"roborl: warning: final checkpoint failed: {exc}", file=sys.stderr)
        ctx._close()
        if algo is not None:
            with contextlib.suppress(Exception):
                algo.close()
        env_cfg = self.cfg.get("env") or {}
        robot_cfg = self.cfg.get("robot") or {}
        last = ctx.last_eval
        summary = {
            "algo": self.algo_cls.name,
            "env": (robot_cfg.get("name") and f"robot:{robot_cfg.get('name')}")
            or env_cfg.get("id"),
            "seed": self.run.seed,
            "steps": ctx.step,
            "updates": ctx.updates,
            # training episodes in the env; null for a run that stepped no env (offline)
            "episodes": ctx.episodes if ctx.step else None,
            "eval_episodes": ctx.eval_episodes,
            "status": self.status,
            **({"stop_reason": ctx.stop_reason} if ctx.stop_reason else {}),
            "final_eval_return": None if last is None else last["return_mean"],
            "best_eval_return": ctx.best_eval_return,
            "wall_time_s": round(ctx.elapsed, 3),
            "versions": versions(),
            "git_sha": git_sha(),
        }
        if last is not None:
            for key in ("cost_mean", "success_rate", "success_any_rate", "normalized_score"):
                if key in last:
                    summary[f"final_eval_{key}"] = last[key]
        if ctx.step or ctx.updates or not (self.run_dir / SUMMARY_FILE).exists():
            write_summary(self.run_dir, summary)
        else:  # failed before it started or restored anything: keep the run's own summary
            log.info("run %s before it started; %s left as it was", self.status, SUMMARY_FILE)
        log.info(
            "run %s: %d env steps, %d updates, final eval return %s",
            self.status, ctx.step, ctx.updates, summary["final_eval_return"],
        )  # fmt: skip
        with contextlib.suppress(Exception):
            plot_learning_curve(
                self.run_dir, f"{summary['algo']} on {summary['env']} (seed {self.run.seed})"
            )
        self.host.pm.hook.roborl_run_end(run_dir=str(self.run_dir), summary=summary)
        return summary


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(f"received signal {signal.Signals(signum).name}")


def _install_signal_handlers() -> dict[int, Any]:
    # SIGINT too: a library imported by some plugin may have replaced Python's default
    # handler, and Ctrl-C must always reach the runner so it can write its final checkpoint.
    previous: dict[int, Any] = {}
    for signum in STOP_SIGNALS:  # a closed terminal (SIGHUP) too: checkpoint, then stop
        try:
            previous[signum] = signal.signal(signum, _raise_interrupted)
        except ValueError:  # not in the main thread
            pass
    return previous


def _restore_signal_handlers(previous: Mapping[int, Any]) -> None:
    for signum, handler in previous.items():
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signum, handler)

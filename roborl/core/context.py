"""`TrainContext`: the one object a training loop or an algorithm's own `train(ctx)` receives.

Why one object: before it, loops got the whole runner and wrote into its state (counters, a
private buffer slot, stats kept for a test), and the log/eval/checkpoint schedule was copied
into every loop. The context owns the run's counters and schedule; a loop reads them through
properties and changes them only through methods:

- read-only configuration: `run` (the frozen `RunConfig`), `algo_config` (a read-only view of
  the algorithm's config dataclass), `config` (the whole config as nested read-only mappings)
  and `config_dict()` (a plain deep copy, e.g. to ship to a worker process);
- envs: `make_env`, `make_vec_env`, `robot_env` (with `robot=`, the run's one robot env that
  both return, so evaluation and collection never open a second driver); data:
  `load_dataset`; the algorithm: `build_algorithm`, `make_collector`;
- bookkeeping: `advance(env_steps=, updates=)`, `record_episode`, `log`, `evaluate`,
  `checkpoint(algo, buffer=)`, `attach` (what every checkpoint saves: the algorithm, the
  buffer, the demo buffer with the interventions it gained),
  `resume(algo, buffer=)`, `finish(algo, buffer=)`, `set_extra`;
- the schedule: `begin(clock, total)` picks what the schedule counts (env steps or gradient
  updates) and `due("eval" | "checkpoint" | "log")` says when; it is the only schedule;
- counters (read-only): `step` (env steps), `updates`, `episodes`, `eval_episodes`;
- seeded generators: `np_rng`, `torch_gen`; `resume_checkpoint`, `run_dir`, `device`.

Each of those jobs lives in its own module and the context delegates to it: the schedule
(`roborl.core.schedule`), envs, collector and dataset (`roborl.core.run_inputs`), metrics and
loggers (`roborl.core.run_log`), evaluations (`roborl.core.periodic_eval`), the checkpoint's
content (`roborl.core.checkpoint_payload`), read-only config views (`roborl.core.readonly`)
and the progress bar (`roborl.core.progress`).

The design follows torchrl's Trainer/collector and stable-baselines3's `OffPolicyAlgorithm` +
callbacks (the loop asks the schedule, it does not keep one).
"""

from __future__ import annotations

import copy
import logging
import time
import types
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.checkpoint import save_checkpoint
from roborl.core.checkpoint_payload import RunState, checkpoint_payload, restore_runner
from roborl.core.config import RunConfig
from roborl.core.envs import SharedEnv
from roborl.core.errors import StopRun
from roborl.core.evaluate import eval_metrics
from roborl.core.interfaces import Algorithm
from roborl.core.lazy_dynamo import defer_dynamo_import
from roborl.core.obs import check_algorithm_obs
from roborl.core.periodic_eval import EVAL_SEED_OFFSET, Evaluations, reference_score
from roborl.core.progress import ProgressBar
from roborl.core.readonly import ReadOnlyView, freeze
from roborl.core.run_dir import truncate_metrics_after
from roborl.core.run_inputs import RunInputs
from roborl.core.run_log import RunLog
from roborl.core.schedule import Clock, Schedule, Scheduled
from roborl.core.video import VIDEO_DIR, render_config

if TYPE_CHECKING:
    from roborl.core.loops.collectors import Collector
    from roborl.core.plugins import PluginHost

log = logging.getLogger("roborl.run")
"""The run's event lines (evaluations, checkpoints, start and end); `roborl train` writes
them to <run_dir>/cli.log through Hydra's job logging."""


class TrainContext:
    """The run as a loop sees it; see the module docstring for what it offers and why."""

    def __init__(
        self,
        host: PluginHost,
        run: RunConfig,
        config: Mapping[str, Any],
        algo_cls: type[Algorithm],
        algo_config: Any,
        run_dir: str | Path,
        resume: Mapping[str, Any] | None = None,
    ) -> None:
        self._host = host
        self._run = run
        self._cfg = copy.deepcopy(dict(config))
        self._frozen_cfg = freeze(self._cfg)
        self._algo_cls = algo_cls
        self._algo_config = algo_config
        self._run_dir = Path(run_dir)
        self._resume = resume
        self._state = RunState(run.seed)  # counters, RNGs, extras: what a checkpoint resumes
        self._schedule = Schedule(run)
        self._evals = Evaluations(host, self._cfg)
        self._last_checkpoint: tuple[int, int, str] | None = None
        self._stop_reason: str | None = None  # a plugin (or the loop) asked to end early
        self._stop_at: tuple[int, int] | None = None  # (step, updates) of that request
        self._algo: Algorithm | None = None
        self._buffer: ReplayBuffer | None = None
        self._demos: ReplayBuffer | None = None  # demos= plus the interventions it gained
        self._inputs = RunInputs(host, run, self._cfg)
        self._log = RunLog(host, self._run_dir)
        self._progress = ProgressBar()
        self._start = time.time()

    # -- read-only views -----------------------------------------------------------------------

    @property
    def run(self) -> RunConfig:
        """Run-level settings (frozen dataclass)."""
        return self._run

    @property
    def algo_config(self) -> ReadOnlyView:
        return ReadOnlyView(self._algo_config)

    @property
    def algo_name(self) -> str:
        return self._algo_cls.name

    @property
    def config(self) -> Mapping[str, Any]:
        """The whole config (sections algo, env, robot, ...) as nested read-only mappings."""
        return self._frozen_cfg

    def config_dict(self) -> dict[str, Any]:
        """A plain deep copy of the whole config, e.g. to send to a worker process."""
        return copy.deepcopy(self._cfg)

    @property
    def run_dir(self) -> Path:
        return self._run_dir

    @property
    def device(self) -> str:
        return self._run.device

    @property
    def step(self) -> int:
        """Env steps taken so far (never gradient updates)."""
        return self._state.step

    @property
    def updates(self) -> int:
        """Gradient updates made so far."""
        return self._state.updates

    @property
    def episodes(self) -> int:
        """Training episodes finished in the env (evaluation episodes are not counted)."""
        return self._state.episodes

    @property
    def eval_episodes(self) -> int:
        """Evaluation episodes run so far."""
        return self._state.eval_episodes

    @property
    def np_rng(self) -> np.random.Generator:
        """The run's numpy generator (seeded by `seed`, saved in checkpoints)."""
        return self._state.np_rng

    @property
    def torch_gen(self) -> torch.Generator:
        """The run's torch generator for buffer/dataset sampling (saved in checkpoints)."""
        return self._state.torch_gen

    @property
    def resume_checkpoint(self) -> Mapping[str, Any] | None:
        """The checkpoint this run resumes from (None for a fresh run), read-only."""
        return None if self._resume is None else types.MappingProxyType(self._resume)

    @property
    def last_eval(self) -> Mapping[str, Any] | None:
        last = self._evals.last
        return None if last is None else types.MappingProxyType(last)

    @property
    def best_eval_return(self) -> float | None:
        return self._evals.best_return

    @property
    def extra(self) -> Mapping[str, Any]:
        """Loop-specific state kept in checkpoints (`set_extra` writes it)."""
        return types.MappingProxyType(self._state.extra)

    @property
    def algorithm(self) -> Algorithm | None:
        """The algorithm `build_algorithm` made (or `attach` named), if any yet."""
        return self._algo

    @property
    def buffer(self) -> ReplayBuffer | None:
        return self._buffer

    @property
    def clock(self) -> Clock:
        """What the schedule and the progress bar count now: env steps or updates."""
        return self._schedule.clock

    @property
    def total(self) -> int:
        """The budget of the current phase, on `clock`."""
        return self._schedule.total

    @property
    def finished(self) -> bool:
        """The current phase's budget is used up, or the run was asked to stop early
        (`request_stop`, a plugin's `roborl_should_stop`)."""
        return self._stop_reason is not None or self._now() >= self._schedule.total

    @property
    def stop_reason(self) -> str | None:
        """Why the run was asked to end early (None: it runs its whole budget)."""
        return self._stop_reason

    def request_stop(self, reason: str) -> None:
        """End the run early: `finished` turns True, so the loop ends as at the end of its
        budget (final evaluation and `last.pt`); `summary.json` records `reason`. The first
        request wins."""
        if self._stop_reason is None:
            self._stop_reason = str(reason) or "stop requested"
            self._stop_at = (self.step, self.updates)
            log.info("stopping early at step %d, update %d: %s", self.step, self.updates, reason)

    @property
    def elapsed(self) -> float:
        """Wall time of the run in seconds, resumed parts included."""
        return self._state.elapsed_before + (time.time() - self._start)

    # -- envs, data, algorithm, collector ------------------------------------------------------

    def make_env(self, seed: int | None = None, learned_reward: bool = True) -> gym.Env:
        """One env from the config, with episode statistics (`learned_reward=False`: without
        `reward=`'s model, for evaluation in simulation).

        With `robot=` every call returns the same `robot_env`: a robot has one driver, so the
        collector, evaluation and an algorithm's own loop share it (its `close()` only makes
        the robot hold; the context disconnects it at the end of the run).
        """
        return self._inputs.make_env(seed, learned_reward)

    @property
    def robot_env(self) -> SharedEnv | None:
        """The run's one robot env (connected on first use), or None without `robot=`."""
        return self._inputs.robot_env

    def make_vec_env(self, num_envs: int | None = None) -> gym.vector.VectorEnv:
        """A vector env (same-step autoreset); its sub-envs' RNG states go into checkpoints.

        With `robot=` it wraps the one `robot_env` (num_envs must be 1)."""
        return self._inputs.make_vec_env(num_envs)

    def build_algorithm(self, observation_space: gym.Space, action_space: gym.Space) -> Algorithm:
        """The run's algorithm (`algo=`), built on these spaces and attached to the run."""
        check_algorithm_obs(self._algo_cls, observation_space)
        defer_dynamo_import()  # an optimiser would import torch._dynamo (~2 s) for nothing
        algo = self._algo_cls(observation_space, action_space, self._algo_config, self.device)
        self._algo = algo
        return algo

    def make_collector(self) -> Collector:
        """The collector named by `collector=` (or `distributed=`), from `roborl_collectors`.

        With `robot=` the default (`vector`) becomes `robot`: whole episodes at the control
        rate, the loop's updates only while the robot holds between episodes.
        """
        factory = self._host.registry.get("collectors", self._inputs.collector_name())
        return factory(self)

    def reward_model(self) -> Any:
        """`reward=`'s model (None without one), e.g. to relabel demonstrations."""
        return self._inputs.reward_model()

    def load_dataset(self, path: str | None = None) -> Any:
        """`dataset=` (or `path`), from the first dataset-source plugin that accepts it."""
        return self._inputs.load_dataset(path, self.algo_name)

    def attach(
        self, algo: Algorithm, buffer: ReplayBuffer | None = None, demos: ReplayBuffer | None = None
    ) -> None:
        """Name what checkpoints save: the algorithm and buffer of an interrupted run's final
        one, and in every one the demo buffer (`demos=` rows and the interventions added)."""
        self._algo, self._buffer, self._demos = algo, buffer, demos

    def set_extra(self, key: str, value: Any) -> None:
        """Keep `value` (tensors, numbers, strings, lists, dicts) in every later checkpoint."""
        self._state.extra[key] = value

    # -- counters and the schedule -------------------------------------------------------------

    def begin(self, clock: Clock = "steps", total: int | None = None) -> None:
        """Start a phase: the schedule and the progress bar count `clock` up to `total`.

        `total` defaults to `run.total_steps` (steps) or `run.total_updates` (updates). The
        next eval/checkpoint/log fall on the next multiples of their `*_every` on that clock.
        """
        self._schedule.begin(clock, total)
        self._schedule.realign(self._now())
        self._open_progress()

    def event_stride(self, limit: int = 256) -> int:
        """The largest n <= `limit` such that every scheduled log/eval/checkpoint/video, the
        end of the random phase (`learning_starts`) and the phase's budget fall on multiples of
        n env steps (1 on an updates clock).

        A collector that takes several steps per call ends its chunks on these multiples, so
        nothing scheduled runs late (issue 23: random-phase chunks cut the per-step cost of the
        loop).
        """
        return self._schedule.event_stride(limit)

    def due(self, kind: Scheduled) -> bool:
        """True once each time the clock reaches the next multiple of `{kind}_every`.

        The one schedule of every loop: call it after `advance`, act when it says so.
        """
        return self._schedule.due(kind, self._now())

    def advance(self, env_steps: int = 0, updates: int = 0) -> None:
        """Count env steps taken and gradient updates made (the only way counters move)."""
        if env_steps < 0 or updates < 0:
            raise ValueError("advance() counts forward only")
        self._state.step += int(env_steps)
        self._state.updates += int(updates)
        self._progress.update(env_steps if self._schedule.clock == "steps" else updates)

    def record_episode(self, ret: float, length: int, **extra: float) -> None:
        """A training episode ended: count it and log its return and length."""
        self._state.episodes += 1
        self.log({"train/episode_return": ret, "train/episode_length": length, **extra})

    # -- logging, evaluation, checkpoints ------------------------------------------------------

    def log(self, metrics: Mapping[str, Any]) -> None:
        """One metrics.jsonl record at the current `step` and `updates`, also sent to the
        configured loggers and the `roborl_metrics` hook."""
        self._log.write(self.step, self.updates, self._now(), metrics)

    def evaluate(self, algo: Algorithm, episodes: int | None = None) -> dict[str, Any]:
        """Deterministic-policy evaluation on a separately seeded env, logged as `eval/...`.

        On a robot it runs on the one `robot_env`, between training episodes (the loop's next
        episode starts with a reset), and the robot holds when it ends. In simulation, when
        the algorithm's state is bit-identical to that of the last evaluation (no update in
        between, e.g. before `learning_starts`), the last result is logged again instead of
        replaying the same seeded episodes; robots and video recordings always run.

        After a stop request (`request_stop`, `roborl_should_stop`), a loop that went on past
        it (one that does not check `finished`) is ended here with `StopRun`, which the runner
        ends as a normal stop: the stop takes effect at the latest by the next evaluation.
        """
        if self._stop_at is not None and self._stop_at != (self.step, self.updates):
            raise StopRun(self._stop_reason or "stop requested")
        return self._evaluate(algo, episodes)

    def _evaluate(self, algo: Algorithm, episodes: int | None = None) -> dict[str, Any]:
        seed = self._run.seed + EVAL_SEED_OFFSET
        make_env = lambda s: self.make_env(seed=s, learned_reward=False)  # noqa: E731
        self._evals.ensure_env(bool(self._run.video_every), seed, make_env)
        video = self._video_path()
        if video is not None:
            self._evals.start_video(video)
        n = episodes or self._run.eval_episodes
        robot = self._inputs.robot
        result = self._evals.episodes(algo, n, seed, memoize=video is None and robot is None)
        if robot is not None:
            robot.pause()
        self._state.eval_episodes += n
        score = reference_score(self._cfg, self._state.extra, result["return_mean"])
        if score is not None:
            result["normalized_score"] = score
        result["step"], result["updates"] = self.step, self.updates
        self._evals.record(result)
        ret = result["return_mean"]
        metrics = eval_metrics(result)
        self.log(metrics)
        self._ask_plugins_to_stop(metrics)
        if video is not None:
            self._evals.finish_video(self._log, self._now())
        log.info(
            "eval at step %d, update %d: return %.2f +- %.2f over %d episodes",
            self.step, self.updates, ret, result["return_std"], n,
        )  # fmt: skip
        self._progress.postfix(f"eval_return={ret:.1f}")
        return result

    def _ask_plugins_to_stop(self, metrics: Mapping[str, Any]) -> None:
        """`roborl_should_stop` after an evaluation: the first reason (or True, or a
        `StopRun`) ends the run early."""
        if self._stop_reason is not None:
            return
        try:
            answers = self._host.pm.hook.roborl_should_stop(
                run_dir=str(self._run_dir), step=self.step, updates=self.updates, metrics=metrics
            )
        except StopRun as exc:
            answers = [str(exc) or "a plugin raised StopRun"]
        if self._now() >= self._schedule.total:
            return  # the evaluation that ends the budget: the run is over anyway, not stopped
        for answer in answers:
            if answer:
                text = answer if isinstance(answer, str) else "a plugin's roborl_should_stop"
                self.request_stop(text)
                return

    def _video_path(self) -> Path | None:
        """Where this evaluation's video goes when `video_every` says it is due, else None."""
        if "video" not in self._schedule.every or not self.due("video"):
            return None
        prefix = "step" if self._schedule.clock == "steps" else "update"
        return self._run_dir / VIDEO_DIR / f"{prefix}_{self._now()}.mp4"

    def checkpoint(
        self, algo: Algorithm, buffer: ReplayBuffer | None = None, name: str = "last.pt"
    ) -> Path:
        """Write `checkpoints/<name>` atomically: weights, counters, RNGs, buffer if given."""
        env_states = self._inputs.env_rng_states()
        payload = checkpoint_payload(
            self._algo_cls.name,
            self._algo_config,
            algo,
            self._cfg,
            buffer,
            self._demos,
            self._state,
            self._evals,
            self.elapsed,
            env_states,
        )
        path = self._run_dir / "checkpoints" / name
        save_checkpoint(path, payload)
        self._last_checkpoint = (self.step, self.updates, name)
        log.info("checkpoint %s at step %d, update %d", path, self.step, self.updates)
        self._host.pm.hook.roborl_checkpoint(path=str(path), step=self.step)
        return path

    def resume(self, algo: Algorithm, buffer: ReplayBuffer | None = None) -> bool:
        """Load the resume checkpoint (if any) into `algo`, the buffers, counters and RNGs;
        False for a fresh run. Metrics logged after the checkpoint are dropped (logged again)."""
        ckpt = self._resume
        if ckpt is None:
            return False
        algo.load_state_dict(ckpt["state"])
        r = ckpt["runner"]
        cls = self._algo_cls
        restore_runner(self._state, self._evals, r, cls.loop, cls.accepts_pretrained)
        if buffer is not None and "buffer" in ckpt:
            buffer.load_state_dict(ckpt["buffer"])
        if self._demos is not None and "demo_buffer" in ckpt:
            self._demos.load_state_dict(ckpt["demo_buffer"])
        truncate_metrics_after(self._run_dir, int(r["step"]), self.updates)
        self._log.reopen_metrics()  # the file was replaced: write to the new one
        self._schedule.realign(self._now())
        self._progress.move_to(self._now())
        return True

    def finish(self, algo: Algorithm, buffer: ReplayBuffer | None = None) -> None:
        """The end of a phase: evaluate and write last.pt, each unless the schedule already
        did at this very point, so neither is written twice."""
        last = self._evals.last
        due = "eval" in self._schedule.every
        if due and (
            last is None or (last.get("step"), last.get("updates")) != (self.step, self.updates)
        ):
            self._evaluate(algo)  # never refused: this is how a stopped run ends too
        if self._last_checkpoint != (self.step, self.updates, "last.pt"):
            self.checkpoint(algo, buffer)

    # -- runner-only lifecycle (roborl.core.runner) ----------------------------------------------

    def _open(self) -> None:
        self._log.open_metrics()
        if self._run.video_every:
            render_config(self._cfg)  # refuses robot= before the run starts
        self._log.open_loggers(self._cfg)

    def _close(self) -> None:
        self._progress.close()
        self._evals.close()
        self._inputs.release_robot()
        self._log.close()

    def _now(self) -> int:
        return self._schedule.now(self.step, self.updates)

    def _open_progress(self) -> None:
        self._progress.open(
            total=self._schedule.total,
            initial=self._now(),
            enabled=self._run.progress,
            unit="step" if self._schedule.clock == "steps" else "update",
            desc=self._algo_cls.name,
        )

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
  `checkpoint(algo, buffer=)`, `attach` (what an interrupt's final checkpoint saves),
  `resume(algo, buffer=)`, `finish(algo, buffer=)`, `set_extra`;
- the schedule: `begin(clock, total)` picks what the schedule counts (env steps or gradient
  updates) and `due("eval" | "checkpoint" | "log")` says when; it is the only schedule;
- counters (read-only): `step` (env steps), `updates`, `episodes`, `eval_episodes`;
- seeded generators: `np_rng`, `torch_gen`; `resume_checkpoint`, `run_dir`, `device`.

The design follows the split that torchrl's Trainer/collector and stable-baselines3's
`OffPolicyAlgorithm` + callbacks make (the loop asks the schedule, it does not keep one), with
roborl's run-directory contract (metrics.jsonl, checkpoints, summary.json) behind it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
import math
import time
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.checkpoint import save_checkpoint
from roborl.core.config import RunConfig, config_to_dict
from roborl.core.envs import SharedEnv, env_rng_state, make_env, make_vec_env
from roborl.core.errors import CheckpointError, ConfigError
from roborl.core.evaluate import eval_metrics, evaluate
from roborl.core.interfaces import Algorithm, Logger
from roborl.core.lazy_dynamo import defer_dynamo_import
from roborl.core.obs import check_algorithm_obs
from roborl.core.run_dir import MetricsWriter, truncate_metrics_after, versions
from roborl.core.secrets import redact
from roborl.core.single_vector import SingleEnvVector
from roborl.core.spaces import space_to_dict
from roborl.core.video import VIDEO_DIR, EpisodeRecorder, make_recording_env, render_config

if TYPE_CHECKING:
    from roborl.core.loops.collectors import Collector
    from roborl.core.plugins import PluginHost

log = logging.getLogger("roborl.run")
"""The run's event lines (evaluations, checkpoints, start and end); `roborl train` writes
them to <run_dir>/cli.log through Hydra's job logging."""

Clock = Literal["steps", "updates"]
Scheduled = Literal["eval", "checkpoint", "log", "video"]
"""`video` is scheduled only with `video_every=N`; `evaluate` asks for it itself."""
EVAL_SEED_OFFSET = 1_000_003
CHECKPOINT_FORMAT = 2
"""2: `runner.step` counts env steps only and `runner.updates` gradient updates (format 1,
before issue 18, counted offline updates and WSRL pre-training updates as steps)."""


def freeze(value: Any) -> Any:
    """Nested mappings as read-only `MappingProxyType`s, lists as tuples."""
    if isinstance(value, Mapping):
        return types.MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def state_digest(algo: Algorithm) -> bytes | None:
    """A hash of everything in `algo.state_dict()` (weights, optimiser and normaliser state),
    or None when some entry cannot be hashed. Equal digests mean an unchanged policy, so an
    evaluation on the same seeds can be reused instead of run again (a few ms for SAC-sized
    networks, against seconds of evaluation episodes)."""
    h = hashlib.blake2b(digest_size=20)

    def feed(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            t = obj.detach().to("cpu").contiguous().reshape(-1)
            h.update(f"T{t.dtype}{tuple(obj.shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(obj, np.ndarray):
            h.update(f"A{obj.dtype}{obj.shape}".encode())
            h.update(np.ascontiguousarray(obj).tobytes())
        elif isinstance(obj, Mapping):
            h.update(b"{")
            for key in sorted(obj, key=repr):
                h.update(repr(key).encode())
                feed(obj[key])
            h.update(b"}")
        elif isinstance(obj, list | tuple):
            h.update(b"[")
            for item in obj:
                feed(item)
            h.update(b"]")
        elif obj is None or isinstance(obj, bool | int | float | str | bytes):
            h.update(repr(obj).encode())
        else:
            raise TypeError(type(obj).__name__)

    try:
        feed(algo.state_dict())
    except Exception:  # an algorithm whose state cannot be hashed is simply evaluated again
        return None
    return h.digest()


def logger_options(section: Mapping[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """The loggers a `logger` config section selects, as (name, options) pairs.

    `logger=[wandb,tensorboard]` composes each option under its own name
    (`{"wandb": {...}, "tensorboard": {...}}`); `logger=jsonl` composes to `{}` (metrics.jsonl
    only, which is always written). Configs saved before several loggers were possible hold
    one logger as `{"name": "wandb", ...options}` and still load.
    """
    section = dict(section or {})
    if "name" in section and not isinstance(section["name"], Mapping):
        name = section.pop("name")
        return [] if name in ("jsonl", "none", None) else [(str(name), section)]
    out = []
    for name, options in section.items():
        if options is not None and not isinstance(options, Mapping):
            raise ConfigError(
                f"logger.{name}={options!r}: each selected logger's options are a mapping "
                "(select loggers with logger=NAME or logger=[wandb,tensorboard])."
            )
        if name not in ("jsonl", "none"):
            out.append((str(name), dict(options or {})))
    return out


class ReadOnlyView:
    """Attribute access to a config dataclass without the means to change it."""

    __slots__ = ("_target",)

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        return freeze(copy.deepcopy(getattr(self._target, name)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the run's config is read-only (tried to set {name!r})")

    def __repr__(self) -> str:
        return f"ReadOnlyView({self._target!r})"


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
        self._step = 0
        self._updates = 0
        self._episodes = 0
        self._eval_episodes = 0
        self._clock: Clock = "steps"
        self._total = run.total_steps
        self._next: dict[str, int] = {}
        self._every = {"checkpoint": run.checkpoint_every, "log": run.log_every}
        if run.eval_every:  # eval_every=0: no evaluations at all (collection-only runs)
            self._every["eval"] = run.eval_every
        if run.video_every:  # the first evaluation at or after each multiple gets a video
            self._every["video"] = run.video_every
        self._last_eval: dict[str, Any] | None = None
        # (digest of the algorithm's state, episodes, result) of the last evaluation that ran
        self._eval_memo: tuple[bytes, int, dict[str, Any]] | None = None
        self._last_checkpoint: tuple[int, int, str] | None = None
        self._best_eval_return: float | None = None
        self._extra: dict[str, Any] = {}
        self._np_rng = np.random.default_rng(run.seed)
        self._torch_gen = torch.Generator().manual_seed(run.seed)
        self._algo: Algorithm | None = None
        self._buffer: ReplayBuffer | None = None
        self._envs: gym.vector.VectorEnv | None = None
        self._eval_env: gym.Env | None = None
        self._robot_env: SharedEnv | None = None
        self._metrics: MetricsWriter | None = None
        self._loggers: list[Logger] = []
        self._progress: Any = None
        self._start = time.time()
        self._elapsed_before = 0.0

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
        return self._step

    @property
    def updates(self) -> int:
        """Gradient updates made so far."""
        return self._updates

    @property
    def episodes(self) -> int:
        """Training episodes finished in the env (evaluation episodes are not counted)."""
        return self._episodes

    @property
    def eval_episodes(self) -> int:
        """Evaluation episodes run so far."""
        return self._eval_episodes

    @property
    def np_rng(self) -> np.random.Generator:
        """The run's numpy generator (seeded by `seed`, saved in checkpoints)."""
        return self._np_rng

    @property
    def torch_gen(self) -> torch.Generator:
        """The run's torch generator for buffer/dataset sampling (saved in checkpoints)."""
        return self._torch_gen

    @property
    def resume_checkpoint(self) -> Mapping[str, Any] | None:
        """The checkpoint this run resumes from (None for a fresh run), read-only."""
        return None if self._resume is None else types.MappingProxyType(self._resume)

    @property
    def last_eval(self) -> Mapping[str, Any] | None:
        return None if self._last_eval is None else types.MappingProxyType(self._last_eval)

    @property
    def best_eval_return(self) -> float | None:
        return self._best_eval_return

    @property
    def extra(self) -> Mapping[str, Any]:
        """Loop-specific state kept in checkpoints (`set_extra` writes it)."""
        return types.MappingProxyType(self._extra)

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
        return self._clock

    @property
    def total(self) -> int:
        """The budget of the current phase, on `clock`."""
        return self._total

    @property
    def finished(self) -> bool:
        """The current phase's budget is used up."""
        return self._now() >= self._total

    @property
    def elapsed(self) -> float:
        """Wall time of the run in seconds, resumed parts included."""
        return self._elapsed_before + (time.time() - self._start)

    # -- envs, data, algorithm, collector ------------------------------------------------------

    def make_env(self, seed: int | None = None, learned_reward: bool = True) -> gym.Env:
        """One env from the config, with episode statistics (`learned_reward=False`: without
        `reward=`'s model, for evaluation in simulation).

        With `robot=` every call returns the same `robot_env`: a robot has one driver, so the
        collector, evaluation and an algorithm's own loop share it (its `close()` only makes
        the robot hold; the context disconnects it at the end of the run).
        """
        robot = self.robot_env
        if robot is not None:
            if seed is not None:
                robot.action_space.seed(seed)
            return robot
        return make_env(self._host.registry, self._cfg, seed, learned_reward)

    @property
    def robot_env(self) -> SharedEnv | None:
        """The run's one robot env (connected on first use), or None without `robot=`."""
        if not self._cfg.get("robot"):
            return None
        if self._robot_env is None:
            if self._run.num_envs != 1:
                raise ConfigError(
                    f"num_envs={self._run.num_envs} with a real robot: a robot is one env, use 1."
                )
            self._robot_env = SharedEnv(make_env(self._host.registry, self._cfg))
        return self._robot_env

    def make_vec_env(self, num_envs: int | None = None) -> gym.vector.VectorEnv:
        """A vector env (same-step autoreset); its sub-envs' RNG states go into checkpoints.

        With `robot=` it wraps the one `robot_env` (num_envs must be 1)."""
        robot = self.robot_env
        if robot is not None:
            if (num_envs or 1) != 1:
                raise ConfigError(f"num_envs={num_envs} with a real robot: a robot is one env.")
            envs: gym.vector.VectorEnv = SingleEnvVector(lambda: robot)
        else:
            envs = make_vec_env(
                self._host.registry,
                self._cfg,
                num_envs or self._run.num_envs,
                self._run.vector_mode,
            )
        self._envs = envs
        return envs

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
        name = self._run.collector_name
        if name == "vector" and self._cfg.get("robot"):
            name = "robot"
        factory = self._host.registry.get("collectors", name)
        return factory(self)

    def reward_model(self) -> Any:
        """`reward=`'s model (None without one), e.g. to relabel demonstrations."""
        from roborl.core.rewards import build_reward_model, reward_options

        options = reward_options(self._cfg)
        return None if options is None else build_reward_model(self._host.registry, options)

    def load_dataset(self, path: str | None = None) -> Any:
        """`dataset=` (or `path`), from the first dataset-source plugin that accepts it."""
        path = path or self._run.dataset
        if not path:
            raise ConfigError(
                f"algo={self.algo_name} trains from data and needs dataset=PATH (a Minari "
                "dataset directory or a D4RL-style .hdf5/.npz file)."
            )
        sources = self._host.registry.dataset_sources
        if not sources:
            raise ConfigError(
                f"dataset={path!r} given, but no dataset-source plugin is installed or enabled."
            )
        for loader in sources.values():
            accepts: Callable[[str], bool] | None = getattr(loader, "accepts", None)
            if accepts is not None and not accepts(path):
                continue
            return loader(path)
        raise ConfigError(f"no dataset source accepts {path!r} (tried {', '.join(sources)}).")

    def attach(self, algo: Algorithm, buffer: ReplayBuffer | None = None) -> None:
        """Name what an interrupted run's final checkpoint must save (algorithm, buffer)."""
        self._algo = algo
        self._buffer = buffer

    def set_extra(self, key: str, value: Any) -> None:
        """Keep `value` (tensors, numbers, strings, lists, dicts) in every later checkpoint."""
        self._extra[key] = value

    # -- counters and the schedule -------------------------------------------------------------

    def begin(self, clock: Clock = "steps", total: int | None = None) -> None:
        """Start a phase: the schedule and the progress bar count `clock` up to `total`.

        `total` defaults to `run.total_steps` (steps) or `run.total_updates` (updates). The
        next eval/checkpoint/log fall on the next multiples of their `*_every` on that clock.
        """
        if clock not in ("steps", "updates"):
            raise ValueError(f"clock must be 'steps' or 'updates', not {clock!r}")
        self._clock = clock
        default = self._run.total_steps if clock == "steps" else self._run.total_updates
        self._total = int(default if total is None else total)
        now = self._now()
        for kind, every in self._intervals().items():
            self._next[kind] = (now // every + 1) * every
        self._open_progress()

    def event_stride(self, limit: int = 256) -> int:
        """The largest n <= `limit` such that every scheduled log/eval/checkpoint/video, the
        end of the random phase (`learning_starts`) and the phase's budget fall on multiples of
        n env steps (1 on an updates clock).

        A collector that takes several steps per call ends its chunks on these multiples, so
        nothing scheduled runs late (issue 23: random-phase chunks cut the per-step cost of the
        loop).
        """
        if self._clock != "steps":
            return 1
        common = math.gcd(self._total, self._run.learning_starts, *self._every.values())
        if common <= 0:
            return 1
        return max(d for d in range(1, max(1, limit) + 1) if common % d == 0)

    def due(self, kind: Scheduled) -> bool:
        """True once each time the clock reaches the next multiple of `{kind}_every`.

        The one schedule of every loop: call it after `advance`, act when it says so.
        """
        every = self._every.get(kind)
        if not every:  # not scheduled (eval_every=0, no video_every)
            return False
        now = self._now()
        if kind not in self._next:
            self._next[kind] = (now // every + 1) * every
            return False
        if now >= self._next[kind]:
            self._next[kind] = (now // every + 1) * every
            return True
        return False

    def advance(self, env_steps: int = 0, updates: int = 0) -> None:
        """Count env steps taken and gradient updates made (the only way counters move)."""
        if env_steps < 0 or updates < 0:
            raise ValueError("advance() counts forward only")
        self._step += int(env_steps)
        self._updates += int(updates)
        if self._progress is not None:
            self._progress.update(env_steps if self._clock == "steps" else updates)

    def record_episode(self, ret: float, length: int, **extra: float) -> None:
        """A training episode ended: count it and log its return and length."""
        self._episodes += 1
        self.log({"train/episode_return": ret, "train/episode_length": length, **extra})

    # -- logging, evaluation, checkpoints ------------------------------------------------------

    def log(self, metrics: Mapping[str, Any]) -> None:
        """One metrics.jsonl record at the current `step` and `updates`, also sent to the
        configured loggers and the `roborl_metrics` hook."""
        if self._metrics is None:
            raise RuntimeError("TrainContext.log before the run started")
        record = self._metrics.write(self._step, {"updates": self._updates, **metrics})
        record.pop("step")
        step = self._step if self._clock == "steps" else self._updates
        for logger in self._loggers:
            logger.log(record, step)
        self._host.pm.hook.roborl_metrics(step=self._step, metrics=record)

    def evaluate(self, algo: Algorithm, episodes: int | None = None) -> dict[str, Any]:
        """Deterministic-policy evaluation on a separately seeded env, logged as `eval/...`.

        On a robot it runs on the one `robot_env`, between training episodes (the loop's next
        episode starts with a reset), and the robot holds when it ends. In simulation, when
        the algorithm's state is bit-identical to that of the last evaluation (no update in
        between, e.g. before `learning_starts`), the last result is logged again instead of
        replaying the same seeded episodes; robots and video recordings always run.
        """
        if self._eval_env is None and self._run.video_every:  # renders only when recording
            seed = self._run.seed + EVAL_SEED_OFFSET
            self._eval_env = make_recording_env(self._host.registry, self._cfg, seed)
        if self._eval_env is None:  # the task's own reward and success, not reward='s model
            seed = self._run.seed + EVAL_SEED_OFFSET
            self._eval_env = self.make_env(seed=seed, learned_reward=False)
        video = self._video_path()
        if video is not None:
            assert isinstance(self._eval_env, EpisodeRecorder)
            self._eval_env.start(video, episodes=1)
        n = episodes or self._run.eval_episodes
        digest = None if video is not None or self._robot_env is not None else state_digest(algo)
        memo = self._eval_memo
        if digest is not None and memo is not None and memo[:2] == (digest, n):
            # Same weights, same eval seeds, deterministic policy: the episodes would repeat
            # the last evaluation exactly (e.g. every evaluation before learning_starts).
            result = copy.deepcopy(memo[2])
        else:
            policy = algo.policy()
            result = evaluate(
                policy.act,
                self._eval_env,
                n,
                seed=self._run.seed + EVAL_SEED_OFFSET,
                reset_policy=policy.reset,
            )
            self._eval_memo = None if digest is None else (digest, n, copy.deepcopy(result))
        if self._robot_env is not None:
            self._robot_env.pause()
        self._eval_episodes += n
        score = self._normalized_score(result["return_mean"])
        if score is not None:
            result["normalized_score"] = score
        result["step"], result["updates"] = self._step, self._updates
        self._last_eval = result
        ret = result["return_mean"]
        if self._best_eval_return is None or ret > self._best_eval_return:
            self._best_eval_return = ret
        self.log(eval_metrics(result))
        if video is not None:
            self._log_video()
        log.info(
            "eval at step %d, update %d: return %.2f +- %.2f over %d episodes",
            self._step, self._updates, ret, result["return_std"], n,
        )  # fmt: skip
        if self._progress is not None:
            self._progress.set_postfix_str(f"eval_return={ret:.1f}", refresh=False)
        return result

    def _video_path(self) -> Path | None:
        """Where this evaluation's video goes when `video_every` says it is due, else None."""
        if "video" not in self._every or not self.due("video"):
            return None
        prefix = "step" if self._clock == "steps" else "update"
        return self._run_dir / VIDEO_DIR / f"{prefix}_{self._now()}.mp4"

    def _log_video(self) -> None:
        """Finish the evaluation's MP4 and hand it to the loggers that show videos."""
        assert isinstance(self._eval_env, EpisodeRecorder)
        written = self._eval_env.finish()
        if written is None:
            return
        path, frames = written
        log.info("video %s (%d frames)", path, frames)
        step = self._step if self._clock == "steps" else self._updates
        for logger in self._loggers:
            logger.log_video("eval/video", str(path), step)

    def _normalized_score(self, ret: float) -> float | None:
        """D4RL-style score when reference returns are known (dataset or env.ref_*)."""
        from roborl.core.datasets import normalized_score

        env_cfg = self._cfg.get("env") or {}
        refs = {"random": env_cfg.get("ref_min_score"), "expert": env_cfg.get("ref_max_score")}
        refs.update(self._extra.get("reference_returns") or {})
        return normalized_score(ret, refs)

    def checkpoint(
        self, algo: Algorithm, buffer: ReplayBuffer | None = None, name: str = "last.pt"
    ) -> Path:
        """Write `checkpoints/<name>` atomically: weights, counters, RNGs, buffer if given."""
        # Each sub-env's RNG as it was when its current episode began (`env_rng_state`).
        env_states = [env_rng_state(sub) for sub in getattr(self._envs, "envs", None) or []]
        last = None if self._last_eval is None else self._last_eval["return_mean"]
        payload = {
            "algo": self._algo_cls.name,
            "algo_config": redact(config_to_dict(self._algo_config)),
            "observation_space": space_to_dict(algo.observation_space),
            "action_space": space_to_dict(algo.action_space),
            "state": algo.state_dict(),
            "config": redact(self._cfg),
            "runner": {
                "format": CHECKPOINT_FORMAT,
                "step": self._step,
                "updates": self._updates,
                "episodes": self._episodes,
                "eval_episodes": self._eval_episodes,
                "elapsed_s": self.elapsed,
                "best_eval_return": self._best_eval_return,
                "last_eval_return": last,
                "torch_rng": torch.get_rng_state(),
                "torch_gen": self._torch_gen.get_state(),
                "np_rng": self._np_rng.bit_generator.state,
                "env_rng": env_states,
                "extra": self._extra,
            },
            "versions": versions(),
        }
        if buffer is not None:
            payload["buffer"] = buffer.state_dict()
        path = self._run_dir / "checkpoints" / name
        save_checkpoint(path, payload)
        self._last_checkpoint = (self._step, self._updates, name)
        log.info("checkpoint %s at step %d, update %d", path, self._step, self._updates)
        self._host.pm.hook.roborl_checkpoint(path=str(path), step=self._step)
        return path

    def resume(self, algo: Algorithm, buffer: ReplayBuffer | None = None) -> bool:
        """Load the resume checkpoint (if any) into `algo`, `buffer`, the counters and RNGs.

        Returns False for a fresh run. Metrics logged after the checkpoint are dropped, since
        the resumed run logs them again.
        """
        ckpt = self._resume
        if ckpt is None:
            return False
        algo.load_state_dict(ckpt["state"])
        r = ckpt["runner"]
        step, updates = int(r["step"]), int(r["updates"])
        if int(r.get("format", 1)) < CHECKPOINT_FORMAT and self._algo_cls.loop == "offline":
            step = 0  # format 1 counted offline updates as steps; they are updates
        elif int(r.get("format", 1)) < CHECKPOINT_FORMAT and self._algo_cls.accepts_pretrained:
            raise CheckpointError(
                "this checkpoint was written before roborl split env steps from updates "
                "(its step counts pre-training updates too), so its run cannot be resumed "
                "exactly; start a new run from its weights with pretrained=PATH instead."
            )
        self._step, self._updates = step, updates
        self._episodes = int(r["episodes"])
        self._eval_episodes = int(r.get("eval_episodes", 0))
        self._elapsed_before = float(r.get("elapsed_s", 0.0))
        self._best_eval_return = r.get("best_eval_return")
        last = r.get("last_eval_return")
        self._last_eval = None if last is None else {"return_mean": last}
        torch.set_rng_state(r["torch_rng"])
        self._torch_gen.set_state(r["torch_gen"])
        self._np_rng.bit_generator.state = r["np_rng"]
        self._extra = dict(r.get("extra") or {})
        if buffer is not None and "buffer" in ckpt:
            buffer.load_state_dict(ckpt["buffer"])
        truncate_metrics_after(self._run_dir, int(r["step"]), updates)
        if self._metrics is not None:  # the file was replaced: write to the new one
            self._metrics.close()
            self._metrics = MetricsWriter(self._run_dir)
        for kind, every in self._intervals().items():
            self._next[kind] = (self._now() // every + 1) * every
        if self._progress is not None:
            self._progress.n = self._now()
        return True

    def finish(self, algo: Algorithm, buffer: ReplayBuffer | None = None) -> None:
        """The end of a phase: evaluate and write last.pt, each unless the schedule already
        did at this very point, so neither is written twice."""
        last = self._last_eval
        due = "eval" in self._every
        if due and (
            last is None or (last.get("step"), last.get("updates")) != (self._step, self._updates)
        ):
            self.evaluate(algo)
        if self._last_checkpoint != (self._step, self._updates, "last.pt"):
            self.checkpoint(algo, buffer)

    # -- runner-only lifecycle (roborl.core.runner) ----------------------------------------------

    def _open(self) -> None:
        self._metrics = MetricsWriter(self._run_dir)
        if self._run.video_every:
            render_config(self._cfg)  # refuses robot= before the run starts
        for name, options in logger_options(self._cfg.get("logger")):
            cls = self._host.registry.get("loggers", name)
            self._loggers.append(cls(str(self._run_dir), redact(self._cfg), **options))

    def _close(self) -> None:
        if self._progress is not None:
            self._progress.close()
            self._progress = None
        if self._eval_env is not None:
            with contextlib.suppress(Exception):
                self._eval_env.close()
            self._eval_env = None
        if self._robot_env is not None:  # the final stop command, then disconnect
            with contextlib.suppress(Exception):
                self._robot_env.release()
            self._robot_env = None
        if self._metrics is not None:
            self._metrics.close()
        for logger in self._loggers:
            with contextlib.suppress(Exception):
                logger.close()

    def _now(self) -> int:
        return self._step if self._clock == "steps" else self._updates

    def _intervals(self) -> dict[str, int]:
        return self._every

    def _open_progress(self) -> None:
        from tqdm.auto import tqdm

        if self._progress is not None:
            self._progress.close()
        self._progress = tqdm(
            total=self._total,
            initial=self._now(),
            disable=not self._run.progress,
            unit="step" if self._clock == "steps" else "update",
            dynamic_ncols=True,
            desc=self._algo_cls.name,
            mininterval=1.0,
        )

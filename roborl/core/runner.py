"""The runner: collect, update, evaluate, checkpoint, and leave a complete run directory.

One `Runner` per run. It resolves the algorithm, env and loggers through the registry, then
drives the loop the algorithm asks for (`Algorithm.loop`): the off-policy loop here, the
offline loop over a dataset, or the algorithm's own `train(ctx)` with the runner as context.
SIGINT/SIGTERM write a final checkpoint and summary before the run stops.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from roborl.core.buffer import ReplayBuffer
from roborl.core.checkpoint import load_checkpoint, save_checkpoint
from roborl.core.config import RunConfig, build_config, config_to_dict
from roborl.core.envs import make_env, make_vec_env
from roborl.core.errors import ConfigError
from roborl.core.evaluate import eval_metrics, evaluate
from roborl.core.interfaces import Algorithm, Logger
from roborl.core.plugins import PluginHost
from roborl.core.run_dir import (
    CONFIG_FILE,
    MetricsWriter,
    git_sha,
    plot_learning_curve,
    truncate_metrics_after,
    versions,
    write_summary,
)
from roborl.core.spaces import space_from_dict, space_to_dict

RUN_KEYS = {f for f in RunConfig.__dataclass_fields__}
SECTION_KEYS = {"algo", "env", "robot", "logger", "plugins", "hydra", "ray"}
EVAL_SEED_OFFSET = 1_000_003


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: checkpoint, summarise, stop."""


def split_config(cfg: Mapping[str, Any]) -> tuple[RunConfig, dict[str, Any]]:
    """Validate the run-level keys; returns (RunConfig, the whole config as a plain dict)."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    cfg = dict(cfg)
    run_values = {k: v for k, v in cfg.items() if k in RUN_KEYS}
    unknown = set(cfg) - RUN_KEYS - SECTION_KEYS
    unknown.discard("run_dir")
    if unknown:
        raise ConfigError(
            f"unknown top-level config key(s): {', '.join(sorted(unknown))}. Run-level keys are "
            f"{', '.join(sorted(RUN_KEYS))}; sections are algo, env, robot, logger, plugins."
        )
    return build_config(RunConfig, run_values), cfg


def resolve_algorithm(host: PluginHost, algo_cfg: Mapping[str, Any]) -> tuple[type[Algorithm], Any]:
    """The algorithm class named by `algo.name` and its validated config dataclass."""
    algo_cfg = dict(algo_cfg or {})
    name = algo_cfg.pop("name", None)
    if not name:
        raise ConfigError("algo.name is not set: pass algo=<name>, e.g. algo=sac.")
    cls = host.registry.get("algorithms", name)
    return cls, build_config(cls.Config, algo_cfg, prefix="algo.")


def build_algorithm(
    host: PluginHost,
    algo_cfg: Mapping[str, Any],
    observation_space: gym.Space,
    action_space: gym.Space,
    device: str,
) -> Algorithm:
    cls, config = resolve_algorithm(host, algo_cfg)
    return cls(observation_space, action_space, config, device)


def algorithm_from_checkpoint(
    host: PluginHost, path: str | Path, device: str = "cpu"
) -> tuple[Algorithm, dict[str, Any]]:
    """Rebuild an algorithm (weights, no env needed) from a checkpoint written by a run."""
    ckpt = load_checkpoint(path, map_location=device)
    algo_cfg = {"name": ckpt["algo"], **ckpt["algo_config"]}
    obs_space = space_from_dict(ckpt["observation_space"])
    act_space = space_from_dict(ckpt["action_space"])
    algo = build_algorithm(host, algo_cfg, obs_space, act_space, device)
    algo.load_state_dict(ckpt["state"])
    return algo, ckpt


class Runner:
    """Drives one run; also the `TrainContext` handed to custom-loop algorithms."""

    def __init__(self, cfg: Mapping[str, Any], run_dir: str | Path, host: PluginHost) -> None:
        self.host = host
        self.run, self.cfg = split_config(cfg)
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir = self.run_dir / "checkpoints"
        if self.run.torch_threads > 0:
            torch.set_num_threads(self.run.torch_threads)
        self.device = self.run.device
        self.algo_cls, self.algo_config = resolve_algorithm(host, self.cfg.get("algo") or {})
        if self.run.pretrained and not getattr(self.algo_cls, "accepts_pretrained", False):
            raise ConfigError(
                f"pretrained={self.run.pretrained!r} given, but algo={self.algo_cls.name} does "
                "not start from a pre-trained checkpoint; use an algorithm that does (e.g. "
                "algo=wsrl), or `roborl resume RUN_DIR` to continue a run."
            )
        self.logger_cfg = dict(self.cfg.get("logger") or {"name": "jsonl"})
        self.loggers: list[Logger] = []
        self.metrics: MetricsWriter | None = None
        self.step = 0
        self.updates = 0
        self.episodes = 0
        self.last_eval: dict[str, Any] | None = None
        self.best_eval_return: float | None = None
        self.start_time = time.time()
        self.elapsed_before = 0.0
        self.extra_state: dict[str, Any] = {}
        self.status = "running"
        self.np_rng = np.random.default_rng(self.run.seed)
        self.torch_gen = torch.Generator().manual_seed(self.run.seed)
        # Network initialisation and policy sampling draw from torch's global generator:
        # seeding it makes `run.seed` reproduce a run, not only its env and buffer.
        torch.manual_seed(self.run.seed)
        self.progress: Any = None

    # -- environment and algorithm -----------------------------------------------------------

    def make_env(self, seed: int | None = None) -> gym.Env:
        return make_env(self.host.registry, self.cfg, seed)

    def make_vec_env(self, num_envs: int | None = None) -> gym.vector.VectorEnv:
        return make_vec_env(
            self.host.registry, self.cfg, num_envs or self.run.num_envs, self.run.vector_mode
        )

    def build_algorithm(self, observation_space: gym.Space, action_space: gym.Space) -> Algorithm:
        return self.algo_cls(observation_space, action_space, self.algo_config, self.device)

    # -- logging -----------------------------------------------------------------------------

    def _open_loggers(self) -> None:
        self.metrics = MetricsWriter(self.run_dir)
        name = self.logger_cfg.get("name", "jsonl")
        if name in ("jsonl", "none", None):
            return
        options = {k: v for k, v in self.logger_cfg.items() if k != "name"}
        cls = self.host.registry.get("loggers", name)
        self.loggers.append(cls(str(self.run_dir), self.cfg, **options))

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        step = self.step if step is None else step
        assert self.metrics is not None
        record = self.metrics.write(step, metrics)
        record.pop("step")
        for logger in self.loggers:
            logger.log(record, step)
        self.host.pm.hook.roborl_metrics(step=step, metrics=record)

    # -- evaluation --------------------------------------------------------------------------

    def evaluate(self, algo: Algorithm, episodes: int | None = None) -> dict[str, Any]:
        """Deterministic-policy evaluation, logged as `eval/...` at the current step."""
        if not hasattr(self, "_eval_env"):
            self._eval_env = self.make_env(seed=self.run.seed + EVAL_SEED_OFFSET)
        policy = algo.policy()
        result = evaluate(
            policy.act,
            self._eval_env,
            episodes or self.run.eval_episodes,
            seed=self.run.seed + EVAL_SEED_OFFSET,
            reset_policy=policy.reset,
        )
        result.update(self.normalize_scores(result))
        result["step"] = self.step
        self.last_eval = result
        ret = result["return_mean"]
        if self.best_eval_return is None or ret > self.best_eval_return:
            self.best_eval_return = ret
        self.log(eval_metrics(result))
        if self.progress is not None:
            self.progress.set_postfix_str(f"eval_return={ret:.1f}", refresh=False)
        return result

    def normalize_scores(self, result: Mapping[str, Any]) -> dict[str, float]:
        """D4RL-style normalised score when reference returns are configured (env.ref_*)."""
        env_cfg = self.cfg.get("env") or {}
        lo, hi = env_cfg.get("ref_min_score"), env_cfg.get("ref_max_score")
        refs = self.extra_state.get("reference_returns") or {}
        lo = refs.get("random", lo)
        hi = refs.get("expert", hi)
        if lo is None or hi is None or hi == lo:
            return {}
        return {"normalized_score": 100.0 * (result["return_mean"] - lo) / (hi - lo)}

    # -- checkpoints -------------------------------------------------------------------------

    def checkpoint(
        self, algo: Algorithm, buffer: ReplayBuffer | None = None, name: str = "last.pt"
    ) -> Path:
        env_states = []
        vec = getattr(self, "_vec_env", None)
        for sub in getattr(vec, "envs", []) or []:
            try:
                env_states.append(sub.unwrapped.np_random.bit_generator.state)
            except AttributeError:
                env_states.append(None)
        payload = {
            "algo": self.algo_cls.name,
            "algo_config": config_to_dict(self.algo_config),
            "observation_space": space_to_dict(algo.observation_space),
            "action_space": space_to_dict(algo.action_space),
            "state": algo.state_dict(),
            "config": self.cfg,
            "runner": {
                "step": self.step,
                "updates": self.updates,
                "episodes": self.episodes,
                "elapsed_s": self.elapsed(),
                "best_eval_return": self.best_eval_return,
                "last_eval_return": None
                if self.last_eval is None
                else self.last_eval["return_mean"],
                "torch_rng": torch.get_rng_state(),
                "torch_gen": self.torch_gen.get_state(),
                "np_rng": self.np_rng.bit_generator.state,
                "env_rng": env_states,
                "extra": self.extra_state,
            },
            "versions": versions(),
        }
        if buffer is not None:
            payload["buffer"] = buffer.state_dict()
        path = self.ckpt_dir / name
        save_checkpoint(path, payload)
        self.host.pm.hook.roborl_checkpoint(path=str(path), step=self.step)
        return path

    def restore(
        self, algo: Algorithm, buffer: ReplayBuffer | None, ckpt: Mapping[str, Any]
    ) -> None:
        algo.load_state_dict(ckpt["state"])
        r = ckpt["runner"]
        self.step, self.updates, self.episodes = (
            int(r["step"]),
            int(r["updates"]),
            int(r["episodes"]),
        )
        self.elapsed_before = float(r.get("elapsed_s", 0.0))
        self.best_eval_return = r.get("best_eval_return")
        last = r.get("last_eval_return")
        self.last_eval = None if last is None else {"return_mean": last}
        torch.set_rng_state(r["torch_rng"])
        self.torch_gen.set_state(r["torch_gen"])
        self.np_rng.bit_generator.state = r["np_rng"]
        self.extra_state = dict(r.get("extra") or {})
        self._saved_env_rng = r.get("env_rng") or []
        if buffer is not None and "buffer" in ckpt:
            buffer.load_state_dict(ckpt["buffer"])
        truncate_metrics_after(self.run_dir, self.step)
        if self.metrics is not None:  # the file was replaced: write to the new one, not the old
            self.metrics.close()
            self.metrics = MetricsWriter(self.run_dir)

    def elapsed(self) -> float:
        return self.elapsed_before + (time.time() - self.start_time)

    # -- the run -----------------------------------------------------------------------------

    def execute(self, resume_from: str | Path | None = None) -> dict[str, Any]:
        """Run to `total_steps` (or resume), always leaving summary.json and last.pt."""
        ckpt = load_checkpoint(resume_from) if resume_from else None
        if ckpt is None:
            (self.run_dir / CONFIG_FILE).write_text(OmegaConf.to_yaml(OmegaConf.create(self.cfg)))
        self._open_loggers()
        self.host.pm.hook.roborl_run_start(run_dir=str(self.run_dir), config=self.cfg)
        previous = _install_signal_handlers()
        algo: Algorithm | None = None
        self.current_algo: Algorithm | None = None
        try:
            loop = self.algo_cls.loop
            if self.run.distributed:
                loop_fn = self.host.registry.get("loops", self.run.distributed)
                algo = loop_fn(self, ckpt)
            elif loop == "offpolicy":
                algo = self._offpolicy(ckpt)
            elif loop == "offline":
                algo = self._offline(ckpt)
            elif loop == "custom":
                algo = self._custom(ckpt)
            else:
                raise ConfigError(
                    f"algorithm {self.algo_cls.name!r} declares unknown loop {loop!r}"
                )
            self.status = "finished"
        except KeyboardInterrupt:
            self.status = "interrupted"
            raise
        except BaseException:
            self.status = "crashed"
            raise
        finally:
            _restore_signal_handlers(previous)
            if self.progress is not None:
                self.progress.close()
            summary = self._finish(algo or self.current_algo)
        return summary

    def _finish(self, algo: Algorithm | None) -> dict[str, Any]:
        if algo is not None and self.status != "finished" and self.step > 0:
            try:
                self.checkpoint(algo, getattr(self, "_buffer", None))
            except Exception as exc:  # the previous checkpoint is intact; keep the real error
                print(f"roborl: warning: final checkpoint failed: {exc}", file=sys.stderr)
        eval_env = self.__dict__.pop("_eval_env", None)
        if eval_env is not None:  # a robot's eval env sends its final stop command on close
            with contextlib.suppress(Exception):
                eval_env.close()
        env_cfg = self.cfg.get("env") or {}
        robot_cfg = self.cfg.get("robot") or {}
        summary = {
            "algo": self.algo_cls.name,
            "env": (robot_cfg.get("name") and f"robot:{robot_cfg.get('name')}")
            or env_cfg.get("id"),
            "seed": self.run.seed,
            "steps": self.step,
            "updates": self.updates,
            "episodes": self.episodes,
            "status": self.status,
            "final_eval_return": None if self.last_eval is None else self.last_eval["return_mean"],
            "best_eval_return": self.best_eval_return,
            "wall_time_s": round(self.elapsed(), 3),
            "versions": versions(),
            "git_sha": git_sha(),
        }
        if self.last_eval is not None:
            for key in ("cost_mean", "success_rate", "normalized_score"):
                if key in self.last_eval:
                    summary[f"final_eval_{key}"] = self.last_eval[key]
        write_summary(self.run_dir, summary)
        if self.metrics is not None:
            self.metrics.close()
        for logger in self.loggers:
            with contextlib.suppress(Exception):
                logger.close()
        with contextlib.suppress(Exception):
            plot_learning_curve(
                self.run_dir, f"{summary['algo']} on {summary['env']} (seed {self.run.seed})"
            )
        self.host.pm.hook.roborl_run_end(run_dir=str(self.run_dir), summary=summary)
        return summary

    def _progress(self) -> Any:
        from tqdm.auto import tqdm

        self.progress = tqdm(
            total=self.run.total_steps,
            initial=self.step,
            disable=not self.run.progress,
            unit="step",
            dynamic_ncols=True,
            desc=f"{self.algo_cls.name}",
            mininterval=1.0,
        )
        return self.progress

    # -- loops -------------------------------------------------------------------------------

    def _offpolicy(self, ckpt: Mapping[str, Any] | None) -> Algorithm:
        run = self.run
        envs = self.make_vec_env()
        self._vec_env = envs
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        algo = self.current_algo = self.build_algorithm(obs_space, act_space)
        capacity = min(
            int(getattr(self.algo_config, "buffer_size", run.total_steps)), run.total_steps
        )
        act_shape = () if isinstance(act_space, gym.spaces.Discrete) else act_space.shape
        buffer = ReplayBuffer(
            max(capacity, 1),
            obs_space.shape,
            act_shape,
            device=run.buffer_device or self.device,
            with_costs=True,
            action_dtype=torch.long
            if isinstance(act_space, gym.spaces.Discrete)
            else torch.float32,
        )
        self._buffer = buffer
        batch_size = int(getattr(self.algo_config, "batch_size", 256))
        n_step = int(getattr(self.algo_config, "n_step", 1))
        if ckpt is not None:
            self.restore(algo, buffer, ckpt)
            for sub, state in zip(getattr(envs, "envs", []), self._saved_env_rng):
                if state is not None:
                    sub.unwrapped.np_random.bit_generator.state = state
            obs, _ = envs.reset()
        else:
            obs, _ = envs.reset(seed=run.seed)
        act_space.seed(run.seed)
        n = envs.num_envs
        next_eval = (self.step // run.eval_every + 1) * run.eval_every
        next_ckpt = (self.step // run.checkpoint_every + 1) * run.checkpoint_every
        next_log = (self.step // run.log_every + 1) * run.log_every
        update_debt = 0.0
        sums: dict[str, Any] = defaultdict(float)
        count = 0
        t_log, s_log = time.time(), self.step
        bar = self._progress()
        low = getattr(act_space, "low", None)
        high = getattr(act_space, "high", None)

        while self.step < run.total_steps:
            if self.step < run.learning_starts:
                if low is not None:
                    actions = self.np_rng.uniform(low, high, size=(n, *act_space.shape)).astype(
                        np.float32
                    )
                else:
                    actions = self.np_rng.integers(0, act_space.n, size=n)
            else:
                actions = algo.act(obs, deterministic=False)
            next_obs, rewards, terminated, truncated, infos = envs.step(actions)
            real_next = next_obs
            done = np.logical_or(terminated, truncated)
            if done.any() and "final_obs" in infos:
                real_next = next_obs.copy()
                for i in np.flatnonzero(done):
                    real_next[i] = infos["final_obs"][i]
            costs = infos.get("cost") if isinstance(infos, dict) else None
            buffer.add(obs, actions, rewards, real_next, terminated.astype(np.float32), costs)
            obs = next_obs
            self.step += n
            bar.update(n)

            if done.any() and "final_info" in infos and "episode" in infos["final_info"]:
                ep = infos["final_info"]["episode"]
                mask = infos["final_info"].get("_episode", done)
                for i in np.flatnonzero(mask):
                    self.episodes += 1
                    self.log(
                        {
                            "train/episode_return": float(ep["r"][i]),
                            "train/episode_length": int(ep["l"][i]),
                        }
                    )

            if self.step >= run.learning_starts and len(buffer) >= batch_size:
                update_debt += run.utd_ratio * n
                while update_debt >= 1.0:
                    if n_step > 1:
                        gamma = float(getattr(self.algo_config, "gamma", 0.99))
                        batch = buffer.sample_nstep(batch_size, n_step, gamma, self.torch_gen)
                    else:
                        batch = buffer.sample(batch_size, self.torch_gen)
                    metrics = algo.update(batch)
                    for k, v in metrics.items():
                        sums[k] = sums[k] + (v.detach() if torch.is_tensor(v) else v)
                    count += 1
                    self.updates += 1
                    update_debt -= 1.0

            if self.step >= next_log:
                now = time.time()
                record = {f"train/{k}": float(v) / count for k, v in sums.items()} if count else {}
                record["time/sps"] = (self.step - s_log) / max(now - t_log, 1e-9)
                record["time/updates"] = self.updates
                self.log(record)
                bar.set_postfix_str(
                    f"sps={record['time/sps']:.0f}"
                    + (
                        ""
                        if self.last_eval is None
                        else f" eval_return={self.last_eval['return_mean']:.1f}"
                    ),
                    refresh=False,
                )
                sums, count = defaultdict(float), 0
                t_log, s_log = now, self.step
                next_log += run.log_every
            if self.step >= next_eval:
                self.evaluate(algo)
                next_eval += run.eval_every
            if self.step >= next_ckpt:
                self.checkpoint(algo, buffer)
                next_ckpt += run.checkpoint_every

        if self.last_eval is None or self.last_eval.get("step") != self.step:
            self.evaluate(algo)
        self.checkpoint(algo, buffer)
        envs.close()
        return algo

    def _offline(self, ckpt: Mapping[str, Any] | None) -> Algorithm:
        """Train from `dataset=` (loaded by a dataset-source plugin), evaluate online."""
        run = self.run
        if not run.dataset:
            raise ConfigError(
                f"algo={self.algo_cls.name} trains offline and needs dataset=PATH "
                "(a Minari dataset directory or a D4RL-style .hdf5/.npz file)."
            )
        dataset = self.load_dataset(run.dataset)
        refs = getattr(dataset, "reference_returns", None)
        if refs:
            self.extra_state["reference_returns"] = dict(refs)
        algo = self.current_algo = self.build_algorithm(
            dataset.observation_space, dataset.action_space
        )
        if hasattr(algo, "prepare"):
            algo.prepare(dataset)
        if ckpt is not None:
            self.restore(algo, None, ckpt)
        batch_size = int(getattr(self.algo_config, "batch_size", 256))
        next_eval = (self.step // run.eval_every + 1) * run.eval_every
        next_ckpt = (self.step // run.checkpoint_every + 1) * run.checkpoint_every
        next_log = (self.step // run.log_every + 1) * run.log_every
        sums: dict[str, Any] = defaultdict(float)
        count, t_log, s_log = 0, time.time(), self.step
        bar = self._progress()
        while self.step < run.total_steps:
            metrics = algo.update(dataset.sample(batch_size, self.torch_gen))
            for k, v in metrics.items():
                sums[k] = sums[k] + (v.detach() if torch.is_tensor(v) else v)
            count += 1
            self.step += 1
            self.updates += 1
            bar.update(1)
            if self.step >= next_log:
                now = time.time()
                record = {f"train/{k}": float(v) / count for k, v in sums.items()}
                record["time/sps"] = (self.step - s_log) / max(now - t_log, 1e-9)
                self.log(record)
                sums, count, t_log, s_log = defaultdict(float), 0, now, self.step
                next_log += run.log_every
            if self.step >= next_eval:
                self.evaluate(algo)
                next_eval += run.eval_every
            if self.step >= next_ckpt:
                self.checkpoint(algo)
                next_ckpt += run.checkpoint_every
        self.evaluate(algo)
        self.checkpoint(algo)
        return algo

    def _custom(self, ckpt: Mapping[str, Any] | None) -> Algorithm:
        env = self.make_env(seed=self.run.seed)
        algo = self.current_algo = self.build_algorithm(env.observation_space, env.action_space)
        env.close()
        self._resume_ckpt = ckpt
        if ckpt is not None:
            self.restore(algo, None, ckpt)
        self._progress()
        self.current_algo = algo
        algo.train(self)
        return algo

    # -- helpers for custom loops and offline algorithms -------------------------------------

    @property
    def resume_checkpoint(self) -> Mapping[str, Any] | None:
        return getattr(self, "_resume_ckpt", None)

    def load_dataset(self, path: str) -> Any:
        """Ask each dataset-source plugin in turn; the first that accepts `path` loads it."""
        sources = self.host.registry.dataset_sources
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

    def advance(self, steps: int) -> None:
        """Custom loops report env steps they consumed (progress bar and step counter)."""
        self.step += steps
        if self.progress is not None:
            self.progress.update(steps)


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(f"received signal {signal.Signals(signum).name}")


def _install_signal_handlers() -> dict[int, Any]:
    # SIGINT too: a library imported by some plugin may have replaced Python's default
    # handler, and Ctrl-C must always reach the runner so it can write its final checkpoint.
    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[signum] = signal.signal(signum, _raise_interrupted)
        except ValueError:  # not in the main thread
            pass
    return previous


def _restore_signal_handlers(previous: Mapping[int, Any]) -> None:
    for signum, handler in previous.items():
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signum, handler)

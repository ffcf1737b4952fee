"""Actor-learner collection on Ray: rollout actors stream transitions, the learner pushes weights.

`RayCollector` is the off-policy loop's `collector=ray` (alias `distributed=ray`): the loop,
its replay buffer, updates and schedule are the same as for the in-process collector. The
pattern is the one SERL (Luo et al., 2024) and LeRobot's async actor-learner use, built on Ray
actors (Moritz et al., 2018) rather than a home-made transport:

- each `RolloutWorker` is a Ray actor with its own `gymnasium` vector env (built from the same
  registry and config as the learner) and a CPU copy of the algorithm, used only to act
  (`Algorithm.act`, stochastic);
- the collector keeps one `collect` request in flight per worker and hands the loop each
  finished chunk as it arrives (`ray.wait`, first come first served); the loop runs
  `utd_ratio` updates per received env step, and `sync` publishes new weights every
  `ray.sync_every` env steps; a worker gets them with its next request, so a chunk may come
  from a policy up to one sync period old (logged as `dist/policy_lag`, in weight versions);
- a worker that dies (its process killed, its node lost) is replaced by a fresh actor up to
  `ray.max_restarts` times; after that the run continues with the workers that are left, and
  fails only when none is left. Each worker's process id is logged as `dist/worker_pid`.

This module never imports an algorithm plugin. Deviations from the in-process collector: the
learner receives transitions in chunks of `rollout_steps * envs_per_worker` per worker, and
before `learning_starts` the workers draw uniform random actions with their own seeds (the
loop's `random` flag is applied when a request is sent, not when its chunk arrives).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.checkpoint import atomic_write_json
from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError, RoborlError
from roborl.core.interfaces import Algorithm
from roborl.core.loops.collectors import (
    Chunk,
    Collector,
    finished_episodes,
    real_next_obs,
    step_info,
)

if TYPE_CHECKING:
    from roborl.core.context import TrainContext

WORKER_SEED_STRIDE = 10_007
STATS_FILE = "distributed.json"


@dataclass
class RayConfig:
    """The `ray:` section of the config."""

    num_workers: int = field(default=2, metadata=rng(1, 4096, "rollout actors"))
    address: str | None = field(
        default=None, metadata={"help": "null: local Ray; 'auto' or 'ray://host:10001'"}
    )
    num_cpus: int | None = field(default=None, metadata=rng(1, None, "CPUs of a local Ray"))
    envs_per_worker: int = field(default=1, metadata=rng(1, 1024))
    rollout_steps: int = field(default=64, metadata=rng(1, None, "vector steps per request"))
    sync_every: int = field(default=1000, metadata=rng(1, None, "env steps between pushes"))
    cpus_per_worker: float = field(default=0.5, metadata=rng(0.0, None))
    max_restarts: int = field(default=1, metadata=rng(0, None, "replacements per worker"))


def _to_cpu(obj: Any) -> Any:
    if torch.is_tensor(obj):
        return obj.detach().cpu()
    if isinstance(obj, Mapping):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


class RolloutWorker:
    """One rollout actor: a vector env and a policy copy; returns chunks of transitions."""

    def __init__(self, cfg: Mapping[str, Any], index: int, seed: int, num_envs: int) -> None:
        torch.set_num_threads(1)
        from roborl.core.algorithms import build_algorithm
        from roborl.core.envs import make_vec_env
        from roborl.core.plugins import get_host

        host = get_host((cfg.get("plugins") or {}).get("disable") or [])
        self.index = index
        self.envs = make_vec_env(host.registry, cfg, num_envs, "sync")
        self.obs_space = self.envs.single_observation_space
        self.act_space = self.envs.single_action_space
        self.algo = build_algorithm(host, cfg["algo"], self.obs_space, self.act_space, "cpu")
        self.obs, _ = self.envs.reset(seed=seed)
        self.rng = np.random.default_rng(seed)
        self.version = -1

    def pid(self) -> int:
        return os.getpid()

    def collect(
        self, steps: int, random: bool, weights: Any = None, version: int = -1
    ) -> dict[str, Any]:
        """`steps` vector steps; `weights` (a state dict) replaces the policy first if given."""
        if weights is not None:
            self.algo.load_state_dict(weights)
            self.version = version
        n = self.envs.num_envs
        space = self.act_space
        discrete = isinstance(space, gym.spaces.Discrete)
        act_shape = () if discrete else space.shape
        obs_buf = np.empty((steps, n, *self.obs_space.shape), np.float32)
        next_buf = np.empty_like(obs_buf)
        act_buf = np.empty((steps, n, *act_shape), np.int64 if discrete else np.float32)
        rew = np.empty((steps, n), np.float32)
        term = np.empty((steps, n), np.float32)
        cost = np.zeros((steps, n), np.float32)
        ep_returns: list[float] = []
        ep_lengths: list[int] = []
        for t in range(steps):
            if random:
                if discrete:
                    actions = self.rng.integers(0, space.n, size=n)
                else:
                    actions = self.rng.uniform(space.low, space.high, size=(n, *space.shape))
            else:
                actions = self.algo.act(self.obs, deterministic=False)
            nxt, r, te, tr, infos = self.envs.step(actions)
            done = np.logical_or(te, tr)
            obs_buf[t], act_buf[t], rew[t], term[t] = self.obs, actions, r, te
            next_buf[t] = real_next_obs(nxt, infos, done)
            step_cost = step_info(infos, "cost", done)
            if step_cost is not None:
                cost[t] = step_cost
            for ret, length, _ in finished_episodes(infos, done):
                ep_returns.append(ret)
                ep_lengths.append(length)
            self.obs = nxt
        flat = steps * n
        return {
            "obs": obs_buf.reshape(flat, *self.obs_space.shape),
            "actions": act_buf.reshape(flat, *act_shape),
            "rewards": rew.reshape(flat),
            "next_obs": next_buf.reshape(flat, *self.obs_space.shape),
            "terminated": term.reshape(flat),
            "costs": cost.reshape(flat),
            "episode_returns": ep_returns,
            "episode_lengths": ep_lengths,
            "worker": self.index,
            "version": self.version,
        }


@dataclass
class WorkerSlot:
    index: int
    actor: Any = None
    pid: int | None = None
    version: int = -1
    restarts: int = 0
    transitions: int = 0
    chunks: int = 0
    alive: bool = True


@dataclass
class RayStats:
    """What the learner saw; written to `distributed.json` and kept in checkpoints."""

    workers: dict[int, WorkerSlot] = field(default_factory=dict)
    failures: int = 0
    weight_pushes: int = 0
    ray_address: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "failures": self.failures,
            "weight_pushes": self.weight_pushes,
            "ray_address": self.ray_address,
            "workers": {
                str(i): {k: v for k, v in asdict(w).items() if k != "actor"}
                for i, w in self.workers.items()
            },
            "transitions_total": sum(w.transitions for w in self.workers.values()),
        }


def _init_ray(rc: RayConfig) -> bool:
    """Connect to (or start) Ray; True when this call started it (and must shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        if rc.address:
            ray.init(address=rc.address, include_dashboard=False, logging_level="WARNING")
        else:
            ray.init(num_cpus=rc.num_cpus, include_dashboard=False, logging_level="WARNING")
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ConfigError(
            f"ray.address={rc.address!r}: could not connect to a Ray cluster ({exc}). Accepted: "
            "null (start a local Ray), 'auto' (the cluster `ray start` made on this machine) or "
            "'ray://HOST:10001' (Ray Client)."
        ) from None
    return True


class RayCollector(Collector):
    """`collector=ray`: chunks of transitions from Ray rollout workers (see module docstring)."""

    def __init__(self, ctx: TrainContext) -> None:
        self.ctx = ctx
        self.rc = build_config(RayConfig, ctx.config.get("ray") or {}, prefix="ray.")
        probe = ctx.make_env(seed=ctx.run.seed)
        self.observation_space, self.action_space = probe.observation_space, probe.action_space
        probe.close()
        self.stats = RayStats()
        self.pending: dict[Any, int] = {}
        self.version = 0
        self.weights_ref: Any = None
        self.lags: list[int] = []
        self.started = False
        self.next_sync = 0

    # -- workers -------------------------------------------------------------------------------

    def start(self, algo: Algorithm) -> None:
        import ray

        self.started = _init_ray(self.rc)
        self.stats.ray_address = ray.get_runtime_context().gcs_address
        self.actor_cls = ray.remote(num_cpus=self.rc.cpus_per_worker, max_restarts=0)(RolloutWorker)
        self.cfg = self.ctx.config_dict()
        self.cfg.pop("hydra", None)
        self.weights_ref = ray.put(_to_cpu(algo.state_dict()))
        self.next_sync = self.ctx.step + self.rc.sync_every
        self.stats.workers = {i: WorkerSlot(index=i) for i in range(self.rc.num_workers)}
        self._spawn(list(self.stats.workers.values()))
        for slot in self.stats.workers.values():
            self._submit(slot)

    def _spawn(self, slots: list[WorkerSlot]) -> None:
        """Start actors together (their start-up, mostly imports, overlaps), then wait."""
        import ray

        run = self.ctx.run
        for slot in slots:
            seed = run.seed + WORKER_SEED_STRIDE * (slot.index + 1) + 97 * slot.restarts
            seed += self.ctx.step
            slot.actor = self.actor_cls.remote(self.cfg, slot.index, seed, self.rc.envs_per_worker)
            slot.version = -1
        pids = ray.get([slot.actor.pid.remote() for slot in slots])
        for slot, pid in zip(slots, pids):
            slot.pid = pid
            self.ctx.log({"dist/worker_pid": pid, "dist/worker": slot.index})

    def _submit(self, slot: WorkerSlot) -> None:
        stale = slot.version < self.version
        ref = slot.actor.collect.remote(
            self.rc.rollout_steps,
            self.ctx.step < self.ctx.run.learning_starts,
            self.weights_ref if stale else None,
            self.version,
        )
        slot.version = self.version
        self.pending[ref] = slot.index

    # -- the collector protocol ----------------------------------------------------------------

    def collect(self, algo: Algorithm, random: bool) -> Chunk:
        import ray
        from ray.exceptions import RayActorError, WorkerCrashedError

        while True:
            ready, _ = ray.wait(list(self.pending), num_returns=1)
            ref = ready[0]
            slot = self.stats.workers[self.pending.pop(ref)]
            try:
                data = ray.get(ref)
            except (RayActorError, WorkerCrashedError) as exc:
                self._failed(slot, exc)
                continue
            self._submit(slot)
            n = min(len(data["rewards"]), self.ctx.run.total_steps - self.ctx.step)
            slot.transitions += n
            slot.chunks += 1
            self.lags.append(self.version - data["version"])
            extra = {"dist/worker": slot.index}
            # Ray hands back read-only arrays; the buffer copies them into its tensors anyway.
            return Chunk(
                *(np.array(data[k][:n]) for k in CHUNK_FIELDS),
                episodes=[
                    (r, length, extra)
                    for r, length in zip(data["episode_returns"], data["episode_lengths"])
                ],
            )

    def _failed(self, slot: WorkerSlot, exc: BaseException) -> None:
        self.stats.failures += 1
        self.ctx.log({"dist/worker_failures": self.stats.failures, "dist/worker": slot.index})
        if slot.restarts < self.rc.max_restarts:
            slot.restarts += 1
            self._spawn([slot])
            self._submit(slot)
        else:
            slot.alive = False
        if not self.pending:
            raise RoborlError(
                f"all {self.rc.num_workers} Ray rollout workers died (last error: "
                f"{type(exc).__name__}); ray.max_restarts={self.rc.max_restarts} replacements "
                "each were used up. Check the workers' logs under /tmp/ray/session_latest."
            ) from None

    def sync(self, algo: Algorithm) -> None:
        if self.ctx.step >= self.next_sync:
            import ray

            self.version += 1
            self.weights_ref = ray.put(_to_cpu(algo.state_dict()))
            self.stats.weight_pushes += 1
            self.next_sync = self.ctx.step + self.rc.sync_every

    def metrics(self) -> dict[str, float]:
        out = {
            "dist/workers_alive": float(sum(w.alive for w in self.stats.workers.values())),
            "dist/policy_lag": float(np.mean(self.lags)) if self.lags else 0.0,
        }
        self.lags = []
        return out

    def state(self) -> dict[str, Any]:
        return self.stats.to_dict()

    def close(self) -> None:
        if not self.stats.workers:
            return
        import ray

        atomic_write_json(self.ctx.run_dir / STATS_FILE, self.stats.to_dict())
        for slot in self.stats.workers.values():
            if slot.actor is not None:
                try:
                    ray.kill(slot.actor)
                except Exception:  # already dead: nothing to clean up
                    pass
        if self.started:
            ray.shutdown()


CHUNK_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "costs")

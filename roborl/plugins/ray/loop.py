"""Actor-learner training on Ray: rollout actors stream transitions, the learner pushes weights.

The pattern is the one SERL (Luo et al., 2024) and LeRobot's async actor-learner use, built on
Ray actors (Moritz et al., 2018) rather than a home-made transport:

- each `RolloutWorker` is a Ray actor with its own `gymnasium` vector env (built from the same
  registry and config as the single-process runner) and a CPU copy of the algorithm, used only
  to act (`Algorithm.act`, stochastic);
- the learner (the process running `Runner.execute`) keeps one `collect` request in flight per
  worker, adds each finished chunk of transitions to its replay buffer as it arrives
  (`ray.wait`, first come first served), runs `utd_ratio` updates per received env step, and
  publishes new weights every `ray.sync_every` env steps; a worker gets them with its next
  request, so a chunk may come from a policy up to one sync period old (logged as
  `dist/policy_lag`, in weight versions);
- a worker that dies (its process killed, its node lost) is replaced by a fresh actor up to
  `ray.max_restarts` times; after that the run continues with the workers that are left, and
  fails only when none is left.

The algorithm is whichever off-policy algorithm `algo=` names, built through the runner; this
module never imports an algorithm plugin. Deviations from the single-process runner: the
learner applies transitions in chunks of `rollout_steps * envs_per_worker` per worker, and
before `learning_starts` the workers draw uniform random actions with their own seeds.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.checkpoint import atomic_write_json
from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError, RoborlError

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
        from roborl.core.envs import make_vec_env
        from roborl.core.plugins import get_host
        from roborl.core.runner import build_algorithm

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
            real_next = nxt
            if done.any() and "final_obs" in infos:
                real_next = nxt.copy()
                for i in np.flatnonzero(done):
                    real_next[i] = infos["final_obs"][i]
            obs_buf[t], act_buf[t], rew[t], next_buf[t], term[t] = (
                self.obs,
                actions,
                r,
                real_next,
                te,
            )
            if isinstance(infos, dict) and "cost" in infos:
                cost[t] = infos["cost"]
            if done.any() and "final_info" in infos and "episode" in infos["final_info"]:
                ep = infos["final_info"]["episode"]
                for i in np.flatnonzero(infos["final_info"].get("_episode", done)):
                    ep_returns.append(float(ep["r"][i]))
                    ep_lengths.append(int(ep["l"][i]))
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


def ray_loop(runner: Any, ckpt: Mapping[str, Any] | None) -> Any:
    """The `distributed=ray` training loop (registered through `roborl_loops`)."""
    import ray
    from ray.exceptions import RayActorError, WorkerCrashedError

    run = runner.run
    if runner.algo_cls.loop != "offpolicy":
        raise ConfigError(
            f"distributed=ray collects transitions for off-policy algorithms; "
            f"algo={runner.algo_cls.name} uses loop={runner.algo_cls.loop!r}. Use an off-policy "
            "algorithm (e.g. algo=sac) or drop distributed=ray."
        )
    rc = build_config(RayConfig, runner.cfg.get("ray") or {}, prefix="ray.")
    probe = runner.make_env(seed=run.seed)
    obs_space, act_space = probe.observation_space, probe.action_space
    probe.close()
    algo = runner.current_algo = runner.build_algorithm(obs_space, act_space)
    capacity = min(
        int(getattr(runner.algo_config, "buffer_size", run.total_steps)), run.total_steps
    )
    discrete = isinstance(act_space, gym.spaces.Discrete)
    buffer = ReplayBuffer(
        max(capacity, 1),
        obs_space.shape,
        () if discrete else act_space.shape,
        device=run.buffer_device or runner.device,
        with_costs=True,
        action_dtype=torch.long if discrete else torch.float32,
    )
    runner._buffer = buffer  # the runner's final checkpoint on Ctrl-C includes it
    if ckpt is not None:
        runner.restore(algo, buffer, ckpt)
    batch_size = int(getattr(runner.algo_config, "batch_size", 256))

    started = _init_ray(rc)
    stats = RayStats(ray_address=ray.get_runtime_context().gcs_address)
    runner.ray_stats = stats
    actor_cls = ray.remote(num_cpus=rc.cpus_per_worker, max_restarts=0)(RolloutWorker)
    cfg = dict(runner.cfg)
    cfg.pop("hydra", None)

    def spawn(slots: list[WorkerSlot]) -> None:
        """Start actors together (their start-up, mostly imports, overlaps), then wait."""
        for slot in slots:
            seed = run.seed + WORKER_SEED_STRIDE * (slot.index + 1) + 97 * slot.restarts
            seed += runner.step
            slot.actor = actor_cls.remote(cfg, slot.index, seed, rc.envs_per_worker)
            slot.version = -1
        pids = ray.get([slot.actor.pid.remote() for slot in slots])
        for slot, pid in zip(slots, pids):
            slot.pid = pid

    version, weights_ref = 0, ray.put(_to_cpu(algo.state_dict()))
    pending: dict[Any, int] = {}

    def submit(slot: WorkerSlot) -> None:
        stale = slot.version < version
        ref = slot.actor.collect.remote(
            rc.rollout_steps,
            runner.step < run.learning_starts,
            weights_ref if stale else None,
            version,
        )
        slot.version = version
        pending[ref] = slot.index

    try:
        stats.workers = {i: WorkerSlot(index=i) for i in range(rc.num_workers)}
        spawn(list(stats.workers.values()))
        for slot in stats.workers.values():
            submit(slot)
        next_eval = (runner.step // run.eval_every + 1) * run.eval_every
        next_ckpt = (runner.step // run.checkpoint_every + 1) * run.checkpoint_every
        next_log = (runner.step // run.log_every + 1) * run.log_every
        next_sync = runner.step + rc.sync_every
        update_debt = 0.0
        sums: dict[str, Any] = defaultdict(float)
        count, lags = 0, []
        t_log, s_log = time.time(), runner.step
        while runner.step < run.total_steps:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            slot = stats.workers[pending.pop(ref)]
            try:
                data = ray.get(ref)
            except (RayActorError, WorkerCrashedError) as exc:
                stats.failures += 1
                runner.log({"dist/worker_failures": stats.failures, "dist/worker": slot.index})
                if slot.restarts < rc.max_restarts:
                    slot.restarts += 1
                    spawn([slot])
                    submit(slot)
                else:
                    slot.alive = False
                if not pending:
                    raise RoborlError(
                        f"all {rc.num_workers} Ray rollout workers died (last error: "
                        f"{type(exc).__name__}); ray.max_restarts={rc.max_restarts} replacements "
                        "each were used up. Check the workers' logs under /tmp/ray/session_latest."
                    ) from None
                continue
            submit(slot)
            n = min(len(data["rewards"]), run.total_steps - runner.step)
            # Ray hands back read-only arrays; the buffer copies them into its tensors anyway.
            fields = ("obs", "actions", "rewards", "next_obs", "terminated", "costs")
            buffer.add(*(np.array(data[k][:n]) for k in fields))
            slot.transitions += n
            slot.chunks += 1
            lags.append(version - data["version"])
            runner.advance(n)
            for r, length in zip(data["episode_returns"], data["episode_lengths"]):
                runner.episodes += 1
                runner.log(
                    {
                        "train/episode_return": r,
                        "train/episode_length": length,
                        "dist/worker": slot.index,
                    }
                )
            if runner.step >= run.learning_starts and len(buffer) >= batch_size:
                update_debt += run.utd_ratio * n
                while update_debt >= 1.0:
                    metrics = algo.update(buffer.sample(batch_size, runner.torch_gen))
                    for k, v in metrics.items():
                        sums[k] = sums[k] + (v.detach() if torch.is_tensor(v) else v)
                    count += 1
                    runner.updates += 1
                    update_debt -= 1.0
            if runner.step >= next_sync:
                version += 1
                weights_ref = ray.put(_to_cpu(algo.state_dict()))
                stats.weight_pushes += 1
                next_sync = runner.step + rc.sync_every
            if runner.step >= next_log:
                now = time.time()
                record = {f"train/{k}": float(v) / count for k, v in sums.items()} if count else {}
                record["time/sps"] = (runner.step - s_log) / max(now - t_log, 1e-9)
                record["time/updates"] = runner.updates
                record["dist/workers_alive"] = sum(w.alive for w in stats.workers.values())
                record["dist/policy_lag"] = float(np.mean(lags)) if lags else 0.0
                runner.log(record)
                sums, count, lags = defaultdict(float), 0, []
                t_log, s_log = now, runner.step
                next_log += run.log_every
            if runner.step >= next_eval:
                runner.evaluate(algo)
                next_eval += run.eval_every
            if runner.step >= next_ckpt:
                runner.extra_state["ray"] = stats.to_dict()
                runner.checkpoint(algo, buffer)
                next_ckpt += run.checkpoint_every
        if runner.last_eval is None or runner.last_eval.get("step") != runner.step:
            runner.evaluate(algo)
        runner.extra_state["ray"] = stats.to_dict()
        runner.checkpoint(algo, buffer)
        return algo
    finally:
        atomic_write_json(runner.run_dir / STATS_FILE, stats.to_dict())
        for slot in stats.workers.values():
            if slot.actor is not None:
                try:
                    ray.kill(slot.actor)
                except Exception:  # already dead: nothing to clean up
                    pass
        if started:
            ray.shutdown()

"""The off-policy loop: a collector fills a replay buffer, the algorithm updates from it.

`learning_starts` env steps of uniform random actions, then `utd_ratio` updates per env step
for every step after them (stable-baselines3's `num_timesteps > learning_starts`, so
`total_steps=learning_starts` collects and never updates), n-step returns when the config
asks for them, as in SAC's and stable-baselines3's `OffPolicyAlgorithm`. `algo.gamma` and
`algo.n_step` are read once (`roborl.core.buffer.Returns.of`) and every batch carries
`Batch.discount`, which the update bootstraps with. Where the
transitions come from is the collector's business (`collector=vector|ray|<plugin>`), so this
loop exists once.

With `demos=PATH` every batch takes exactly round(batch_size * demo_fraction) rows from a demo
buffer and the rest from the online buffer (RLPD's symmetric sampling, `roborl.core.demos`),
and transitions a person took over (`Chunk.extras["intervened"]`) go to both (HIL-SERL).
With `her=` the buffer is `roborl.core.buffer_her.HerReplayBuffer`, which relabels goals when
it samples and waits for a finished episode (`ReplayBuffer.can_sample`).
With `reward.relabel_every=N` the learned reward is retrained with its false positives every N
env steps (`roborl.core.reward_rounds`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch

from roborl.core.buffer import ReplayBuffer, Returns
from roborl.core.config import OffPolicyConfig
from roborl.core.demos import EXTRAS, add_interventions, load_demo_buffer, sample_mixed
from roborl.core.errors import ConfigError
from roborl.core.goals import her_options
from roborl.core.interfaces import Algorithm
from roborl.core.reward_rounds import reward_rounds

if TYPE_CHECKING:
    from roborl.core.context import TrainContext

log = logging.getLogger(__name__)


def replay_buffer(ctx: TrainContext, algo: Algorithm) -> ReplayBuffer:
    """A buffer sized `min(buffer_size, total_steps)` for the algorithm's spaces."""
    cfg = algo.config
    if not isinstance(cfg, OffPolicyConfig):
        raise ConfigError(
            f"algo={ctx.algo_name} uses the off-policy loop, but its config "
            f"{type(cfg).__name__} does not subclass roborl.core.config.OffPolicyConfig, so "
            "the loop has no batch_size/buffer_size/gamma/n_step to read. Subclass it in the "
            "algorithm's Config (or declare another loop)."
        )
    if cfg.buffer_size < cfg.batch_size:  # it would never hold a batch: no update, ever
        raise ConfigError(
            f"algo.buffer_size={cfg.buffer_size} is smaller than algo.batch_size="
            f"{cfg.batch_size}: the replay buffer could never hold one batch, so the run would "
            "never update. Raise algo.buffer_size or lower algo.batch_size."
        )
    obs_space, act_space = algo.observation_space, algo.action_space
    discrete = isinstance(act_space, gym.spaces.Discrete)
    capacity = max(min(cfg.buffer_size, ctx.run.total_steps), 1)
    # `intervened` whenever a person can take over (a robot) or demos are mixed in.
    extras = EXTRAS if ctx.run.demos or ctx.config.get("robot") else None
    her = her_options(ctx.config)
    if her is not None:  # hindsight relabelling of a goal env's episodes
        from roborl.core.buffer_her import her_replay_buffer

        return her_replay_buffer(ctx, algo, her, capacity, extras)
    return ReplayBuffer(
        capacity,
        obs_space if isinstance(obs_space, gym.spaces.Dict) else obs_space.shape,
        () if discrete else act_space.shape,
        device=ctx.run.buffer_device or ctx.device,
        with_costs=True,
        action_dtype=torch.long if discrete else torch.float32,
        extras=extras,
    )


def pretrain_on_demos(
    algo: Algorithm,
    online: ReplayBuffer,
    demos: ReplayBuffer,
    updates: int,
    ctx: TrainContext,
    returns: Returns,
) -> None:
    """`demo_pretrain_updates` updates on batches of demo rows alone (`sample_mixed` with
    fraction 1.0: every row marked `is_demo`, so BC terms see them all), before any env step:
    the offline phase of offline-to-online methods, here on the demos of `demos=`."""
    if updates <= 0:
        return
    batch_size = algo.config.batch_size
    for _ in range(updates):
        algo.update(sample_mixed(online, demos, batch_size, 1.0, ctx.torch_gen, returns))
    log.info(
        "pre-trained on demos=%s: %d updates before the first env step", ctx.run.demos, updates
    )


def offpolicy_loop(ctx: TrainContext) -> Algorithm:
    """Collect, store, update, and follow `ctx.due` for logs, evaluations and checkpoints."""
    run = ctx.run
    collector = ctx.make_collector()
    try:
        algo = ctx.build_algorithm(collector.observation_space, collector.action_space)
        buffer = replay_buffer(ctx, algo)
        cfg: OffPolicyConfig = algo.config
        # Room for intervened transitions beside the demos (untouched pages cost no memory).
        demos = load_demo_buffer(ctx, algo.observation_space, algo.action_space, buffer.capacity)
        fraction = run.demo_fraction
        batch_size, returns = cfg.batch_size, Returns.of(cfg)  # algo.gamma/n_step read once
        ctx.attach(algo, buffer, demos)
        ctx.resume(algo, buffer)
        rounds = reward_rounds(ctx, collector)  # after resume: it restores the last round
        if run.demo_pretrain_updates and demos is None:
            raise ConfigError(
                f"demo_pretrain_updates={run.demo_pretrain_updates} pre-trains on demos=, "
                "and no demos= was given: add demos=PATH or drop demo_pretrain_updates."
            )
        if demos is not None and ctx.step == 0:  # not again on a resumed run
            pretrain_on_demos(algo, buffer, demos, run.demo_pretrain_updates, ctx, returns)
        ctx.begin("steps")
        collector.start(algo)
        debt = 0.0
        sums: dict[str, Any] = defaultdict(float)
        count, t_log, s_log = 0, time.time(), ctx.step
        while not ctx.finished:
            chunk = collector.collect(algo, random=ctx.step < run.learning_starts)
            chunk = chunk.head(run.total_steps - ctx.step)
            n = len(chunk)
            store = buffer.extend if chunk.consecutive else buffer.add
            store(
                obs=chunk.obs, actions=chunk.actions, rewards=chunk.rewards,
                next_obs=chunk.next_obs, terminated=chunk.terminated,
                costs=chunk.costs, extras=chunk.extras,
            )  # fmt: skip
            if demos is not None:
                add_interventions(demos, chunk)
            ctx.advance(env_steps=n)
            for ret, length, extra in chunk.episodes:
                ctx.record_episode(ret, length, **extra)
            if rounds is not None:
                rounds.after_steps(ctx)
            if ctx.step > run.learning_starts and buffer.can_sample(batch_size):
                # A one-env chunk of successive steps owes updates only for its steps after
                # learning_starts, as when each step came alone.
                owed = min(n, ctx.step - run.learning_starts) if chunk.consecutive else n
                debt += run.utd_ratio * owed
                done = 0
                while debt >= 1.0:
                    if demos is not None:
                        batch = sample_mixed(
                            buffer, demos, batch_size, fraction, ctx.torch_gen, returns
                        )
                    else:  # n_step 1 included: one-step transitions, discount gamma
                        batch = buffer.sample_nstep(
                            batch_size,
                            returns.n_step,
                            returns.gamma,
                            ctx.torch_gen,
                            returns.stop_at,
                        )
                    for k, v in algo.update(batch).items():
                        sums[k] = sums[k] + (v.detach() if torch.is_tensor(v) else v)
                    done += 1
                    debt -= 1.0
                count += done
                ctx.advance(updates=done)
                collector.sync(algo)
            if ctx.due("log"):
                now = time.time()
                record = {f"train/{k}": float(v) / count for k, v in sums.items()} if count else {}
                record["time/sps"] = (ctx.step - s_log) / max(now - t_log, 1e-9)
                record.update(collector.metrics())
                ctx.log(record)
                sums, count, t_log, s_log = defaultdict(float), 0, now, ctx.step
            if ctx.due("eval"):
                ctx.evaluate(algo)
            if ctx.due("checkpoint"):
                _keep_collector_state(ctx, collector)
                ctx.checkpoint(algo, buffer)
        _keep_collector_state(ctx, collector)
        ctx.finish(algo, buffer)
        return algo
    finally:
        collector.close()


def _keep_collector_state(ctx: TrainContext, collector: Any) -> None:
    state = collector.state()
    if state is not None:
        ctx.set_extra(ctx.run.collector_name, state)

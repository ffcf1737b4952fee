"""A third-party collector: `collector=example_episodes` feeds roborl's off-policy loop from one
plain (non-vector) env, in chunks of up to `CHUNK_STEPS` steps.

It shows what a collector needs from roborl, and that it is only public API: the `Collector`
base class and `Chunk` from `roborl.core.loops.collectors`, and the `TrainContext` it is built
with (`make_env`, `run`, `step`). The loop around it (replay buffer, updates, schedule, checkpoints)
is roborl's own; any off-policy algorithm (`algo=sac`, `algo=example_td3`) trains with it.
A collector for an actor process beside a robot has the same shape: `collect` would receive
the actor's transitions instead of stepping an env itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from roborl.core.context import TrainContext
from roborl.core.interfaces import Algorithm
from roborl.core.loops.collectors import Chunk, Collector

CHUNK_STEPS = 50


class EpisodeCollector(Collector):
    """Steps one env; every `collect` returns up to `CHUNK_STEPS` consecutive transitions."""

    def __init__(self, ctx: TrainContext) -> None:
        self.ctx = ctx
        self.seed = ctx.run.seed
        self.env = ctx.make_env(seed=self.seed)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self.chunks = 0
        self.transitions = 0

    def start(self, algo: Algorithm) -> None:
        self.obs, _ = self.env.reset(seed=self.seed)
        self.action_space.seed(self.seed)

    def collect(self, algo: Algorithm, random: bool) -> Chunk:
        obs, acts, rews, nxts, terms, costs = [], [], [], [], [], []
        episodes: list[tuple[float, int, dict[str, float]]] = []
        budget = self.ctx.run.total_steps - self.ctx.step  # the loop keeps no more than this
        for _ in range(min(CHUNK_STEPS, budget)):
            if random:
                action = self.action_space.sample()
            else:
                action = algo.act(np.asarray(self.obs, np.float32)[None])[0]
            nxt, reward, terminated, truncated, info = self.env.step(action)
            obs.append(self.obs)
            acts.append(action)
            rews.append(reward)
            nxts.append(nxt)  # a plain env: `nxt` is the true next state, not a reset one
            terms.append(float(terminated))
            costs.append(float(info.get("cost", 0.0)))
            self.obs = nxt
            if terminated or truncated:
                ep = info["episode"]  # RecordEpisodeStatistics, added by ctx.make_env
                episodes.append((float(ep["r"]), int(ep["l"]), {}))
                self.obs, _ = self.env.reset()
                break  # one chunk never spans two episodes
        self.chunks += 1
        self.transitions += len(rews)
        return Chunk(
            np.asarray(obs, np.float32),
            np.asarray(acts, np.float32),
            np.asarray(rews, np.float32),
            np.asarray(nxts, np.float32),
            np.asarray(terms, np.float32),
            np.asarray(costs, np.float32),
            episodes,
        )

    def metrics(self) -> dict[str, float]:
        return {
            "example/chunks": float(self.chunks),
            "example/transitions": float(self.transitions),
        }

    def state(self) -> dict[str, Any]:
        return {"chunks": self.chunks, "transitions": self.transitions}

    def close(self) -> None:
        self.env.close()

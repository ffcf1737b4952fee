"""`RobotCollector`: the off-policy loop's collector for a real robot (`train robot=...`).

Why a collector of its own: the default vector collector steps the env once per `collect`, so
the loop's gradient updates run between two control ticks of a running episode, and a slow
update delays (or, through the watchdog, holds) the next command. This collector runs a
**whole episode** per `collect`, at the control rate, with nothing but policy inference
between ticks; at the episode's end it makes the robot hold (`RobotEnv.hold`) and returns.
The loop then pays its update debt (`utd_ratio` x the episode's steps) while the robot holds,
and the next `collect` starts with a reset. Evaluation uses the same robot env between
episodes (`TrainContext.robot_env`), so one driver commands the robot for the whole run.

Design chosen for simplicity: one process, no second driver, no shared-memory policy. Its cost
is idle robot time while the learner updates; an actor-learner split (control loop in its own
process, weights pushed to it) is the later alternative and will be a separate collector.

Human in the loop: the action stored is the one the robot executed (`info["executed_action"]`:
after the safety layer, and a person's command while they intervened), never the policy's
proposal, and each transition carries `intervened` in `Chunk.extras` (the loop also routes
those transitions to the demo buffer when there is one, as HIL-SERL does). The intervention
rate and the episodes' success rate are logged as `robot/intervention_rate` and
`robot/success_rate`.

An episode's rows are successive steps of one stream (`Chunk.consecutive`), so the buffer
stores them as such: n-step returns (`algo.n_step`) walk them in order, and camera frames a row
shares with the next are stored once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Algorithm
from roborl.core.loops.collectors import Chunk, Collector
from roborl.core.obs import add_batch_axis, stack_obs

if TYPE_CHECKING:
    from roborl.core.context import TrainContext


class RobotCollector(Collector):
    """Whole episodes on the run's one robot env; see the module docstring for why."""

    def __init__(self, ctx: TrainContext) -> None:
        env = ctx.robot_env
        if env is None:
            raise ConfigError("collector=robot needs a robot: pass robot=NAME (e.g. robot=ros2).")
        self.ctx = ctx
        self.env = env
        self.robot = env.unwrapped
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self._seed: int | None = None
        self._episodes = 0
        self._holds = 0
        self._watchdog = 0
        self._policy_time_max = 0.0
        self._steps = 0
        self._intervened = 0
        self._ended = 0
        self._successes = 0

    def start(self, algo: Algorithm) -> None:
        self._seed = self.ctx.run.seed
        self.action_space.seed(self.ctx.run.seed)

    def collect(self, algo: Algorithm, random: bool) -> Chunk:
        """One episode (cut short at the run's step budget), then the robot holds."""
        budget = max(1, self.ctx.run.total_steps - self.ctx.step)
        space, rng = self.action_space, self.ctx.np_rng
        obs, _ = self.env.reset(seed=self._seed)
        self._seed = None  # seed the first episode only, as the vector collector does
        keys = ("obs", "act", "rew", "next", "term", "human")
        rows: dict[str, list[Any]] = {k: [] for k in keys}
        ret, ended = 0.0, False
        try:
            while True:
                if random:
                    action = rng.uniform(space.low, space.high).astype(np.float32)
                else:
                    action = np.asarray(algo.act(add_batch_axis(obs), deterministic=False))[0]
                next_obs, reward, terminated, truncated, info = self.env.step(action)
                executed = info.get("executed_action")
                if executed is not None:  # what the robot did, e.g. a person's command
                    action = np.asarray(executed, dtype=space.dtype)
                intervened = bool(info.get("intervened", False))
                for key, value in zip(
                    keys, (obs, action, reward, next_obs, terminated, intervened)
                ):
                    rows[key].append(value)
                self._intervened += intervened
                ret += float(reward)
                self._holds += bool(info.get("held"))
                self._watchdog += bool(info.get("watchdog"))
                self._policy_time_max = max(
                    self._policy_time_max, float(info.get("policy_time_s", 0.0))
                )
                obs = next_obs
                if terminated or truncated:
                    ended = True
                    self._successes += bool(info.get("success", False))
                    break
                if len(rows["rew"]) >= budget:
                    break
        finally:
            self.env.pause()  # hold now: the loop updates next, the robot must not wait on it
        n = len(rows["rew"])
        episodes = [(ret, n, {})] if ended else []
        self._episodes += len(episodes)
        self._ended += len(episodes)
        self._steps += n
        return Chunk(
            stack_obs(rows["obs"]),  # arrays, or dicts of arrays with cameras
            np.asarray(rows["act"]),
            np.asarray(rows["rew"], np.float32),
            stack_obs(rows["next"]),
            np.asarray(rows["term"], np.float32),
            None,
            episodes,
            {"intervened": np.asarray(rows["human"], bool)},
            consecutive=True,  # one robot's successive steps: n-step returns walk them in order
        )

    def metrics(self) -> dict[str, float]:
        """Since the last log: held steps, watchdog truncations, the slowest policy step
        (inference plus anything else between two observations), the share of steps a person
        drove (`intervention_rate`) and of ended episodes that succeeded."""
        out = {
            "robot/held_steps": float(self._holds),
            "robot/watchdog_stops": float(self._watchdog),
            "robot/policy_time_max_s": self._policy_time_max,
            "robot/intervention_rate": self._intervened / max(self._steps, 1),
            "robot/intervened_steps": float(self._intervened),
        }
        if self._ended:
            out["robot/success_rate"] = self._successes / self._ended
        self._holds, self._watchdog, self._policy_time_max = 0, 0, 0.0
        self._steps = self._intervened = self._ended = self._successes = 0
        return out

    def close(self) -> None:
        """The robot holds; the context disconnects it at the end of the run (evaluation
        still needs it after the loop)."""
        self.env.pause()

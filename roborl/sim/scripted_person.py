"""A scripted person intervening on a simulated task through the teleop channel's code.

HIL-SERL (Luo et al., 2024, Sec. III-B) has a person take over when the policy drifts. On a
robot that person is `roborl scripted-human` publishing Joy messages over ROS 2. For
in-process benchmarks (the sim stepped as fast as it goes), `scripted_person=` puts the same
person between the training env and its policy, with the same code on both sides of the
channel:

- the drift rule is scripted-human's `DriftRule` (take over when the task error has not shrunk
  by `min_progress` over `window_s` of robot time; release on recovery, at `tolerance`, or
  after `max_takeover_s`), on the env's `progress()` and with the env's `expert_action()`;
- each step the person's `TeleopWriter` builds the `sensor_msgs/Joy` (or Twist) message that
  scripted-human would publish, and the robot env's `Teleop` decodes it (`on_message`,
  `command`): the dead-man button, axis mapping and scale are the robot's;
- while the person intervenes the env executes the decoded command, and the step's info
  carries ``executed_action`` and ``intervened``, as a robot env's does, so the off-policy loop
  stores the person's action, flags it, and copies it to the demo buffer.

Robot time is the env's step count times its `dt` (no wall clock). Only the training envs get
the person: evaluation runs the policy alone.

A fading person (`taper_episodes` > 0, issue 48): HIL-SERL's operators step in often early
and rarely late. The drift rule alone does not fade: on a push it fires during the approach
behind the block (the block-to-goal distance does not shrink there), however good the policy.
With `taper_episodes` = N, each takeover the rule calls for goes ahead with probability
``max(taper_floor, 1 - s)``, `s` the success rate (the task's flag at the episode's end) over
the last N training episodes, and is otherwise declined (the rule starts a new window). A
policy that succeeds is left alone more and more; one that fails, including after the person
steps back, brings the person back. The draws come from the person's own generator, seeded by
the first `reset(seed=...)`, so the env's stream is untouched. `train/intervention_rate` over
the run shows the fade. Off by default: it is not yet measured to help the state gate
(benchmarks/results/hil_manipulation_gate.md).

Config (every key checked, unknown keys refused)::

    scripted_person:
      tolerance: 0.05        # task error counted as done (no takeover)
      window_s: 0.4          # drift: no progress over this much robot time
      min_progress: 0.01     # drift: the error shrank by less than this
      recover: 0.03          # release once the error shrank by this since the takeover
      max_takeover_s: 1.0    # release after this much robot time in control
      intervention: null     # the teleop mapping (robot.intervention's keys); null: Joy,
                             # axis i -> action i, dead-man button 0, timeout_s 60
      taper_episodes: 0      # fade with the success of the last this many episodes; 0: never
      taper_floor: 0.1       # the fading person's lowest takeover probability
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError


@dataclass
class ScriptedPersonConfig:
    """`scripted_person=` options (names and meaning as `roborl scripted-human`'s)."""

    tolerance: float = field(default=0.05, metadata=rng(0.0, None, "task error counted as done"))
    window_s: float = field(default=0.4, metadata=rng(1e-6, None, "drift window, robot s"))
    min_progress: float = field(default=0.01, metadata=rng(0.0, None, "drift: shrank < this"))
    recover: float = field(default=0.03, metadata=rng(0.0, None, "release: shrank by this"))
    max_takeover_s: float = field(default=1.0, metadata=rng(1e-6, None, "release after, s"))
    intervention: dict[str, Any] | None = field(
        default=None, metadata={"help": "teleop mapping (robot.intervention keys)"}
    )
    taper_episodes: int = field(
        default=0,
        metadata=rng(0, 100_000, "fade: takeover prob. 1 - success of the last N episodes; 0 off"),
    )
    taper_floor: float = field(
        default=0.1, metadata=rng(0.0, 1.0, "fade: lowest takeover probability")
    )


class ScriptedPerson(gym.Wrapper):
    """Executes the scripted person's command whenever it intervenes (module docstring)."""

    def __init__(self, env: gym.Env, config: ScriptedPersonConfig) -> None:
        super().__init__(env)
        from roborl.robots.env.intervention import InterventionConfig, Teleop
        from roborl.robots.nodes.scripted_human import DriftRule, TeleopWriter

        task = env.unwrapped
        missing = [m for m in ("expert_action", "progress") if not callable(getattr(task, m, None))]
        if missing:
            raise ConfigError(
                f"scripted_person= needs an env with a scripted expert ({', '.join(missing)} "
                f"missing on {type(task).__name__}); RoborlTabletop and the Fetch pixel tasks "
                "(env=fetch_push_pixels) have one."
            )
        n_action = int(np.prod(env.action_space.shape))
        # Messages are decoded the moment they are written, so the channel's staleness timeout
        # only guards against a stalled process here: a generous one keeps a loaded machine
        # from dropping the person's command.
        raw = config.intervention or {
            "type": "joy", "axes": list(range(n_action)), "button": 0, "timeout_s": 60.0,
        }  # fmt: skip
        channel = InterventionConfig.parse(raw, n_action)
        self.rule = DriftRule(config)  # type: ignore[arg-type]  (same option names)
        self.writer = TeleopWriter(channel)
        self.teleop = Teleop(channel)
        self.dt = float(getattr(task, "dt", 1.0))
        self._t = 0.0
        self.taper_episodes, self.taper_floor = config.taper_episodes, config.taper_floor
        self.outcomes: deque[bool] = deque(maxlen=max(1, config.taper_episodes))
        self._rng = np.random.default_rng(0)
        self._seeded = False

    def takeover_probability(self) -> float:
        """The chance a takeover the drift rule calls for goes ahead: 1 without `taper_episodes`
        (or before the first episode ends), else max(floor, 1 - recent success rate)."""
        if not self.taper_episodes or not self.outcomes:
            return 1.0
        return max(self.taper_floor, 1.0 - float(np.mean(self.outcomes)))

    def reset(self, **kwargs: Any) -> Any:
        self.rule.reset()
        self._t = 0.0
        if kwargs.get("seed") is not None and not self._seeded:
            self._rng, self._seeded = np.random.default_rng(int(kwargs["seed"]) + 7919), True
        return self.env.reset(**kwargs)

    def step(self, action: np.ndarray) -> Any:
        task = self.env.unwrapped
        event = self.rule.update(self._t, float(task.progress()))
        takeover = event is not None and event[0] == "takeover"
        if takeover and self.taper_episodes and self._rng.random() >= self.takeover_probability():
            self.rule.reset()  # declined: the policy goes on, the rule starts a new window
        expert = np.asarray(task.expert_action(), np.float64)
        self.teleop.on_message(self.writer.message(expert, self.rule.intervening))
        command = self.teleop.command()
        executed = np.asarray(action if command is None else command, np.float32)
        space = self.action_space
        executed = np.clip(executed, space.low, space.high).astype(space.dtype)
        obs, reward, terminated, truncated, info = self.env.step(executed)
        self._t += self.dt
        info = {**info, "executed_action": executed, "intervened": command is not None}
        if terminated or truncated:
            self.outcomes.append(bool(info.get("success", info.get("is_success", False))))
        return obs, reward, terminated, truncated, info


def with_scripted_person(
    cfg: Mapping[str, Any], maker: Callable[[], gym.Env]
) -> Callable[[], gym.Env]:
    """`maker`, wrapped in `ScriptedPerson` when the config sets `scripted_person=`."""
    raw = cfg.get("scripted_person")
    if raw is None or raw is False:
        return maker
    if raw is True:
        raw = {}
    if cfg.get("robot"):
        raise ConfigError(
            "scripted_person= drives a simulated env in-process; on robot= run "
            "`roborl scripted-human` on the robot's teleop topic instead."
        )
    if not isinstance(raw, Mapping):
        raise ConfigError(f"scripted_person={raw!r} must be a mapping (or true for defaults).")
    config = build_config(ScriptedPersonConfig, raw, "scripted_person.")
    return lambda: ScriptedPerson(maker(), config)

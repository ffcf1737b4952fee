"""`scripted_person=`: a scripted person intervening on a simulated task.

HIL-SERL (Luo et al., 2024, Sec. III-B) has a person take over when the policy drifts. On a
robot that person is `roborl scripted-human` publishing Joy messages over ROS 2. For
in-process benchmarks (the sim stepped as fast as it goes), `scripted_person=` puts the same
person between the training env and its policy as a `Teleoperator` that asks the task's own
expert, with no message in between:

- the drift rule is scripted-human's (`drift.py`), on the env's `progress()`; while it holds,
  the person's action is the env's `expert_action()`;
- that action goes through the teleop mapping (`intervention.py`: the inputs the person's
  hands would give, decoded as the robot decodes them), so a dead-man-less mapping or a scale
  acts as it would on the robot;
- `Teleoperated` executes it and flags the step (``executed_action``, ``intervened``), so the
  off-policy loop stores it, flagged, and copies it to the demo buffer.

Robot time is the env's step count times its `dt` (no wall clock). Only the training envs get
the person: evaluation runs the policy alone.

A fading person (`taper_episodes` > 0, issue 48): HIL-SERL's operators step in often early
and rarely late. The drift rule alone does not fade: on a push it fires during the approach
behind the block (the block-to-goal distance does not shrink there), however good the policy.
With `taper_episodes` = N, each takeover the rule calls for goes ahead with probability
``max(taper_floor, 1 - s)``, `s` the success rate (the task's flag at the episode's end) over
the last N training episodes, and is otherwise declined (the rule starts a new window). The
draws come from the person's own generator, seeded by the first `reset(seed=...)`, so the
env's stream is untouched. Off by default: it is not yet measured to help the state gate
(benchmarks/results/hil_manipulation_gate.md).

Config (every key checked, unknown keys refused)::

    scripted_person:
      tolerance: 0.05        # task error counted as done (no takeover)
      window_s: 0.4          # drift: no progress over this much robot time
      min_progress: 0.01     # drift: the error shrank by less than this
      recover: 0.03          # release once the error shrank by this since the takeover
      max_takeover_s: 1.0    # release after this much robot time in control
      intervention: null     # the teleop mapping (intervention.py's keys; topic and qos are
                             # accepted, unused); null: axis i -> action i, dead-man button
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
from roborl.hil.drift import DriftRule
from roborl.hil.intervention import InputMap
from roborl.hil.teleoperator import Teleoperated


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


class ExpertPerson:
    """The scripted person as a `Teleoperator`: the task's expert, when the drift rule says."""

    def __init__(self, task: Any, n_action: int, config: ScriptedPersonConfig) -> None:
        missing = [m for m in ("expert_action", "progress") if not callable(getattr(task, m, None))]
        if missing:
            raise ConfigError(
                f"scripted_person= needs an env with a scripted expert ({', '.join(missing)} "
                f"missing on {type(task).__name__}); RoborlTabletop and the Fetch pixel tasks "
                "(env=fetch_push_pixels) have one."
            )
        self.task = task
        raw = config.intervention or {"type": "joy", "axes": list(range(n_action)), "button": 0}
        where = "scripted_person.intervention"
        self.hands = InputMap.parse(raw, n_action, where, extra_keys=("topic", "qos"))
        self.rule = DriftRule(config)
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

    def reset(self, seed: int | None = None) -> None:
        self.rule.reset()
        self._t = 0.0
        if seed is not None and not self._seeded:
            self._rng, self._seeded = np.random.default_rng(seed + 7919), True

    def act(self, obs: Any, info: Mapping[str, Any]) -> np.ndarray | None:
        event = self.rule.update(self._t, float(self.task.progress()))
        self._t += self.dt
        takeover = event is not None and event[0] == "takeover"
        if takeover and self.taper_episodes and self._rng.random() >= self.takeover_probability():
            self.rule.reset()  # declined: the policy goes on, the rule starts a new window
        if not self.rule.intervening:
            return None
        expert = np.asarray(self.task.expert_action(), np.float64)
        command, intervening = self.hands.command(self.hands.inputs(expert), pressed=True)
        return command if intervening else None

    def end_episode(self, info: Mapping[str, Any]) -> None:
        self.outcomes.append(bool(info.get("success", info.get("is_success", False))))

    def close(self) -> None:
        pass


class ScriptedPerson(Teleoperated):
    """A simulated env with the scripted person at its controls (module docstring)."""

    def __init__(self, env: gym.Env, config: ScriptedPersonConfig) -> None:
        n_action = int(np.prod(env.action_space.shape))
        super().__init__(env, ExpertPerson(env.unwrapped, n_action, config))


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

"""The intervention channel: a person's teleop input over ROS 2 that overrides the policy.

HIL-SERL (Luo et al., 2024, "Precise and Dexterous Robotic Manipulation via Human-in-the-Loop
Reinforcement Learning", Sec. III-B) lets a person take over the robot at any moment; the
robot executes the person's command instead of the policy's, and those corrections are
stored for the learner (with a flag, and also in the demo buffer). Here the person's input is
a standard ROS 2 topic, so any teleop node works (`joy_node` + a gamepad, a SpaceMouse driver,
`teleop_twist_keyboard`, or `roborl scripted-human`):

- `sensor_msgs/Joy`: `axes[i]` of the message drive action dimension `i` of the list `axes`
  (times `scale`); the person intervenes while `button` is held (a dead-man switch), or, with
  `button: null`, while any mapped axis is beyond `deadzone`;
- `geometry_msgs/Twist`: `axes` names the fields (`linear.x`, `angular.z`, ...) per action
  dimension; any non-zero mapped field (beyond `deadzone`) is an intervention;
- `geometry_msgs/TwistStamped` (`type: twist_stamped`, what `teleop_twist_keyboard` with
  `stamped:=true` and `teleop_twist_joy` with `publish_stamped_twist:=true` send): read like a
  Twist from its `twist` field; the header is not used (the fields map to action dimensions
  as they are, whatever the frame).

The mapping (axes, scale, dead-man button, deadzone) is `roborl.hil.intervention.InputMap`,
shared with the scripted person; `Teleop` is the ROS gamepad's `roborl.hil.Teleoperator`.
A teleop that falls silent for `timeout_s` no longer intervenes (a crashed teleop node must
not keep steering the robot with its last message). The command still goes through the
safety layer: clamped to the limits, rate-limited, watchdogs in force.

Robot config (`robot.intervention`, absent or null: no channel)::

    intervention:
      topic: /joy
      type: joy            # joy | twist | twist_stamped
      axes: [1, 0]         # joy: axis index per action dim; twist*: e.g. [linear.x, angular.z]
      scale: 1.0           # a number, or one per action dim (a sign flips an axis)
      button: 4            # joy: the dead-man button; null: any non-zero mapped axis
      deadzone: 0.05
      timeout_s: 0.5
      qos: default
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from roborl.hil.intervention import TWIST_FIELDS, TYPES, InputMap
from roborl.robots.transport.common import qos_spec

__all__ = ["KEYS", "TWIST_FIELDS", "TYPES", "InterventionConfig", "Teleop", "make_teleop"]

KEYS = ("topic", "type", "axes", "scale", "button", "deadzone", "timeout_s", "qos")


@dataclass(frozen=True)
class InterventionConfig(InputMap):
    """The `robot.intervention` block, validated against the robot's action size: the mapping
    plus where it arrives (`topic`, `qos`)."""

    topic: str
    qos: Any

    @classmethod
    def parse(
        cls,
        raw: Mapping[str, Any],
        n_action: int,
        where: str = "robot.intervention",
        extra_keys: Collection[str] = (),
    ) -> InterventionConfig:
        fields = InputMap.parse_fields(raw, n_action, where, ("topic", *extra_keys, "qos"))
        joy = fields["type"] == "joy"
        return cls(
            **fields,
            topic=str(raw.get("topic") or ("/joy" if joy else "/teleop/cmd_vel")),
            qos=qos_spec(raw.get("qos"), f"{where}.qos"),
        )


class Teleop:
    """The newest teleop message as "is a person intervening, and with which command".

    Decoding happens in the transport's callback; `command()` is what the control loop asks,
    once per tick, so it only reads a value under a lock. A `roborl.hil.Teleoperator`."""

    def __init__(self, config: InterventionConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._command: np.ndarray | None = None
        self._intervening = False
        self._stamp = -np.inf
        self.received = 0
        self.rejected = 0
        self.last_error: str | None = None
        self._reader: Any = None

    @property
    def msg_type(self) -> type:
        from roborl.robots.transport import msgs  # cyclonedds's IDL types: ROS robots only

        return {"joy": msgs.Joy, "twist": msgs.Twist, "twist_stamped": msgs.TwistStamped}[
            self.config.type
        ]

    def attach(self, transport: Any) -> None:
        """Subscribe on the robot's transport (rclpy node or raw DDS)."""
        self._reader = transport.subscribe(
            self.config.topic, self.msg_type, self.on_message, self.config.qos
        )

    def decode(self, msg: Any) -> tuple[np.ndarray, bool]:
        """(command in action units, intervening) of one message; ValueError if unusable."""
        c = self.config
        if c.type == "joy":
            axes = list(msg.axes)
            missing = [a for a in c.axes if a >= len(axes)]
            if missing:
                raise ValueError(f"Joy on {c.topic} has {len(axes)} axes, config maps {missing}")
            raw = np.asarray([axes[a] for a in c.axes], dtype=np.float64)
        else:
            twist = msg.twist if c.type == "twist_stamped" else msg
            raw = np.asarray(
                [getattr(getattr(twist, a.split(".")[0]), a.split(".")[1]) for a in c.axes],
                dtype=np.float64,
            )
        pressed = None
        if c.button is not None:
            buttons = list(msg.buttons)
            pressed = c.button < len(buttons) and bool(buttons[c.button])
        return c.command(raw, pressed)

    def on_message(self, msg: Any) -> None:
        try:
            command, intervening = self.decode(msg)
        except (ValueError, TypeError, AttributeError) as exc:
            self.rejected += 1
            self.last_error = str(exc)
            return
        with self._lock:
            self._command, self._intervening = command, intervening
            self._stamp = time.monotonic()
            self.received += 1

    def command(self) -> np.ndarray | None:
        """The person's command while they intervene (fresh input), else None."""
        with self._lock:
            if not self._intervening or time.monotonic() - self._stamp > self.config.timeout_s:
                return None
            return None if self._command is None else self._command.copy()

    # -- roborl.hil.Teleoperator: the gamepad needs no episode bookkeeping ------------------
    def reset(self, seed: int | None = None) -> None:
        pass

    def act(self, obs: Any, info: Mapping[str, Any]) -> np.ndarray | None:
        return self.command()

    def end_episode(self, info: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass  # the subscription ends with the robot's transport


def make_teleop(cfg: Mapping[str, Any], n_action: int) -> Teleop | None:
    """A `Teleop` for `cfg["intervention"]`, or None when the robot config has none."""
    raw = cfg.get("intervention")
    if not raw:
        return None
    return Teleop(InterventionConfig.parse(raw, n_action))

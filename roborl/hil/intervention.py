"""A teleop device's inputs as an action: axis mapping, scale, dead-man button, deadzone.

The device gives a vector of inputs (a gamepad's axes, a Twist's fields); `InputMap` picks one
per action dimension and scales it. The person intervenes while the dead-man `button` is held,
or, with no button, while any mapped input is beyond `deadzone` (a resting stick is noise).
`inputs` is the inverse (the inputs that command a given action), what the scripted person's
hands put on the device. The ROS gamepad reads its messages through this map; the staleness
`timeout_s` is for a device that can fall silent.

Config (`robot.intervention`, or `scripted_person.intervention`)::

    type: joy            # joy | twist | twist_stamped
    axes: [1, 0]         # joy: axis index per action dim; twist*: e.g. [linear.x, angular.z]
    scale: 1.0           # a number, or one per action dim (a sign flips an axis)
    button: 4            # joy: the dead-man button; null: any non-zero mapped axis
    deadzone: 0.05
    timeout_s: 0.5
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from roborl.core.errors import ConfigError

TYPES = ("joy", "twist", "twist_stamped")
KEYS = ("type", "axes", "scale", "button", "deadzone", "timeout_s")
TWIST_FIELDS = tuple(f"{part}.{axis}" for part in ("linear", "angular") for axis in "xyz")


@dataclass(frozen=True)
class InputMap:
    """Which device input drives which action dimension, and when the person is in control."""

    type: str
    axes: tuple[Any, ...]
    scale: np.ndarray
    button: int | None
    deadzone: float
    timeout_s: float

    @staticmethod
    def parse_fields(
        raw: Mapping[str, Any], n_action: int, where: str, extra_keys: Collection[str] = ()
    ) -> dict[str, Any]:
        """The validated fields of `raw` (`extra_keys`: a caller's own, accepted unread)."""
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}={raw!r} must be a mapping (topic, type, axes, ...).")
        accepted = (*extra_keys, *KEYS)
        bad = [k for k in raw if k not in accepted]
        if bad:
            raise ConfigError(
                f"{where} has unknown keys {bad}: accepted are {', '.join(accepted)}."
            )
        kind = str(raw.get("type", "joy"))
        if kind not in TYPES:
            raise ConfigError(f"{where}.type={kind!r}: accepted are {', '.join(TYPES)}.")
        default_axes = list(range(n_action)) if kind == "joy" else list(TWIST_FIELDS[:n_action])
        axes = list(raw.get("axes") or default_axes)
        if len(axes) != n_action:
            raise ConfigError(
                f"{where}.axes={axes} maps {len(axes)} inputs, the robot has {n_action} action "
                "dimensions: give one per action dimension."
            )
        if kind == "joy":
            if not all(isinstance(a, int) and not isinstance(a, bool) and a >= 0 for a in axes):
                raise ConfigError(f"{where}.axes={axes}: Joy axes are indices >= 0.")
        elif not all(a in TWIST_FIELDS for a in axes):
            raise ConfigError(f"{where}.axes={axes}: Twist fields are {', '.join(TWIST_FIELDS)}.")
        scale = np.asarray(raw.get("scale", 1.0), dtype=np.float64).reshape(-1)
        if scale.size == 1:
            scale = np.full(n_action, float(scale[0]))
        if scale.shape != (n_action,) or not np.all(np.isfinite(scale)):
            raise ConfigError(
                f"{where}.scale={raw.get('scale')!r}: one finite number, or {n_action}."
            )
        button = raw.get("button", 0 if kind == "joy" else None)
        if button is not None:
            if kind != "joy":
                raise ConfigError(
                    f"{where}.button={button!r}: Twist has no buttons (any non-zero input "
                    "intervenes); set button: null or use type: joy."
                )
            if isinstance(button, bool) or not isinstance(button, int) or button < 0:
                raise ConfigError(f"{where}.button={button!r} must be an index >= 0 or null.")
        deadzone = float(raw.get("deadzone", 0.05))
        timeout = float(raw.get("timeout_s", 0.5))
        if deadzone < 0 or timeout <= 0:
            raise ConfigError(
                f"{where}: deadzone={deadzone} must be >= 0 and timeout_s={timeout} > 0."
            )
        return {
            "type": kind, "axes": tuple(axes), "scale": scale, "button": button,
            "deadzone": deadzone, "timeout_s": timeout,
        }  # fmt: skip

    @classmethod
    def parse(
        cls, raw: Mapping[str, Any], n_action: int, where: str, extra_keys: Collection[str] = ()
    ) -> InputMap:
        """The map `raw` describes for `n_action` action dimensions; ConfigError if invalid."""
        return cls(**cls.parse_fields(raw, n_action, where, extra_keys))

    def command(self, inputs: np.ndarray, pressed: bool | None) -> tuple[np.ndarray, bool]:
        """(action, intervening) from the mapped `inputs` (one per action dimension) and the
        dead-man button's state (`pressed`; ignored without a button)."""
        raw = np.asarray(inputs, dtype=np.float64)
        if self.button is not None:
            intervening = bool(pressed)
        else:
            intervening = bool(np.any(np.abs(raw) > self.deadzone))
        return raw * self.scale, intervening

    def inputs(self, action: np.ndarray) -> np.ndarray:
        """The mapped inputs that command `action` (a zero scale's input is the action's)."""
        return np.asarray(action, dtype=np.float64) / np.where(self.scale == 0, 1.0, self.scale)

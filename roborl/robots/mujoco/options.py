"""`robot.options` for `robot=mujoco`: which physics to run and how, typed like every config
(unknown keys refused, ranges checked)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError
from roborl.robots.config import RobotConfig


@dataclass
class MujocoFaults:
    """Faults to rehearse what the safety layer does (null: none)."""

    mute_state_after: int | None = field(
        default=None, metadata=rng(1, None, "stop updating the state after this many commands")
    )
    estop_after: int | None = field(
        default=None, metadata=rng(1, None, "fire the robot's e-stop after this many commands")
    )


@dataclass
class MujocoOptions:
    """The in-process MuJoCo robot (`roborl.robots.mujoco`)."""

    env: str | None = field(
        default=None,
        metadata={
            "help": "an env= config name, served like `roborl sim-robot env=NAME` (null: "
            "inverted_pendulum, unless model is set)"
        },
    )
    model: str | None = field(
        default=None,
        metadata={
            "help": "instead of env: an MJCF file, or `position_arm` (built in); its actuators "
            "take the commands in order (ctrl), its first keyframe is the start state"
        },
    )
    seed: int = field(default=0, metadata=rng(0, None, "env seed"))
    sim_rate_hz: float | None = field(
        default=None, metadata=rng(1e-3, None, "physics steps per second (null: real time)")
    )
    command_timeout_s: float = field(
        default=0.5,
        metadata=rng(0.0, None, "zero the actuators when no command came for this long (0: off)"),
    )
    on_terminate: str = field(
        default="hold",
        metadata={
            "choices": ["reset", "hold"],
            "help": "when the task ends: freeze until the env's reset asks (like a real "
            "robot, so the episode sees its end), or reset at once",
        },
    )
    record: str | None = field(
        default=None,
        metadata={"help": "append every command the robot applied (JSON lines) to this file"},
    )
    faults: MujocoFaults = field(default_factory=MujocoFaults)

    @classmethod
    def parse(cls, raw: MujocoOptions | Mapping[str, Any] | None) -> MujocoOptions:
        """Validate `robot.options` (kept as a mapping by the generic robot config) once."""
        if isinstance(raw, MujocoOptions):
            return raw
        values = dict(raw or {})
        faults = values.get("faults")
        if faults is not None and not isinstance(faults, Mapping | MujocoFaults):
            raise ConfigError(f"robot.options.faults={faults!r} must be a mapping.")
        if isinstance(faults, Mapping):
            values["faults"] = build_config(MujocoFaults, faults, "robot.options.faults.")
        opts = build_config(cls, values, "robot.options.")
        if opts.env is not None and opts.model is not None:
            raise ConfigError(
                f"robot.options: give one of env= (a MuJoCo env, e.g. inverted_pendulum) or "
                f"model= (an MJCF file or position_arm), not env={opts.env!r} and "
                f"model={opts.model!r}."
            )
        if opts.model is None and opts.env is None:
            opts.env = "inverted_pendulum"
        return opts


@dataclass
class MujocoRobotConfig(RobotConfig):
    """`robot=mujoco`'s config: the robot config, with `options` typed (what `robot=mujoco`
    composes, so `robot.options.KEY=...` overrides work like any other key)."""

    name: str = field(default="mujoco", metadata={"help": "the robot kind (roborl_robots)"})
    options: MujocoOptions = field(default_factory=MujocoOptions)

"""The `actor_learner:` config block, and what the learner derives from it before any
socket opens: the spaces (from its own robot config, never from a message) and the check that
refuses an unauthenticated link other machines can reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.core.spaces import space_from_dict
from roborl.robots.config import RobotConfig
from roborl.robots.training.actor_learner import keys as keyring


@dataclass
class ActorLearnerConfig:
    """The `actor_learner:` section of the config (the actor reads it from config.json too)."""

    port: int = field(default=5555, metadata=rng(1, 65534, "transitions in; weights on port+1"))
    bind: str = field(
        default="127.0.0.1",
        metadata={"help": "0.0.0.0 for a remote actor (then keys are required)"},
    )
    spawn: bool = field(default=True, metadata={"help": "start `roborl actor` locally"})
    sync_every: int = field(default=50, metadata=rng(1, None, "updates between weight pushes"))
    send_every: int = field(default=10, metadata=rng(1, None, "actor steps per chunk"))
    timeout_s: float = field(default=300.0, metadata=rng(0.1, None, "wait for the actor"))
    keys: str | None = field(
        default=None,
        metadata={"help": "CURVE keys from `roborl actor keys dir=DIR` (required off loopback)"},
    )
    max_message_mb: float = field(
        default=64.0, metadata=rng(0.001, 4096.0, "largest frame either end accepts, MiB")
    )
    heartbeat_s: float = field(
        default=0.5, metadata=rng(0.01, None, "learner -> actor heartbeat period")
    )
    learner_timeout_s: float = field(
        default=5.0, metadata=rng(0.05, None, "actor holds and stops after this much silence")
    )
    spaces: dict | None = field(
        default=None,
        metadata={"help": "{observation, action} spaces for a robot plugin other than ros2"},
    )

    @property
    def max_message_bytes(self) -> int:
        """Frames over this are dropped and counted (`dropped_oversized`). Sockets set
        libzmq's MAXMSGSIZE to twice this: a frame past that hard cut is never buffered,
        libzmq closes the sender's connection instead (counted as `disconnects`)."""
        return int(self.max_message_mb * 2**20)


def learner_spaces(
    robot_cfg: RobotConfig | Mapping[str, Any], cfg: ActorLearnerConfig
) -> tuple[Any, Any]:
    """(observation space, action space) from the learner's own config, never from a peer.

    For a robot config (`robot=ros2`, `robot=mujoco`) they follow from it as the actor's
    `RobotEnv` builds them (observed joints x fields, plus one uint8 image per camera; a Box of the
    safety limits of the commanded joints), without opening the robot. Another robot plugin
    states them in `actor_learner.spaces` (the `space_to_dict` form a checkpoint stores)."""
    if cfg.spaces is not None:
        try:
            obs, act = cfg.spaces["observation"], cfg.spaces["action"]
            return space_from_dict(obs), space_from_dict(act)
        except Exception as exc:
            raise ConfigError(
                f"actor_learner.spaces={cfg.spaces!r} is not {{observation: SPACE, action: "
                f"SPACE}} with SPACE like {{type: Box, low: -1, high: 1, shape: [2], dtype: "
                f"float32}} ({exc})."
            ) from exc
    from roborl.robots.config import parse_robot_config
    from roborl.robots.env.robot_env import robot_observation_space
    from roborl.robots.robot import ConfigLayout

    try:  # the built-in robots' config (ros2, mujoco) and any plugin's that extends it
        robot = parse_robot_config(robot_cfg)  # the defaults the actor's RobotEnv uses
    except ConfigError as exc:
        name = robot_cfg.name if isinstance(robot_cfg, RobotConfig) else robot_cfg.get("name")
        raise ConfigError(
            f"collector=actor_learner with robot.name={name!r}: the learner "
            "takes its spaces from the robot config, which does not describe them here. Set actor_learner.spaces={observation: ..., action: ...} (as a checkpoint's "
            f"spaces: {{type: Box, low, high, shape, dtype}}). ({exc})"
        ) from exc
    driver = ConfigLayout.of(robot)  # the config's layout: no node, no connection
    low, high = (np.asarray(v, np.float32) for v in robot.limits)  # one per commanded joint
    return robot_observation_space(driver), gym.spaces.Box(low, high, dtype=np.float32)


def check_bind(cfg: ActorLearnerConfig) -> None:
    """Refuse an unauthenticated link that other machines can reach."""
    if keyring.is_loopback(cfg.bind) or cfg.keys or cfg.spawn:
        return
    raise ConfigError(
        f"actor_learner.bind={cfg.bind!r} accepts connections from other machines, so the "
        "actor-learner link must be authenticated, but actor_learner.keys is not set (and "
        "actor_learner.spawn=false, so there is no local actor to make ephemeral keys for): "
        "anyone who reaches the port could feed the replay buffer or read the policy. Make a "
        "keypair with `roborl actor keys dir=DIR`, pass actor_learner.keys=DIR to the learner "
        "and copy DIR/actor to the robot for `roborl actor ... keys=DIR/actor`; or bind "
        "127.0.0.1 and reach it over an SSH tunnel."
    )

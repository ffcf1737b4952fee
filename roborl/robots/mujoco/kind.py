"""Opening `robot=mujoco` (`RobotKind.open`), importing the physics only when used."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from roborl.robots.config import RobotConfig


def open_mujoco(
    cfg: RobotConfig | Mapping[str, Any], *args: Any, **kwargs: Any
) -> tuple[Any, RobotConfig]:
    """The in-process MuJoCo robot (not yet connected) and its validated config."""
    from roborl.robots.local import open_local
    from roborl.robots.mujoco.robot import MujocoRobot

    return open_local(MujocoRobot, cfg, *args, **kwargs)

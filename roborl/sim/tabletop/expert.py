"""RoborlTabletop's scripted expert for a scene seen from outside (`roborl scripted-human`).

`sim-robot env=tabletop...` publishes every slide joint of the scene as a JointState: the
gripper (`gx`, `gy`) and the blocks. This expert writes them into its own copy of the scene and
asks it `expert_action()` (the action) and `progress()` (the task error). Registered as
``tabletop`` (`roborl/sim/registration.py`).
"""

from __future__ import annotations

import numpy as np

from roborl.hil.experts import joint_values
from roborl.sim.tabletop.env import COLORS, TabletopEnv


class TabletopExpert:
    """RoborlTabletop's expert on the scene state seen in JointState messages."""

    def __init__(self, task: int = 0) -> None:
        self.env = TabletopEnv(tasks=[task])
        self.env.task = task
        self.joints = ["gx", "gy"] + [f"{c}_{a}" for c in COLORS for a in "xy"]
        self._qadr = self.env._qadr
        self.instruction = self.env.instruction
        self.n_action, self.commands = 2, "2 gripper velocities"

    def set_state(self, names: list[str], positions: list[float]) -> np.ndarray:
        """Write the scene's joints from a JointState; returns the blocks' (the gripper moves
        every step; blocks jump only on a reset)."""
        values = joint_values(names, positions, self.joints, "tabletop", "env=tabletop...")
        for j, v in zip(self.joints, values):
            self.env.data.qpos[self._qadr[j]] = v
        return values[2:]

    def action(self) -> np.ndarray:
        return self.env.expert_action()

    def error(self) -> float:
        return self.env.progress()

"""Fetch's scripted push expert for a scene seen from outside (`roborl scripted-human`).

`sim-robot env=fetch_push_pixels` publishes the end effector, block and goal as JointState
(the person sees the block; the policy's robot config does not observe it). Registered as
``fetch_push`` (`roborl/sim/registration.py`).
"""

from __future__ import annotations

import numpy as np

from roborl.hil.experts import joint_values
from roborl.sim.benchmarks.fetch_pixels import expert_move


class FetchPushExpert:
    """`fetch_pixels.expert_move` on the published scene. Action: (dx, dy, dz, gripper),
    fingers closed. One task: `task` is accepted for the registry's uniform call."""

    joints = ["ee_x", "ee_y", "ee_z", "block_x", "block_y", "block_z", "goal_x", "goal_y", "goal_z"]

    def __init__(self, task: int = 0) -> None:
        self.values = np.zeros(len(self.joints))
        self.instruction = "push the block onto the goal (FetchPush)"
        self.n_action, self.commands = 4, "(dx, dy, dz, gripper)"

    def set_state(self, names: list[str], positions: list[float]) -> np.ndarray:
        """Read the scene from a JointState; returns block and goal (a jump is a new episode:
        the goal moves only on a reset)."""
        self.values = joint_values(
            names, positions, self.joints, "fetch_push", "env=fetch_push_pixels"
        )
        return self.values[3:]

    def action(self) -> np.ndarray:
        grip, block, goal = self.values[:3], self.values[3:6], self.values[6:]
        return np.array([*expert_move(grip, block, goal), -1.0])

    def error(self) -> float:
        return float(np.linalg.norm(self.values[3:6] - self.values[6:]))

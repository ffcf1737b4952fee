"""A point-robot navigation task with a goal and hazards (cost while inside a hazard).

Why: Safety-Gymnasium's ``SafetyPointGoal`` pins an old MuJoCo; this is roborl's own small
MJCF version of the same idea (Ray et al., 2019, "Benchmarking Safe Exploration"): a point mass
on a plane driven by two force actuators (x, y), a goal region (radius 0.3) and ``n_hazards``
hazard discs (radius 0.25). Layouts (start, goal, hazards) are drawn from the reset seed, with
hazards placed around the straight line from start to goal so that the shortest path is unsafe.

reward_t = (d_{t-1} - d_t) * 10 + 1[goal reached]   (distance progress, Safety-Gym style)
cost_t   = 1[robot centre inside any hazard]
The episode terminates when the goal is reached and is truncated after ``max_episode_steps``.
Observation: [x, y, vx, vy, goal_x - x, goal_y - y, (hazard_i - pos) for each hazard].
Deviation from Safety-Gym: no lidar, no heading, goal not resampled after being reached.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

_MJCF = """
<mujoco model="roborl_point_goal">
  <option timestep="0.004"/>
  <worldbody>
    <geom name="floor" type="plane" size="3 3 0.1" rgba="0.8 0.8 0.8 1"/>
    <body name="robot" pos="0 0 0.1">
      <joint name="x" type="slide" axis="1 0 0" damping="1"/>
      <joint name="y" type="slide" axis="0 1 0" damping="1"/>
      <geom name="robot" type="sphere" size="0.1" mass="1" contype="0" conaffinity="0"
            rgba="0.2 0.2 0.9 1"/>
    </body>
    <site name="goal" pos="0 0 0.01" size="0.3 0.005" type="cylinder" rgba="0 1 0 0.4"/>
    {hazards}
  </worldbody>
  <actuator>
    <motor joint="x" gear="1" ctrlrange="-1 1" ctrllimited="true"/>
    <motor joint="y" gear="1" ctrlrange="-1 1" ctrllimited="true"/>
  </actuator>
</mujoco>
"""


class SafePointGoalEnv(gym.Env):
    """Point robot to a goal among hazards; per-step cost in ``info["cost"]``."""

    metadata = {"render_modes": []}
    reports_cost = True

    def __init__(
        self,
        n_hazards: int = 4,
        hazard_radius: float = 0.25,
        goal_radius: float = 0.3,
        frame_skip: int = 5,
        max_episode_steps: int = 200,
        force_scale: float = 5.0,
    ) -> None:
        self.n_hazards = int(n_hazards)
        self.hazard_radius = float(hazard_radius)
        self.goal_radius = float(goal_radius)
        self.frame_skip = int(frame_skip)
        self.max_episode_steps = int(max_episode_steps)
        self.force_scale = float(force_scale)
        hz = "".join(
            f'<site name="hazard{i}" pos="0 0 0.005" size="{hazard_radius} 0.005" '
            f'type="cylinder" rgba="0.9 0.1 0.1 0.4"/>'
            for i in range(self.n_hazards)
        )
        self.model = mujoco.MjModel.from_xml_string(_MJCF.replace("{hazards}", hz))
        self.data = mujoco.MjData(self.model)
        self.model.actuator_gear[:, 0] = self.force_scale
        obs_dim = 6 + 2 * self.n_hazards
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.goal = np.zeros(2)
        self.hazards = np.zeros((self.n_hazards, 2))
        self._t = 0
        self._dist = 0.0

    # -- layout ------------------------------------------------------------------------------
    def _sample_layout(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = self.np_random
        start = np.array([-1.2, rng.uniform(-1.0, 1.0)])
        goal = np.array([1.2, rng.uniform(-1.0, 1.0)])
        hazards = np.zeros((self.n_hazards, 2))
        for i in range(self.n_hazards):
            for _ in range(100):
                frac = rng.uniform(0.2, 0.8)
                p = start + frac * (goal - start) + rng.normal(0.0, 0.25, 2)
                far = all(np.linalg.norm(p - q) > 1.5 * self.hazard_radius for q in hazards[:i])
                clear_goal = np.linalg.norm(p - goal) > self.goal_radius + self.hazard_radius
                clear_start = np.linalg.norm(p - start) > self.hazard_radius + 0.2
                if far and clear_goal and clear_start:
                    break
            hazards[i] = p
        return start, goal, hazards

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        start, self.goal, self.hazards = self._sample_layout()
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = start
        mujoco.mj_forward(self.model, self.data)
        self.model.site_pos[0, :2] = self.goal
        for i in range(self.n_hazards):
            self.model.site_pos[1 + i, :2] = self.hazards[i]
        self._t = 0
        self._dist = float(np.linalg.norm(self.goal - self.position))
        return self._obs(), {"cost": 0.0}

    @property
    def position(self) -> np.ndarray:
        return self.data.qpos[:2].copy()

    def hazard_cost(self, pos: np.ndarray) -> float:
        """The task's cost definition: 1 while the robot's centre is inside any hazard."""
        d = np.linalg.norm(self.hazards - pos[None, :], axis=1)
        return float(np.any(d < self.hazard_radius))

    def _obs(self) -> np.ndarray:
        pos = self.position
        return np.concatenate(
            [pos, self.data.qvel[:2], self.goal - pos, (self.hazards - pos).ravel()]
        ).astype(np.float64)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0)
        self.data.ctrl[:] = a
        mujoco.mj_step(self.model, self.data, nstep=self.frame_skip)
        self._t += 1
        pos = self.position
        dist = float(np.linalg.norm(self.goal - pos))
        reached = dist < self.goal_radius
        reward = (self._dist - dist) * 10.0 + (1.0 if reached else 0.0)
        self._dist = dist
        cost = self.hazard_cost(pos)
        truncated = self._t >= self.max_episode_steps
        info = {"cost": cost, "goal_reached": reached, "goal_distance": dist}
        return self._obs(), float(reward), bool(reached), bool(truncated and not reached), info

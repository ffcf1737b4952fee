"""An image-based MuJoCo tabletop with language instructions, for VLA policies.

A point "gripper" (two actuated slide joints) moves over a table with three coloured blocks
that can be pushed. Each episode is one task variant, given as an instruction:

- ``reach the {red,green,blue} block``: success when the gripper is over the block;
- ``push the {red,green,blue} block to the target``: success when the block is on the grey
  target pad.

Observations (``obs_mode``):

- ``"image_task"`` (default, VLA-RL): ``{"image": 64x64 RGB uint8 (top-down camera), "task":
  variant index}``; the instruction text is ``env.unwrapped.instruction``;
- ``"pixels"``: ``{"image"}`` only, for pixel RL on one task (``tasks=[0]``);
- ``"pixels_state"``: ``{"image", "state"}``, the state being what a robot knows about itself
  (gripper x, y and their velocities, float32), as SERL combines a wrist/scene camera with
  proprioception.

Reward is sparse (1 on success, which ends the episode) unless ``reward_type="dense"``: then
minus the distance left to the goal each step, plus 1 on success (a shaped variant for quick
learning checks; the sparse one is the task). `expert_action()` is a scripted expert used for
demonstrations. Rendering is offscreen: set ``MUJOCO_GL=egl`` (or ``osmesa``) on machines
without a display. The shadow map is 512 px: MuJoCo's default 4096 px map took ~32 of ~35 ms
per frame under Mesa's software renderer (32-64 px frames); at 512 a 32 px frame is identical
and a 64 px one differs in 0.2% of its pixels, at 3-5 ms a frame.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np

from roborl.core.errors import ConfigError

COLORS = {"red": "0.9 0.15 0.15 1", "green": "0.15 0.8 0.2 1", "blue": "0.2 0.3 0.95 1"}
TASKS = [f"reach the {c} block" for c in COLORS] + [
    f"push the {c} block to the target" for c in COLORS
]
TABLE = 0.30  # half-size of the reachable square, metres
STEP = 0.04  # metres per unit action
REACH_TOL = 0.055  # touching: sphere radius + half block + margin
PUSH_TOL = 0.06
TARGET = np.array([0.0, 0.0])
OBS_MODES = ("image_task", "pixels", "pixels_state")
REWARD_TYPES = ("sparse", "dense")


def _xml() -> str:
    blocks = "".join(
        f"""
    <body name="{c}" pos="0 0 0.025">
      <joint name="{c}_x" type="slide" axis="1 0 0" damping="4"/>
      <joint name="{c}_y" type="slide" axis="0 1 0" damping="4"/>
      <geom type="box" size="0.025 0.025 0.025" rgba="{rgba}" mass="0.2" friction="0.4"/>
    </body>"""
        for c, rgba in COLORS.items()
    )
    return f"""
<mujoco model="roborl_tabletop">
  <option timestep="0.01" gravity="0 0 -9.81"/>
  <visual><global offwidth="256" offheight="256"/><quality shadowsize="512"/></visual>
  <worldbody>
    <light pos="0 0 1.5" dir="0 0 -1" diffuse="0.9 0.9 0.9"/>
    <camera name="top" pos="0 0 0.95" xyaxes="1 0 0 0 1 0" fovy="45"/>
    <geom name="table" type="plane" size="0.4 0.4 0.02" rgba="0.85 0.8 0.7 1"/>
    <geom name="target" type="cylinder" pos="0 0 0.001" size="{PUSH_TOL} 0.001" rgba="0.45 0.45 0.45 1" contype="0" conaffinity="0"/>
    <body name="gripper" pos="0 0 0.03">
      <joint name="gx" type="slide" axis="1 0 0" damping="1"/>
      <joint name="gy" type="slide" axis="0 1 0" damping="1"/>
      <geom type="sphere" size="0.02" rgba="0.1 0.1 0.1 1" mass="0.5"/>
    </body>{blocks}
  </worldbody>
  <actuator>
    <position joint="gx" kp="300" ctrlrange="-{TABLE} {TABLE}"/>
    <position joint="gy" kp="300" ctrlrange="-{TABLE} {TABLE}"/>
  </actuator>
</mujoco>"""


class TabletopEnv(gym.Env):
    """Language-conditioned reach/push tabletop, rendered offscreen."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    task_instructions = TASKS

    def __init__(
        self,
        image_size: int = 64,
        max_episode_steps: int = 40,
        tasks: list[int] | None = None,
        render_mode: str | None = "rgb_array",
        obs_mode: str = "image_task",
        reward_type: str = "sparse",
    ) -> None:
        if obs_mode not in OBS_MODES:
            raise ConfigError(
                f"RoborlTabletop obs_mode={obs_mode!r} is unknown; accepted: {', '.join(OBS_MODES)}"
            )
        if reward_type not in REWARD_TYPES:
            raise ConfigError(
                f"RoborlTabletop reward_type={reward_type!r} is unknown; accepted: "
                f"{', '.join(REWARD_TYPES)}"
            )
        if not 8 <= int(image_size) <= 256:
            raise ConfigError(
                f"RoborlTabletop image_size={image_size} must lie in [8, 256] (the offscreen "
                "framebuffer is 256x256)"
            )
        bad = [t for t in (tasks or []) if not 0 <= int(t) < len(TASKS)]
        if bad or (tasks is not None and not list(tasks)):
            raise ConfigError(
                f"RoborlTabletop tasks={tasks} must be a non-empty list of indices 0..{len(TASKS) - 1}"
                f" ({'; '.join(f'{i}: {t}' for i, t in enumerate(TASKS))})"
            )
        os.environ.setdefault("MUJOCO_GL", "egl")
        self.obs_mode = obs_mode
        self.reward_type = reward_type
        self.model = mujoco.MjModel.from_xml_string(_xml())
        self.data = mujoco.MjData(self.model)
        self.image_size = image_size
        self.max_episode_steps = max_episode_steps
        self.tasks = list(range(len(TASKS))) if tasks is None else list(tasks)
        self.render_mode = render_mode
        self._renderer: mujoco.Renderer | None = None
        entries: dict[str, gym.Space] = {
            "image": gym.spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
        }
        if obs_mode == "image_task":
            entries["task"] = gym.spaces.Discrete(len(TASKS))
        elif obs_mode == "pixels_state":
            entries["state"] = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.observation_space = gym.spaces.Dict(entries)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.task = 0
        self._steps = 0
        self._jid = {
            j: mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in ("gx", "gy")
        }
        self._qadr = {
            name: self.model.jnt_qposadr[
                mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, name)
            ]
            for name in ["gx", "gy"] + [f"{c}_{a}" for c in COLORS for a in "xy"]
        }

    # -- state -------------------------------------------------------------------------------

    @property
    def dt(self) -> float:
        """Simulated seconds per step (10 physics substeps), like Gymnasium's MuJoCo envs'
        `dt`: `sim-robot` paces its real-time loop and /clock with it."""
        return 10 * float(self.model.opt.timestep)

    @property
    def instruction(self) -> str:
        return TASKS[self.task]

    @property
    def color(self) -> str:
        return TASKS[self.task].split()[2]

    def gripper_xy(self) -> np.ndarray:
        return np.array([self.data.qpos[self._qadr["gx"]], self.data.qpos[self._qadr["gy"]]])

    def block_xy(self, color: str | None = None) -> np.ndarray:
        c = color or self.color
        return np.array(
            [self.data.qpos[self._qadr[f"{c}_x"]], self.data.qpos[self._qadr[f"{c}_y"]]]
        )

    def is_push(self) -> bool:
        return self.task >= len(COLORS)

    def success(self) -> bool:
        if self.is_push():
            return bool(np.linalg.norm(self.block_xy() - TARGET) < PUSH_TOL)
        return bool(np.linalg.norm(self.block_xy() - self.gripper_xy()) < REACH_TOL)

    def progress(self) -> float:
        """Distance left to the goal (used to segment demonstrations into milestones)."""
        if self.is_push():
            return float(np.linalg.norm(self.block_xy() - TARGET))
        return float(np.linalg.norm(self.block_xy() - self.gripper_xy()))

    # -- gym API -----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        self.task = int(options.get("task", self.np_random.choice(self.tasks)))
        mujoco.mj_resetData(self.model, self.data)
        rng = self.np_random
        # Blocks on a ring away from the target and from each other; gripper elsewhere.
        angles = rng.uniform(0, 2 * np.pi) + np.array([0.0, 2.1, 4.2]) + rng.uniform(-0.3, 0.3, 3)
        radii = rng.uniform(0.12, 0.2, 3)
        for c, a, r in zip(COLORS, angles, radii):
            self.data.qpos[self._qadr[f"{c}_x"]] = r * np.cos(a)
            self.data.qpos[self._qadr[f"{c}_y"]] = r * np.sin(a)
        g = rng.uniform(-0.22, 0.22, 2)
        self.data.qpos[self._qadr["gx"]], self.data.qpos[self._qadr["gy"]] = g
        self.data.ctrl[:] = g
        mujoco.mj_forward(self.model, self.data)
        self._steps = 0
        return self._obs(), {"instruction": self.instruction, "task": self.task}

    def step(self, action: np.ndarray):
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0)
        target = np.clip(self.gripper_xy() + STEP * action, -TABLE, TABLE)
        self.data.ctrl[:] = target
        for _ in range(10):
            mujoco.mj_step(self.model, self.data)
        self._steps += 1
        success = self.success()
        truncated = self._steps >= self.max_episode_steps and not success
        info = {"success": success, "instruction": self.instruction, "task": self.task}
        reward = float(success)
        if self.reward_type == "dense":
            reward -= self.progress()
        return self._obs(), reward, success, truncated, info

    def render(self) -> np.ndarray:
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.image_size, self.image_size)
        self._renderer.update_scene(self.data, camera="top")
        return self._renderer.render().copy()

    def _obs(self) -> dict[str, Any]:
        obs: dict[str, Any] = {"image": self.render()}
        if self.obs_mode == "image_task":
            obs["task"] = self.task
        elif self.obs_mode == "pixels_state":
            obs["state"] = self.proprio()
        return obs

    def proprio(self) -> np.ndarray:
        """Gripper x, y and their velocities: what a robot's joint states tell it."""
        vel = [self.data.qvel[self.model.jnt_dofadr[self._jid[j]]] for j in ("gx", "gy")]
        return np.array([*self.gripper_xy(), *vel], dtype=np.float32)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # -- scripted expert ---------------------------------------------------------------------

    def expert_action(self, noise: float = 0.0) -> np.ndarray:
        """Proportional controller: to the block (reach), or behind it then through it (push)."""
        g = self.gripper_xy()
        b = self.block_xy()
        if self.is_push():
            direction = TARGET - b
            dist = np.linalg.norm(direction) + 1e-8
            behind = b - 0.065 * direction / dist
            unit = direction / dist
            to_behind = behind - g
            if np.dot(g - b, unit) > -0.03 and np.linalg.norm(to_behind) > 0.015:
                # On the wrong side: go around the block (sideways waypoint) without pushing it.
                perp = np.array([-unit[1], unit[0]])
                side = perp if np.dot(g - b, perp) >= 0 else -perp
                aim = b + 0.08 * side - 0.03 * unit
            elif np.linalg.norm(to_behind) > 0.015:
                aim = behind  # the pre-push point
            else:
                aim = b + 0.05 * unit  # push through the block towards the target
            delta = aim - g
        else:
            delta = b - g
        action = np.clip(delta / STEP, -1.0, 1.0)
        if noise:
            action = np.clip(action + noise * self.np_random.normal(size=2), -1.0, 1.0)
        return action.astype(np.float32)

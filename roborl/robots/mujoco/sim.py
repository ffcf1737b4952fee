"""The physics behind `robot=mujoco`: a registered MuJoCo env (what `roborl sim-robot` serves,
through the same registry and joint table) or a plain MJCF model whose actuators take the
commands. Both answer `step(command) -> ended`, `joints()` and `reset()`; no ROS anywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from roborl.core.errors import ConfigError
from roborl.robots.mujoco.options import MujocoOptions

BUILTIN_MODELS = {"position_arm": Path(__file__).with_name("position_arm.xml")}


class Sim(Protocol):
    """One simulated robot: named joints, actuators that take a command vector."""

    names: list[str]
    n_act: int
    dt: float
    low: np.ndarray
    high: np.ndarray
    zero_on_timeout: bool

    def step(self, command: np.ndarray) -> bool:
        """Advance one step with `command`; True when the task ended (terminated)."""

    def joints(self) -> tuple[list[float], list[float], list[float]]:
        """(positions, velocities, efforts) of `names`."""

    def reset(self) -> None: ...

    def rest_command(self) -> np.ndarray:
        """The command that keeps the robot where it is after a reset (zero force, or a
        position servo's current target)."""


class EnvSim:
    """A registered env (`env=NAME` as in `roborl train`), published like `sim-robot` does."""

    def __init__(self, opts: MujocoOptions) -> None:
        from roborl.core.compose import compose_dict
        from roborl.core.envs import make_env
        from roborl.core.plugins import get_host
        from roborl.robots.nodes.sim_robot import _joint_table
        from roborl.robots.nodes.sim_serve import env_dt, joint_reader

        host = get_host()
        env_cfg = compose_dict(host, [f"env={opts.env}"], "train")["env"]
        self.env = make_env(host.registry, {"env": env_cfg}, seed=opts.seed)
        self.env.reset(seed=opts.seed)
        base = self.env.unwrapped
        described = callable(getattr(base, "robot_joints", None))
        if not described and not hasattr(base, "data"):
            raise ConfigError(
                f"robot.options.env={opts.env!r} is not a MuJoCo env (nor one with "
                "robot_joints()), so it cannot be served as a robot."
            )
        table = (
            [(n, -1, -1) for n in base.robot_joints()] if described else _joint_table(base.model)
        )
        self.names = [t[0] for t in table]
        self._read = joint_reader(base, table)
        self.n_act = int(np.prod(self.env.action_space.shape))
        self.low = np.asarray(self.env.action_space.low, np.float64).reshape(-1)
        self.high = np.asarray(self.env.action_space.high, np.float64).reshape(-1)
        self.dt = env_dt(base)

    #: A silent commander gets zero (sim-robot's command timeout): these envs take forces
    #: and velocities.
    zero_on_timeout = True

    def joints(self) -> tuple[list[float], list[float], list[float]]:
        return self._read()

    def step(self, command: np.ndarray) -> bool:
        _, _, terminated, truncated, _ = self.env.step(command.astype(np.float32))
        return bool(terminated or truncated)

    def reset(self) -> None:
        self.env.reset()

    def rest_command(self) -> np.ndarray:
        return np.zeros(self.n_act)


class ModelSim:
    """An MJCF model stepped with `mj_step`; `ctrl` is the command (a position actuator's
    ctrl is the target angle), and its first keyframe, if any, is the start state."""

    def __init__(self, opts: MujocoOptions) -> None:
        import mujoco

        path = BUILTIN_MODELS.get(str(opts.model), Path(str(opts.model)))
        if not path.is_file():
            raise ConfigError(
                f"robot.options.model={opts.model!r} is neither an MJCF file nor a built-in "
                f"model ({', '.join(BUILTIN_MODELS)})."
            )
        self._mj = mujoco
        self.model = mujoco.MjModel.from_xml_path(str(path))
        self.data = mujoco.MjData(self.model)
        hinge_slide = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
        self.table = [
            (
                self.model.joint(j).name,
                int(self.model.jnt_qposadr[j]),
                int(self.model.jnt_dofadr[j]),
            )
            for j in range(self.model.njnt)
            if int(self.model.jnt_type[j]) in hinge_slide
        ]
        self.names = [t[0] for t in self.table]
        self.n_act = int(self.model.nu)
        ranges = np.asarray(self.model.actuator_ctrlrange, np.float64).reshape(-1, 2)
        limited = np.asarray(self.model.actuator_ctrllimited, bool).reshape(-1)
        self.low = np.where(limited, ranges[:, 0], -np.inf)
        self.high = np.where(limited, ranges[:, 1], np.inf)
        self.dt = float(self.model.opt.timestep)
        self.reset()

    #: A position actuator keeps its last target when commands stop (zero would be a move).
    zero_on_timeout = False

    def step(self, command: np.ndarray) -> bool:
        self.data.ctrl[:] = command
        self._mj.mj_step(self.model, self.data)
        return False

    def joints(self) -> tuple[list[float], list[float], list[float]]:
        d = self.data
        return (
            [float(d.qpos[a]) for _, a, _ in self.table],
            [float(d.qvel[v]) for _, _, v in self.table],
            [float(d.qfrc_actuator[v]) for _, _, v in self.table],
        )

    def reset(self) -> None:
        if self.model.nkey > 0:
            self._mj.mj_resetDataKeyframe(self.model, self.data, 0)
        else:
            self._mj.mj_resetData(self.model, self.data)
        self._mj.mj_forward(self.model, self.data)

    def rest_command(self) -> np.ndarray:
        return np.asarray(self.data.ctrl, np.float64).copy()


def make_sim(opts: MujocoOptions) -> Sim:
    return ModelSim(opts) if opts.model is not None else EnvSim(opts)

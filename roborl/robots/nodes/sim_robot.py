"""`sim-robot` (node `sim_robot`) serves a MuJoCo env from the registry like a ros2_control
robot: it publishes sensor_msgs/JointState on /joint_states after every physics step and
rosgraph_msgs/Clock on /clock (sim time, for nodes with `use_sim_time`), applies the latest
std_msgs/Float64MultiArray from `/<controller>/commands`, steps at `rate_hz` env steps per
second (1/env.dt is real time; more is faster than real time), publishes the terminal state
when the task ends and then resets on the next tick (`on_terminate=reset`) or stays frozen in
it until a reset request (`on_terminate=hold`, like a real robot that needs its reset
routine). A reset is requested with the `~/reset` service (std_srvs/Trigger, answered once
the new episode has started) or a std_msgs/Bool True on `/sim_robot/reset`. It prints one
JSON line per episode.

Cameras (`cameras=[top]` or `cameras=[{name: top, topic: ..., width: 64, height: 64,
rate_hz: 10}]`, `name` being a MuJoCo camera of the model) are rendered offscreen (MuJoCo's
renderer, `MUJOCO_GL=egl`) after the physics step and published as sensor_msgs/Image (rgb8)
with the JointState's stamp. `env=tabletop` is the pixel robot: the RoborlTabletop scene, its
gripper's slide joints `gx`, `gy` as joint state, its top-down camera `top`, and commands in
the env's action space (a velocity of the gripper, [-1, 1] per axis).

An env that describes itself as a robot (`robot_joints()`: name -> (position, velocity), e.g.
`env=fetch_push_pixels`: the end effector, fingers, block and goal) is published that way
instead of by its MuJoCo joints, and its own view is the camera `render` (the env's
`render()`, at the env's image size), so what sim-robot serves is the very task that
`roborl train env=...` runs in-process.

This module is the command (options, parameters, set-up); `sim_serve` runs the loop and
`sim_cameras` renders the cameras.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from roborl.core.compose import register_command_config
from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.robots.nodes.common import (
    ROS_ARGS_HELP,
    SIM_ROBOT_CONFIG,
    command_help,
    compose_options,
    guard_command,
)
from roborl.robots.nodes.sim_cameras import CameraPublisher, camera_specs
from roborl.robots.nodes.sim_serve import env_dt, serve_sim

SIM_QOS_TOPICS = ("state", "command", "reset", "clock", "camera")


@dataclass
class SimRobotOptions:
    """`roborl sim-robot` options (the `env` group selects the MuJoCo task)."""

    rate_hz: float | None = field(
        default=None, metadata=rng(1e-3, None, "env steps per second (null: real time, 1/env.dt)")
    )
    controller: str = field(
        default="forward_command_controller",
        metadata={"help": "commands arrive on /<controller>/commands (Float64MultiArray)"},
    )
    duration_s: float | None = field(
        default=None, metadata=rng(0.0, None, "stop after this many seconds (null: Ctrl-C)")
    )
    seed: int = field(default=0, metadata=rng(0, None, "env seed"))
    transport: str = field(
        default="auto",
        metadata={"choices": ["auto", "rclpy", "dds"], "help": "auto: rclpy if importable"},
    )
    node_name: str = field(default="sim_robot", metadata={"help": "ROS 2 node name"})
    namespace: str = field(default="", metadata={"help": "ROS 2 namespace of the node"})
    state_topic: str = field(
        default="/joint_states", metadata={"help": "sensor_msgs/JointState is published here"}
    )
    command_topic: str | None = field(
        default=None, metadata={"help": "command topic (null: /<controller>/commands)"}
    )
    joints: list[str] | None = field(
        default=None,
        metadata={"help": "joints published, in this order (null: every hinge/slide joint)"},
    )
    command_timeout_s: float = field(
        default=0.5,
        metadata=rng(
            0.0,
            None,
            "apply the hold (zero) when no command arrived for this long, like "
            "diff_drive_controller's cmd_vel_timeout; 0 = apply the last command forever",
        ),
    )
    command_low: list[float] | None = field(
        default=None, metadata={"help": "commands are clipped to these (null: the env's bounds)"}
    )
    command_high: list[float] | None = field(
        default=None, metadata={"help": "upper clip per actuator (null: the env's bounds)"}
    )
    reset_topic: str = field(
        default="/sim_robot/reset", metadata={"help": "std_msgs/Bool True requests a reset"}
    )
    on_terminate: str = field(
        default="reset",
        metadata={
            "choices": ["reset", "hold"],
            "help": "reset: new episode next tick; hold: freeze until a reset request",
        },
    )
    publish_clock: bool = field(
        default=True, metadata={"help": "publish sim time on /clock (rosgraph_msgs/Clock)"}
    )
    qos: dict = field(
        default_factory=dict,
        metadata={
            "help": "per-topic QoS: state, command, reset, clock, camera (default, "
            "sensor_data, ...)"
        },
    )
    cameras: list[Any] = field(
        default_factory=list,
        metadata={
            "help": "MuJoCo cameras published as sensor_msgs/Image (rgb8): names, or "
            "{name, topic, width, height, rate_hz, frame_id}; defaults /camera/<name>/image_raw, "
            "64x64, every step"
        },
    )


register_command_config(SIM_ROBOT_CONFIG, SimRobotOptions, {"env": "inverted_pendulum"})


def _joint_table(model: Any) -> list[tuple[str, int, int]]:
    import mujoco

    table = []
    for j in range(model.njnt):
        if int(model.jnt_type[j]) in (
            int(mujoco.mjtJoint.mjJNT_HINGE),
            int(mujoco.mjtJoint.mjJNT_SLIDE),
        ):
            table.append((model.joint(j).name, int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j])))
    return table


def sim_robot(argv: list[str]) -> int:
    """`roborl sim-robot env=inverted_pendulum [rate_hz=N] [controller=NAME] [duration_s=S]
    [on_terminate=reset|hold] [--ros-args -p rate_hz:=N ...]`."""
    from roborl.core.envs import make_env
    from roborl.core.plugins import get_host
    from roborl.robots.transport.common import (
        Param,
        make_transport,
        qos_spec,
        split_ros_args,
    )

    if any(a in ("-h", "--help") for a in argv):
        print(
            command_help(
                "usage: roborl sim-robot [env=NAME] [key=value ...] [--ros-args ...]\n\n"
                "Serve a MuJoCo env like a ros2_control robot: JointState on /joint_states,\n"
                "commands on /<controller>/commands, sim time on /clock, ~/reset "
                "(std_srvs/Trigger).\n" + ROS_ARGS_HELP,
                SimRobotOptions,
                "Config group: env=NAME (as in roborl train; default inverted_pendulum), "
                "env.KEY=VALUE.",
            )
        )
        return 0
    argv, ros_args = split_ros_args(argv)
    opts, composed = compose_options(argv, SimRobotOptions, SIM_ROBOT_CONFIG, "sim-robot")
    bad_qos = [k for k in opts.qos if k not in SIM_QOS_TOPICS]
    if bad_qos:
        raise ConfigError(f"qos has unknown topics {bad_qos}: accepted are {SIM_QOS_TOPICS}.")
    qos = {k: qos_spec(opts.qos.get(k), f"qos.{k}") for k in SIM_QOS_TOPICS}
    env_cfg = composed["env"]
    host = get_host()
    env = make_env(host.registry, {"env": env_cfg}, seed=int(opts.seed))
    env.reset(seed=int(opts.seed))
    base = env.unwrapped
    described = callable(getattr(base, "robot_joints", None))
    if not described and not hasattr(base, "data"):
        raise ConfigError(
            f"sim-robot needs a MuJoCo env (or one with robot_joints()); env.id="
            f"{env_cfg.get('id')!r} is neither."
        )
    table = [(n, -1, -1) for n in base.robot_joints()] if described else _joint_table(base.model)
    cams = camera_specs(list(opts.cameras or []), base)
    n_act = int(np.prod(env.action_space.shape))
    low = np.asarray(opts.command_low if opts.command_low is not None else env.action_space.low)
    high = np.asarray(opts.command_high if opts.command_high is not None else env.action_space.high)
    transport = make_transport(
        opts.transport, opts.node_name, namespace=opts.namespace, ros_args=ros_args
    )
    try:
        p = transport.declare_parameters(
            {
                "rate_hz": Param(float(opts.rate_hz or 1.0 / env_dt(base)), "env steps per second"),
                "joints": Param(
                    list(opts.joints or [t[0] for t in table]), "joints published, in order"
                ),
                "command_low": Param([float(x) for x in low], "lower clip per actuator"),
                "command_high": Param([float(x) for x in high], "upper clip per actuator"),
                "state_topic": Param(opts.state_topic, "sensor_msgs/JointState topic"),
                "command_topic": Param(
                    opts.command_topic or f"/{opts.controller}/commands",
                    "std_msgs/Float64MultiArray command topic",
                ),
                "reset_topic": Param(opts.reset_topic, "std_msgs/Bool reset request topic"),
                "on_terminate": Param(opts.on_terminate, "reset or hold"),
                "publish_clock": Param(bool(opts.publish_clock), "publish sim time on /clock"),
                "command_timeout_s": Param(
                    float(opts.command_timeout_s), "hold when no command for this long (0: off)"
                ),
            },
        )
        cameras = CameraPublisher(cams, base, transport, qos["camera"]) if cams else None
        try:
            return serve_sim(
                env, base, table, n_act, p, qos, transport, opts, env_cfg.get("id"), cameras
            )
        finally:
            if cameras is not None:
                cameras.close()
    finally:
        transport.close()


sim_robot_cmd = guard_command(
    sim_robot, "sim-robot", "serve a MuJoCo env as a ros2_control robot over ROS 2"
)

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
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from roborl.core.compose import register_command_config
from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.robots.nodes.common import (
    ROS_ARGS_HELP,
    SIM_ROBOT_CONFIG,
    announce,
    command_help,
    compose_options,
    emit_event,
    guard_command,
    stop_on_signals,
)

SIM_QOS_TOPICS = ("state", "command", "reset", "clock", "camera")
SIM_CAMERA_KEYS = ("name", "topic", "width", "height", "rate_hz", "frame_id")


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


@dataclass
class SimCamera:
    """A MuJoCo camera that sim-robot renders and publishes."""

    name: str
    topic: str
    width: int
    height: int
    rate_hz: float | None
    frame_id: str


def _camera_specs(value: list[Any], model: Any) -> list[SimCamera]:
    """`cameras=` checked against the model (camera names, offscreen buffer size)."""
    import mujoco

    names = [model.camera(i).name for i in range(model.ncam)]
    max_w, max_h = int(model.vis.global_.offwidth), int(model.vis.global_.offheight)
    out = []
    for i, item in enumerate(value):
        at = f"cameras[{i}]"
        item = {"name": item} if isinstance(item, str) else item
        if not isinstance(item, dict):
            raise ConfigError(f"{at}={item!r}: give a camera name or a mapping.")
        bad = [k for k in item if k not in SIM_CAMERA_KEYS]
        if bad:
            raise ConfigError(f"{at} has unknown keys {bad}: accepted are {SIM_CAMERA_KEYS}.")
        name = str(item.get("name") or "")
        if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name) < 0:
            raise ConfigError(f"{at}.name={name!r} is not a camera of the model: it has {names}.")
        w, h = int(item.get("width") or 64), int(item.get("height") or 64)
        if not (0 < w <= max_w and 0 < h <= max_h):
            raise ConfigError(
                f"{at}: {w}x{h} does not fit the model's offscreen buffer {max_w}x{max_h} "
                "(<visual><global offwidth offheight> in its XML)."
            )
        rate = item.get("rate_hz")
        if rate is not None and not float(rate) > 0:
            raise ConfigError(f"{at}.rate_hz={rate!r} must be > 0 (null: every step).")
        out.append(
            SimCamera(
                name=name,
                topic=str(item.get("topic") or f"/camera/{name}/image_raw"),
                width=w,
                height=h,
                rate_hz=float(rate) if rate is not None else None,
                frame_id=str(item.get("frame_id") or f"{name}_camera"),
            )
        )
    if len({c.topic for c in out}) != len(out):
        raise ConfigError(f"cameras={value!r}: two cameras publish on the same topic.")
    return out


class _CameraPublisher:
    """Renders each camera at its rate with MuJoCo's offscreen renderer and publishes it.

    Rendering happens on sim-robot's loop thread (an OpenGL context belongs to one thread)."""

    def __init__(self, cams: list[SimCamera], base: Any, transport: Any, qos: Any) -> None:
        import mujoco

        from roborl.robots.transport import msgs

        self.base = base
        self.items = []
        for cam in cams:
            try:
                renderer = mujoco.Renderer(base.model, cam.height, cam.width)
            except Exception as exc:  # no EGL/OSMesa: say what to install, not a GL trace
                raise ConfigError(
                    f"cannot render camera {cam.name!r} offscreen ({exc}); MuJoCo needs "
                    "MUJOCO_GL=egl (libEGL) or MUJOCO_GL=osmesa (libosmesa6)."
                ) from None
            pub = transport.publisher(cam.topic, msgs.Image, qos)
            self.items.append([cam, renderer, pub, -float("inf")])
        self.published = 0

    def publish(self, stamp: Any) -> None:
        from roborl.robots.env.cameras import encode_image

        now = time.monotonic()
        for item in self.items:
            cam, renderer, pub, next_t = item
            if cam.rate_hz is not None and now < next_t:
                continue
            item[3] = max(next_t + 1.0 / cam.rate_hz, now) if cam.rate_hz else now
            renderer.update_scene(self.base.data, camera=cam.name)
            pub(encode_image(renderer.render(), stamp, cam.frame_id))
            self.published += 1

    def close(self) -> None:
        for _, renderer, _, _ in self.items:
            renderer.close()


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
    if not hasattr(base, "data"):
        raise ConfigError(f"sim-robot needs a MuJoCo env; env.id={env_cfg.get('id')!r} is not.")
    table = _joint_table(base.model)
    cams = _camera_specs(list(opts.cameras or []), base.model)
    n_act = int(np.prod(env.action_space.shape))
    low = np.asarray(opts.command_low if opts.command_low is not None else env.action_space.low)
    high = np.asarray(opts.command_high if opts.command_high is not None else env.action_space.high)
    transport = make_transport(
        opts.transport, opts.node_name, namespace=opts.namespace, ros_args=ros_args
    )
    try:
        p = transport.declare_parameters(
            {
                "rate_hz": Param(
                    float(opts.rate_hz or 1.0 / _env_dt(base)), "env steps per second"
                ),
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
        cameras = _CameraPublisher(cams, base, transport, qos["camera"]) if cams else None
        try:
            return _serve_sim(
                env, base, table, n_act, p, qos, transport, opts, env_cfg.get("id"), cameras
            )
        finally:
            if cameras is not None:
                cameras.close()
    finally:
        transport.close()


def _env_dt(base: Any) -> float:
    """Simulated seconds per env step: `dt` (Gymnasium's MuJoCo envs, RoborlTabletop), else
    the physics timestep times the env's `frame_skip` (1 if it has none)."""
    dt = getattr(base, "dt", None)
    if dt is None:
        dt = float(base.model.opt.timestep) * int(getattr(base, "frame_skip", 1))
    return float(dt)


def _serve_sim(
    env: Any,
    base: Any,
    table: list[tuple[str, int, int]],
    n_act: int,
    p: dict[str, Any],
    qos: dict[str, Any],
    transport: Any,
    opts: SimRobotOptions,
    env_id: str | None,
    cameras: _CameraPublisher | None = None,
) -> int:
    """sim-robot's loop, with its parameters `p` resolved."""
    from roborl.robots.transport import msgs

    by_name = {t[0]: t for t in table}
    unknown = [j for j in p["joints"] if j not in by_name]
    if unknown or not p["joints"]:
        raise ConfigError(
            f"joints={p['joints']} names {'unknown joints ' + str(unknown) if unknown else 'none'}"
            f"; the model's hinge/slide joints are {list(by_name)}."
        )
    table = [by_name[j] for j in p["joints"]]
    names = [t[0] for t in table]
    if p["on_terminate"] not in ("reset", "hold"):
        raise ConfigError(f"on_terminate={p['on_terminate']!r}: accepted are reset, hold.")
    rate = float(p["rate_hz"])
    if rate <= 0:
        raise ConfigError(f"rate_hz={rate} must be > 0.")
    low, high = np.asarray(p["command_low"]), np.asarray(p["command_high"])
    if low.shape != (n_act,) or high.shape != (n_act,) or np.any(low > high):
        raise ConfigError(
            f"command_low={low.tolist()} / command_high={high.tolist()} need {n_act} values each, "
            "low <= high."
        )
    publish = transport.publisher(p["state_topic"], msgs.JointState, qos["state"])
    clock = transport.publisher("/clock", msgs.Clock, qos["clock"]) if p["publish_clock"] else None
    diagnostics = transport.publisher("/diagnostics", msgs.DiagnosticArray)
    stamps_sim = bool(transport.use_sim_time)
    command = np.zeros(n_act)
    lock = threading.Lock()
    resets: list[threading.Event] = []  # pending reset requests, each set once served
    state = {"commands": 0, "rejected": 0, "reset_requests": 0, "episodes": 0, "timeouts": 0}
    timeout_s = float(p["command_timeout_s"])
    hold = np.clip(np.zeros(n_act), low, high)
    last_command = [time.monotonic()]

    def on_command(msg: msgs.Float64MultiArray) -> None:
        data = np.asarray(msg.data, dtype=np.float64)
        if data.shape != (n_act,) or not np.all(np.isfinite(data)):
            state["rejected"] += 1
            return
        with lock:
            command[:] = np.clip(data, low, high)
            state["commands"] += 1
            last_command[0] = time.monotonic()

    def on_reset(msg: msgs.Bool) -> None:
        if msg.data:
            with lock:
                resets.append(threading.Event())

    def on_reset_service(_: bool | None) -> tuple[bool, str]:
        done = threading.Event()
        with lock:
            resets.append(done)
        if done.wait(5.0):
            return True, f"new episode started (reset request {state['reset_requests']})"
        return False, "sim-robot did not reset within 5 s (is its loop running?)"

    transport.subscribe(p["command_topic"], msgs.Float64MultiArray, on_command, qos["command"])
    transport.subscribe(p["reset_topic"], msgs.Bool, on_reset, qos["reset"])
    transport.service("~/reset", "trigger", on_reset_service)
    stop = stop_on_signals()
    announce(
        transport,
        logging.INFO,
        event="sim_robot_start",
        env=env_id,
        node=transport.fully_qualified_name or opts.node_name,
        joints=names,
        rate_hz=rate,
        state_topic=p["state_topic"],
        command_topic=p["command_topic"],
        clock=bool(p["publish_clock"]),
        cameras={c[0].name: c[0].topic for c in cameras.items} if cameras else {},
    )
    period = 1.0 / rate
    dt = _env_dt(base)
    t_end = time.monotonic() + float(opts.duration_s) if opts.duration_s else float("inf")
    next_tick = time.monotonic()
    ep_len, ep_ret = 0, 0.0
    sim_t = 0.0  # monotone across episodes: /clock must never jump back
    reset_next, frozen = False, False
    next_status = time.monotonic() + 1.0
    while not stop[0] and time.monotonic() < t_end:
        if time.monotonic() >= next_status:
            next_status += 1.0
            emit_event(event="status", current_episode_length=ep_len, commands=state["commands"])
            diagnostics(_sim_diagnostics(msgs, transport, opts, state, ep_len, sim_t))
        with lock:
            served, resets[:] = list(resets), []
        if served:
            state["reset_requests"] += len(served)
            announce(
                transport,
                logging.INFO,
                event="episode",
                length=ep_len,
                ret=ep_ret,
                cause="reset_request",
            )
            reset_next = True
        if reset_next:
            env.reset()
            ep_len, ep_ret = 0, 0.0
            reset_next, frozen = False, False
        if not frozen:
            with lock:
                # A controller with a command timeout: a silent commander gets the hold.
                silent = timeout_s > 0 and time.monotonic() - last_command[0] > timeout_s
                if silent and not np.array_equal(command, hold):
                    command[:] = hold
                    state["timeouts"] += 1
                    announce(transport, logging.WARNING, event="command_timeout",
                             timeout_s=timeout_s)  # fmt: skip
                action = command.astype(np.float32)
            _, reward, terminated, truncated, _ = env.step(action)
            ep_len += 1
            ep_ret += float(reward)
            if terminated or truncated:
                state["episodes"] += 1
                announce(
                    transport,
                    logging.INFO,
                    event="episode",
                    length=ep_len,
                    ret=ep_ret,
                    cause="terminated" if terminated else "truncated",
                )
                # The terminal state goes out on the wire first, as a real robot's would.
                if terminated and p["on_terminate"] == "hold":
                    frozen = True
                else:
                    reset_next = True
        sim_t += dt
        if clock is not None:
            clock(msgs.Clock(clock=msgs.stamp_now(sim_t)))
        qpos, qvel = base.data.qpos, base.data.qvel
        qfrc = base.data.qfrc_actuator
        stamp = msgs.stamp_now(sim_t if stamps_sim else time.time())
        publish(
            msgs.JointState(
                header=msgs.Header(stamp=stamp, frame_id=""),
                name=names,
                position=[float(qpos[a]) for _, a, _ in table],
                velocity=[float(qvel[d]) for _, _, d in table],
                effort=[float(qfrc[d]) for _, _, d in table],
            )
        )
        if cameras is not None:
            cameras.publish(stamp)  # the same instant as the JointState
        for done in served:
            done.set()  # the service answers once the new episode's first state is out
        next_tick += period
        delay = next_tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_tick = time.monotonic()
    announce(
        transport,
        logging.INFO,
        event="sim_robot_stop",
        current_episode_length=ep_len,
        episodes_ended=state["episodes"],
        commands=state["commands"],
        rejected_commands=state["rejected"],
        command_timeouts=state["timeouts"],
        reset_requests=state["reset_requests"],
        sim_time_s=sim_t,
        last_clock_s=transport.now() if stamps_sim else None,
        images_published=cameras.published if cameras is not None else 0,
    )
    return 0


def _sim_diagnostics(
    msgs: Any, transport: Any, opts: SimRobotOptions, state: dict, ep_len: int, sim_t: float
) -> Any:
    node = (transport.fully_qualified_name or opts.node_name).lstrip("/")
    values = {**state, "episode_length": ep_len, "sim_time_s": round(sim_t, 6)}
    return msgs.DiagnosticArray(
        header=msgs.Header(stamp=msgs.stamp_now(time.time())),
        status=[
            msgs.DiagnosticStatus(
                level=0,
                name=f"{node}: sim",
                message="running",
                hardware_id="sim_robot",
                values=[msgs.KeyValue(k, str(v)) for k, v in values.items()],
            )
        ],
    )


sim_robot_cmd = guard_command(
    sim_robot, "sim-robot", "serve a MuJoCo env as a ros2_control robot over ROS 2"
)

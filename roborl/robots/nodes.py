"""roborl's ROS 2 nodes: `roborl sim-robot` and `roborl deploy`.

`sim-robot` (node `sim_robot`) serves a MuJoCo env from the registry like a ros2_control
robot: it publishes sensor_msgs/JointState on /joint_states after every physics step and
rosgraph_msgs/Clock on /clock (sim time, for nodes with `use_sim_time`), applies the latest
std_msgs/Float64MultiArray from `/<controller>/commands`, steps at `rate_hz` env steps per
second (1/env.dt is real time; more is faster than real time), publishes the terminal state
when the task ends and then resets on the next tick (`on_terminate=reset`) or stays frozen in
it until a reset request (`on_terminate=hold`, like a real robot that needs its reset
routine). A reset is requested with the `~/reset` service (std_srvs/Trigger, answered once
the new episode has started) or a std_msgs/Bool True on `/sim_robot/reset`. It prints one
JSON line per episode.

`deploy` (node `roborl_deploy`, a managed lifecycle node over rclpy) loads a checkpoint's
policy and runs it at a fixed rate through the safety layer, commanding only while active;
by default it configures and activates itself at start (`autostart=true`, for the command
line). It prints JSON events (start, lifecycle, watchdog_stop, estop, estop_cleared, done),
offers `~/estop` (std_srvs/SetBool), publishes /diagnostics, and writes control-loop latency
statistics to `stats=PATH`.

Both take `--ros-args ...` (and `--params-file FILE`) after their key=value overrides: the
overrides set the parameters' defaults, the ROS arguments override those. With transport=dds
there is no ROS node, and ROS arguments are refused with a clear error.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from roborl.core.compose import register_command_config
from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError, RoborlError, RobotError

T = TypeVar("T")
SIM_QOS_TOPICS = ("state", "command", "reset", "clock")


def _event(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _announce(transport: Any, level: int, **fields: Any) -> None:
    """A JSON event on stdout (what scripts and tests read) and a log line on the node's
    logger (what /rosout and `ros2 topic echo /rosout` show)."""
    from roborl.robots.transport import node_log

    _event(**fields)
    if transport is not None:
        rest = " ".join(f"{k}={v}" for k, v in fields.items() if k != "event")
        node_log(transport, level, f"{fields.get('event')}: {rest}")


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
            "help": "per-topic QoS: state, command, reset, clock (default, sensor_data, ...)"
        },
    )


@dataclass
class DeployOptions:
    """`roborl deploy` options (the `robot` group describes the robot; `algo=` is optional)."""

    checkpoint: str | None = field(
        default=None,
        metadata={"help": "policy checkpoint (or algo=NAME for a checkpoint-free one)"},
    )
    model: str | None = field(
        default=None,
        metadata={"help": "a folder written by `roborl export` (safetensors; no unpickling)"},
    )
    rate_hz: float | None = field(
        default=None, metadata=rng(1e-3, None, "control rate (null: robot.rate_hz)")
    )
    duration_s: float | None = field(
        default=None, metadata=rng(0.0, None, "stop after this many seconds (null: Ctrl-C)")
    )
    stats: str | None = field(
        default=None, metadata={"help": "write control-loop latency statistics (JSON) here"}
    )
    on_watchdog: str = field(
        default="exit",
        metadata={
            "choices": ["exit", "hold"],
            "help": "exit (code 3) or keep holding when the safety watchdog stops the robot",
        },
    )
    node_name: str = field(default="roborl_deploy", metadata={"help": "ROS 2 node name"})
    namespace: str = field(default="", metadata={"help": "ROS 2 namespace of the node"})
    autostart: bool = field(
        default=True,
        metadata={
            "help": "configure and activate the lifecycle node at start (false: wait for "
            "lifecycle transitions over ROS, e.g. from a launch file or a lifecycle manager)"
        },
    )


SIM_ROBOT_CONFIG = "roborl_sim_robot"
DEPLOY_CONFIG = "roborl_deploy"
register_command_config(SIM_ROBOT_CONFIG, SimRobotOptions, {"env": "inverted_pendulum"})
register_command_config(DEPLOY_CONFIG, DeployOptions, {"robot": "ros2", "algo": None})


def _compose(argv: list[str], cls: type[T], config: str, command: str) -> tuple[T, dict[str, Any]]:
    """The command's options and its composed config (Hydra's compose, as every subcommand)."""
    from roborl.core.compose import compose_dict
    from roborl.core.plugins import get_host

    cfg = compose_dict(get_host(), argv, command, config)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return build_config(cls, {k: cfg[k] for k in names}), cfg


def _help(usage: str, cls: type, groups: str) -> str:
    from roborl.core.help import field_lines, section

    return f"{usage}\n\n{section('Keys', field_lines(cls))}\n{groups}"


# -- sim-robot ----------------------------------------------------------------------------------


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


ROS_ARGS_HELP = (
    "ROS 2 arguments go last: --ros-args -p NAME:=VALUE [-r __ns:=/NS] [--params-file FILE]\n"
    "(or --params-file FILE alone). key=value overrides set the parameters' defaults; ROS\n"
    "arguments override them. transport=dds has no node and refuses ROS arguments."
)


def sim_robot(argv: list[str]) -> int:
    """`roborl sim-robot env=inverted_pendulum [rate_hz=N] [controller=NAME] [duration_s=S]
    [on_terminate=reset|hold] [--ros-args -p rate_hz:=N ...]`."""
    from roborl.core.envs import make_env
    from roborl.core.plugins import get_host
    from roborl.robots.transport import (
        Param,
        declare_parameters,
        make_transport,
        qos_spec,
        split_ros_args,
    )

    if any(a in ("-h", "--help") for a in argv):
        print(
            _help(
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
    opts, composed = _compose(argv, SimRobotOptions, SIM_ROBOT_CONFIG, "sim-robot")
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
    n_act = int(np.prod(env.action_space.shape))
    low = np.asarray(opts.command_low if opts.command_low is not None else env.action_space.low)
    high = np.asarray(opts.command_high if opts.command_high is not None else env.action_space.high)
    transport = make_transport(
        opts.transport, opts.node_name, namespace=opts.namespace, ros_args=ros_args
    )
    try:
        p = declare_parameters(
            transport,
            {
                "rate_hz": Param(float(opts.rate_hz or 1.0 / base.dt), "env steps per second"),
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
            },
        )
        return _serve_sim(env, base, table, n_act, p, qos, transport, opts, env_cfg.get("id"))
    finally:
        transport.close()


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
) -> int:
    """sim-robot's loop, with its parameters `p` resolved."""
    from roborl.robots import msgs
    from roborl.robots.transport import add_service, now, publisher, subscribe

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
    publish = publisher(transport, p["state_topic"], msgs.JointState, qos["state"])
    clock = publisher(transport, "/clock", msgs.Clock, qos["clock"]) if p["publish_clock"] else None
    diagnostics = publisher(transport, "/diagnostics", msgs.DiagnosticArray)
    stamps_sim = bool(getattr(transport, "use_sim_time", False))
    command = np.zeros(n_act)
    lock = threading.Lock()
    resets: list[threading.Event] = []  # pending reset requests, each set once served
    state = {"commands": 0, "rejected": 0, "reset_requests": 0, "episodes": 0}

    def on_command(msg: msgs.Float64MultiArray) -> None:
        data = np.asarray(msg.data, dtype=np.float64)
        if data.shape != (n_act,) or not np.all(np.isfinite(data)):
            state["rejected"] += 1
            return
        with lock:
            command[:] = np.clip(data, low, high)
            state["commands"] += 1

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

    subscribe(transport, p["command_topic"], msgs.Float64MultiArray, on_command, qos["command"])
    subscribe(transport, p["reset_topic"], msgs.Bool, on_reset, qos["reset"])
    add_service(transport, "~/reset", "trigger", on_reset_service)
    stop = [False]

    def on_term(signum: int, frame: Any) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    _announce(
        transport,
        logging.INFO,
        event="sim_robot_start",
        env=env_id,
        node=getattr(transport, "fully_qualified_name", opts.node_name),
        joints=names,
        rate_hz=rate,
        state_topic=p["state_topic"],
        command_topic=p["command_topic"],
        clock=bool(p["publish_clock"]),
    )
    period = 1.0 / rate
    t_end = time.monotonic() + float(opts.duration_s) if opts.duration_s else float("inf")
    next_tick = time.monotonic()
    ep_len, ep_ret = 0, 0.0
    sim_t = 0.0  # monotone across episodes: /clock must never jump back
    reset_next, frozen = False, False
    next_status = time.monotonic() + 1.0
    while not stop[0] and time.monotonic() < t_end:
        if time.monotonic() >= next_status:
            next_status += 1.0
            _event(event="status", current_episode_length=ep_len, commands=state["commands"])
            diagnostics(_sim_diagnostics(msgs, transport, opts, state, ep_len, sim_t))
        with lock:
            served, resets[:] = list(resets), []
        if served:
            state["reset_requests"] += len(served)
            _announce(
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
                action = command.astype(np.float32)
            _, reward, terminated, truncated, _ = env.step(action)
            ep_len += 1
            ep_ret += float(reward)
            if terminated or truncated:
                state["episodes"] += 1
                _announce(
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
        sim_t += base.dt
        if clock is not None:
            clock(msgs.Clock(clock=msgs.stamp_now(sim_t)))
        qpos, qvel = base.data.qpos, base.data.qvel
        qfrc = base.data.qfrc_actuator
        publish(
            msgs.JointState(
                header=msgs.Header(
                    stamp=msgs.stamp_now(sim_t if stamps_sim else time.time()), frame_id=""
                ),
                name=names,
                position=[float(qpos[a]) for _, a, _ in table],
                velocity=[float(qvel[d]) for _, _, d in table],
                effort=[float(qfrc[d]) for _, _, d in table],
            )
        )
        for done in served:
            done.set()  # the service answers once the new episode's first state is out
        next_tick += period
        delay = next_tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_tick = time.monotonic()
    _announce(
        transport,
        logging.INFO,
        event="sim_robot_stop",
        current_episode_length=ep_len,
        episodes_ended=state["episodes"],
        commands=state["commands"],
        rejected_commands=state["rejected"],
        reset_requests=state["reset_requests"],
        sim_time_s=sim_t,
        last_clock_s=now(transport) if stamps_sim else None,
    )
    return 0


def _sim_diagnostics(
    msgs: Any, transport: Any, opts: SimRobotOptions, state: dict, ep_len: int, sim_t: float
) -> Any:
    node = getattr(transport, "fully_qualified_name", opts.node_name).lstrip("/")
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


# -- deploy -------------------------------------------------------------------------------------


def deploy(argv: list[str]) -> int:
    """`roborl deploy checkpoint=PATH robot=ros2 robot.joints=[...] [rate_hz=N] [duration_s=S]
    [--ros-args -p rate_hz:=N ...]`.

    `algo=NAME` instead of `checkpoint=` deploys an algorithm that acts without training
    (`algo=llm llm.model=PATH`); its config composes like `roborl eval algo=llm`.
    """
    from roborl.core.cli import _algo_prefix_to_algo
    from roborl.robots.transport import split_ros_args

    if any(a in ("-h", "--help") for a in argv):
        print(
            _help(
                "usage: roborl deploy checkpoint=PATH [robot=ros2] [robot.KEY=VALUE ...] "
                "[key=value ...] [--ros-args ...]\n"
                "       roborl deploy algo=NAME [NAME.KEY=VALUE ...] ...   (checkpoint-free)\n\n"
                "Run a policy on a robot at a fixed rate through the safety layer, as the\n"
                "lifecycle node roborl_deploy (commands only while active; autostart=true\n"
                "configures and activates it at start). ~/estop (std_srvs/SetBool) latches\n"
                "(true) or clears (false) the e-stop; /diagnostics carries the safety state.\n"
                "ROS parameters: the robot config's rate_hz, joints, fields, state_topic,\n"
                "estop_topic, command.*, safety.*, plus autostart and on_watchdog.\n"
                + ROS_ARGS_HELP,
                DeployOptions,
                "Config groups: robot=NAME (default ros2; robot.joints, robot.safety.*, "
                "robot.qos.*, ...), algo=NAME.",
            )
        )
        return 0
    argv, ros_args = split_ros_args(argv)
    # Composed (and checked) before any ROS traffic starts.
    opts, cfg = _compose(_algo_prefix_to_algo(argv), DeployOptions, DEPLOY_CONFIG, "deploy")
    algo_cfg = cfg.get("algo")
    if not opts.checkpoint and not opts.model and not algo_cfg:
        raise ConfigError(
            "deploy needs checkpoint=PATH (e.g. runs/.../checkpoints/last.pt), model=DIR (a "
            "folder written by roborl export), or algo=NAME for an algorithm that acts without "
            "training (e.g. algo=llm llm.model=PATH)."
        )
    if sum(bool(x) for x in (opts.checkpoint, opts.model, algo_cfg)) > 1:
        raise ConfigError("deploy takes one of checkpoint=PATH, model=DIR or algo=NAME.")
    robot_cfg = dict(cfg["robot"])
    if opts.rate_hz:
        robot_cfg["rate_hz"] = float(opts.rate_hz)
    node = _DeployNode(opts, robot_cfg, algo_cfg, ros_args)
    try:
        return node.run()
    finally:
        node.teardown()


class _DeployNode:
    """`roborl deploy`'s state: the driver node, the robot env (built at configure), the policy,
    and the lifecycle flags the control loop obeys (it commands only while active)."""

    def __init__(
        self,
        opts: DeployOptions,
        robot_cfg: dict[str, Any],
        algo_cfg: dict[str, Any] | None,
        ros_args: list[str],
    ) -> None:
        from roborl.core.algorithms import algorithm_from_checkpoint
        from roborl.core.plugins import get_host
        from roborl.robots.driver import Ros2Driver
        from roborl.robots.transport import Param, rclpy_available

        self.opts = opts
        self.lock = threading.RLock()
        self.env: Any = None
        self.driver: Any = None
        self.algo: Any = None
        self.active = False
        self.started = False
        self.stop = False
        self.reported_estop = False
        self.configure_error: BaseException | None = None
        host = get_host()
        if opts.model:
            from roborl.core.model_dir import algorithm_from_model_dir

            self.algo, _ = algorithm_from_model_dir(host, opts.model)
        elif opts.checkpoint:
            self.algo, _ = algorithm_from_checkpoint(host, opts.checkpoint)
        else:
            name = algo_cfg["name"]  # type: ignore[index]
            if not host.registry.get("algorithms", name).checkpoint_free:
                raise ConfigError(
                    f"roborl deploy: algo={name} learns its weights, so it needs "
                    "checkpoint=PATH; only algorithms that act without training (e.g. "
                    "algo=llm) run from config alone."
                )
        kind = robot_cfg.get("transport", "auto")
        self.managed = kind == "rclpy" or (kind == "auto" and rclpy_available())
        handlers = {
            "configure": self._on_configure,
            "activate": self._on_activate,
            "deactivate": self._on_deactivate,
            "cleanup": self._on_cleanup,
            "shutdown": self._on_shutdown,
        }
        self.driver, self.cfg = Ros2Driver.open(
            robot_cfg,
            opts.node_name,
            namespace=opts.namespace,
            ros_args=ros_args,
            lifecycle=handlers if self.managed else None,
            extra_params={
                "autostart": Param(bool(opts.autostart), "configure and activate at start"),
                "on_watchdog": Param(opts.on_watchdog, "exit or hold on a watchdog stop"),
            },
        )
        self.transport = self.driver.transport
        try:
            self._setup(algo_cfg, host)
        except BaseException:
            self.teardown()
            raise

    def _setup(self, algo_cfg: dict[str, Any] | None, host: Any) -> None:
        """Read the node's parameters and build the policy (checked against the robot)."""
        import gymnasium as gym

        from roborl.core.algorithms import build_algorithm

        self.autostart = bool(self.cfg.pop("autostart"))
        self.on_watchdog = self.cfg.pop("on_watchdog")
        if self.on_watchdog not in ("exit", "hold"):
            raise ConfigError(f"on_watchdog={self.on_watchdog!r}: accepted are exit, hold.")
        d = self.driver
        self.rate_hz = float(self.cfg.get("rate_hz") or 50.0)
        if self.rate_hz <= 0:
            raise ConfigError(f"rate_hz={self.rate_hz} must be > 0.")
        self.period = 1.0 / self.rate_hz
        obs_space = gym.spaces.Box(-np.inf, np.inf, (len(d.joints) * len(d.fields),), np.float64)
        if self.algo is None:
            safety = dict(self.cfg.get("safety") or {})
            n = len(d.command_joints)
            act_space = gym.spaces.Box(
                np.asarray(safety.get("low", [-1.0] * n), np.float32),
                np.asarray(safety.get("high", [1.0] * n), np.float32),
                dtype=np.float32,
            )
            self.algo = build_algorithm(host, algo_cfg, obs_space, act_space, "cpu")
        self.policy = self.algo.policy()
        expected = self.policy.observation_space.shape
        if expected != obs_space.shape:
            raise ConfigError(
                f"the checkpoint's policy expects observations of shape {expected}, robot "
                f"config gives {obs_space.shape} ({len(d.joints)} joints x fields "
                f"{d.fields}): fix robot.joints / robot.fields."
            )
        self.sim_time = bool(getattr(self.transport, "use_sim_time", False))

    # -- lifecycle ---------------------------------------------------------------------------
    def _lifecycle(self, state: str) -> None:
        if self.managed:
            _announce(self.transport, logging.INFO, event="lifecycle", state=state)

    def _on_configure(self) -> bool:
        """Connect to the robot (wait for a valid JointState) and build the safety layer once;
        a later configure (after cleanup) only checks that the robot still answers."""
        from roborl.robots.env import RobotEnv

        if self.driver is None:
            return False
        try:
            with self.lock:
                if self.env is None:
                    self.env = RobotEnv(self.cfg, driver=self.driver)
                    self.driver.serve_safety(
                        self.env.safety, clear=self._clear_estop, extra=self._status
                    )
                else:
                    self.env._fresh_obs(
                        time.monotonic(), float(self.cfg.get("connect_timeout_s", 10.0))
                    )
        except BaseException as exc:
            self.configure_error = exc
            raise
        self._lifecycle("inactive")
        return True

    def _on_activate(self) -> bool:
        with self.lock:
            if self.env is None:
                return False
            if self.env.safety.estopped:
                _announce(
                    self.transport,
                    logging.ERROR,
                    event="activate_refused",
                    cause=f"e-stop latched ({self.env.safety.estop_cause}); clear it with "
                    "~/estop false first",
                )
                return False
            self.active = True
        self._lifecycle("active")
        if not self.started:
            self.started = True
            _announce(
                self.transport,
                logging.INFO,
                event="deploy_start",
                node=getattr(self.transport, "fully_qualified_name", self.opts.node_name),
                managed=self.managed,
                rate_hz=self.rate_hz,
                joints=self.driver.joints,
                command_topic=self.driver.command_topic,
                sim_time=self.sim_time,
            )
        return True

    def _on_deactivate(self) -> bool:
        with self.lock:
            self.active = False
            if self.env is not None and not self.env.safety.estopped:
                self.driver.stop(self.env.safety.hold_command())  # leave the robot holding
        self._lifecycle("inactive")
        return True

    def _on_cleanup(self) -> bool:
        with self.lock:
            self.active = False
        self._lifecycle("unconfigured")
        return True

    def _on_shutdown(self) -> bool:
        with self.lock:
            if self.active and self.env is not None and not self.env.safety.estopped:
                self.driver.stop(self.env.safety.hold_command())
            self.active = False
            self.stop = True
        self._lifecycle("finalized")
        return True

    def _clear_estop(self) -> None:
        with self.lock:
            self.env.reset_estop()
            self.reported_estop = False
        _announce(self.transport, logging.WARNING, event="estop_cleared")

    def _status(self) -> dict[str, Any]:
        state = self.transport.lifecycle_state() if self.managed else "active"
        return {"lifecycle_state": state, "rate_hz": self.rate_hz}

    # -- the control loop ---------------------------------------------------------------------
    def _start(self) -> None:
        """Autostart: configure and activate (a failed configure re-raises its error)."""
        if not self.managed:
            self._on_configure()
            self._on_activate()
            return
        if not self.transport.trigger("configure"):
            if self.configure_error is not None:
                raise self.configure_error
            raise RobotError(f"{self.opts.node_name}: configure failed (see its log).")
        if not self.transport.trigger("activate"):
            raise RobotError(f"{self.opts.node_name}: activate failed (see its log).")

    def _pace(self, next_tick: float) -> float:
        """Sleep until the next tick of the node's clock (sim time with use_sim_time)."""
        from roborl.robots.transport import now

        clock = (lambda: now(self.transport)) if self.sim_time else time.monotonic
        next_tick += self.period
        if clock() - next_tick > self.period:  # fell behind (or the clock jumped): restart
            next_tick = clock()
        while not self.stop:
            delay = next_tick - clock()
            if delay <= 0:
                break
            time.sleep(min(delay, 0.002) if self.sim_time else delay)
        return next_tick

    def run(self) -> int:
        def on_sigint(signum: int, frame: Any) -> None:
            if self.env is not None:
                self.env.safety.trigger_estop("Ctrl-C" if signum == signal.SIGINT else "SIGTERM")
            self.stop = True

        signal.signal(signal.SIGINT, on_sigint)
        signal.signal(signal.SIGTERM, on_sigint)
        if self.autostart:
            self._start()
        else:
            _announce(
                self.transport,
                logging.INFO,
                event="waiting_for_lifecycle",
                node=getattr(self.transport, "fully_qualified_name", self.opts.node_name),
            )
        driver = self.driver
        latency: list[float] = []
        compute: list[float] = []
        ticks: list[float] = []
        self.code = 0
        t0 = time.monotonic()
        t_end = t0 + float(self.opts.duration_s) if self.opts.duration_s else float("inf")
        next_tick = time.monotonic() if not self.sim_time else 0.0
        last_seen = -1
        while not self.stop and time.monotonic() < t_end:
            if not self.active:
                time.sleep(self.period)
                next_tick = time.monotonic() if not self.sim_time else 0.0
                continue
            next_tick = self._pace(next_tick)
            with self.lock:
                if not self.active or self.stop:
                    continue
                env = self.env
                tick = time.monotonic()
                ticks.append(tick)
                if env.safety.estopped:
                    if not self.reported_estop:
                        _announce(
                            self.transport,
                            logging.ERROR,
                            event="estop",
                            cause=env.safety.estop_cause,
                            t=tick - t0,
                            commands_at_estop=env.commands_at_estop,
                            commands_sent=driver.sent,
                        )
                        driver.publish_diagnostics()
                        self.reported_estop = True
                    continue
                obs, age = driver.observation()
                arrived = tick - age
                start = time.monotonic()
                action = self.policy.act(obs.astype(np.float32))
                decision = env.safety.filter(action, age, time.monotonic() - start)
                if decision is None:
                    continue
                driver.command(decision.command)
                done = time.monotonic()
                compute.append(done - start)
                if driver.received != last_seen:
                    latency.append(done - arrived)
                    last_seen = driver.received
                if decision.watchdog:
                    _announce(
                        self.transport,
                        logging.ERROR,
                        event="watchdog_stop",
                        cause=decision.cause,
                        t=done - t0,
                    )
                    if self.on_watchdog == "exit":
                        self.code = 3
                        break
        self.stats = self._stats(latency, compute, ticks, time.monotonic() - t0)
        return self.code

    def _stats(
        self, latency: list[float], compute: list[float], ticks: list[float], elapsed: float
    ) -> dict[str, Any]:
        def pct(xs: list[float], q: float) -> float | None:
            return float(np.percentile(np.asarray(xs) * 1e3, q)) if xs else None

        env, driver = self.env, self.driver
        return {
            "node": getattr(self.transport, "fully_qualified_name", self.opts.node_name),
            "rate_hz_target": self.rate_hz,
            "rate_hz_achieved": (len(ticks) - 1) / (ticks[-1] - ticks[0])
            if len(ticks) > 1
            else 0.0,
            "latency_ms_p50": pct(latency, 50),
            "latency_ms_p99": pct(latency, 99),
            "compute_ms_p50": pct(compute, 50),
            "compute_ms_p99": pct(compute, 99),
            "commands": driver.sent,
            "states_received": driver.received,
            "states_rejected": driver.rejected,
            "last_state_error": driver.last_error,
            "interventions": dict(env.safety.interventions) if env is not None else {},
            "estop": bool(env is not None and env.safety.estopped),
            "commands_at_estop": env.commands_at_estop if env is not None else None,
            "elapsed_s": elapsed,
        }

    def teardown(self) -> None:
        """Hold (unless the e-stop is latched: then not even a final command goes out), close
        the node, and report."""
        with self.lock:
            self.active = False
            env, driver = self.env, self.driver
            if driver is not None:
                if env is not None and not env.safety.estopped:
                    env.close()  # final hold command, then an orderly teardown
                else:
                    driver.close()
        if self.algo is not None:
            self.algo.close()  # e.g. the LLM policy's engine or server session
        stats = getattr(self, "stats", None)
        if stats is None:
            return
        _event(event="done", exit_code=self.code, **stats)
        if self.opts.stats:
            tmp = Path(str(self.opts.stats) + ".tmp")
            tmp.write_text(json.dumps(stats, indent=1))
            tmp.replace(self.opts.stats)


def _guard(fn: Any, command: str, summary: str) -> Any:
    def run(argv: list[str]) -> int:
        from roborl.core.cli import error_line

        try:
            return fn(argv)
        except (RoborlError, RobotError) as exc:
            print(error_line(command, exc), file=sys.stderr)
            return 2  # transports still open are closed by their atexit hook

    run.__doc__ = fn.__doc__
    run.summary = summary  # type: ignore[attr-defined]  # shown by `roborl --help`
    return run


sim_robot_cmd = _guard(
    sim_robot, "sim-robot", "serve a MuJoCo env as a ros2_control robot over ROS 2"
)
deploy_cmd = _guard(
    deploy, "deploy", "run a checkpoint's policy on a ROS 2 robot through the safety layer"
)

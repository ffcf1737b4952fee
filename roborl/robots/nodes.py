"""roborl's ROS 2 nodes: `roborl sim-robot` and `roborl deploy`.

`sim-robot` serves a MuJoCo env from the registry like a ros2_control robot: it publishes
sensor_msgs/JointState on /joint_states after every physics step, applies the latest
std_msgs/Float64MultiArray from `/<controller>/commands`, steps at `rate_hz` env steps per
second (1/env.dt is real time; more is faster than real time), publishes the terminal state
when the task ends and then resets on the next tick (`on_terminate=reset`) or stays frozen in
it until a std_msgs/Bool True arrives on `/sim_robot/reset` (`on_terminate=hold`, like a real
robot that needs its reset routine), and prints one JSON line per episode.

`deploy` loads a checkpoint's policy and runs it at a fixed rate through the safety layer,
printing JSON events (start, watchdog_stop, estop, done) and writing control-loop latency
statistics to `stats=PATH`.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from roborl.core.compose import register_command_config
from roborl.core.config import build_config, rng
from roborl.core.errors import ConfigError, RoborlError, RobotError

T = TypeVar("T")


def _event(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


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


@dataclass
class DeployOptions:
    """`roborl deploy` options (the `robot` group describes the robot; `algo=` is optional)."""

    checkpoint: str | None = field(
        default=None,
        metadata={"help": "policy checkpoint (or algo=NAME for a checkpoint-free one)"},
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


def sim_robot(argv: list[str]) -> int:
    """`roborl sim-robot env=inverted_pendulum [rate_hz=N] [controller=NAME] [duration_s=S]
    [on_terminate=reset|hold]`."""
    from roborl.core.envs import make_env
    from roborl.core.plugins import get_host
    from roborl.robots import msgs
    from roborl.robots.transport import make_transport

    if any(a in ("-h", "--help") for a in argv):
        print(
            _help(
                "usage: roborl sim-robot [env=NAME] [key=value ...]\n\n"
                "Serve a MuJoCo env like a ros2_control robot: JointState on /joint_states,\n"
                "commands on /<controller>/commands.",
                SimRobotOptions,
                "Config group: env=NAME (as in roborl train; default inverted_pendulum), "
                "env.KEY=VALUE.",
            )
        )
        return 0
    opts, composed = _compose(argv, SimRobotOptions, SIM_ROBOT_CONFIG, "sim-robot")
    cfg = {**dataclasses.asdict(opts), "env": composed["env"]}
    host = get_host()
    env = make_env(host.registry, {"env": cfg["env"]}, seed=int(cfg["seed"]))
    env.reset(seed=int(cfg["seed"]))
    base = env.unwrapped
    if not hasattr(base, "data"):
        raise ConfigError(f"sim-robot needs a MuJoCo env; env.id={cfg['env'].get('id')!r} is not.")
    table = _joint_table(base.model)
    names = [t[0] for t in table]
    rate = float(cfg["rate_hz"] or 1.0 / base.dt)
    n_act = int(np.prod(env.action_space.shape))
    low, high = env.action_space.low, env.action_space.high
    transport = make_transport(cfg["transport"], "sim_robot")
    publish = transport.publisher("/joint_states", msgs.JointState)
    command = np.zeros(n_act)
    pending_reset = [False]
    state = {"commands": 0, "rejected": 0, "reset_requests": 0}

    def on_command(msg: msgs.Float64MultiArray) -> None:
        data = np.asarray(msg.data, dtype=np.float64)
        if data.shape != (n_act,) or not np.all(np.isfinite(data)):
            state["rejected"] += 1
            return
        command[:] = np.clip(data, low, high)
        state["commands"] += 1

    def on_reset(msg: msgs.Bool) -> None:
        if msg.data:
            pending_reset[0] = True

    transport.subscribe(f"/{cfg['controller']}/commands", msgs.Float64MultiArray, on_command)
    transport.subscribe(cfg["reset_topic"], msgs.Bool, on_reset)
    stop = [False]

    def on_term(signum: int, frame: Any) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    _event(
        event="sim_robot_start",
        env=cfg["env"].get("id"),
        joints=names,
        rate_hz=rate,
        command_topic=f"/{cfg['controller']}/commands",
    )
    period = 1.0 / rate
    t_end = time.monotonic() + float(cfg["duration_s"]) if cfg["duration_s"] else float("inf")
    next_tick = time.monotonic()
    ep_len, ep_ret, episodes = 0, 0.0, 0
    reset_next, frozen = False, False
    next_status = time.monotonic() + 1.0
    while not stop[0] and time.monotonic() < t_end:
        if time.monotonic() >= next_status:
            next_status += 1.0
            _event(event="status", current_episode_length=ep_len, commands=state["commands"])
        if pending_reset[0]:
            pending_reset[0] = False
            state["reset_requests"] += 1
            _event(event="episode", length=ep_len, ret=ep_ret, cause="reset_request")
            reset_next = True
        if reset_next:
            env.reset()
            ep_len, ep_ret = 0, 0.0
            reset_next, frozen = False, False
        if not frozen:
            _, reward, terminated, truncated, _ = env.step(command.astype(np.float32))
            ep_len += 1
            ep_ret += float(reward)
            if terminated or truncated:
                episodes += 1
                _event(
                    event="episode",
                    length=ep_len,
                    ret=ep_ret,
                    cause="terminated" if terminated else "truncated",
                )
                # The terminal state goes out on the wire first, as a real robot's would.
                if terminated and cfg["on_terminate"] == "hold":
                    frozen = True
                else:
                    reset_next = True
        qpos, qvel = base.data.qpos, base.data.qvel
        qfrc = base.data.qfrc_actuator
        now = time.time()
        publish(
            msgs.JointState(
                header=msgs.Header(stamp=msgs.stamp_now(now), frame_id=""),
                name=names,
                position=[float(qpos[a]) for _, a, _ in table],
                velocity=[float(qvel[d]) for _, _, d in table],
                effort=[float(qfrc[d]) for _, _, d in table],
            )
        )
        next_tick += period
        delay = next_tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_tick = time.monotonic()
    _event(
        event="sim_robot_stop",
        current_episode_length=ep_len,
        episodes_ended=episodes,
        commands=state["commands"],
        rejected_commands=state["rejected"],
        reset_requests=state["reset_requests"],
    )
    transport.close()
    return 0


# -- deploy -------------------------------------------------------------------------------------


def deploy(argv: list[str]) -> int:
    """`roborl deploy checkpoint=PATH robot=ros2 robot.joints=[...] [rate_hz=N] [duration_s=S]`.

    `algo=NAME` instead of `checkpoint=` deploys an algorithm that acts without training
    (`algo=llm llm.model=PATH`); its config composes like `roborl eval algo=llm`.
    """
    from roborl.core.algorithms import algorithm_from_checkpoint, build_algorithm
    from roborl.core.cli import _algo_prefix_to_algo
    from roborl.core.plugins import get_host
    from roborl.robots.driver import Ros2Driver
    from roborl.robots.env import RobotEnv

    if any(a in ("-h", "--help") for a in argv):
        print(
            _help(
                "usage: roborl deploy checkpoint=PATH [robot=ros2] [robot.KEY=VALUE ...] "
                "[key=value ...]\n"
                "       roborl deploy algo=NAME [NAME.KEY=VALUE ...] ...   (checkpoint-free)\n\n"
                "Run a policy on a robot at a fixed rate through the safety layer.",
                DeployOptions,
                "Config groups: robot=NAME (default ros2; robot.joints, robot.safety.*, ...), "
                "algo=NAME.",
            )
        )
        return 0
    # Composed (and checked) before any DDS traffic starts.
    opts, cfg = _compose(_algo_prefix_to_algo(argv), DeployOptions, DEPLOY_CONFIG, "deploy")
    algo_cfg = cfg.get("algo")
    if not opts.checkpoint and not algo_cfg:
        raise ConfigError(
            "deploy needs checkpoint=PATH (e.g. runs/.../checkpoints/last.pt), or algo=NAME "
            "for an algorithm that acts without training (e.g. algo=llm llm.model=PATH)."
        )
    if opts.checkpoint and algo_cfg:
        raise ConfigError("deploy takes checkpoint=PATH or algo=NAME, not both.")
    robot_cfg = dict(cfg["robot"])
    if opts.rate_hz:
        robot_cfg["rate_hz"] = float(opts.rate_hz)
    host = get_host()
    if opts.checkpoint:
        algo, _ = algorithm_from_checkpoint(host, opts.checkpoint)
    else:
        name = algo_cfg["name"]
        if not host.registry.get("algorithms", name).checkpoint_free:
            raise ConfigError(
                f"roborl deploy: algo={name} learns its weights, so it needs checkpoint=PATH; "
                "only algorithms that act without training (e.g. algo=llm) run from config alone."
            )
    driver = Ros2Driver({**robot_cfg, "node_name": "roborl_deploy"})
    env = RobotEnv(robot_cfg, driver=driver)
    if not opts.checkpoint:
        try:
            algo = build_algorithm(host, algo_cfg, env.observation_space, env.action_space, "cpu")
        except BaseException:
            env.close()
            raise
    policy = algo.policy()
    expected = policy.observation_space.shape
    if expected != env.observation_space.shape:
        env.close()
        raise ConfigError(
            f"the checkpoint's policy expects observations of shape {expected}, robot config "
            f"gives {env.observation_space.shape} ({len(driver.joints)} joints x fields "
            f"{driver.fields}): fix robot.joints / robot.fields."
        )
    stop = [False]

    def on_sigint(signum: int, frame: Any) -> None:
        env.safety.trigger_estop("Ctrl-C" if signum == signal.SIGINT else "SIGTERM")
        stop[0] = True

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigint)
    period = env.period
    _event(
        event="deploy_start",
        rate_hz=env.rate_hz,
        joints=driver.joints,
        command_topic=driver.command_topic,
    )
    latency, compute, ticks = [], [], []
    code = 0
    reported_estop = False
    t0 = time.monotonic()
    t_end = t0 + float(opts.duration_s) if opts.duration_s else float("inf")
    next_tick = t0
    last_seen = -1
    while not stop[0] and time.monotonic() < t_end:
        next_tick += period
        delay = next_tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_tick = time.monotonic()
        tick = time.monotonic()
        ticks.append(tick)
        if env.safety.estopped:
            if not reported_estop:
                _event(
                    event="estop",
                    cause=env.safety.estop_cause,
                    t=tick - t0,
                    commands_at_estop=env.commands_at_estop,
                    commands_sent=driver.sent,
                )
                reported_estop = True
            continue
        obs, age = driver.observation()
        arrived = tick - age
        start = time.monotonic()
        action = policy.act(obs.astype(np.float32))
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
            _event(event="watchdog_stop", cause=decision.cause, t=done - t0)
            if opts.on_watchdog == "exit":
                code = 3
                break
    elapsed = time.monotonic() - t0
    if env.safety.estopped:
        driver.close()  # latched: not even a final stop command goes out
    else:
        env.close()  # final hold command, then an orderly DDS teardown
    algo.close()  # e.g. the LLM policy's engine or server session

    def pct(xs: list[float], q: float) -> float | None:
        return float(np.percentile(np.asarray(xs) * 1e3, q)) if xs else None

    stats = {
        "rate_hz_target": env.rate_hz,
        "rate_hz_achieved": (len(ticks) - 1) / (ticks[-1] - ticks[0]) if len(ticks) > 1 else 0.0,
        "latency_ms_p50": pct(latency, 50),
        "latency_ms_p99": pct(latency, 99),
        "compute_ms_p50": pct(compute, 50),
        "compute_ms_p99": pct(compute, 99),
        "commands": driver.sent,
        "states_received": driver.received,
        "states_rejected": driver.rejected,
        "last_state_error": driver.last_error,
        "interventions": dict(env.safety.interventions),
        "estop": env.safety.estopped,
        "commands_at_estop": env.commands_at_estop,
        "elapsed_s": elapsed,
    }
    _event(event="done", exit_code=code, **stats)
    if opts.stats:
        tmp = Path(str(opts.stats) + ".tmp")
        tmp.write_text(json.dumps(stats, indent=1))
        tmp.replace(opts.stats)
    return code


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

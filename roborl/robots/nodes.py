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

import json
import signal
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from roborl.core.errors import ConfigError, RoborlError, RobotError


def _event(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _parse(argv: list[str], defaults: dict[str, Any]) -> dict[str, Any]:
    """Hydra-style `key=value` / `a.b=value` overrides (values parsed as YAML)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(defaults)
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ConfigError(f"argument {arg!r} is not key=value (e.g. rate_hz=100).")
        if key == "robot" and "." not in value:
            cfg.robot = OmegaConf.create(_load_group("roborl.robots.configs", "robot", value))
            continue
        if key == "env" and "." not in value:
            cfg.env = OmegaConf.create(_load_group("roborl.configs", "env", value))
            continue
        OmegaConf.update(cfg, key, yaml.safe_load(value), force_add=True)
    return OmegaConf.to_container(cfg, resolve=True)


def _load_group(package: str, group: str, name: str) -> dict[str, Any]:
    path = resources.files(package) / group / f"{name}.yaml"
    if not path.is_file():
        choices = sorted(
            p.name[:-5]
            for p in (resources.files(package) / group).iterdir()
            if p.name.endswith(".yaml")
        )
        raise ConfigError(f"unknown {group}={name!r}: accepted are {choices}.")
    return yaml.safe_load(path.read_text()) or {}


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

    cfg = _parse(
        argv,
        {
            "env": _load_group("roborl.configs", "env", "inverted_pendulum"),
            "rate_hz": None,
            "controller": "forward_command_controller",
            "duration_s": None,
            "seed": 0,
            "transport": "auto",
            "reset_topic": "/sim_robot/reset",
            "on_terminate": "reset",
        },
    )
    if cfg["on_terminate"] not in ("reset", "hold"):
        raise ConfigError(
            f"on_terminate={cfg['on_terminate']!r}: accepted are reset (start a new episode "
            "on the next tick) and hold (freeze in the terminal state until a reset request)."
        )
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
    from roborl.core.cli import compose_checkpoint_free
    from roborl.core.plugins import get_host
    from roborl.core.runner import algorithm_from_checkpoint, build_algorithm
    from roborl.robots.driver import Ros2Driver
    from roborl.robots.env import RobotEnv

    algo_name = next((a.split("=", 1)[1] for a in argv if a.startswith("algo=")), None)
    algo_args = [
        a for a in argv if algo_name and a.split("=", 1)[0].split(".")[0] in ("algo", algo_name)
    ]
    argv = [a for a in argv if a not in algo_args]
    cfg = _parse(
        argv,
        {
            "checkpoint": None,
            "robot": _load_group("roborl.robots.configs", "robot", "ros2"),
            "rate_hz": None,
            "duration_s": None,
            "stats": None,
            "on_watchdog": "exit",
        },
    )
    if not cfg["checkpoint"] and not algo_args:
        raise ConfigError(
            "deploy needs checkpoint=PATH (e.g. runs/.../checkpoints/last.pt), or algo=NAME "
            "for an algorithm that acts without training (e.g. algo=llm llm.model=PATH)."
        )
    if cfg["checkpoint"] and algo_args:
        raise ConfigError("deploy takes checkpoint=PATH or algo=NAME, not both.")
    if cfg["on_watchdog"] not in ("exit", "hold"):
        raise ConfigError(f"on_watchdog={cfg['on_watchdog']!r}: accepted are exit and hold.")
    robot_cfg = dict(cfg["robot"])
    if cfg["rate_hz"]:
        robot_cfg["rate_hz"] = float(cfg["rate_hz"])
    host = get_host()
    if cfg["checkpoint"]:
        algo, _ = algorithm_from_checkpoint(host, cfg["checkpoint"])
    else:  # composed (and checked) before any DDS traffic starts
        algo_cfg = compose_checkpoint_free(host, algo_args, ("algo",), "deploy")["algo"]
    driver = Ros2Driver({**robot_cfg, "node_name": "roborl_deploy"})
    env = RobotEnv(robot_cfg, driver=driver)
    if not cfg["checkpoint"]:
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
    t_end = t0 + float(cfg["duration_s"]) if cfg["duration_s"] else float("inf")
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
            if cfg["on_watchdog"] == "exit":
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
    if cfg["stats"]:
        tmp = Path(str(cfg["stats"]) + ".tmp")
        tmp.write_text(json.dumps(stats, indent=1))
        tmp.replace(cfg["stats"])
    return code


def _guard(fn: Any) -> Any:
    def run(argv: list[str]) -> int:
        try:
            return fn(argv)
        except (RoborlError, RobotError) as exc:
            print(f"roborl: error: {exc}", file=sys.stderr)
            return 2  # transports still open are closed by their atexit hook

    run.__doc__ = fn.__doc__
    return run


sim_robot_cmd = _guard(sim_robot)
deploy_cmd = _guard(deploy)

"""sim-robot's loop: step the MuJoCo env at `rate_hz`, apply the newest command (or the hold
after `command_timeout_s` without one), publish JointState, /clock and /diagnostics, and
serve reset requests (topic and `~/reset`), until the duration ends or a signal stops it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from roborl.core.errors import ConfigError
from roborl.robots.nodes.common import announce, emit_event, stop_on_signals

if TYPE_CHECKING:
    from roborl.robots.nodes.sim_cameras import CameraPublisher
    from roborl.robots.nodes.sim_robot import SimRobotOptions
    from roborl.robots.transport.protocol import Transport


def env_dt(base: Any) -> float:
    """Simulated seconds per env step: `dt` (Gymnasium's MuJoCo envs, RoborlTabletop), else
    the physics timestep times the env's `frame_skip` (1 if it has none)."""
    dt = getattr(base, "dt", None)
    if dt is None:
        dt = float(base.model.opt.timestep) * int(getattr(base, "frame_skip", 1))
    return float(dt)


def joint_reader(base: Any, table: list[tuple[str, int, int]]) -> Any:
    """() -> (positions, velocities, efforts) of `table`'s joints: from the MuJoCo state, or
    from the env's `robot_joints()` (no efforts: zeros) when it describes itself."""
    names = [t[0] for t in table]
    if callable(getattr(base, "robot_joints", None)):

        def described() -> tuple[list[float], list[float], list[float]]:
            joints = base.robot_joints()
            return [joints[n][0] for n in names], [joints[n][1] for n in names], [0.0] * len(names)

        return described

    def mujoco_state() -> tuple[list[float], list[float], list[float]]:
        qpos, qvel, qfrc = base.data.qpos, base.data.qvel, base.data.qfrc_actuator
        return (
            [float(qpos[a]) for _, a, _ in table],
            [float(qvel[d]) for _, _, d in table],
            [float(qfrc[d]) for _, _, d in table],
        )

    return mujoco_state


def serve_sim(
    env: Any,
    base: Any,
    table: list[tuple[str, int, int]],
    n_act: int,
    p: dict[str, Any],
    qos: dict[str, Any],
    transport: Transport,
    opts: SimRobotOptions,
    env_id: str | None,
    cameras: CameraPublisher | None = None,
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
    read_joints = joint_reader(base, table)
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
    dt = env_dt(base)
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
            diagnostics(sim_diagnostics(msgs, transport, opts, state, ep_len, sim_t))
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
        position, velocity, effort = read_joints()
        stamp = msgs.stamp_now(sim_t if stamps_sim else time.time())
        publish(
            msgs.JointState(
                header=msgs.Header(stamp=stamp, frame_id=""),
                name=names,
                position=position,
                velocity=velocity,
                effort=effort,
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


def sim_diagnostics(
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

"""`deploy` (node `roborl_deploy`, a managed lifecycle node over rclpy) loads a checkpoint's
policy and runs it at a fixed rate through the safety layer, commanding only while active;
by default it configures and activates itself at start (`autostart=true`, for the command
line). It prints JSON events (start, lifecycle, watchdog_stop, estop, estop_cleared, done),
offers `~/estop` (std_srvs/SetBool), publishes /diagnostics, and writes control-loop latency
statistics to `stats=PATH`.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from roborl.core.compose import register_command_config
from roborl.core.config import rng
from roborl.core.errors import ConfigError, RobotError
from roborl.robots.nodes import (
    DEPLOY_CONFIG,
    ROS_ARGS_HELP,
    announce,
    command_help,
    compose_options,
    emit_event,
    guard_command,
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
    runtime: str = field(
        default="torch",
        metadata={
            "choices": ["torch", "onnx"],
            "help": "with model=DIR: onnx runs its policy.onnx with onnxruntime (export with "
            "format=onnx; pip install 'roborl[onnx]')",
        },
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


register_command_config(DEPLOY_CONFIG, DeployOptions, {"robot": "ros2", "algo": None})


def deploy(argv: list[str]) -> int:
    """`roborl deploy checkpoint=PATH robot=ros2 robot.joints=[...] [rate_hz=N] [duration_s=S]
    [--ros-args -p rate_hz:=N ...]`.

    `algo=NAME` instead of `checkpoint=` deploys an algorithm that acts without training
    (`algo=llm llm.model=PATH`); its config composes like `roborl eval algo=llm`.
    """
    from roborl.core.cli.common import algo_prefix_to_algo as _algo_prefix_to_algo
    from roborl.robots.transport import split_ros_args

    if any(a in ("-h", "--help") for a in argv):
        print(
            command_help(
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
    opts, cfg = compose_options(_algo_prefix_to_algo(argv), DeployOptions, DEPLOY_CONFIG, "deploy")
    algo_cfg = cfg.get("algo")
    if not opts.checkpoint and not opts.model and not algo_cfg:
        raise ConfigError(
            "deploy needs checkpoint=PATH (e.g. runs/.../checkpoints/last.pt), model=DIR (a "
            "folder written by roborl export), or algo=NAME for an algorithm that acts without "
            "training (e.g. algo=llm llm.model=PATH)."
        )
    if sum(bool(x) for x in (opts.checkpoint, opts.model, algo_cfg)) > 1:
        raise ConfigError("deploy takes one of checkpoint=PATH, model=DIR or algo=NAME.")
    if opts.runtime == "onnx" and not opts.model:
        raise ConfigError(
            "deploy: runtime=onnx runs the policy.onnx of an export folder: give model=DIR "
            "(written by roborl export ... format=onnx)."
        )
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
        self.onnx_policy: Any = None  # runtime=onnx: policy.onnx alone, no algorithm
        self.active = False
        self.started = False
        self.stop = False
        self.reported_estop = False
        self.configure_error: BaseException | None = None
        self.warmup_ms: list[float] = []
        host = get_host()
        if opts.model and opts.runtime == "onnx":
            from roborl.core.onnx_policy import onnx_policy_from_model_dir

            self.onnx_policy, _ = onnx_policy_from_model_dir(opts.model)
        elif opts.model:
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
        from roborl.robots.env import robot_observation_space

        self.autostart = bool(self.cfg.pop("autostart"))
        self.on_watchdog = self.cfg.pop("on_watchdog")
        if self.on_watchdog not in ("exit", "hold"):
            raise ConfigError(f"on_watchdog={self.on_watchdog!r}: accepted are exit, hold.")
        d = self.driver
        self.rate_hz = float(self.cfg["rate_hz"])
        if self.rate_hz <= 0:
            raise ConfigError(f"rate_hz={self.rate_hz} must be > 0.")
        self.period = 1.0 / self.rate_hz
        obs_space = robot_observation_space(d)
        if self.algo is None and self.onnx_policy is None:
            safety = dict(self.cfg.get("safety") or {})
            n = len(d.command_joints)
            act_space = gym.spaces.Box(
                np.asarray(safety.get("low", [-1.0] * n), np.float32),
                np.asarray(safety.get("high", [1.0] * n), np.float32),
                dtype=np.float32,
            )
            self.algo = build_algorithm(host, algo_cfg, obs_space, act_space, "cpu")
        self.policy = self.onnx_policy if self.onnx_policy is not None else self.algo.policy()
        _check_policy_space(self.policy.observation_space, obs_space, d)
        self.sim_time = bool(getattr(self.transport, "use_sim_time", False))

    # -- lifecycle ---------------------------------------------------------------------------
    def _lifecycle(self, state: str) -> None:
        if self.managed:
            announce(self.transport, logging.INFO, event="lifecycle", state=state)

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
                    # Configured is not active: no command until the activate transition.
                    self.env.safety.disable("configured, not yet active", hold=False)
                    if self.sim_time:  # a paused simulation is not a hung policy
                        from roborl.robots.transport import now

                        self.env.safety.clock = lambda: now(self.transport)
                    self.driver.serve_safety(
                        self.env.safety,
                        clear=self._clear_estop,
                        extra=self._status,
                        activate=None if self.managed else self._activate_unmanaged,
                    )
                else:
                    self.env._fresh_obs(time.monotonic(), float(self.cfg["connect_timeout_s"]))
                self._warm_up()
        except BaseException as exc:
            self.configure_error = exc
            raise
        self._lifecycle("inactive")
        return True

    def _warm_up(self) -> None:
        """Run the policy on the robot's current observation before any command, so lazy
        initialisation (torch's first-call kernel selection, an LLM engine's first request)
        happens here and the first tick is as fast as the rest: a cold first call took 1.2 s
        against a plain rclpy robot, past the default `max_policy_time_s`. Once (an LLM call
        costs seconds); its duration goes into the stats (`warmup_ms`)."""
        from roborl.robots.env import read_observation

        obs, _, _ = read_observation(self.driver)
        if not isinstance(obs, dict):
            obs = obs.astype(np.float32)
        start = time.monotonic()
        self.policy.act(obs)
        self.warmup_ms = [(time.monotonic() - start) * 1e3]

    def _on_activate(self) -> bool:
        with self.lock:
            if self.env is None:
                return False
            if self.env.safety.estopped:
                announce(
                    self.transport,
                    logging.ERROR,
                    event="activate_refused",
                    cause=f"e-stop latched ({self.env.safety.estop_cause}); clear it with "
                    "~/estop false first",
                )
                return False
            self.env.safety.enable()
            self.active = True
        self._lifecycle("active")
        if not self.started:
            self.started = True
            announce(
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

    def _halt(self, cause: str) -> None:
        """Stop commanding and leave the robot holding (the hold goes out at once)."""
        self.active = False
        if self.env is not None:
            self.env.safety.disable(cause)

    def _on_deactivate(self) -> bool:
        with self.lock:
            self._halt("lifecycle deactivate")
        self._lifecycle("inactive")
        return True

    def _on_cleanup(self) -> bool:
        with self.lock:
            self._halt("lifecycle cleanup")
        self._lifecycle("unconfigured")
        return True

    def _on_shutdown(self) -> bool:
        with self.lock:
            self._halt("lifecycle shutdown")
            self.stop = True
        self._lifecycle("finalized")
        return True

    def _clear_estop(self) -> None:
        """Clearing only clears: the node goes to inactive and commands again only after an
        explicit lifecycle activate (or `~/activate` for a node without a lifecycle)."""
        with self.lock:
            self.env.reset_estop()
            self.reported_estop = False
            self.active = False
        announce(self.transport, logging.WARNING, event="estop_cleared", awaiting="activate")
        if self.managed and self.transport.lifecycle_state() == "active":
            # Off the service's thread: a transition from inside a callback would wait on it.
            threading.Thread(
                target=self.transport.trigger, args=("deactivate",), daemon=True
            ).start()

    def _activate_unmanaged(self) -> None:
        with self.lock:
            self.env.safety.enable()
            self.active = True
        announce(self.transport, logging.WARNING, event="activated")

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
            if self.env is not None:  # latches and sends the hold at once
                self.env.safety.trigger_estop("Ctrl-C" if signum == signal.SIGINT else "SIGTERM")
            self.stop = True

        signal.signal(signal.SIGINT, on_sigint)
        signal.signal(signal.SIGTERM, on_sigint)
        if self.autostart:
            self._start()
        else:
            announce(
                self.transport,
                logging.INFO,
                event="waiting_for_lifecycle",
                node=getattr(self.transport, "fully_qualified_name", self.opts.node_name),
            )
        from roborl.robots.env import read_observation

        driver = self.driver
        latency: list[float] = []
        compute: list[float] = []
        ticks: list[float] = []
        ages: list[float] = []  # the newest state's age at the tick: the phase of the stream
        late: list[float] = []  # how late the tick woke (the thread waiting for the GIL)
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
                if not self.sim_time:
                    late.append(tick - next_tick)
                if env.safety.estopped:
                    if not self.reported_estop:
                        # The latch is set just before its hold goes out, both under the
                        # output lock: taking it counts that hold in commands_sent.
                        with env.safety._out_lock:
                            sent = driver.sent
                        announce(
                            self.transport,
                            logging.ERROR,
                            event="estop",
                            cause=env.safety.estop_cause,
                            t=tick - t0,
                            commands_at_estop=env.commands_at_estop,
                            commands_sent=sent,
                        )
                        driver.publish_diagnostics()
                        self.reported_estop = True
                    continue
                obs, age, camera_ages = read_observation(driver)
                arrived = tick - age
                ages.append(age)
                start = time.monotonic()
                if not isinstance(obs, dict):
                    obs = obs.astype(np.float32)
                action = self.policy.act(obs)
                human = env.teleop.command() if env.teleop is not None else None  # a takeover
                decision = env.safety.filter(
                    action, age, time.monotonic() - start, camera_ages, human=human
                )
                if decision is None or not env.safety.emit(decision.command):
                    continue
                done = time.monotonic()
                compute.append(done - start)
                if driver.received != last_seen:
                    latency.append(done - arrived)
                    last_seen = driver.received
                if decision.watchdog:
                    announce(
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
        self.stats.update(
            state_age_ms_p50=_pct(ages, 50),
            state_age_ms_p99=_pct(ages, 99),
            tick_late_ms_p50=_pct(late, 50),
            tick_late_ms_p99=_pct(late, 99),
        )
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
            "warmup_ms": self.warmup_ms,
            "ticks": len(ticks),
            "commands": driver.sent,
            "states_received": driver.received,
            "states_rejected": driver.rejected,
            "last_state_error": driver.last_error,
            "images_received": {n: f.received for n, f in driver.feeds.items()},
            "images_rejected": {n: f.rejected for n, f in driver.feeds.items()},
            "interventions": dict(env.safety.interventions) if env is not None else {},
            "estop": bool(env is not None and env.safety.estopped),
            "commands_at_estop": env.commands_at_estop if env is not None else None,
            "elapsed_s": elapsed,
        }

    def teardown(self) -> None:
        """Send the final hold (e-stop latched or not), close the node, and report."""
        with self.lock:
            self.active = False
            env, driver = self.env, self.driver
            if driver is not None:
                if env is not None:
                    env.close()  # final hold command, then an orderly teardown
                else:
                    driver.close()
        if self.algo is not None:
            self.algo.close()  # e.g. the LLM policy's engine or server session
        stats = getattr(self, "stats", None)
        if stats is None:
            return
        if driver is not None:  # the final hold went out after the loop's statistics
            stats["commands"] = driver.sent
        emit_event(event="done", exit_code=self.code, **stats)
        if self.opts.stats:
            tmp = Path(str(self.opts.stats) + ".tmp")
            tmp.write_text(json.dumps(stats, indent=1))
            tmp.replace(self.opts.stats)


def _pct(xs: list[float], q: float) -> float | None:
    """The q-th percentile of seconds `xs`, in milliseconds (None without samples)."""
    return float(np.percentile(np.asarray(xs) * 1e3, q)) if xs else None


def _describe(space: Any) -> str:
    if hasattr(space, "spaces"):
        return "{" + ", ".join(f"{k}: {tuple(s.shape)}" for k, s in space.spaces.items()) + "}"
    return str(tuple(space.shape))


def _check_policy_space(expected: Any, given: Any, driver: Any) -> None:
    """The robot's observations must be what the policy was trained on: the same joint
    vector length, and the same cameras (names and frame sizes) when it sees pixels."""

    def layout(space: Any) -> Any:
        if hasattr(space, "spaces"):
            return {k: tuple(s.shape) for k, s in space.spaces.items()}
        return tuple(space.shape)

    if layout(expected) != layout(given):
        raise ConfigError(
            f"the checkpoint's policy expects observations {_describe(expected)}, the robot "
            f"config gives {_describe(given)} ({len(driver.joints)} joints x fields "
            f"{driver.fields}, cameras {[c.name for c in driver.cameras]}): fix robot.joints / "
            "robot.fields / robot.cameras."
        )


deploy_cmd = guard_command(
    deploy, "deploy", "run a checkpoint's policy on a ROS 2 robot through the safety layer"
)

"""`roborl deploy`'s node: the robot (any `roborl.robots.robot.Robot`, opened through its
`RobotKind`), the robot env built at configure, the policy, and the lifecycle transitions (configure, activate, deactivate, cleanup, shutdown) that decide when the
control loop (`deploy_loop.ControlLoop`) may command; teardown sends the final hold.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from roborl.core.errors import ConfigError, RobotError
from roborl.robots.nodes.common import announce, emit_event
from roborl.robots.nodes.deploy_loop import ControlLoop
from roborl.robots.nodes.policy_check import TrainedRobot, check_trained_robot

if TYPE_CHECKING:
    from roborl.core.policy_source import LoadedPolicy, PolicySource
    from roborl.robots.nodes.deploy import DeployOptions


class DeployNode(ControlLoop):
    """`roborl deploy`'s state: the driver node, the robot env (built at configure), the policy,
    and the lifecycle flags the control loop obeys (it commands only while active)."""

    def __init__(
        self,
        opts: DeployOptions,
        robot_cfg: dict[str, Any],
        source: PolicySource | None,
        ros_args: list[str],
    ) -> None:
        """`source`: where the policy comes from (None: the checkpoint=/model=/runtime= of
        `opts`). A checkpoint or model folder loads here, before the robot is opened; an
        algo=NAME source is only checked here and built at `_setup`, on the robot's spaces."""
        from roborl.core.plugins import get_host
        from roborl.core.policy_source import PolicySource, load_policy
        from roborl.robots.robot import resolved_config, robot_kind
        from roborl.robots.transport.common import Param

        self.opts = opts
        self.lock = threading.RLock()
        self.env: Any = None
        self.driver: Any = None
        self.loaded: LoadedPolicy | None = None  # built at _setup for algo=NAME
        self.trained: TrainedRobot | None = None  # the robot layout the policy learnt on
        self.active = False
        self.started = False
        self.stop = False
        self.reported_estop = False
        self.configure_error: BaseException | None = None
        self.warmup_ms: list[float] = []
        host = get_host()
        if source is None:
            source = PolicySource(
                "deploy", checkpoint=opts.checkpoint, model=opts.model, runtime=opts.runtime
            )
        self.source = source
        if source.kind == "algo":
            source.check_algorithm(host)
        else:
            self.loaded = load_policy(source, host)
            self.trained = TrainedRobot.of(self.loaded.metadata)
        kind = robot_kind(host.registry, robot_cfg, "deploy")
        self.managed = kind.lifecycle(robot_cfg)  # a ROS 2 lifecycle node (rclpy)
        handlers = {
            "configure": self._on_configure,
            "activate": self._on_activate,
            "deactivate": self._on_deactivate,
            "cleanup": self._on_cleanup,
            "shutdown": self._on_shutdown,
        }
        self.driver, resolved = kind.open(
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
        self.transport = self.driver.transport  # None for a robot without ROS
        try:
            #: The typed robot config in force (`RobotKind.open` resolved its parameters).
            self.cfg = resolved_config(resolved, ("autostart", "on_watchdog"))
            self._setup(host)
        except BaseException:
            self.teardown()
            raise

    def _setup(self, host: Any) -> None:
        """Read the node's parameters and build the policy (checked against the robot)."""
        import gymnasium as gym

        from roborl.core.policy_source import load_policy
        from roborl.robots.env.robot_env import robot_observation_space

        self.autostart = bool(self.cfg.node_params["autostart"])
        self.on_watchdog = self.cfg.node_params["on_watchdog"]
        if self.on_watchdog not in ("exit", "hold"):
            raise ConfigError(f"on_watchdog={self.on_watchdog!r}: accepted are exit, hold.")
        d = self.driver
        self.rate_hz = self.cfg.rate_hz  # > 0: checked by RobotConfig
        self.period = 1.0 / self.rate_hz
        obs_space = robot_observation_space(d)
        if self.loaded is None:  # algo=NAME: acts in the robot's safety box
            low, high = self.cfg.limits
            act_space = gym.spaces.Box(
                np.asarray(low, np.float32), np.asarray(high, np.float32), dtype=np.float32
            )
            self.loaded = load_policy(self.source, host, spaces=(obs_space, act_space))
        self.policy = self.loaded.policy
        _check_policy_space(self.policy.observation_space, obs_space, d)
        unchecked = check_trained_robot(self.trained, d)  # joint names and order
        if unchecked:
            announce(self.driver, logging.INFO, event="policy_check", note=unchecked)
        self.sim_time = self.driver.use_sim_time

    # -- lifecycle ---------------------------------------------------------------------------
    def _lifecycle(self, state: str) -> None:
        if self.managed:
            announce(self.driver, logging.INFO, event="lifecycle", state=state)

    def _on_configure(self) -> bool:
        """Connect to the robot (wait for a valid JointState) and build the safety layer once;
        a later configure (after cleanup) only checks that the robot still answers."""
        from roborl.robots.env.robot_env import RobotEnv

        if self.driver is None:
            return False
        try:
            with self.lock:
                if self.env is None:
                    self.env = RobotEnv(self.cfg, driver=self.driver)
                    # Configured is not active: no command until the activate transition.
                    self.env.safety.disable("configured, not yet active", hold=False)
                    if self.sim_time:  # a paused simulation is not a hung policy
                        self.env.safety.clock = self.driver.now
                    self.driver.serve_safety(
                        self.env.safety,
                        clear=self._clear_estop,
                        extra=self._status,
                        activate=None if self.managed else self._activate_unmanaged,
                    )
                else:
                    self.env._fresh_obs(time.monotonic(), self.cfg.connect_timeout_s)
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
        from roborl.robots.env.robot_env import read_observation

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
                    self.driver,
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
                self.driver,
                logging.INFO,
                event="deploy_start",
                node=self.node_label(),
                managed=self.managed,
                rate_hz=self.rate_hz,
                joints=self.driver.joints,
                command_topic=self.driver.endpoint,
                sim_time=self.sim_time,
            )
        return True

    def _halt(self, cause: str) -> None:
        """Stop commanding and leave the robot holding (the hold goes out at once). Without
        `self.lock`, which the control loop holds while the policy runs: a stop must not wait
        for a slow policy (an LLM takes seconds); the safety layer's own output lock orders
        the hold after any command in flight, and the loop's next `emit` is refused."""
        self.active = False
        if self.env is not None:
            self.env.safety.disable(cause)

    def _on_deactivate(self) -> bool:
        self._halt("lifecycle deactivate")
        self._lifecycle("inactive")
        return True

    def _on_cleanup(self) -> bool:
        self._halt("lifecycle cleanup")
        self._lifecycle("unconfigured")
        return True

    def _on_shutdown(self) -> bool:
        self._halt("lifecycle shutdown")
        self.stop = True
        self._lifecycle("finalized")
        return True

    def _clear_estop(self) -> None:
        """Clearing only clears: the node goes to inactive and commands again only after an
        explicit lifecycle activate (or `~/activate` for a node without a lifecycle). Like a
        stop, it does not wait for the policy."""
        self.active = False
        self.env.reset_estop()
        self.reported_estop = False
        announce(self.driver, logging.WARNING, event="estop_cleared", awaiting="activate")
        if self.managed and self.transport.lifecycle_state() == "active":
            # Off the service's thread: a transition from inside a callback would wait on it.
            threading.Thread(
                target=self.transport.trigger, args=("deactivate",), daemon=True
            ).start()

    def _activate_unmanaged(self) -> None:
        with self.lock:
            self.env.safety.enable()
            self.active = True
        announce(self.driver, logging.WARNING, event="activated")

    def node_label(self) -> str:
        """The node's fully qualified name for events (the option's name without a node)."""
        name = self.transport.fully_qualified_name if self.transport is not None else None
        return name or self.opts.node_name

    def _status(self) -> dict[str, Any]:
        state = self.transport.lifecycle_state() if self.managed else "active"
        return {"lifecycle_state": state, "rate_hz": self.rate_hz}

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
        if self.loaded is not None:
            self.loaded.close()  # e.g. the LLM policy's engine or server session
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

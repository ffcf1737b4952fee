"""`MujocoRobot`: a `Robot` (roborl.robots.robot) that runs MuJoCo in this process.

The physics runs on its own thread at `options.sim_rate_hz` (real time by default), like a real
robot that moves whether or not anyone commands it: the newest command is applied at every
physics step, the state (joint positions, velocities, efforts, picked by name as a JointState
would be) is stamped when it is measured, and a silent commander gets zero after
`command_timeout_s` (sim-robot's rule; a position servo keeps its target). So the state
watchdog, the policy watchdog and the holds of the safety layer see the same timing as over
ROS 2. `options.record` logs what the robot received; `options.faults` rehearse a dying state
stream and an e-stop.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from roborl.core.errors import ConfigError, RobotError
from roborl.robots.config import ResetConfig, RobotConfig, parse_robot_config
from roborl.robots.local import LocalRobot
from roborl.robots.mujoco.options import MujocoOptions
from roborl.robots.mujoco.sim import Sim, make_sim


class MujocoRobot(LocalRobot):
    """See module docstring; `cfg` is the `robot` config (`robot=mujoco`)."""

    def __init__(self, cfg: RobotConfig | Mapping[str, Any], sim: Sim | None = None) -> None:
        config = parse_robot_config(cfg)
        super().__init__(config)
        self.opts = MujocoOptions.parse(config.options)
        self.sim = sim or make_sim(self.opts)
        missing = [j for j in self.joints if j not in self.sim.names]
        if missing:
            raise ConfigError(
                f"robot.joints has {missing}, which the MuJoCo model does not have; its "
                f"hinge/slide joints are {self.sim.names}."
            )
        if len(self.command_joints) != self.sim.n_act:
            raise ConfigError(
                f"robot.command.joints={self.command_joints} has {len(self.command_joints)} "
                f"entries; the MuJoCo model has {self.sim.n_act} actuators (one command each)."
            )
        names = self.sim.names
        self._index = [names.index(j) for j in self.joints]
        self._cmd_index = [names.index(j) for j in self.command_joints if j in names]
        self.endpoint = f"mujoco:{self.opts.model or self.opts.env}"
        self.rate_hz = float(self.opts.sim_rate_hz or 1.0 / self.sim.dt)
        self._lock = threading.Lock()
        self._command = self.sim.rest_command()
        self._last_command_at = time.monotonic()
        self._muted = False
        self._resets: list[threading.Event] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._record: IO[str] | None = None

    # -- the physics thread --------------------------------------------------------------------
    def _measure(self) -> None:
        pos, vel, eff = self.sim.joints()
        values = {"position": pos, "velocity": vel, "effort": eff}
        if not self._muted:
            self.set_state(np.asarray([values[f][i] for f in self.fields for i in self._index]))

    def _run(self) -> None:
        period, frozen = 1.0 / self.rate_hz, False
        next_tick = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                served, self._resets = self._resets, []
                silent = time.monotonic() - self._last_command_at
                timeout = self.opts.command_timeout_s
                if self.sim.zero_on_timeout and timeout > 0 and silent > timeout:
                    self._command[:] = 0.0
                command = self._command.copy()
            if served:
                self.sim.reset()
                frozen = False
                with self._lock:  # a new episode starts at rest, not with the old command
                    self._command[:] = self.sim.rest_command()
            if not frozen and self.sim.step(command):
                if self.opts.on_terminate == "hold":
                    frozen = True  # like a real robot: it waits for its reset routine
                else:
                    self.sim.reset()
            self._measure()
            for done in served:
                done.set()  # the new episode's first state is measured
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_tick = time.monotonic()

    # -- LocalRobot ----------------------------------------------------------------------------
    def connect(self, timeout_s: float) -> None:
        if self._thread is None:
            if self.opts.record:
                self._record = open(self.opts.record, "a", buffering=1)  # noqa: SIM115
            self._measure()
            self._thread = threading.Thread(target=self._run, name="roborl-mujoco", daemon=True)
            self._thread.start()

    def write(self, command: np.ndarray) -> None:
        with self._lock:
            self._command[:] = np.clip(command, self.sim.low, self.sim.high)
            self._last_command_at = time.monotonic()
            position = [float(self.sim.joints()[0][i]) for i in self._cmd_index]
        if self._record is not None:  # what the robot received, and where it stood
            line = {"t": time.monotonic(), "data": command.tolist(), "position": position}
            self._record.write(json.dumps(line) + "\n")
        self._inject_faults(self.sent + 1)

    def _inject_faults(self, sent: int) -> None:
        faults = self.opts.faults
        if faults.mute_state_after is not None and sent >= faults.mute_state_after:
            self._muted = True
        if faults.estop_after is not None and sent == faults.estop_after:
            # Off the caller's thread, as an e-stop button's message would arrive.
            threading.Thread(target=self.estop, args=("e-stop fault",), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        if self._record is not None:
            self._record.close()
            self._record = None

    def stop(self, hold: np.ndarray | None = None) -> None:
        if self._thread is not None:
            super().stop(hold)

    def request_reset(self, reset: ResetConfig) -> None:
        """Modes `topic` and `service` both mean "the robot resets itself": the simulation
        restarts its episode, and this returns once the new episode's first state is in."""
        done = threading.Event()
        with self._lock:
            self._resets.append(done)
        if not done.wait(reset.timeout_s):
            raise RobotError(f"{self.endpoint} did not reset (is its physics thread running?).")

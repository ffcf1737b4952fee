"""A real robot as a `gymnasium.Env`: a `Robot` (`roborl.robots.robot`) behind the safety layer.

`step` waits for the next control tick (fixed rate), filters the action through the safety
layer, commands the robot, then reads the newest state. A watchdog hold truncates the episode;
a latched e-stop raises `RobotError` until `reset_estop()`. Resets stop the robot, then run the
configured routine: `wait`, `topic` (ask the robot, e.g. `sim-robot`), `operator` (wait for
Enter), or `home` (a scripted joint-space move to `reset.home`, linearly interpolated over
`reset.duration_s` through the safety layer, then held until within `reset.tolerance`). The
policy-time watchdog measures, at each `step`, the time since the previous observation was
handed out: the policy's inference plus whatever else the caller (e.g. a learner) did in
between; past `safety.max_policy_time_s` the robot holds and the episode is truncated, in
`train` as in `deploy`. `hold()` sends the hold command between episodes. On position
interfaces (trajectory, a position forward controller) every hold and the final stop send
where the arm stands (the newest measured position; the last command sent when that is
stale), never zero. Reward is task-specific and real
robots rarely report it, so the config picks a simple one (`alive`: 1 per step) and an optional
termination bound on one observed joint (`terminate: {joint: hinge, abs_above: 0.2}`).

With `cameras` in the robot config the observation is a Dict: `state` (the joint vector) and
one uint8 (height, width, 3) RGB frame per camera under its name; each camera's staleness
(`max_age_s`) is a watchdog of the safety layer, like the joint state's age.

Human in the loop (`intervention.py`, `episode.py`): with `robot.intervention` a person's
teleop topic (sensor_msgs/Joy, geometry_msgs/Twist or TwistStamped) overrides the policy
while they intervene, through the same safety checks; every step's info carries
`executed_action` (what the robot was sent) and `intervened`. `robot.episode` adds success
signals from a person (a std_srvs/Trigger service or a key on stdin), a wall-clock time limit
and a sparse success reward; `reset.mode: service` calls a std_srvs/Trigger reset service
between episodes.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from roborl.core.errors import ConfigError, RobotError
from roborl.core.stop_signals import STOP_SIGNALS, signal_cause
from roborl.robots.config import RobotConfig, parse_robot_config
from roborl.robots.env.episode import EpisodeConfig, EpisodeControl
from roborl.robots.env.intervention import make_teleop
from roborl.robots.env.safety import SafetyConfig, SafetyLayer
from roborl.robots.robot import Robot, RobotLayout, require_transport

log = logging.getLogger("roborl.robots.env")


def robot_observation_space(driver: RobotLayout) -> gym.Space:
    """The joint vector (Box), or with cameras a Dict of `state` and one uint8 image per
    camera (what `train robot=` stores and what `deploy` checks a policy against)."""
    n_obs = len(driver.joints) * len(driver.fields)
    state = gym.spaces.Box(-np.inf, np.inf, (n_obs,), np.float64)
    if not driver.cameras:
        return state
    spaces: dict[str, gym.Space] = {"state": state}
    for cam in driver.cameras:
        spaces[cam.name] = gym.spaces.Box(0, 255, cam.shape, np.uint8)
    return gym.spaces.Dict(spaces)


def read_observation(driver: Robot) -> tuple[Any, float, dict[str, float]]:
    """(observation, state age, per-camera frame ages) from the driver's newest messages."""
    state, age = driver.observation()
    if not driver.cameras:
        return state, age, {}
    obs: dict[str, np.ndarray] = {"state": state}
    ages: dict[str, float] = {}
    for name, (frame, frame_age) in driver.frames().items():
        obs[name], ages[name] = frame, frame_age
    return obs, age, ages


class RobotEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, cfg: RobotConfig | Mapping[str, Any], driver: Robot | None = None) -> None:
        #: The typed robot config (a composed section is validated here, a config passes).
        self.cfg = parse_robot_config(cfg)
        if driver is None:  # the config alone: a ROS 2 driver that opens its node at connect
            from roborl.robots.env.driver import Ros2Driver

            driver = Ros2Driver(self.cfg)
        #: The robot (any `Robot`: the ROS 2 driver, the in-process MuJoCo robot, a plugin's).
        self.driver: Robot = driver
        self.rate_hz = self.cfg.rate_hz  # > 0: checked by RobotConfig
        self.period = 1.0 / self.rate_hz
        s = self.cfg.safety
        n_cmd = len(self.driver.command_joints)
        low, high = self.cfg.limits  # filled per commanded joint by RobotConfig
        self.safety = SafetyLayer(
            SafetyConfig(
                low=low,
                high=high,
                max_delta=s.max_delta,
                max_state_age_s=s.max_state_age_s,
                max_policy_time_s=s.max_policy_time_s,
                hold=self.cfg.hold,
                max_camera_age_s={c.name: c.max_age_s for c in self.driver.cameras},
            )
        )
        if len(low) != n_cmd:  # the robot's layout against its config (a plugin's may differ)
            raise ConfigError(
                f"robot.safety.low/high have {len(low)} entries for {n_cmd} commanded joints "
                f"{self.driver.command_joints}."
            )
        self.action_space = gym.spaces.Box(
            np.asarray(low, np.float32), np.asarray(high, np.float32), dtype=np.float32
        )
        self.observation_space = robot_observation_space(self.driver)
        self.max_episode_steps = self.cfg.max_episode_steps
        term = self.cfg.terminate or {}
        self._term_idx = None
        if term:
            joint = term.get("joint")
            if joint not in self.driver.joints:
                raise ConfigError(
                    f"robot.terminate.joint={joint!r} is not in robot.joints {self.driver.joints}."
                )
            self._term_idx = self.driver.joints.index(joint)
            self._term_bound = float(term.get("abs_above", np.inf))
        self.reset_cfg = self.cfg.reset  # validated, defaults filled (ResetConfig)
        mode = self.reset_cfg.mode
        if mode == "home" or self.safety.config.hold == "position":
            self._position_index()  # validates that the commanded joints' positions are observed
        if mode == "home":
            self._home = self._check_home(self.reset_cfg.home)
        # The teleop parser (intervention.py) reads its own section from a mapping.
        self.teleop = make_teleop({"intervention": self.cfg.intervention}, n_cmd)
        episode_cfg = EpisodeConfig.parse(self.cfg.episode)
        if episode_cfg.success_key is not None and mode == "operator":
            raise ConfigError(
                "robot.episode.success_key and robot.reset.mode=operator both read stdin: "
                "use success_service, or another reset mode."
            )
        self.driver.on_estop(self._on_estop)
        self.driver.connect(self.cfg.connect_timeout_s)
        if self.safety.config.hold == "position":  # holds read where the arm stands
            self.safety.bind_measurement(self._measured_command_positions)
            self.safety.set_last(self.commanded_positions())
        # Every command and hold goes out through the safety layer from here on; creating
        # the env is the explicit request to command (deploy disables it until activate).
        self.safety.bind_output(self.driver.command)
        self.safety.enable()
        self.safety.start_supervisor(self.period)
        if self.teleop is not None:  # ROS-only for now: a teleop topic on the robot's node
            self.teleop.attach(require_transport(self.driver, "robot.intervention"))
        if episode_cfg.success_service:
            require_transport(self.driver, "robot.episode.success_service")
        self.episode = EpisodeControl(episode_cfg, self.driver.transport)
        # With `use_sim_time` (e.g. a ROS parameter of the driver node) steps tick on the
        # robot's clock: `rate_hz` per sim second, and no step while the sim stands still.
        self.sim_time = self.driver.use_sim_time
        if self.sim_time:  # the supervisor too: a paused simulation is not a hung policy
            self.safety.clock = self._clock
        self._next_tick = self._clock()
        self._steps = 0
        self._obs_handed_at: float | None = None
        self.last_latency_s = 0.0
        self.last_policy_time_s = 0.0

    def _position_index(self) -> list[int]:
        """Where each commanded joint's position sits in the observation vector."""
        d = self.driver
        missing = [j for j in d.command_joints if j not in d.joints]
        if "position" not in d.fields or missing:
            raise ConfigError(
                "robot.reset.mode=home and position interfaces (whose hold is where the arm "
                "stands) need the commanded joints' "
                f"positions: robot.fields={d.fields} must include 'position' and robot.joints "
                f"must include {missing or d.command_joints}."
            )
        base = d.fields.index("position") * len(d.joints)
        return [base + d.joints.index(j) for j in d.command_joints]

    def commanded_positions(self) -> np.ndarray:
        """Measured positions of the commanded joints, in the controller's joint order."""
        return self._measured_command_positions()[0]

    def _measured_command_positions(self) -> tuple[np.ndarray, float]:
        """(commanded joints' measured positions, seconds since their JointState arrived):
        what a position hold sends, if fresh enough."""
        obs, age = self.driver.observation()
        return obs[self._position_index()], age

    def _check_home(self, home: Any) -> np.ndarray:
        n = len(self.driver.command_joints)
        try:
            pose = np.asarray(home, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            pose = np.zeros(0)
        if pose.shape != (n,) or not np.all(np.isfinite(pose)):
            raise ConfigError(
                f"robot.reset.home={home!r} must list {n} finite positions, one per commanded "
                f"joint {self.driver.command_joints}."
            )
        if np.any(pose < self.safety.low) or np.any(pose > self.safety.high):
            raise ConfigError(
                f"robot.reset.home={pose.tolist()} is outside the safety limits "
                f"[{self.safety.low.tolist()}, {self.safety.high.tolist()}]."
            )
        return pose

    def _move_home(self) -> None:
        """Interpolate from the measured pose to `reset.home` at the control rate, every
        command through the safety layer, then hold home until the robot is within tolerance."""
        start = self.commanded_positions()
        self.safety.set_last(start)
        steps = max(1, int(np.ceil(self.reset_cfg.duration_s * self.rate_hz)))
        tolerance = self.reset_cfg.tolerance
        timeout = self.reset_cfg.timeout_s
        targets = [start + (self._home - start) * (k / steps) for k in range(1, steps + 1)]
        deadline = None
        self._next_tick = self._clock()
        while True:
            target = targets.pop(0) if targets else self._home
            self._wait_tick()
            _, age = self.driver.observation()
            decision = self.safety.filter(target, age)
            if decision is None:
                raise RobotError(f"e-stop latched ({self.safety.estop_cause}) while moving home.")
            if decision.watchdog:
                raise RobotError(f"move home aborted by the watchdog: {decision.cause}.")
            if not self.safety.emit(decision.command):
                raise RobotError("commanding stopped while moving home (e-stop or deactivate).")
            if targets:
                continue
            error = np.abs(self.commanded_positions() - self._home)
            if np.all(error <= tolerance):
                return
            deadline = deadline or time.monotonic() + timeout
            if time.monotonic() > deadline:
                raise RobotError(
                    f"robot did not reach home {self._home.tolist()} within {timeout}s of the "
                    f"move's end: joints {self.driver.command_joints} at "
                    f"{self.commanded_positions().tolist()} (tolerance {tolerance})."
                )

    def _clock(self) -> float:
        """The control clock: the node's clock (/clock) with use_sim_time, else monotonic."""
        if self.sim_time:
            return self.driver.now()
        return time.monotonic()

    def _wait_tick(self) -> None:
        self._next_tick += self.period
        if not self.sim_time:
            delay = self._next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                self._next_tick = time.monotonic()
            return
        # Sim time: poll the node's clock (it moves only when /clock does). Far behind, or a
        # clock that jumped back (the sim restarted), restarts the schedule from now.
        clock = self._clock()
        if not -self.period <= clock - self._next_tick <= 2 * self.period:
            self._next_tick = clock
        while self._clock() < self._next_tick:
            if self.safety.estopped:
                return  # step() reports the latch at once rather than wait for the sim
            time.sleep(0.001)

    def _fresh_obs(self, after: float, timeout_s: float) -> Any:
        """The first observation whose JointState (and every camera frame) arrived after
        `after`: no episode starts on a picture of the previous one."""
        deadline = time.monotonic() + timeout_s
        while True:
            obs, age, camera_ages = read_observation(self.driver)
            now = time.monotonic()
            stale = [n for n, a in camera_ages.items() if now - a < after]
            if now - age >= after and not stale:
                return obs
            if time.monotonic() > deadline:
                if now - age < after:
                    raise RobotError(
                        f"robot sent no fresh JointState within {timeout_s}s after reset "
                        f"(last error: {self.driver.last_error})."
                    )
                feed = self.driver.feeds[stale[0]]
                raise RobotError(
                    f"camera {stale[0]!r} sent no fresh image on {feed.spec.topic} within "
                    f"{timeout_s}s after reset (last error: {feed.last_error})."
                )
            time.sleep(0.002)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        if self.safety.estopped:
            raise RobotError(
                f"e-stop is latched ({self.safety.estop_cause}); call reset_estop() after the "
                "operator has cleared the robot."
            )
        self._await_enable()
        self.safety.send_hold()
        mode = self.reset_cfg.mode
        if mode in ("topic", "service"):  # the robot's own reset routine
            self.driver.request_reset(self.reset_cfg)
        elif mode == "operator":
            input("roborl: reset the robot, then press Enter ")
        elif mode == "home":
            self._move_home()
        time.sleep(self.reset_cfg.wait_s)
        obs = self._fresh_obs(time.monotonic(), self.cfg.connect_timeout_s)
        self.episode.start()
        self._steps = 0
        self._next_tick = self._clock()
        self._obs_handed_at = time.monotonic()
        return obs, {}

    def policy_time(self) -> float:
        """Seconds since the last observation was handed out (0 before the first reset)."""
        if self._obs_handed_at is None:
            return 0.0
        return time.monotonic() - self._obs_handed_at

    def step(self, action: np.ndarray) -> tuple:
        policy_time = self.policy_time()
        self.last_policy_time_s = policy_time
        self._wait_tick()
        _, age, camera_ages = read_observation(self.driver)
        human = self.teleop.command() if self.teleop is not None else None
        decision = self.safety.filter(action, age, policy_time, camera_ages, human=human)
        if decision is None or not self.safety.emit(decision.command):
            why = (
                f"e-stop latched ({self.safety.estop_cause})"
                if self.safety.estopped
                else ("commanding is disabled (an e-stop was cleared: activate to resume)")
            )
            raise RobotError(f"{why}: no commands are sent; the robot holds.")
        self.last_latency_s = age
        self._steps += 1
        obs, age, camera_ages = read_observation(self.driver)
        state = obs["state"] if isinstance(obs, dict) else obs
        success = self.episode.take_success()
        terminated = success or bool(
            self._term_idx is not None and abs(state[self._term_idx]) > self._term_bound
        )
        timed_out = self.episode.timed_out()
        truncated = decision.watchdog or timed_out or self._steps >= self.max_episode_steps
        info = {
            "held": decision.held,
            "safety_cause": decision.cause,
            "watchdog": decision.watchdog,
            "state_age_s": age,
            "policy_time_s": policy_time,
            "executed_action": decision.command.astype(self.action_space.dtype),
            "intervened": decision.human,
            "success": success,
            "time_limit": timed_out,
        }
        reward = float(success) if self.episode.config.reward == "success" else 1.0
        if camera_ages:
            info["camera_ages_s"] = camera_ages
        self._obs_handed_at = time.monotonic()
        return obs, reward, terminated, truncated, info

    def hold(self) -> None:
        """Send the safety layer's hold command now (zero, or where the arm stands on a
        position interface): the robot waits there between episodes, e.g. while the learner
        updates, instead of repeating the episode's last action."""
        self.safety.send_hold()

    @property
    def commands_at_estop(self) -> int | None:
        """How many commands had gone out when the e-stop latched (None: not latched):
        proof that only holds follow the latch."""
        return self.safety.outputs_at_estop

    def _on_estop(self, cause: str) -> None:
        """Latch (the hold goes out at once)."""
        self.safety.trigger_estop(cause)

    def reset_estop(self) -> None:
        """Clear the latch only: commanding resumes after an explicit `activate()`."""
        self.safety.reset_estop()

    def activate(self) -> None:
        """The explicit request to command again after a cleared e-stop (`~/activate`)."""
        self.safety.enable()
        log.warning("commanding activated by operator")

    def _await_enable(self) -> None:
        """Between episodes after a cleared e-stop: hold and wait for `activate()`."""
        if self.safety.enabled:
            return
        log.warning("e-stop was cleared: the robot holds until ~/activate (std_srvs/Trigger)")
        while not self.safety.enabled:
            if self.safety.estopped:
                raise RobotError(f"e-stop latched ({self.safety.estop_cause}) while waiting.")
            time.sleep(0.05)

    def close(self) -> None:
        """Final hold command (always, e-stop or not), then disconnect."""
        self.safety.stop_supervisor()
        self.safety.disable("close")
        self.driver.close()


def make_robot_env(
    cfg: RobotConfig | Mapping[str, Any], driver: Robot | None = None, *, robot: Robot | None = None
) -> gym.Env:
    """The env of `train robot=NAME` (`RobotKind`). Every stop signal (Ctrl-C, SIGTERM,
    SIGHUP, SIGQUIT) requests the e-stop first (the hold follows on the supervisor's thread,
    after any command the signal interrupted), then runs the handler that was there."""
    env = RobotEnv(cfg, driver=robot or driver)
    for signum in STOP_SIGNALS:
        previous = signal.getsignal(signum)

        def on_signal(signum: int, frame: Any, previous: Any = previous) -> None:
            env.safety.request_estop(signal_cause(signum))
            if callable(previous):
                previous(signum, frame)
            else:
                raise KeyboardInterrupt

        try:
            signal.signal(signum, on_signal)
        except ValueError:  # not the main thread
            break
    return env

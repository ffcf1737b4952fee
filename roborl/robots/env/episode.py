"""Episode control on a robot: what ends an episode and what starts the next one.

A real robot has no `done` of its own. Here an episode ends on

- **success**, signalled by a person -- a `std_srvs/Trigger` service on the driver node
  (`success_service`, e.g. `~/success`: `ros2 service call /roborl_driver/success
  std_srvs/srv/Trigger`) or a key typed on the trainer's stdin (`success_key`, a line such as
  `s`) -- or by a learned success classifier (the `reward=` wrapper of the run, which turns the
  classifier's output into reward and termination on top of this env);
- a **time limit** in wall-clock seconds (`time_limit_s`), beside `max_episode_steps`;
- the safety layer's watchdogs and the config's `terminate` bound, as before.

The next episode starts with the robot env's reset routine (`robot.reset.mode`), to which this
module adds `service`: call a `std_srvs/Trigger` reset service (`sim-robot`'s `~/reset`, or a
real cell's "move home and re-arrange" routine) and wait for its answer.

With `reward: success` the robot env's reward is 1 on the step a success is signalled and 0
otherwise (SERL's sparse reward when no classifier is used); `alive` (default) keeps 1 per step.

No gradient step runs inside an episode: the robot collector runs whole episodes at the
control rate and the loop updates only while the robot holds between them.

Robot config::

    episode:
      time_limit_s: null        # wall-clock seconds per episode (null: none)
      success_service: null     # e.g. ~/success (std_srvs/Trigger; transport rclpy)
      success_key: null         # e.g. s: a line "s" on stdin marks success
      reward: alive             # alive | success
    reset: {mode: service, service: /sim_robot/reset, timeout_s: 10}
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

from roborl.core.errors import ConfigError, RobotError

log = logging.getLogger("roborl.robots.episode")

KEYS = ("time_limit_s", "success_service", "success_key", "reward")
FIRST_CALL_SETTLE_S = 1.0  # see call_trigger: discovery of a new service client, both ways
REWARDS = ("alive", "success")


@dataclass(frozen=True)
class EpisodeConfig:
    """The `robot.episode` block."""

    time_limit_s: float | None = None
    success_service: str | None = None
    success_key: str | None = None
    reward: str = "alive"

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> EpisodeConfig:
        raw = dict(raw or {})
        bad = [k for k in raw if k not in KEYS]
        if bad:
            raise ConfigError(
                f"robot.episode has unknown keys {bad}: accepted are {', '.join(KEYS)}."
            )
        limit = raw.get("time_limit_s")
        if limit is not None and not float(limit) > 0:
            raise ConfigError(f"robot.episode.time_limit_s={limit!r} must be > 0 (null: none).")
        reward = str(raw.get("reward") or "alive")
        if reward not in REWARDS:
            raise ConfigError(
                f"robot.episode.reward={reward!r}: accepted are {', '.join(REWARDS)}."
            )
        key = raw.get("success_key")
        return cls(
            time_limit_s=None if limit is None else float(limit),
            success_service=raw.get("success_service") or None,
            success_key=None if key in (None, "") else str(key),
            reward=reward,
        )


class EpisodeControl:
    """Success signals from a person, and the episode's wall-clock limit, for `RobotEnv`."""

    def __init__(self, config: EpisodeConfig, transport: Any, stdin: IO[str] | None = None) -> None:
        self.config = config
        self._success = threading.Event()
        self._started = time.monotonic()
        self.successes = 0
        if config.success_service:
            served = transport.service(config.success_service, "trigger", self._on_success_service)
            if served is None:
                raise ConfigError(
                    f"robot.episode.success_service={config.success_service!r} needs a ROS 2 "
                    "node (transport=rclpy); with transport=dds use success_key instead."
                )
            transport.log(
                logging.INFO,
                f"success service {config.success_service} (std_srvs/Trigger)",
            )
        self.key_reader: threading.Thread | None = None
        if config.success_key is not None:
            stream = stdin if stdin is not None else sys.stdin
            self.key_reader = threading.Thread(
                target=self._read_keys, args=(stream,), name="roborl-success-key", daemon=True
            )
            self.key_reader.start()

    def _on_success_service(self, _: Any) -> tuple[bool, str]:
        self.mark_success("the success service")
        return True, "success marked: the current episode ends at the next control step"

    def _read_keys(self, stream: IO[str]) -> None:
        for line in stream:
            if line.strip() == self.config.success_key:
                self.mark_success(f"key {self.config.success_key!r}")

    def mark_success(self, source: str) -> None:
        """A person says the task is done (thread-safe)."""
        log.info("success signalled by %s", source)
        self._success.set()

    def start(self) -> None:
        """A new episode: forget signals that came in between episodes, restart the clock."""
        self._success.clear()
        self._started = time.monotonic()

    def take_success(self) -> bool:
        """True once per signalled success (the step that ends the episode consumes it)."""
        if self._success.is_set():
            self._success.clear()
            self.successes += 1
            return True
        return False

    def timed_out(self) -> bool:
        limit = self.config.time_limit_s
        return limit is not None and time.monotonic() - self._started >= limit


def call_trigger(transport: Any, service: str, timeout_s: float) -> str:
    """Call a `std_srvs/Trigger` service and return its message; RobotError if it is absent,
    slow or answers success=false (a reset that failed must not start an episode)."""
    node = transport.node
    if node is None:
        raise ConfigError(
            f"calling the service {service} needs a ROS 2 node (transport=rclpy); with "
            "transport=dds use reset.mode=topic."
        )
    from std_srvs.srv import Trigger

    clients = transport.__dict__.setdefault("_roborl_trigger_clients", {})
    client = clients.get(service)
    fresh = client is None
    if client is None:
        client = clients[service] = node.create_client(Trigger, service)
    if not client.wait_for_service(timeout_sec=timeout_s):
        raise RobotError(
            f"service {service} (std_srvs/Trigger) is not available after {timeout_s}s."
        )
    if fresh:
        # The client sees the server before the server sees the client's response reader, and
        # Fast DDS's server drops a response it cannot deliver within 100 ms ("failed to send
        # response (timeout)"): the service would run and its answer never arrive. A first
        # call waits for discovery to settle on the server's side too.
        time.sleep(FIRST_CALL_SETTLE_S)
    done = threading.Event()
    future = client.call_async(Trigger.Request())
    future.add_done_callback(lambda _: done.set())
    if not done.wait(timeout_s):
        future.cancel()
        raise RobotError(f"service {service} did not answer within {timeout_s}s.")
    response = future.result()
    if response is None or not response.success:
        why = response.message if response is not None else str(future.exception())
        raise RobotError(f"service {service} failed: {why}")
    return str(response.message)

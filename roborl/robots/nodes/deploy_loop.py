"""`roborl deploy`'s control loop: at each tick of the node's clock, the newest observation
through the policy and the safety layer to the robot, while the node is active; latency,
compute and tick statistics for `stats=PATH`.
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

import numpy as np

from roborl.core.stop_signals import STOP_SIGNALS, signal_cause
from roborl.robots.nodes.common import announce


class ControlLoop:
    """`DeployNode`'s fixed-rate loop (the node provides the state it reads)."""

    def _pace(self, next_tick: float) -> float:
        """Sleep until the next tick of the node's clock (sim time with use_sim_time)."""
        clock = self.driver.now if self.sim_time else time.monotonic
        next_tick += self.period
        if clock() - next_tick > self.period:  # fell behind (or the clock jumped): restart
            next_tick = clock()
        while not self.stop:
            delay = next_tick - clock()
            if delay <= 0:
                break
            time.sleep(min(delay, 0.002) if self.sim_time else delay)
        return next_tick

    def on_stop_signal(self, signum: int, frame: Any) -> None:
        """Any stop signal: request the e-stop (its hold follows on the supervisor's thread,
        after a command this handler may have interrupted, never before it) and end the loop.
        It takes no lock: the main thread it runs on may hold them."""
        if self.env is not None:
            self.env.safety.request_estop(signal_cause(signum))
        self.stop = True

    def run(self) -> int:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self.on_stop_signal)
        if self.autostart:
            self._start()
        else:
            announce(
                self.driver,
                logging.INFO,
                event="waiting_for_lifecycle",
                node=self.node_label(),
            )
        from roborl.robots.env.robot_env import read_observation

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
                            self.driver,
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
                        self.driver,
                        logging.ERROR,
                        event="watchdog_stop",
                        cause=decision.cause,
                        t=done - t0,
                        commands_sent=driver.sent,
                    )
                    if self.on_watchdog == "exit":
                        self.code = 3
                        break
        if self.env is not None:  # a stop signal's latch, before the statistics read it
            self.env.safety.apply_requested_estop()
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
            "node": self.node_label(),
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


def _pct(xs: list[float], q: float) -> float | None:
    """The q-th percentile of seconds `xs`, in milliseconds (None without samples)."""
    return float(np.percentile(np.asarray(xs) * 1e3, q)) if xs else None

"""The ROS 2 face of the driver's safety layer: the `~/estop` and `~/activate` services and
the safety state on /diagnostics.

`Ros2Driver` mixes this in; it lives apart because it is about serving an operator (latch and
clear the e-stop remotely, see why commands hold), not about moving JointState and commands.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from roborl.core.errors import RobotError
from roborl.robots.env.cameras import CameraFeed
from roborl.robots.transport import msgs

log = logging.getLogger("roborl.robots.driver")

INTERVENTIONS = (
    "estop",
    "watchdog_state",
    "watchdog_camera",
    "watchdog_policy",
    "clamp",
    "rate_limit",
    "nonfinite",
    "watchdog_supervisor",
)


class SafetyServices:
    """`serve_safety` and the /diagnostics loop of `Ros2Driver` (which provides the state)."""

    _transport: Any
    _safety: Any
    _status_extra: Callable[[], dict[str, Any]] | None
    _estop_cb: Any
    _diag_stop: threading.Event
    _diag_thread: threading.Thread | None
    _diag_pub: Any
    _lock: threading.Lock
    _stamp: float
    estop_clear: str
    estop_topic: str
    connected_at: float | None
    #: Seconds after `connect()` from which no matched e-stop publisher is a warning (a log
    #: line, /diagnostics level WARN): discovery takes a moment, an absent e-stop does not.
    estop_grace_s: float = 5.0
    _estop_warned: bool = False
    allow_other_commanders: bool
    diagnostics_period_s: float
    qos: dict[str, Any]
    feeds: dict[str, CameraFeed]
    name: str
    node_name: str
    sent: int
    received: int
    rejected: int
    last_error: str | None

    if TYPE_CHECKING:  # provided by Ros2Driver

        def other_commanders(self) -> list[str]: ...

        def estop_publishers(self) -> int | None: ...

        def _take_state(self) -> None: ...

    def serve_safety(
        self,
        safety: Any,
        clear: Callable[[], None],
        extra: Callable[[], dict[str, Any]] | None = None,
        activate: Callable[[], None] | None = None,
    ) -> None:
        """Offer `~/estop` (std_srvs/SetBool) and publish `safety`'s state on /diagnostics.

        SetBool true latches like a True on the e-stop topic (the hold goes out at once);
        SetBool false calls `clear`, which only clears: motion needs an explicit activate
        (`~/activate`, std_srvs/Trigger, offered when `activate` is given; a lifecycle node
        uses its activate transition instead). `extra()` adds node-specific values (e.g. the
        deploy node's lifecycle state)."""
        if self._transport is None:
            raise RobotError("serve_safety() needs an open transport: call connect() first.")
        self._safety = safety
        self._status_extra = extra
        service = "~/estop"
        served = self._transport.service(
            service, "set_bool", lambda data: self._set_estop(clear, data)
        )
        if served is not None:
            self._transport.log(logging.INFO, f"e-stop service {service} (std_srvs/SetBool)")
        if activate is not None:
            self._transport.service("~/activate", "trigger", lambda _: self._activate(activate))
        self._diag_pub = self._transport.publisher(
            "/diagnostics", msgs.DiagnosticArray, self.qos["diagnostics"]
        )
        self._diag_thread = threading.Thread(
            target=self._diagnostics_loop, name="roborl-diagnostics", daemon=True
        )
        self._diag_thread.start()

    def _set_estop(self, clear: Callable[[], None], data: bool | None) -> tuple[bool, str]:
        safety = self._safety
        if data:
            if self._estop_cb is not None:
                self._estop_cb("e-stop set by the ~/estop service")
            else:
                safety.trigger_estop("e-stop set by the ~/estop service")
            self.publish_diagnostics()
            return True, f"e-stop latched ({safety.estop_cause})"
        if not safety.estopped:
            return True, "e-stop was not latched"
        if self.estop_clear == "none":
            return False, (
                f"e-stop stays latched ({safety.estop_cause}): robot.estop.clear=none allows no "
                "remote clear; restart the node once the robot is safe"
            )
        was = safety.estop_cause
        clear()
        self._transport.log(logging.WARNING, f"e-stop cleared by ~/estop (was: {was})")
        self.publish_diagnostics()
        return True, f"e-stop cleared (was: {was})"

    def _activate(self, activate: Callable[[], None]) -> tuple[bool, str]:
        if self._safety.estopped:
            return False, f"e-stop latched ({self._safety.estop_cause}): clear it first"
        activate()
        self._transport.log(logging.WARNING, "commanding activated by ~/activate")
        return True, "activated"

    def status(self) -> tuple[int, str, dict[str, Any]]:
        """(level, message, values) of the safety layer for /diagnostics (0 OK, 1 WARN, 2 ERROR)."""
        self._take_state()
        safety = self._safety
        counts = dict(safety.interventions) if safety is not None else {}
        values: dict[str, Any] = {
            "estopped": bool(safety is not None and safety.estopped),
            "enabled": bool(safety is not None and safety.enabled),
            "holds_sent": safety.holds_sent if safety is not None else 0,
            "estop_cause": (safety.estop_cause if safety is not None else None) or "",
            "commands_sent": self.sent,
            "states_received": self.received,
            "states_rejected": self.rejected,
            "last_state_error": self.last_error or "",
        }
        estop_pubs = self.estop_publishers()
        values["estop_publishers"] = "unknown" if estop_pubs is None else estop_pubs
        for kind in sorted({*INTERVENTIONS, *counts}):
            values[f"interventions.{kind}"] = int(counts.get(kind, 0))
        for name, feed in self.feeds.items():
            values[f"camera.{name}.frames_received"] = feed.received
            values[f"camera.{name}.frames_rejected"] = feed.rejected
            values[f"camera.{name}.last_error"] = feed.last_error or ""
        if self._status_extra is not None:
            values.update(self._status_extra())
        if values["estopped"]:
            return 2, f"e-stop latched: {values['estop_cause']}", values
        with self._lock:
            age = time.monotonic() - self._stamp
        max_age = safety.config.max_state_age_s if safety is not None else math.inf
        if age > max_age:
            return 1, f"state is stale ({age:.2f}s > {max_age}s): commands hold", values
        for name, feed in self.feeds.items():
            cam_age = feed.latest()[1]
            if cam_age > feed.spec.max_age_s:
                return (
                    1,
                    f"camera {name!r} is stale ({cam_age:.2f}s > {feed.spec.max_age_s}s): "
                    "commands hold",
                    values,
                )
        if self._estop_missing(estop_pubs):
            return 1, f"no e-stop publisher on {self.estop_topic!r}", values
        return 0, "ok", values

    def _estop_missing(self, publishers: int | None) -> bool:
        """True once `estop_grace_s` after connect no publisher is matched on the e-stop
        topic (nothing can e-stop this node through it)."""
        since = self.connected_at
        return (
            publishers == 0 and since is not None and time.monotonic() - since >= self.estop_grace_s
        )

    def _check_estop_publishers(self) -> None:
        """Log when the e-stop topic loses its last publisher (or never had one after the
        grace period), and when one connects again."""
        publishers = self.estop_publishers()
        if self._estop_missing(publishers) and not self._estop_warned:
            self._estop_warned = True
            self._transport.log(
                logging.WARNING,
                f"no e-stop publisher is connected on {self.estop_topic!r}: nothing can "
                "e-stop this node through the topic (the ~/estop service, Ctrl-C and the "
                "watchdogs still work). Check the e-stop node, ROS_DOMAIN_ID and its topic.",
            )
        elif publishers and self._estop_warned:
            self._estop_warned = False
            self._transport.log(
                logging.INFO, f"e-stop publisher connected on {self.estop_topic!r} ({publishers})"
            )

    def publish_diagnostics(self) -> None:
        if self._diag_pub is None or self._transport is None:
            return
        level, message, values = self.status()
        node = self._transport.fully_qualified_name or self.node_name
        status = msgs.DiagnosticStatus(
            level=level,
            name=f"{node.lstrip('/')}: safety",
            message=message,
            hardware_id=self.name,
            values=[
                msgs.KeyValue(k, str(v).lower() if isinstance(v, bool) else str(v))
                for k, v in values.items()
            ],
        )
        header = msgs.Header(stamp=msgs.stamp_now(self._transport.now()))
        try:
            self._diag_pub(msgs.DiagnosticArray(header=header, status=[status]))
        except Exception as exc:  # diagnostics must never take the control loop down
            log.debug("diagnostics publish failed: %s", exc)

    def _diagnostics_loop(self) -> None:
        while not self._diag_stop.wait(self.diagnostics_period_s):
            if not self.allow_other_commanders and self._estop_cb is not None:
                others = self.other_commanders()
                if others:  # a second commander appeared while running: stop, do not fight
                    self._estop_cb(f"another node commands this robot: {', '.join(others)}")
            try:
                self._check_estop_publishers()
            except Exception as exc:  # like diagnostics: never take the control loop down
                log.debug("e-stop publisher check failed: %s", exc)
            self.publish_diagnostics()

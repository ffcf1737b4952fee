"""Run rclpy service callbacks and lifecycle transitions off the executor thread.

Each rclpy transport spins one `SingleThreadedExecutor`; a service handler that waits (a
lifecycle configure waiting for the robot's first JointState, sim-robot's reset waiting for its
loop) would stall every subscription of the node. `defer` hands such requests to a worker
thread that answers when done; `lifecycle_node_class` is the managed node whose transitions run
roborl's handlers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

LIFECYCLE_TRANSITIONS = ("configure", "activate", "deactivate", "cleanup", "shutdown")


class _Pending:
    """A request handed from the executor thread to a worker (see `defer`)."""

    def __init__(self, request: Any, response: Any) -> None:
        self.request, self.response = request, response


def defer(srv: Any, lock: threading.Lock | None = None) -> None:
    """Run a service's callback off the executor thread.

    rclpy's executor calls the service's callback, then `send_response(response, header)`.
    Here the callback only hands the request on; `send_response` starts a worker thread that
    runs the real callback (under `lock` when given) and sends its response when it is done.
    The executor goes straight back to delivering messages, so a handler that waits (a
    lifecycle configure waiting for the first JointState, sim-robot's reset waiting for its
    loop) never stalls the subscriptions of the node, and one executor thread is enough."""
    run, send = srv.callback, srv.send_response

    def work(pending: _Pending, header: Any) -> None:
        response = pending.response
        try:
            if lock is None:
                response = run(pending.request, response)
            else:
                with lock:
                    response = run(pending.request, response)
        except Exception as exc:  # answer the caller rather than leave it waiting
            name = getattr(srv, "srv_name", "?")
            logging.getLogger("roborl.robots.node").error("service %s failed: %s", name, exc)
            if hasattr(response, "success"):
                response.success = False
        try:
            send(response, header)
        except Exception:  # the node closed while the handler ran
            pass

    def send_response(response: Any, header: Any) -> None:
        if isinstance(response, _Pending):
            threading.Thread(
                target=work, args=(response, header), name="roborl-service", daemon=True
            ).start()
        else:
            send(response, header)

    srv.callback = _Pending
    srv.send_response = send_response


def lifecycle_node_class() -> type:
    from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn

    class RoborlLifecycleNode(LifecycleNode):
        """Runs roborl's handler for each transition; a False or an exception fails it."""

        handlers: Mapping[str, Callable[[], bool]] = {}

        def _run(self, name: str, state: Any) -> Any:
            handler = self.handlers.get(name)
            base = getattr(super(), f"on_{name}")
            try:
                ok = handler() if handler is not None else True
            except Exception as exc:
                self.get_logger().error(f"{name} failed: {exc}")
                ok = False
            if not ok:
                return TransitionCallbackReturn.FAILURE
            return base(state)  # (de)activates lifecycle publishers, if any

        def on_configure(self, state: Any) -> Any:
            return self._run("configure", state)

        def on_activate(self, state: Any) -> Any:
            return self._run("activate", state)

        def on_deactivate(self, state: Any) -> Any:
            return self._run("deactivate", state)

        def on_cleanup(self, state: Any) -> Any:
            return self._run("cleanup", state)

        def on_shutdown(self, state: Any) -> Any:
            return self._run("shutdown", state)

    return RoborlLifecycleNode

"""Independent plain-rclpy peers for the robot tests: a script prelude that imports only rclpy
(no roborl code) and spins a node on a background thread, with JSON-line output and waiting
helpers; `peer(SCRIPT, *argv)` is the command line that runs one."""

from __future__ import annotations

import sys
import textwrap

PRELUDE = textwrap.dedent(
    """
    import json, sys, threading, time
    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    _out_lock = threading.Lock()

    def out(**kw):
        # one write per line, under a lock: print() writes the text and the newline apart, so
        # a callback thread's line could land in between and both events were lost as bad JSON
        with _out_lock:
            sys.stdout.write(json.dumps(kw) + "\\n")
            sys.stdout.flush()

    def wait(pred, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return True
            time.sleep(0.02)
        return bool(pred())

    def call(client, request, timeout=60.0):
        if not client.wait_for_service(timeout_sec=timeout):
            raise SystemExit(f"service {client.srv_name} never appeared")
        future = client.call_async(request)
        if not wait(future.done, timeout):
            raise SystemExit(f"service {client.srv_name} did not answer")
        return future.result()

    rclpy.init()
    node = rclpy.create_node("plain_peer")
    executor = MultiThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    """
)


def peer(script: str, *args: str) -> list[str]:
    return [sys.executable, "-c", script, *args]

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

    def out(**kw):
        print(json.dumps(kw), flush=True)

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

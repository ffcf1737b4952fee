"""The learner's PUB socket on a thread of its own: the weights the loop queues, and a
heartbeat every `heartbeat_s` whatever the loop is doing, so the actor can tell a slow learner
from a dead one.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from roborl.robots.training.actor_learner import wire


class WeightsPublisher(threading.Thread):
    """Owns the PUB socket (a ZeroMQ socket is used by one thread only): sends the weights
    the loop queues, and a heartbeat every `period_s` whatever the loop is doing, so that a
    long gradient step never looks like a dead learner to the actor."""

    _STOP = object()

    def __init__(self, sock: Any, period_s: float) -> None:
        super().__init__(name="actor-learner-publisher", daemon=True)
        self.sock, self.period_s = sock, period_s
        self.queue: queue.Queue[Any] = queue.Queue()
        self.updates = 0
        self.heartbeats = 0

    def send_weights(self, payload: bytes) -> None:
        self.queue.put(payload)

    def stop(self) -> None:
        self.queue.put(self._STOP)
        self.join(10.0)

    def run(self) -> None:
        import zmq

        next_beat = time.monotonic()
        try:
            while True:
                try:
                    item = self.queue.get(timeout=max(0.0, next_beat - time.monotonic()))
                except queue.Empty:
                    item = None
                if item is self._STOP:
                    return
                try:
                    if item is None:
                        frames = [wire.HEARTBEAT, wire.encode_heartbeat(self.updates)]
                        self.sock.send_multipart(frames, flags=zmq.NOBLOCK)
                        self.heartbeats += 1
                        next_beat = time.monotonic() + self.period_s
                    else:
                        self.sock.send_multipart(
                            [wire.WEIGHTS, item], flags=zmq.NOBLOCK, copy=False
                        )
                except zmq.Again:  # PUB drops at its high-water mark rather than block
                    pass
        finally:
            self.sock.close(0)

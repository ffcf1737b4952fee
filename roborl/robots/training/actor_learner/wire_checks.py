"""The checks every received actor/learner message passes before anything reads it: a bounded
receive (frames and bytes over the whole message), a guard that turns any parser failure into
a dropped message, and bounded numbers (a peer's integer too large for a float is refused,
never converted). `wire` builds on these; the reasons are the learner's drop counters.
"""

from __future__ import annotations

import math
from typing import Any

from roborl.core.errors import RobotError

DROP_REASONS = ("malformed", "shape", "nonfinite", "oversized")
FRAMES = 2  # every message is [kind, payload]
MAX_COUNT = 2**53  # largest count or version taken from a peer: exact as a float64


class FrameError(RobotError):
    """A received message that must be dropped; `reason` is one of `DROP_REASONS` (the
    counter it goes to)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def parse_guard(fn: Any, what: str, payload: bytes) -> Any:
    """`fn(payload)`, with any failure of the parser turned into a `malformed` FrameError:
    the bytes come from the network, so a parser's panic (pyo3 raises those as
    BaseException), a RecursionError of deeply nested JSON or a MemoryError must never take
    the receiving process down."""
    try:
        return fn(payload)
    except (KeyboardInterrupt, SystemExit):
        raise
    except FrameError:
        raise
    except BaseException as exc:
        why = f"{what}: not parsable ({type(exc).__name__}: {exc})."
        raise FrameError("malformed", why) from None


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a JSON number (not a bool) that is finite as a float64,
    else None: a peer's integer too large for a float must be refused, since converting it
    raises OverflowError instead of giving inf."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def bounded_count(value: Any, low: int = 0) -> int | None:
    """`value` when it is an integer (not a bool) in `[low, MAX_COUNT]`, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
        return None
    return value


def recv_message(sock: Any, max_bytes: int, flags: int = 0) -> list[bytes]:
    """One message from a ZeroMQ socket, frame by frame: a message of more than `FRAMES`
    frames (`malformed`) or more than `max_bytes` over all its frames (`oversized`) raises
    FrameError after its remaining frames are discarded unread, and no frame of it is ever
    copied into Python. libzmq's MAXMSGSIZE caps each frame, not the message, so
    `recv_multipart` would copy any number of capped frames; libzmq itself still queues a
    message whole before its first frame can be read, which no socket option bounds."""
    frames = [sock.recv(flags, copy=False)]
    size, more = len(frames[0]), frames[0].more
    while more:
        frame = sock.recv(copy=False)
        size += len(frame)
        more = frame.more
        if len(frames) < FRAMES and size <= max_bytes:
            frames.append(frame)
            continue
        count = len(frames) + 1
        frames.clear()
        while more:  # the rest of the message, freed frame by frame
            frame = sock.recv(copy=False)
            size += len(frame)
            count += 1
            more = frame.more
        reason = "oversized" if size > max_bytes else "malformed"
        raise FrameError(
            reason,
            f"a message of {count} frames and {size} bytes (at most {FRAMES} frames and "
            f"{max_bytes} bytes in all)",
        )
    if size > max_bytes:
        raise FrameError(
            "oversized", f"a {size}-byte message in {len(frames)} frames (cap {max_bytes} bytes)"
        )
    return [frame.bytes for frame in frames]

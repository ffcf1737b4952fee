"""The signals that mean "stop": a process that commands a robot handles every one of them
the same way (hold, then exit cleanly), because each ends the process otherwise with the
robot still executing its last command.

SIGHUP is a closed terminal or a dropped SSH session, SIGQUIT is Ctrl-\\: both kill a Python
process by default, without a hold.
"""

from __future__ import annotations

import signal

#: Ctrl-C, `kill`, a closed terminal / dropped SSH session, Ctrl-\.
STOP_SIGNALS: tuple[signal.Signals, ...] = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
)


def signal_cause(signum: int) -> str:
    """A stop cause for logs and events: "Ctrl-C" for SIGINT, else the signal's name."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name

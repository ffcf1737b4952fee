"""Find and stop a `roborl actor` that an earlier learner of the same run started (Linux
/proc): a resumed learner adopts it rather than starting a second actor on one robot.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def running_actor(pid_file: Path, config: Path) -> int | None:
    """The pid in `pid_file` if it is a live `roborl actor` for `config` (Linux /proc)."""
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    args = [a.decode(errors="replace") for a in cmdline]
    return pid if "actor" in args and f"config={config}" in args else None


def terminate(pid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM an adopted actor (not our child) and wait for it to exit, then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            if is_zombie(pid):  # exited, waiting for its new parent to reap it
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False

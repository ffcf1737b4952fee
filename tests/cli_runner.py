"""`roborl ...` as a subprocess for tests: the user's entry point, one torch thread, wandb
offline, and the command's stderr in the failure message."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from cli_server import run_roborl


def roborl(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `roborl *args` in `cwd` and assert it exited 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = run_roborl(args, cwd=cwd, env=env, timeout=timeout)
    assert proc.returncode == 0, f"roborl {' '.join(args)}: {proc.stderr[-3000:]}"
    return proc

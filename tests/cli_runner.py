"""`roborl ...` as a subprocess for tests: the user's entry point, one torch thread, wandb
offline, and the command's stderr in the failure message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def roborl(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run `roborl *args` in `cwd` and assert it exited 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run(
        [sys.executable, "-m", "roborl.core.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, f"roborl {' '.join(args)}: {proc.stderr[-3000:]}"
    return proc

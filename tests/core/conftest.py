"""Host-test fixtures: run the CLI in a subprocess with a tiny, fast config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_server import run_roborl

FAST = [
    "total_steps=600",
    "learning_starts=200",
    "eval_every=300",
    "eval_episodes=2",
    "checkpoint_every=300",
    "log_every=200",
    "algo.batch_size=64",
    "algo.hidden_sizes=[32,32]",
    "progress=false",
]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["WANDB_MODE"] = "offline"
    return env


def roborl(
    *args: str, cwd: Path, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess:
    proc = run_roborl(args, cwd=cwd, env=cli_env(), timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"roborl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return proc


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("summary.json"))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Cli:
    """`cli("train", ...)` runs roborl in a subprocess from the test's temp dir."""

    FAST = FAST

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess:
        return roborl(*args, cwd=self.cwd, timeout=timeout, check=check)

    def run_dirs(self) -> list[Path]:
        return run_dirs(self.cwd)

    @staticmethod
    def read_jsonl(path: Path) -> list[dict[str, Any]]:
        return read_jsonl(path)

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "roborl.core.cli", *args],
            cwd=self.cwd,
            env=cli_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)

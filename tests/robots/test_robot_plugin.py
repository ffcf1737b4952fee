"""docs/robots.md, "Add a robot", tried from the docs alone: its `toy_robot.py` is taken from
the page verbatim, installed as a third-party plugin (a `roborl.plugins` entry point), and
`roborl plugins`, `roborl deploy robot=toy_arm` and `roborl train robot=toy_arm` run it behind
the same `RobotEnv` and safety layer as the built-in robots.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from cli_server import run_roborl
from robot_helpers import install_plugin

DOCS = Path(__file__).resolve().parents[2] / "docs" / "robots.md"


def docs_example() -> str:
    """The python block that follows the page's `add-a-robot` marker."""
    text = DOCS.read_text()
    found = re.search(r"<!-- add-a-robot: toy_robot.py -->\n```python\n(.*?)```", text, re.S)
    assert found, "docs/robots.md lost its 'Add a robot' example"
    return found.group(1)


def roborl(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_roborl(args, env=env, timeout=240)


def test_the_docs_robot_plugin_deploys_and_trains(balance_checkpoint, tmp_path) -> None:
    site = install_plugin(tmp_path, "toy_robot", docs_example())
    env = dict(os.environ, PYTHONPATH=str(site), OMP_NUM_THREADS="1")
    listed = roborl(["plugins"], env)
    assert listed.returncode == 0 and "toy_arm" in listed.stdout, listed.stdout[-2000:]

    stats = tmp_path / "stats.json"
    dep = roborl(
        ["deploy", "robot=toy_arm", f"checkpoint={balance_checkpoint}", "duration_s=2",
         f"stats={stats}", "robot.safety.high=[0.5]"],
        env,
    )  # fmt: skip
    assert dep.returncode == 0, dep.stderr[-3000:]
    done = json.loads(stats.read_text())
    assert done["commands"] > 20 and done["states_received"] > 20, done

    run_dir = tmp_path / "run"
    train = roborl(
        ["train", "algo=sac", "robot=toy_arm", "robot.rate_hz=100", "robot.max_episode_steps=50",
         "total_steps=200", "learning_starts=50", "eval_every=100000", "eval_episodes=1",
         "checkpoint_every=100000", "progress=false", "algo.hidden_sizes=[16,16]",
         "algo.batch_size=32",
         f"hydra.run.dir={run_dir}"],
        env,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env"] == "robot:toy_arm" and summary["updates"] > 0, summary

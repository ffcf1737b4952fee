"""Shared fixtures for the ROS 2 bridge tests: a loopback-only DDS config, unique domain ids,
node processes, and a scripted SAC checkpoint that balances InvertedPendulum."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_server import popen_roborl

from roborl.robots.nodes.processes import EventProcess as Proc

LOOPBACK = (
    '<CycloneDDS><Domain><General><Interfaces><NetworkInterface address="127.0.0.1"/>'
    "</Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery><Peers>"
    '<Peer address="127.0.0.1"/></Peers><ParticipantIndex>auto</ParticipantIndex>'
    "<MaxAutoParticipantIndex>64</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>"
)
# Disjoint domain ranges of 40 ids per lane and pytest-xdist worker, so concurrent test
# processes never share a domain: `make test` runs these tests in lane 1 (ROBORL_TEST_LANE=1,
# one worker) beside lane 0's two workers for the rest of the suite, hence slots 0-2 and ids
# 110-229 (ROS 2 domain ids end at 232). A plain `pytest` takes a per-process base instead. The
# fixed ids some tests use (42, 77) lie below every range.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
_LANE = os.environ.get("ROBORL_TEST_LANE", "")
if _LANE.isdigit() or os.environ.get("PYTEST_XDIST_WORKER"):
    _SLOT = 2 * int(_LANE or 0) + int(_WORKER)
    assert 0 <= _SLOT <= 2, f"no ROS domain range for lane {_LANE!r}, worker gw{_WORKER}"
    _BASE = 110 + 40 * _SLOT
else:
    _BASE = 100 + (os.getpid() % 40) * 2
_IDS = itertools.count(0)
GAINS = [0.5, 5.0, 0.5, 1.0]  # a linear balance controller for [x, theta, xdot, thetadot]


@pytest.fixture
def ros_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment for this test's processes: own ROS_DOMAIN_ID, loopback-only Cyclone, and
    rclpy (Fast DDS) discovery limited to this host (Kilted's replacement of ROS_LOCALHOST_ONLY)."""
    domain = str(_BASE + next(_IDS) % 40)
    monkeypatch.setenv("ROS_DOMAIN_ID", domain)
    monkeypatch.setenv("CYCLONEDDS_URI", LOOPBACK)
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    monkeypatch.delenv("ROS_LOCALHOST_ONLY", raising=False)
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Node:
    """A roborl node process whose JSON stdout events are collected by a thread."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = popen_roborl(args, env=env)
        self.events: list[dict] = []
        self.stderr = ""
        self._err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self._err.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.events.append({**json.loads(line), "_t": time.monotonic()})
            except json.JSONDecodeError:
                pass

    def wait_event(self, name: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events:
                if e.get("event") == name:
                    return e
            if self.proc.poll() is not None and not any(
                e.get("event") == name for e in self.events
            ):
                time.sleep(0.2)
                break
            time.sleep(0.05)
        for e in self.events:
            if e.get("event") == name:
                return e
        raise AssertionError(f"no {name!r} event; events={self.events} stderr={self.finish()}")

    def finish(self, timeout: float = 30.0) -> str:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        time.sleep(0.2)  # let the reader threads drain the pipes
        self.stderr = "".join(self._err)
        return self.stderr

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.finish()


@pytest.fixture
def nodes():
    started: list[Node] = []

    def start(args: list[str], env: dict[str, str]) -> Node:
        node = Node(args, env)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


@pytest.fixture(scope="session")
def balance_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SAC checkpoint whose actor is a scripted linear balance controller.

    Written through the real SAC plugin and the core checkpoint format, so `deploy` loads it
    with `algorithm_from_checkpoint` exactly like a trained one. The 2-unit ReLU layers carry
    +k.x and -k.x; the head outputs their difference, so the deterministic action is
    3*tanh(k.x) (the env's action range is [-3, 3]).
    """
    import gymnasium as gym

    from roborl.core.checkpoint import save_checkpoint
    from roborl.core.config import config_to_dict
    from roborl.core.plugins import get_host
    from roborl.core.runner import build_algorithm
    from roborl.core.spaces import space_to_dict

    host = get_host()
    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
    act_space = gym.spaces.Box(-3.0, 3.0, (1,), np.float32)
    algo = build_algorithm(
        host, {"name": "sac", "hidden_sizes": [2, 2]}, obs_space, act_space, "cpu"
    )
    k = torch.tensor(GAINS)
    with torch.no_grad():
        layers = [m for m in algo.actor.modules() if isinstance(m, torch.nn.Linear)]
        first, second, head = layers[0], layers[1], layers[-1]
        first.weight.copy_(torch.stack([k, -k]))
        first.bias.zero_()
        second.weight.copy_(torch.eye(2))
        second.bias.zero_()
        head.weight.zero_()
        head.bias.zero_()
        head.weight[0, 0], head.weight[0, 1] = 1.0, -1.0
    payload = {
        "algo": "sac",
        "algo_config": config_to_dict(algo.config),
        "observation_space": space_to_dict(obs_space),
        "action_space": space_to_dict(act_space),
        "state": algo.state_dict(),
    }
    path = tmp_path_factory.mktemp("ckpt") / "balance.pt"
    save_checkpoint(path, payload)
    return path


@pytest.fixture
def nan_checkpoint(balance_checkpoint: Path, tmp_path: Path) -> Path:
    """The balance policy with NaN weights: every action it computes is NaN."""
    from roborl.core.checkpoint import load_checkpoint

    ckpt = load_checkpoint(balance_checkpoint)
    ckpt.pop("path", None)
    for key, value in ckpt["state"]["actor"].items():
        ckpt["state"]["actor"][key] = torch.full_like(value, float("nan"))
    path = tmp_path / "nan.pt"
    torch.save(ckpt, path)  # save_checkpoint rightly refuses NaN weights: written by hand
    return path


@pytest.fixture
def rclpy_env(ros_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """ros_env (own ROS_DOMAIN_ID) with ROS 2's localhost-only discovery, for both sides."""
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    monkeypatch.delenv("ROS_LOCALHOST_ONLY", raising=False)
    env = dict(ros_env, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", OMP_NUM_THREADS="1")
    env.pop("ROS_LOCALHOST_ONLY", None)
    env.pop("RMW_IMPLEMENTATION", None)  # the wheels' default, rmw_fastrtps_cpp
    return env


@pytest.fixture
def procs():
    """Start processes (roborl commands, or any command with roborl=False), stopped after."""
    started: list[Proc] = []

    def start(args: list[str], env: dict[str, str], roborl: bool = True) -> Proc:
        if roborl:  # forked from the tests' pre-imported server (tests/cli_server.py)
            p = Proc([sys.executable, "-m", "roborl.core.cli", *args], env,
                     process=popen_roborl(args, env=env))  # fmt: skip
        else:
            p = Proc(args, env)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()

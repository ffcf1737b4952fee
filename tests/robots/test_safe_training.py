"""Safe training on a robot: `train robot=...` against `roborl sim-robot` over real DDS on
loopback, with the trainer in this process so that the test sees, in the order they happen,
every reset, step, hold and gradient update (all run on the trainer's main thread).

- gradient updates happen only while the robot holds between episodes, never mid-episode;
- evaluation reuses the one robot env: one driver, one command publisher, for the whole run;
- a slow policy (inference plus whatever runs between two observations) trips the watchdog
  in `train` as in `deploy`: the robot holds and the episode is truncated;
- `collector=ray` / `distributed=ray` with a robot are refused before anything connects.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from roborl.core.compose import compose_dict
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host
from roborl.core.runner import Runner
from roborl.plugins.sac.sac import SAC
from roborl.robots.env.driver import Ros2Driver
from roborl.robots.env.robot_env import RobotEnv
from roborl.robots.transport import msgs
from roborl.robots.transport.dds import DDSTransport

START = 90.0
COMMAND_TOPIC = "/forward_command_controller/commands"


@pytest.fixture
def sim_robot(ros_env, nodes):
    """`roborl sim-robot` (InvertedPendulum) over raw DDS; frozen after a fall until reset."""
    sim = nodes(
        ["sim-robot", "env=inverted_pendulum", "transport=dds", "rate_hz=100", "on_terminate=hold"],
        ros_env,
    )
    sim.wait_event("sim_robot_start", START)
    yield sim
    sim.proc.terminate()
    sim.wait_event("sim_robot_stop", 60)


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """The trainer's robot resets, steps (with their info), holds and SAC updates, in order."""
    log: list[tuple[str, Any]] = []
    reset, step, hold = RobotEnv.reset, RobotEnv.step, RobotEnv.hold
    update = SAC.update

    def on_reset(self, **kw):
        log.append(("reset", None))
        return reset(self, **kw)

    def on_step(self, action):
        out = step(self, action)
        log.append(("step", {"done": out[2] or out[3], **out[4]}))
        return out

    def on_hold(self):
        log.append(("hold", None))
        return hold(self)

    def on_update(self, batch):
        log.append(("update", None))
        return update(self, batch)

    monkeypatch.setattr(RobotEnv, "reset", on_reset)
    monkeypatch.setattr(RobotEnv, "step", on_step)
    monkeypatch.setattr(RobotEnv, "hold", on_hold)
    monkeypatch.setattr(SAC, "update", on_update)
    return log


def _train(run_dir: Path, *overrides: str) -> dict[str, Any]:
    host = get_host()
    cfg = compose_dict(
        host,
        [
            "algo=sac",
            "algo.batch_size=32",
            "algo.hidden_sizes=[32,32]",
            "robot=ros2",
            "robot.transport=dds",
            "robot.rate_hz=100",
            "robot.connect_timeout_s=60",
            "robot.max_episode_steps=40",
            "checkpoint_every=100000",
            "eval_episodes=1",
            "progress=false",
            *overrides,
        ],
        "train",
    )
    return Runner(cfg, run_dir, host).execute()


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_updates_happen_only_while_the_robot_holds_between_episodes(
    sim_robot, events, tmp_path: Path
) -> None:
    summary = _train(
        tmp_path / "run",
        "total_steps=160",
        "learning_starts=40",
        "eval_every=80",
        "log_every=40",
    )
    assert summary["status"] == "finished" and summary["steps"] == 160
    assert summary["updates"] > 0 and summary["episodes"] >= 2
    kinds = [k for k, _ in events]
    assert kinds.count("update") == summary["updates"]
    in_episode = False
    last_env_event = None
    for i, (kind, info) in enumerate(events):
        if kind == "reset":
            in_episode = True
        elif kind == "step":
            assert in_episode, f"step without a reset at event {i}"
            if info["done"]:
                in_episode = False
        elif kind == "hold":
            in_episode = False
        elif kind == "update":
            # The robot was told to hold after its last step, before any update.
            assert not in_episode, f"update #{kinds[:i].count('update')} ran mid-episode"
            assert last_env_event == "hold", f"update at event {i} came before the hold"
        if kind != "update":
            last_env_event = kind
    # Every episode (training and evaluation) ended with a hold and the next began with a
    # reset: between an update and the next step there is always a reset.
    for i, kind in enumerate(kinds):
        if kind == "update":
            nxt = next((k for k in kinds[i + 1 :] if k in ("reset", "step")), None)
            assert nxt in (None, "reset")
    evals = [r for r in _metrics(tmp_path / "run") if "eval/return_mean" in r]
    assert len(evals) >= 2  # evaluation at step 80 and at the end, on the same robot env


def test_evaluation_reuses_the_one_robot_driver(
    sim_robot, events, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connects: list[Ros2Driver] = []
    connect = Ros2Driver.connect

    def counting_connect(self, timeout_s):
        connects.append(self)
        return connect(self, timeout_s)

    monkeypatch.setattr(Ros2Driver, "connect", counting_connect)
    # The robot's view: how many writers are matched on its command topic, sampled all run.
    observer = DDSTransport("command_observer")
    reader = observer.subscribe(COMMAND_TOPIC, msgs.Float64MultiArray, lambda m: None)
    counts: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            counts.append(observer.matched(reader))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        summary = _train(
            tmp_path / "run",
            "total_steps=120",
            "learning_starts=20",
            "eval_every=30",
            "log_every=30",
        )
    finally:
        stop.set()
        sampler.join()
        observer.close()
    assert summary["status"] == "finished"
    evals = [r for r in _metrics(tmp_path / "run") if "eval/return_mean" in r]
    assert len(evals) >= 3 and summary["eval_episodes"] >= 3
    assert len(connects) == 1, f"{len(connects)} robot drivers connected"
    assert max(counts) == 1, f"up to {max(counts)} publishers commanded the robot"
    # Training steps continue after each evaluation, on the same env, after a reset.
    kinds = [k for k, _ in events]
    assert kinds.count("reset") >= summary["episodes"] + summary["eval_episodes"]


def test_a_slow_policy_in_train_trips_the_watchdog(
    sim_robot, events, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_call, sleep_s = 3, 0.6
    calls = [0]
    act = SAC.act

    def slow_act(self, obs, deterministic=False):
        calls[0] += 1
        if calls[0] == slow_call:
            time.sleep(sleep_s)
        return act(self, obs, deterministic)

    monkeypatch.setattr(SAC, "act", slow_act)
    summary = _train(
        tmp_path / "run",
        "total_steps=60",
        "learning_starts=0",
        "eval_every=100000",
        "log_every=10",
        "robot.safety.max_policy_time_s=0.25",
    )
    assert summary["status"] == "finished"
    steps = [info for kind, info in events if kind == "step"]
    slow = steps[slow_call - 1]  # training steps come first: no evaluation before the end
    assert slow["watchdog"] and slow["held"], slow
    assert "policy took" in slow["safety_cause"] and slow["policy_time_s"] >= sleep_s
    assert slow["done"]  # the watchdog truncated the episode
    assert not steps[slow_call - 2]["watchdog"]  # the policy was on time just before
    # The hold went out to the robot instead of the late action, and training went on.
    idx = next(i for i, (k, info) in enumerate(events) if k == "step" and info is slow)
    assert ("reset", None) in events[idx + 1 :]
    rows = _metrics(tmp_path / "run")
    assert sum(r.get("robot/watchdog_stops", 0) for r in rows) >= 1
    assert max(r.get("robot/policy_time_max_s", 0) for r in rows) >= sleep_s


@pytest.mark.parametrize("setting", ["collector=ray", "distributed=ray"])
def test_ray_with_a_robot_is_refused(
    setting: str, ros_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connects: list[Any] = []
    monkeypatch.setattr(Ros2Driver, "connect", lambda self, t: connects.append(self))
    with pytest.raises(ConfigError, match=r"(?s)cannot drive a real robot.*actor-learner"):
        _train(tmp_path / "run", setting, "total_steps=10")
    assert connects == []  # refused before any driver touched the robot

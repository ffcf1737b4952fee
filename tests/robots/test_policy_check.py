"""Issue 47: `deploy` checks joint names and order, not only the observation shape.

A robot run keeps its robot section (observed joints, fields, commanded joints, cameras) in
every checkpoint and in `roborl export`'s config.json; deploy compares it with the robot config
in force and refuses another name set or order, even when the shapes agree. A policy trained
without a robot (a Gymnasium env) names no joints: deploy keeps the shape check and says so.
No ROS process here: the driver is built from the config alone (no node, no connection).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.checkpoint import load_checkpoint
from roborl.core.compose import compose_dict
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host
from roborl.robots.nodes.policy_check import TrainedRobot, check_trained_robot

OBS4 = {"type": "Box", "low": -1.0, "high": 1.0, "shape": [4], "dtype": "float64"}


def _driver(joints: list[str], command: list[str] | None = None, fields=None, cameras=()):
    return SimpleNamespace(
        joints=list(joints),
        fields=list(fields or ["position", "velocity"]),
        command_joints=list(command if command is not None else joints),
        cameras=[SimpleNamespace(name=n, height=h, width=w) for n, h, w in cameras],
    )


def _meta(robot: dict[str, Any] | None, obs: dict[str, Any] = OBS4) -> dict[str, Any]:
    config: dict[str, Any] = {"env": {"id": "InvertedPendulum-v5"}, "robot": robot}
    return {"path": "run/checkpoints/last.pt", "observation_space": obs, "config": config}


PENDULUM = {
    "joints": ["slider", "hinge"],
    "fields": ["position", "velocity"],
    "command": {"joints": ["slider"]},
}


def test_same_layout_is_accepted() -> None:
    trained = TrainedRobot.of(_meta(PENDULUM))
    assert trained is not None and trained.layout is not None
    assert check_trained_robot(trained, _driver(["slider", "hinge"], ["slider"])) is None


def test_swapped_joint_order_is_refused_with_both_lists_and_the_fix() -> None:
    trained = TrainedRobot.of(_meta(PENDULUM))
    with pytest.raises(ConfigError) as err:  # same shapes: 2 joints x 2 fields
        check_trained_robot(trained, _driver(["hinge", "slider"], ["slider"]))
    msg = str(err.value)
    assert "robot.joints was [slider,hinge] in training and is [hinge,slider] here" in msg
    assert "robot.joints=[slider,hinge]" in msg  # what to set, in the trained order
    assert "run/checkpoints/last.pt" in msg
    assert "\n" not in msg


def test_renamed_joint_and_commanded_order_are_refused() -> None:
    trained = TrainedRobot.of(_meta(PENDULUM))
    with pytest.raises(ConfigError, match=r"\[slider,hinge\] in training and is \[slider,pole\]"):
        check_trained_robot(trained, _driver(["slider", "pole"], ["slider"]))
    with pytest.raises(ConfigError, match=r"robot.command.joints was \[slider\]"):
        check_trained_robot(trained, _driver(["slider", "hinge"], ["hinge"]))
    with pytest.raises(ConfigError, match=r"robot.fields was \[position,velocity\]"):
        check_trained_robot(
            trained, _driver(["slider", "hinge"], ["slider"], ["velocity", "position"])
        )


def test_cameras_are_part_of_the_record() -> None:
    robot = {**PENDULUM, "cameras": [{"name": "top", "topic": "/t", "width": 64, "height": 48}]}
    trained = TrainedRobot.of(_meta(robot))
    ok = _driver(["slider", "hinge"], ["slider"], cameras=[("top", 48, 64)])
    assert check_trained_robot(trained, ok) is None
    other = _driver(["slider", "hinge"], ["slider"], cameras=[("front", 48, 64)])
    with pytest.raises(ConfigError, match=r"robot.cameras was \[top:48x64\]"):
        check_trained_robot(trained, other)


def test_no_record_keeps_the_shape_check_and_says_so() -> None:
    d = _driver(["hinge", "slider"], ["slider"])
    sim = TrainedRobot.of(_meta(None))  # trained on a Gymnasium env
    note = check_trained_robot(sim, d)
    assert note and "joint names could not be checked" in note and "InvertedPendulum-v5" in note
    old = TrainedRobot.of({"algo": "sac", "observation_space": OBS4})  # no config at all
    assert "could not be checked" in (check_trained_robot(old, d) or "")
    assert check_trained_robot(None, d) is None  # nothing trained (a checkpoint-free algo)


def test_a_record_that_cannot_describe_the_run_is_not_trusted() -> None:
    d = _driver(["hinge", "slider"], ["slider"])
    # ROS parameters may have set the joints at training: the saved config does not show them.
    for robot in (
        {**PENDULUM, "params_file": "robot.yaml"},
        {**PENDULUM, "ros_args": ["-p", "joints:=[hinge,slider]"]},
    ):
        note = check_trained_robot(TrainedRobot.of(_meta(robot)), d)
        assert note and "ROS parameters" in note
    # A -p that leaves the layout alone keeps the check.
    rate = {**PENDULUM, "ros_args": ["-p", "rate_hz:=50.0"]}
    with pytest.raises(ConfigError):
        check_trained_robot(TrainedRobot.of(_meta(rate)), d)
    # 3 joints x 2 fields is not the stored 4-value observation.
    three = {**PENDULUM, "joints": ["a", "b", "c"]}
    assert "does not describe" in (check_trained_robot(TrainedRobot.of(_meta(three)), d) or "")


# -- the record is what `train robot=...` stores, and deploy refuses on it -----------------------


class _FakeRobot(gym.Env):
    """Stands in for the ROS 2 robot env: the pendulum's 2 joints x 2 fields, 1 command."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
    action_space = gym.spaces.Box(-3.0, 3.0, (1,), np.float32)

    def __init__(self, cfg: Any) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return np.full(4, 0.01 * self.t), 1.0, self.t >= 10, False, {}

    def pause(self) -> None:
        pass


@pytest.fixture(scope="module")
def robot_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of `train algo=sac robot=ros2` (composed as the CLI does, run by the Runner) whose
    robot is a stand-in env, so its checkpoint is written exactly as a robot run's."""
    from roborl.core.runner import Runner

    host = get_host()
    real = host.registry.robots["ros2"]

    def factory(robot_cfg: Any) -> gym.Env:
        return _FakeRobot(robot_cfg)

    factory.Config = real.Config  # type: ignore[attr-defined]
    cfg = compose_dict(
        host,
        [
            "algo=sac",
            "algo.hidden_sizes=[8,8]",
            "robot=ros2",
            "total_steps=30",
            "learning_starts=10",
            "eval_every=100000",
            "checkpoint_every=100000",
            "progress=false",
        ],
        "train",
    )
    cfg.pop("hydra", None)
    run_dir = tmp_path_factory.mktemp("robot_run")
    host.registry.robots["ros2"] = factory
    threads = torch.get_num_threads()  # the run sets torch_threads for this process
    try:
        Runner(cfg, run_dir, host).execute()
    finally:
        host.registry.robots["ros2"] = real
        torch.set_num_threads(threads)
    return run_dir


def test_a_robot_run_checkpoint_and_its_export_record_the_layout(
    robot_run: Path, tmp_path: Path
) -> None:
    from roborl.plugins.export.cli import export

    ckpt = load_checkpoint(robot_run)
    trained = TrainedRobot.of(ckpt)
    assert trained is not None and trained.layout is not None
    assert trained.layout.joints == ("slider", "hinge")
    assert trained.layout.fields == ("position", "velocity")
    assert trained.layout.command_joints == ("slider",)
    out = tmp_path / "model"
    export(get_host(), str(robot_run), out)
    meta = json.loads((out / "config.json").read_text())
    exported = TrainedRobot.of(meta)
    assert exported is not None and exported.layout == trained.layout


def _deploy(monkeypatch: pytest.MonkeyPatch, source: dict[str, str], joints: list[str]) -> Any:
    """`roborl deploy SOURCE robot=ros2 robot.joints=JOINTS` up to the policy check: the driver
    is built from the config (its node and connection faked; nothing is commanded)."""
    from roborl.robots.config import robot_preset
    from roborl.robots.env.driver import Ros2Driver
    from roborl.robots.nodes.deploy import DeployOptions
    from roborl.robots.nodes.deploy_node import DeployNode

    transport = SimpleNamespace(use_sim_time=False, close=lambda: None, log=lambda *a: None)

    def fake_open(
        cls: type, cfg: dict, node_name: Any = None, *, extra_params: Any = None, **kw: Any
    ) -> tuple[Any, dict]:
        driver = cls(cfg, transport=transport)
        values = {k: p.value for k, p in (extra_params or {}).items()}
        return driver, {**cfg, **values}

    monkeypatch.setattr(Ros2Driver, "open", classmethod(fake_open))
    robot_cfg = {**robot_preset("ros2"), "joints": joints, "transport": "dds"}
    return DeployNode(DeployOptions(**source), robot_cfg, None, [])


def test_deploy_refuses_a_checkpoint_trained_with_another_joint_order(
    robot_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from roborl.plugins.export.cli import export

    ckpt = str(robot_run / "checkpoints" / "last.pt")
    node = _deploy(monkeypatch, {"checkpoint": ckpt}, ["slider", "hinge"])
    assert node.policy is not None
    node.teardown()
    with pytest.raises(ConfigError, match=r"robot.joints=\[slider,hinge\]"):
        _deploy(monkeypatch, {"checkpoint": ckpt}, ["hinge", "slider"])
    model = tmp_path / "model"
    export(get_host(), ckpt, model)
    with pytest.raises(ConfigError, match=r"robot.joints was \[slider,hinge\]"):
        _deploy(monkeypatch, {"model": str(model)}, ["hinge", "slider"])


def test_deploy_of_a_sim_checkpoint_checks_shapes_and_notes_the_names(
    balance_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    node = _deploy(monkeypatch, {"checkpoint": str(balance_checkpoint)}, ["hinge", "slider"])
    node.teardown()
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    notes = [e for e in events if e.get("event") == "policy_check"]
    assert len(notes) == 1 and "joint names could not be checked" in notes[0]["note"]
    with pytest.raises(ConfigError, match="expects observations"):  # the shape check stays
        _deploy(monkeypatch, {"checkpoint": str(balance_checkpoint)}, ["slider", "hinge", "x"])

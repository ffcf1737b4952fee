"""The typed robot config: one dataclass holds every default, unknown keys are refused with a
did-you-mean, and each bad value is a one-paragraph error that names its key."""

from __future__ import annotations

import re

import pytest
from cli_server import run_roborl

from roborl.core.errors import ConfigError
from roborl.robots.config import RobotConfig, parse_robot_config, robot_config_dict

BASE = {
    "joints": ["slider", "hinge"],
    "command": {"joints": ["slider"], "interface_name": "velocity"},
}


def with_(**changes) -> dict:
    cfg = {**BASE, **{k: v for k, v in changes.items() if k not in ("safety", "command")}}
    for section in ("safety", "command"):
        if section in changes:
            cfg[section] = {**BASE.get(section, {}), **changes[section]}
    return cfg


@pytest.mark.parametrize(
    ("cfg", "needles"),
    [
        (with_(safety={"max_detla": 0.1}), ["robot.safety.max_detla", "max_delta"]),
        (with_(ratehz=10), ["robot.ratehz", "rate_hz"]),
        (with_(safety={"max_delta": -0.5}), ["robot.safety.max_delta=-0.5"]),
        (with_(safety={"max_delta": 0.0}), ["robot.safety.max_delta=0.0", "> 0"]),
        (with_(safety={"low": [float("nan")], "high": [1.0]}), ["robot.safety.low", "nan"]),
        (with_(safety={"low": [-1.0], "high": [float("inf")]}), ["robot.safety.high", "finite"]),
        (with_(safety={"low": [1.0], "high": [-1.0]}), ["robot.safety.low=[1.0]", "below"]),
        (with_(safety={"low": [0.5], "high": [0.5]}), ["robot.safety.low=[0.5]", "below"]),
        (
            with_(safety={"low": [-1.0, -1.0], "high": [1.0, 1.0]}),
            ["robot.safety.low", "one value per"],
        ),
        (with_(safety={"max_state_age_s": 0}), ["robot.safety.max_state_age_s=0"]),
        (with_(safety={"max_policy_time_s": -1.0}), ["robot.safety.max_policy_time_s=-1.0"]),
        (with_(safety={"hold": "freeze"}), ["robot.safety.hold='freeze'", "zero, position"]),
        (with_(rate_hz=0), ["robot.rate_hz=0"]),
        (with_(rate_hz=float("inf")), ["robot.rate_hz=inf"]),
        (with_(connect_timeout_s=-2.0), ["robot.connect_timeout_s=-2.0"]),
        (with_(joints=["slider", "slider"]), ["robot.joints", "more than once"]),
        (with_(joints=[]), ["robot.joints is empty"]),
        (with_(command={"joints": ["elbow"]}), ["robot.command.joints", "elbow"]),
        (
            with_(command={"interface": "effort"}),
            ["robot.command.interface='effort'", "twist_stamped"],
        ),
        (with_(command={"frame_id": ""}), ["robot.command.frame_id=''", "non-empty"]),
        (with_(command={"frame_id": "/odom"}), ["robot.command.frame_id='/odom'", "'/'"]),
        (with_(command={"frame_id": "base link"}), ["robot.command.frame_id='base link'"]),
        (with_(command={"frame_id": 7}), ["robot.command.frame_id=7", "string"]),
        (with_(fields=["position", "torque"]), ["robot.fields", "effort"]),
        (with_(transport="zmq"), ["robot.transport='zmq'"]),
        (with_(estop={"clear": "anyone"}), ["robot.estop.clear='anyone'", "service, none"]),
        (with_(reset={"mode": "wait", "wiat_s": 1}), ["robot.reset.wiat_s", "wait_s"]),
        (with_(reset={"mode": "teleport"}), ["robot.reset.mode='teleport'", "home"]),
        (with_(reset={"mode": "home"}), ["robot.reset.mode=home", "robot.reset.home"]),
        (with_(reset={"timeout_s": 0.0}), ["robot.reset.timeout_s=0.0", "> 0"]),
        (with_(reset={"duration_s": float("nan")}), ["robot.reset.duration_s"]),
        (with_(reset={"wait_s": -1.0}), ["robot.reset.wait_s"]),
        (with_(terminate={"joint": "hinge", "abs_abve": 0.2}), ["robot.terminate.abs_abve"]),
    ],
)
def test_each_bad_value_is_a_clear_error_naming_the_key(cfg: dict, needles: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_robot_config(cfg)
    message = str(info.value)
    assert "\n" not in message.strip()
    for needle in needles:
        assert needle in message, (needle, message)


def test_defaults_come_from_the_dataclass_only() -> None:
    cfg = robot_config_dict(BASE)
    assert cfg["rate_hz"] == RobotConfig.rate_hz == 50.0
    assert cfg["safety"]["low"] == [-1.0] and cfg["safety"]["high"] == [1.0]
    assert cfg["estop"] == {"clear": "service"}
    assert cfg["reset"]["mode"] == "wait" and cfg["reset"]["wait_s"] == 0.0
    assert robot_config_dict(cfg) == cfg  # idempotent: a filled config validates unchanged


def test_twist_stamped_frame_id_is_typed_and_checked_as_a_ros_parameter_too() -> None:
    """twist_stamped commands a base (no observed joints needed), holds zero, and its
    header.frame_id is a config key and a ROS parameter, validated on either path."""
    from roborl.robots.config import hold_for
    from roborl.robots.env.driver_params import apply_parameters, robot_parameters

    base = with_(command={"interface": "twist_stamped", "joints": ["vx", "wz"]})
    base["command"].pop("interface_name")
    base["safety"] = {"low": [-0.5, -1.0], "high": [0.5, 1.0]}
    cfg = parse_robot_config(base)
    assert cfg.command.frame_id == "base_link" and hold_for(cfg) == "zero" == cfg.hold
    assert robot_parameters(cfg)["command.frame_id"].value == "base_link"
    moved = apply_parameters(cfg, {"command.frame_id": "base_footprint"})
    assert isinstance(moved, RobotConfig) and moved.command.frame_id == "base_footprint"
    assert cfg.command.frame_id == "base_link"  # a new config; the one passed in is unchanged
    with pytest.raises(ConfigError, match=r"robot\.command\.frame_id=''"):
        apply_parameters(cfg, {"command.frame_id": ""})


def test_each_rule_is_checked_once_when_the_config_is_built() -> None:
    """The typed config is what is passed down: built (and validated) once, then taken as it
    is by everything below it; a bad value is refused at construction, naming its key."""
    from pathlib import Path

    import roborl.robots
    from roborl.robots.env.driver_params import robot_parameters
    from roborl.robots.robot import ConfigLayout

    cfg = parse_robot_config(BASE)
    assert parse_robot_config(cfg) is cfg  # passed down as is, not validated again
    assert ConfigLayout.of(cfg).command_joints == ["slider"] == cfg.commanded_joints
    assert robot_parameters(cfg)["rate_hz"].value == 50.0  # ROS parameters derive from it
    assert cfg.limits == ([-1.0], [1.0])
    for build in (
        lambda: parse_robot_config(with_(rate_hz=0)),
        lambda: RobotConfig(joints=["slider"], rate_hz=-5.0),
    ):
        with pytest.raises(ConfigError, match=r"robot\.rate_hz=(0\.0|-5\.0) must be"):
            build()
    # No module below the config checks the rate again (one rule, one place).
    root = Path(roborl.robots.__file__).parent
    again = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if p.name != "config.py" and re.search(r"rate_hz\s*<=?\s*0", p.read_text())
    ]
    assert again == [], again


def test_rate_limit_never_walks_past_a_limit() -> None:
    """The issue's case: with `low=-1`, repeated steps towards -3 stop at the limit."""
    import numpy as np

    from roborl.robots.env.safety import SafetyConfig, SafetyLayer

    layer = SafetyLayer(SafetyConfig(low=[-1.0], high=[1.0], max_delta=0.5))
    sent: list[float] = []
    layer.bind_output(lambda command: sent.append(float(command[0])))
    layer.enable()
    for _ in range(6):
        assert layer.emit(layer.filter(np.array([-3.0]), 0.0).command)
    assert sent == [-0.5, -1.0, -1.0, -1.0, -1.0, -1.0]


def test_cli_refuses_an_unknown_robot_key_before_any_ros_traffic(tmp_path) -> None:
    proc = run_roborl(
        ["train", "robot=ros2", "robot.safety.max_detla=0.1", "total_steps=10"],
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "max_detla" in proc.stderr and "max_delta" in proc.stderr, proc.stderr

"""The bridge without processes: CDR bytes vs rosbags, ROS 2 naming/QoS, JointState checks,
the safety layer, and a real DDS round trip on loopback."""

from __future__ import annotations

import time

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from roborl.core.errors import ConfigError, RobotError
from roborl.robots.env.driver import Ros2Driver, parse_joint_state
from roborl.robots.env.safety import SafetyConfig, SafetyLayer
from roborl.robots.transport import msgs
from roborl.robots.transport.common import domain_id
from roborl.robots.transport.dds import DDSTransport

TS = get_typestore(Stores.ROS2_HUMBLE)


def _rb(_type: str, **kw):
    return TS.types[_type](**kw)


def _arr(xs):
    return np.asarray(xs, dtype=np.float64)


def test_cdr_bytes_identical_to_rosbags() -> None:
    """Our DDS types serialise to exactly the bytes rosbags' ROS 2 serialiser produces."""
    t = _rb("builtin_interfaces/msg/Time", sec=12, nanosec=345)
    header = _rb("std_msgs/msg/Header", stamp=t, frame_id="base_link")
    cases = [
        (
            "sensor_msgs/msg/JointState",
            _rb(
                "sensor_msgs/msg/JointState",
                header=header,
                name=["slider", "hinge"],
                position=_arr([0.1, -0.2]),
                velocity=_arr([1.5, 2.5]),
                effort=_arr([]),
            ),
            msgs.JointState(
                header=msgs.Header(msgs.Time(12, 345), "base_link"),
                name=["slider", "hinge"],
                position=[0.1, -0.2],
                velocity=[1.5, 2.5],
                effort=[],
            ),
        ),
        (
            "std_msgs/msg/Float64MultiArray",
            _rb(
                "std_msgs/msg/Float64MultiArray",
                layout=_rb(
                    "std_msgs/msg/MultiArrayLayout",
                    dim=[_rb("std_msgs/msg/MultiArrayDimension", label="j", size=3, stride=3)],
                    data_offset=0,
                ),
                data=_arr([1.0, -2.0, 3.5]),
            ),
            msgs.Float64MultiArray(
                layout=msgs.MultiArrayLayout(dim=[msgs.MultiArrayDimension("j", 3, 3)]),
                data=[1.0, -2.0, 3.5],
            ),
        ),
        (
            "trajectory_msgs/msg/JointTrajectory",
            _rb(
                "trajectory_msgs/msg/JointTrajectory",
                header=header,
                joint_names=["a", "b"],
                points=[
                    _rb(
                        "trajectory_msgs/msg/JointTrajectoryPoint",
                        positions=_arr([0.5, 0.25]),
                        velocities=_arr([]),
                        accelerations=_arr([]),
                        effort=_arr([]),
                        time_from_start=_rb("builtin_interfaces/msg/Duration", sec=1, nanosec=5),
                    )
                ],
            ),
            msgs.JointTrajectory(
                header=msgs.Header(msgs.Time(12, 345), "base_link"),
                joint_names=["a", "b"],
                points=[
                    msgs.JointTrajectoryPoint(
                        positions=[0.5, 0.25], time_from_start=msgs.Duration(1, 5)
                    )
                ],
            ),
        ),
        (
            "geometry_msgs/msg/Twist",
            _rb(
                "geometry_msgs/msg/Twist",
                linear=_rb("geometry_msgs/msg/Vector3", x=0.5, y=0.0, z=0.0),
                angular=_rb("geometry_msgs/msg/Vector3", x=0.0, y=0.0, z=-1.25),
            ),
            msgs.Twist(linear=msgs.Vector3(0.5, 0, 0), angular=msgs.Vector3(0, 0, -1.25)),
        ),
        (
            "geometry_msgs/msg/TwistStamped",
            _rb(
                "geometry_msgs/msg/TwistStamped",
                header=header,
                twist=_rb(
                    "geometry_msgs/msg/Twist",
                    linear=_rb("geometry_msgs/msg/Vector3", x=0.5, y=0.0, z=0.0),
                    angular=_rb("geometry_msgs/msg/Vector3", x=0.0, y=0.0, z=-1.25),
                ),
            ),
            msgs.TwistStamped(
                header=msgs.Header(msgs.Time(12, 345), "base_link"),
                twist=msgs.Twist(linear=msgs.Vector3(0.5, 0, 0), angular=msgs.Vector3(0, 0, -1.25)),
            ),
        ),
        ("std_msgs/msg/Bool", _rb("std_msgs/msg/Bool", data=True), msgs.Bool(True)),
    ]
    for name, theirs, ours in cases:
        expected = bytes(TS.serialize_cdr(theirs, name))
        assert ours.serialize() == expected, name
        pkg, _, typ = name.split("/")
        assert type(ours).__idl_typename__ == f"{pkg}::msg::dds_::{typ}_"
        back = type(ours).deserialize(expected)
        assert back == ours


def test_ros2_naming_and_domain(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DDSTransport.dds_topic("/joint_states") == "rt/joint_states"
    assert DDSTransport.dds_topic("/arm_controller/commands") == "rt/arm_controller/commands"
    monkeypatch.setenv("ROS_DOMAIN_ID", "17")
    assert domain_id() == 17
    monkeypatch.setenv("ROS_DOMAIN_ID", "999")
    with pytest.raises(ConfigError, match="ROS_DOMAIN_ID='999'"):
        domain_id()


def test_cyclone_config_always_carries_fastdds_compat_and_keeps_user_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Fast DDS setting comes first, so a user's CYCLONEDDS_URI (merged after it) still
    applies and can override it; the loopback config only stands in for a missing URI."""
    from roborl.robots.transport.dds import FASTDDS_COMPAT_XML, LOOPBACK_XML, cyclone_config

    assert "<IgnoreTypeInformation>1.15</IgnoreTypeInformation>" in FASTDDS_COMPAT_XML
    for var in ("CYCLONEDDS_URI", "ROS_LOCALHOST_ONLY", "ROS_AUTOMATIC_DISCOVERY_RANGE"):
        monkeypatch.delenv(var, raising=False)
    assert cyclone_config() == FASTDDS_COMPAT_XML
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    assert cyclone_config() == f"{FASTDDS_COMPAT_XML},{LOOPBACK_XML}"
    monkeypatch.setenv("CYCLONEDDS_URI", "file:///etc/cyclone.xml")
    assert cyclone_config() == f"{FASTDDS_COMPAT_XML},file:///etc/cyclone.xml"


def _js(names, pos, vel=None):
    vel = [0.0] * len(pos) if vel is None else vel
    return msgs.JointState(name=names, position=pos, velocity=vel, effort=[])


@pytest.mark.parametrize(
    ("msg", "match"),
    [
        (_js(["slider"], [0.0]), r"lacks joints \['hinge'\]"),
        (_js(["slider", "elbow"], [0.0, 0.0]), r"lacks joints \['hinge'\].*elbow"),
        (_js(["slider", "hinge"], [0.0]), "position has 1 values for 2 names"),
        (_js(["slider", "hinge"], [0.0, 0.0], [0.0]), "velocity has 1 values for 2 names"),
        (_js(["slider", "hinge"], [0.0, float("nan")]), "non-finite"),
        (_js(["slider", "hinge"], [0.0, 0.0], [float("inf"), 0.0]), "non-finite"),
        (_js(["hinge", "hinge"], [0.0, 0.0]), "duplicate"),
    ],
)
def test_malformed_joint_state_is_a_clear_error(msg: msgs.JointState, match: str) -> None:
    with pytest.raises(RobotError, match=match):
        parse_joint_state(msg, ["slider", "hinge"], ["position", "velocity"])


def test_joint_state_matched_by_name_not_order() -> None:
    msg = _js(["hinge", "extra", "slider"], [0.2, 9.0, 0.1], [2.0, 9.0, 1.0])
    obs = parse_joint_state(msg, ["slider", "hinge"], ["position", "velocity"])
    np.testing.assert_array_equal(obs, [0.1, 0.2, 1.0, 2.0])


def _layer(**kw) -> SafetyLayer:
    return SafetyLayer(SafetyConfig(low=[-1.0, -2.0], high=[1.0, 2.0], **kw))


def test_safety_clamps_rate_limits_and_rejects_nonfinite() -> None:
    s = _layer(max_delta=0.5)
    s.bind_output(lambda command: None)
    s.enable()
    d = s.filter(np.array([5.0, -5.0]), state_age_s=0.0)
    np.testing.assert_allclose(d.command, [0.5, -0.5])  # clamp then rate limit from 0
    assert s.emit(d.command)  # the rate limit counts from what was sent
    d = s.filter(np.array([5.0, -5.0]), state_age_s=0.0)
    np.testing.assert_allclose(d.command, [1.0, -1.0])
    d = s.filter(np.array([np.nan, 0.0]), state_age_s=0.0)
    assert d.held and "non-finite" in d.cause
    np.testing.assert_array_equal(d.command, [0.0, 0.0])
    assert s.interventions["nonfinite"] == 1 and s.interventions["rate_limit"] >= 1
    d = s.filter(np.array([0.0]), state_age_s=0.0)
    assert d.held and "shape" in d.cause


def test_safety_watchdog_and_latched_estop() -> None:
    s = _layer(max_state_age_s=0.1, max_policy_time_s=0.2, hold="position")
    s.bind_output(lambda command: None)
    s.enable()
    assert s.emit(s.filter(np.array([0.3, 0.4]), 0.0).command)
    d = s.filter(np.array([1.0, 1.0]), state_age_s=0.5)
    assert d.watchdog and d.held and "old" in d.cause
    np.testing.assert_allclose(d.command, [0.3, 0.4])  # no measurement: the last sent
    d = s.filter(np.array([1.0, 1.0]), state_age_s=0.0, policy_time_s=0.3)
    assert d.watchdog and "policy took" in d.cause
    s.trigger_estop("test")
    for _ in range(3):
        assert s.filter(np.array([0.1, 0.1]), 0.0) is None  # latched: nothing is sent
    s.reset_estop()
    assert s.filter(np.array([0.1, 0.1]), 0.0) is not None
    with pytest.raises(ConfigError, match="hold"):
        SafetyConfig(low=[0.0], high=[1.0], hold="float")


def test_dds_driver_round_trip_and_malformed_state_never_updates(ros_env) -> None:
    """A real Cyclone DDS exchange on loopback: driver reads by name, commands, rejects junk."""
    robot = DDSTransport("fake_robot")
    pub = robot.publisher("/joint_states", msgs.JointState)
    got: list = []
    robot.subscribe("/ctl/commands", msgs.Float64MultiArray, got.append)
    driver = Ros2Driver(
        {
            "joints": ["slider", "hinge"],
            "transport": "dds",
            "command": {"controller": "ctl", "joints": ["slider"], "interface_name": "velocity"},
        }
    )
    good = _js(["hinge", "slider"], [0.2, 0.1], [2.0, 1.0])
    stop = [False]
    import threading

    def spam() -> None:
        while not stop[0]:
            pub(good)
            time.sleep(0.01)

    th = threading.Thread(target=spam, daemon=True)
    th.start()
    try:
        driver.connect(timeout_s=30.0)
        obs, age = driver.observation()
        np.testing.assert_array_equal(obs, [0.1, 0.2, 1.0, 2.0])
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            driver.command(np.array([0.75]))
            time.sleep(0.05)
        assert got and got[-1].data == [0.75]
        with pytest.raises(RobotError, match="controller 'ctl' drives 1 joints"):
            driver.command(np.array([0.1, 0.2]))
        stop[0] = True
        th.join()
        before = driver.received
        for bad in (_js(["slider"], [0.0]), _js(["slider", "hinge"], [0.0, float("nan")])):
            pub(bad)
        deadline = time.monotonic() + 30
        while driver.rejected < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert driver.rejected >= 2 and driver.received == before
        assert "non-finite" in driver.last_error or "lacks" in driver.last_error
        _, age2 = driver.observation()
        assert age2 > age  # stale: the safety layer's watchdog would hold, not command
    finally:
        stop[0] = True
        driver.close()
        robot.close()


def test_callback_error_does_not_stop_dispatch_and_close_is_final(ros_env) -> None:
    """A raising callback is logged and later samples still arrive; a closed transport refuses
    new endpoints with a RobotError instead of touching deleted DDS entities."""
    pub_side = DDSTransport("pub_side")
    sub_side = DDSTransport("sub_side")
    pub = pub_side.publisher("/flaky", msgs.Bool)
    got: list[bool] = []

    def flaky(msg: msgs.Bool) -> None:
        got.append(msg.data)
        if len(got) == 1:
            raise ValueError("first sample breaks the callback")

    sub_side.subscribe("/flaky", msgs.Bool, flaky)
    try:
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            pub(msgs.Bool(True))
            time.sleep(0.02)
        assert len(got) >= 3  # the dispatcher survived the exception
    finally:
        sub_side.close()
        pub_side.close()
    sub_side.close()  # idempotent
    with pytest.raises(RobotError, match="is closed"):
        sub_side.publisher("/flaky", msgs.Bool)

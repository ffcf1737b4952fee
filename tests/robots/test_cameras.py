"""Cameras over ROS 2: sensor_msgs/Image bytes, decoding, frames from `sim-robot` into the robot
env's Dict observation, and the per-camera staleness watchdog.

The wire tests run a real `sim-robot env=tabletop` process (MuJoCo rendering the RoborlTabletop
scene offscreen) and a real driver node, with the two transports crossed (Cyclone DDS <-> rclpy
on Fast DDS), so every frame crosses vendors. A frame is checked pixel for pixel against a
local render of the scene at the joint positions that arrived with it.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from roborl.core.errors import RobotError
from roborl.robots.config import robot_preset
from roborl.robots.env.cameras import CameraFeed, CameraSpec, decode_image, encode_image
from roborl.robots.env.driver import Ros2Driver
from roborl.robots.env.ros2_kind import open_driver
from roborl.robots.env.safety import SafetyConfig, SafetyLayer
from roborl.robots.robot import RobotKind
from roborl.robots.transport import msgs
from roborl.robots.transport.rclpy_node import RclpyTransport
from roborl.sim.tabletop.env import TabletopEnv

_make_ros2 = RobotKind(open_driver)  # what `robot=ros2` registers (roborl_robots)

START = 90.0  # process start-up on a loaded 2-core machine can take tens of seconds
SCENE = ["gx", "gy", "red_x", "red_y", "green_x", "green_y", "blue_x", "blue_y"]
TS = get_typestore(Stores.ROS2_KILTED)


def _frame(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _rosbags_image(m: msgs.Image) -> Any:
    t = TS.types
    return t["sensor_msgs/msg/Image"](
        header=t["std_msgs/msg/Header"](
            stamp=t["builtin_interfaces/msg/Time"](
                sec=m.header.stamp.sec, nanosec=m.header.stamp.nanosec
            ),
            frame_id=m.header.frame_id,
        ),
        height=m.height,
        width=m.width,
        encoding=m.encoding,
        is_bigendian=m.is_bigendian,
        step=m.step,
        data=np.frombuffer(m.data, np.uint8),
    )


def _padded(frame: np.ndarray, pad: int, encoding: str) -> msgs.Image:
    """A message whose rows carry `pad` extra bytes (step > 3 * width), as some drivers send."""
    h, w, _ = frame.shape
    src = frame[:, :, ::-1] if encoding == "bgr8" else frame
    rows = np.concatenate([src.reshape(h, 3 * w), np.full((h, pad), 7, np.uint8)], axis=1)
    return msgs.Image(
        header=msgs.Header(stamp=msgs.Time(1700000000, 123456789), frame_id="cam_optical"),
        height=h,
        width=w,
        encoding=encoding,
        step=3 * w + pad,
        data=rows.tobytes(),
    )


def _padding(m: msgs.Image) -> set[int]:
    """Byte offsets of CDR alignment padding in an Image (offsets count from the 4-byte
    encapsulation header): after header.frame_id, and after is_bigendian (before step)."""
    pos = 4 + 8 + 4 + len(m.header.frame_id) + 1  # header, stamp, frame_id length + chars
    pad = set(range(pos, pos + (-(pos - 4)) % 4))
    pos += len(pad) + 8 + 4 + len(m.encoding) + 1 + 1  # height, width, encoding, is_bigendian
    return pad | set(range(pos, pos + (-(pos - 4)) % 4))


CASES = {
    "rgb8_64x64": lambda: encode_image(_frame(64, 64), msgs.Time(12, 34), "top_camera"),
    "rgb8_odd_5x3": lambda: encode_image(_frame(3, 5, 1), msgs.Time(0, 1), ""),
    "bgr8_padded_7x4": lambda: _padded(_frame(4, 7, 2), 3, "bgr8"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_image_cdr_bytes_equal_rosbags_and_rclpy(case: str) -> None:
    """roborl's raw-DDS Image, rosbags' ROS 2 codec and rclpy's own serialiser produce the same
    CDR bytes, and each decodes the others' bytes to the same message and frame."""
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import Image as RosImage

    m = CASES[case]()
    ours = bytes(m.serialize())
    theirs = bytes(TS.serialize_cdr(_rosbags_image(m), "sensor_msgs/msg/Image"))
    ros_msg = RclpyTransport._to_ros(m)
    assert isinstance(ros_msg, RosImage)
    rclpy_bytes = bytes(serialize_message(ros_msg))
    assert ours == theirs, (
        f"first differing byte {next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)}"
    )
    # Fast DDS leaves CDR's alignment padding uninitialised (the spec does not fix its value):
    # every other byte must match.
    pad = _padding(m)
    assert len(rclpy_bytes) == len(ours)
    assert [i for i, (x, y) in enumerate(zip(ours, rclpy_bytes)) if x != y and i not in pad] == []
    assert all(ours[i] == 0 for i in pad)

    back = msgs.Image.deserialize(theirs)
    assert back == m and isinstance(back.data, bytes)
    decoded = TS.deserialize_cdr(ours, "sensor_msgs/msg/Image")
    assert (decoded.height, decoded.width, decoded.encoding, decoded.step) == (
        m.height,
        m.width,
        m.encoding,
        m.step,
    )
    assert decoded.data.tobytes() == m.data
    # rclpy's message (as its subscription callback gets it) through roborl's conversion.
    via_rclpy = RclpyTransport._from_ros(msgs.Image, deserialize_message(rclpy_bytes, RosImage))
    assert via_rclpy == m
    spec = CameraSpec("cam", "/cam", m.width, m.height, m.encoding)
    frame = decode_image(via_rclpy, spec)
    rows = np.frombuffer(m.data, np.uint8).reshape(m.height, m.step)[:, : 3 * m.width]
    expected = rows.reshape(m.height, m.width, 3)
    if m.encoding == "bgr8":
        expected = expected[:, :, ::-1]
    np.testing.assert_array_equal(frame, expected)
    assert frame.shape == (m.height, m.width, 3) and frame.dtype == np.uint8


SPEC = CameraSpec("wrist", "/wrist/image_raw", width=4, height=3)


def _ok() -> msgs.Image:
    return encode_image(_frame(3, 4), msgs.Time(1, 0))


def _with(**fields: Any) -> msgs.Image:
    m = _ok()
    for k, v in fields.items():
        setattr(m, k, v)
    return m


@pytest.mark.parametrize(
    ("msg", "field"),
    [
        (_with(encoding="mono8"), "encoding"),
        (_with(encoding="bgr8"), "encoding"),
        (_with(width=5, step=15, data=bytes(45)), "height x width"),
        (_with(height=4, data=bytes(48)), "height x width"),
        (_with(step=11), "step"),
        (_with(data=bytes(35)), "data"),
        (_with(step=13), "data"),
    ],
)
def test_bad_image_is_refused_naming_camera_and_field(msg: msgs.Image, field: str) -> None:
    with pytest.raises(RobotError, match=rf"camera 'wrist' \(/wrist/image_raw\).*Image\.{field}"):
        decode_image(msg, SPEC)
    feed = CameraFeed(SPEC)
    feed.on_message(_ok())
    first, _ = feed.latest()
    feed.on_message(msg)  # a bad frame never replaces the last good one
    assert feed.rejected == 1 and feed.received == 1 and field in (feed.last_error or "")
    assert feed.latest()[0] is first


def test_camera_watchdog_in_the_safety_layer(caplog: pytest.LogCaptureFixture) -> None:
    """Per camera: only the camera past its own max_age_s holds, with its name in the cause."""
    safety = SafetyLayer(
        SafetyConfig(low=[-1.0], high=[1.0], max_camera_age_s={"top": 0.5, "wrist": 2.0})
    )
    fine = safety.filter(np.array([0.3]), 0.01, 0.0, {"top": 0.4, "wrist": 1.9})
    assert fine is not None and not fine.held and fine.command[0] == pytest.approx(0.3)
    with caplog.at_level(logging.WARNING, logger="roborl.robots.safety"):
        held = safety.filter(np.array([0.3]), 0.01, 0.0, {"top": 0.1, "wrist": 2.5})
    assert held is not None and held.held and held.watchdog
    assert "camera 'wrist'" in (held.cause or "") and held.command[0] == 0.0
    assert safety.interventions["watchdog_camera"] == 1
    assert "watchdog_camera" in caplog.text and "wrist" in caplog.text


# -- over the wire ------------------------------------------------------------------------------


def _robot_cfg(transport: str, **over: Any) -> dict[str, Any]:
    cfg = robot_preset("tabletop")
    cfg.update(transport=transport, connect_timeout_s=60.0, **over)
    return cfg


def _render(state: np.ndarray, joints: list[str]) -> np.ndarray:
    """The top camera's 64x64 view of the scene with these joint positions, rendered here."""
    scene = TabletopEnv()
    try:
        for name, value in zip(joints, state):
            scene.data.qpos[scene._qadr[name]] = value
        mujoco.mj_forward(scene.model, scene.data)
        renderer = mujoco.Renderer(scene.model, 64, 64)
        renderer.update_scene(scene.data, camera="top")
        return renderer.render().copy()
    finally:
        scene.close()


@pytest.mark.parametrize(("sim", "driver"), [("dds", "rclpy"), ("rclpy", "dds")])
def test_sim_robot_frames_reach_the_robot_env(sim: str, driver: str, ros_env, nodes) -> None:
    """sim-robot renders the tabletop and publishes Image next to JointState; the robot env's
    observation is {state, top}, and `top` is exactly the scene at the joint positions that
    arrived with it (no channel swap, transposition, crop or stale picture)."""
    node = nodes(
        ["sim-robot", "env=tabletop", f"transport={sim}", "cameras=[top]", "duration_s=120"],
        ros_env,
    )
    start = node.wait_event("sim_robot_start", START)
    assert start["cameras"] == {"top": "/camera/top/image_raw"}
    cfg = _robot_cfg(
        driver,
        joints=SCENE,
        fields=["position"],
        safety={"low": [-1.0, -1.0], "high": [1.0, 1.0], "max_state_age_s": 3.0},
        cameras=[
            {
                "name": "top",
                "topic": "/camera/top/image_raw",
                "width": 64,
                "height": 64,
                "max_age_s": 3.0,
            }
        ],
    )
    env = _make_ros2(cfg)  # what `train robot=ros2` builds: driver node, env, safety services
    drv = env.driver
    try:
        assert env.observation_space == gym.spaces.Dict(
            {
                "state": gym.spaces.Box(-np.inf, np.inf, (8,), np.float64),
                "top": gym.spaces.Box(0, 255, (64, 64, 3), np.uint8),
            }
        )
        obs, _ = env.reset()
        assert env.observation_space.contains(obs)
        infos = []
        for _ in range(8):  # zero velocity: the gripper holds still, so state and frame agree
            obs, _, _, _, info = env.step(np.zeros(2, np.float32))
            infos.append(info)
        assert not any(i["held"] for i in infos), infos
        assert all("top" in i["camera_ages_s"] for i in infos)
        expected = _render(obs["state"], SCENE)
        diff = np.abs(obs["top"].astype(int) - expected.astype(int))
        assert diff.mean() < 1.0, f"mean abs pixel difference {diff.mean():.2f}"
        assert obs["top"].std() > 5  # a real picture, not a blank buffer
        assert drv.feeds["top"].received >= 8 and drv.feeds["top"].rejected == 0
    finally:
        env.close()
        node.proc.terminate()
    stop = node.wait_event("sim_robot_stop", 60)
    assert stop["images_published"] >= 8


def test_stale_camera_frame_triggers_hold(ros_env, nodes, caplog) -> None:
    """A camera whose frames stop coming (here: one frame every 5 s, max_age_s 0.5) makes the
    safety layer hold and truncate the episode, naming that camera, while the joint state and
    the other camera stay fresh; /diagnostics turns WARN with the same cause."""
    node = nodes(
        [
            "sim-robot",
            "env=tabletop",
            "transport=dds",
            "cameras=[top,{name:top,topic:/camera/slow/image_raw,rate_hz:0.2}]",
            "duration_s=120",
        ],
        ros_env,
    )
    node.wait_event("sim_robot_start", START)
    cameras = [
        {
            "name": "top",
            "topic": "/camera/top/image_raw",
            "width": 64,
            "height": 64,
            "max_age_s": 3.0,
        },
        {
            "name": "slow",
            "topic": "/camera/slow/image_raw",
            "width": 64,
            "height": 64,
            "max_age_s": 0.5,
        },
    ]
    cfg = _robot_cfg(
        "rclpy",
        cameras=cameras,
        max_episode_steps=200,
        safety={"low": [-1.0, -1.0], "high": [1.0, 1.0], "max_state_age_s": 3.0},
    )
    env = _make_ros2(cfg)  # what `train robot=ros2` builds: driver node, env, safety services
    drv = env.driver
    try:
        env.reset()
        with caplog.at_level(logging.WARNING, logger="roborl.robots.safety"):
            for _ in range(200):
                _, _, _, truncated, info = env.step(np.array([0.5, 0.0], np.float32))
                if truncated:
                    break
        assert info["watchdog"] and info["held"], info
        assert "camera 'slow'" in info["safety_cause"], info
        assert info["camera_ages_s"]["slow"] > 0.5
        counts = env.safety.interventions
        assert counts["watchdog_camera"] == 1 and counts["watchdog_state"] == 0, counts
        assert "watchdog_camera" in caplog.text
        level, message, values = drv.status()
        assert level == 1 and "camera 'slow' is stale" in message, (level, message)
        assert values["camera.slow.frames_received"] >= 1
        assert values["interventions.watchdog_camera"] == 1
    finally:
        env.close()
        node.proc.terminate()
    node.wait_event("sim_robot_stop", 60)


@pytest.mark.parametrize(
    ("cameras", "match"),
    [
        ("top", "robot.cameras=.top. has the wrong type: expected a list"),
        ([{"name": "top", "topic": "/t", "width": 64}], r"lacks \['height'\]"),
        ([{"name": "state", "topic": "/t", "width": 8, "height": 8}], "'state' is taken"),
        ([{"name": "a", "topic": "/t", "width": 8, "height": 8, "fps": 3}], "unknown keys"),
        ([{"name": "a", "topic": "/t", "width": 8.5, "height": 8}], "width=8.5"),
        ([{"name": "a", "topic": "/t", "width": 8, "height": 8, "encoding": "mono8"}], "mono8"),
        ([{"name": "a", "topic": "/t", "width": 8, "height": 8, "max_age_s": 0}], "max_age_s"),
    ],
)
def test_bad_camera_config_is_a_config_error(cameras: Any, match: str) -> None:
    from roborl.core.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        Ros2Driver(_robot_cfg("dds", cameras=cameras))


def test_connect_names_the_silent_camera_and_its_last_rejected_frame(ros_env) -> None:
    """JointStates arrive but the camera only sends frames of the wrong size: connect fails
    naming the camera and why its frames were refused (over real DDS traffic)."""
    import threading

    from roborl.robots.transport.dds import DDSTransport

    robot = DDSTransport("fake_camera_robot")
    state = robot.publisher("/joint_states", msgs.JointState)
    image = robot.publisher("/camera/top/image_raw", msgs.Image)
    stop = threading.Event()

    def talk() -> None:
        while not stop.wait(0.05):
            state(msgs.JointState(name=["gx", "gy"], position=[0.0, 0.1], velocity=[0.0, 0.0]))
            image(encode_image(_frame(32, 32), msgs.Time(0, 0)))

    thread = threading.Thread(target=talk, daemon=True)
    thread.start()
    drv = Ros2Driver(_robot_cfg("dds"))
    try:
        with pytest.raises(RobotError) as err:
            drv.connect(8.0)
        text = str(err.value)
        assert "camera 'top'" in text and "/camera/top/image_raw" in text, text
        assert "height x width = 32 x 32" in text, text
        assert drv.feeds["top"].rejected >= 1 and drv.observation()[0].shape == (4,)
    finally:
        stop.set()
        thread.join(5)
        drv.close()
        robot.close()

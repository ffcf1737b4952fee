"""`roborl dataset convert in=BAG`: rosbag2 folders (sqlite3 and MCAP, written by the real
`rosbags` library) -> transitions at the control rate, checked against what was published.

The bags are synthetic here (known send times and values, jitter, a reset, a teleop window, a
silent gap); tests/robots/test_rosbag_sim_robot.py records a real `roborl sim-robot` episode
over DDS and trains RLPD from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.dataset_spaces import check_dataset_spaces
from roborl.core.errors import ConfigError, DatasetError
from roborl.plugins.datasets.cli import load_any, main
from roborl.plugins.datasets.rosbag import bag_folders, convert_bag, mapping_from

pytest.importorskip("rosbags")

T0 = 1_700_000_000 * 10**9  # bag time of the first message (ns)
RATE_HZ = 10.0
PERIOD = 10**8  # ns at 10 Hz


@dataclass
class Recording:
    """What was published: (bag time ns, value) per topic."""

    commands: list[tuple[int, np.ndarray]] = field(default_factory=list)
    states: list[tuple[int, np.ndarray]] = field(default_factory=list)
    resets: list[int] = field(default_factory=list)
    joy_held: tuple[int, int] = (0, 0)


def write_bag(
    path: Path,
    storage: str = "sqlite3",
    seconds: float = 3.0,
    command_hz: float = RATE_HZ,
    reset_at: float | None = None,
    joy_window: tuple[float, float] = (1.0, 1.6),
    seed: int = 0,
    gap: tuple[float, float] | None = None,
) -> Recording:
    """A robot at 50 Hz JointState (joints gx, gy and an unobserved `other`, names shuffled),
    a 10 Hz camera whose pixels encode the frame time, commands at `command_hz` with a few ms
    of jitter, Joy at 20 Hz (button 0 held in `joy_window`), and optionally a reset request
    and a silent gap in every topic."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    rng = np.random.default_rng(seed)
    rec = Recording()
    msgs: list[tuple[int, str, object, str]] = []

    def header(t: int) -> object:
        stamp = T["builtin_interfaces/msg/Time"](sec=t // 10**9, nanosec=t % 10**9)
        return T["std_msgs/msg/Header"](stamp=stamp, frame_id="")

    def silent(t: int) -> bool:
        return gap is not None and T0 + gap[0] * 1e9 <= t < T0 + gap[1] * 1e9

    for k in range(int(seconds * 50)):
        t = T0 + k * 2 * 10**7 + 3 * 10**6
        if silent(t):
            continue
        pos = np.array([np.sin(t / 1e9), np.cos(t / 1e9), 5.0])
        vel = np.array([np.cos(t / 1e9), -np.sin(t / 1e9), 0.0])
        order = [2, 0, 1] if k % 2 else [0, 1, 2]
        names = ["gx", "gy", "other"]
        msg = T["sensor_msgs/msg/JointState"](
            header=header(t), name=[names[i] for i in order], position=pos[order],
            velocity=vel[order], effort=np.zeros(0),
        )  # fmt: skip
        msgs.append((t, "/joint_states", msg, "sensor_msgs/msg/JointState"))
        rec.states.append((t, np.r_[pos[:2], vel[:2]]))
    cmd_period = round(1e9 / command_hz)
    for k in range(int(seconds * command_hz)):
        t = T0 + 5 * 10**6 + k * cmd_period + int(rng.integers(-5, 6)) * 10**6
        if silent(t):
            continue
        value = np.array([np.sin(k * 0.3), np.cos(k * 0.5)])
        msg = T["std_msgs/msg/Float64MultiArray"](
            layout=T["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0), data=value
        )
        msgs.append((t, "/forward_command_controller/commands", msg, msg.__msgtype__))
        rec.commands.append((t, value))
    for k in range(int(seconds * 10)):
        t = T0 + k * PERIOD + 10**6
        if silent(t):
            continue
        frame = np.full((4, 6, 3), k % 256, np.uint8)
        msg = T["sensor_msgs/msg/Image"](
            header=header(t), height=4, width=6, encoding="rgb8", is_bigendian=0, step=18,
            data=frame.reshape(-1),
        )  # fmt: skip
        msgs.append((t, "/camera/top/image_raw", msg, msg.__msgtype__))
    lo, hi = (T0 + int(x * 1e9) for x in joy_window)
    rec.joy_held = (lo, hi)
    for k in range(int(seconds * 20)):
        t = T0 + k * 5 * 10**7 + 2 * 10**6
        held = lo <= t < hi
        msg = T["sensor_msgs/msg/Joy"](
            header=header(t), axes=np.array([0.5, -0.5], np.float32),
            buttons=np.array([int(held), 0], np.int32),
        )  # fmt: skip
        msgs.append((t, "/joy", msg, msg.__msgtype__))
    if reset_at is not None:
        t = T0 + int(reset_at * 1e9)
        msgs.append((t, "/sim_robot/reset", T["std_msgs/msg/Bool"](data=True), "std_msgs/msg/Bool"))
        rec.resets.append(t)
    msgs.sort(key=lambda m: m[0])
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        conns = {}
        for _, topic, _, kind in msgs:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, kind, typestore=ts)
        for t, topic, msg, kind in msgs:
            writer.write(conns[topic], t, ts.serialize_cdr(msg, kind))
    return rec


CAMERA = "/camera/top/image_raw"
MAPPING = {
    "rate_hz": RATE_HZ,
    "joints": ["gx", "gy"],
    "cameras": {"top": CAMERA},
    "joy_topic": "/joy",
    "reset_topic": "/sim_robot/reset",
}


def _rows(ds) -> list[tuple[int, int, int]]:
    """(row, episode, step) of every transition."""
    out = []
    for e, sl in enumerate(ds.episodes()):
        out.extend((i, e, i - sl.start) for i in range(sl.start, sl.stop))
    return out


def _check_against(ds, rec: Recording) -> None:
    """Each step's time is within one period of the command it holds, which is the one sent
    nearest its tick; its state is the newest one received by that command's send time."""
    sent = np.array([t for t, _ in rec.commands])
    states = np.array([t for t, _ in rec.states])
    starts = ds.metadata["episode_start_ns"]
    assert len(starts) == len(ds.episode_lengths())
    for row, ep, step in _rows(ds):
        tick = starts[ep] + step * PERIOD
        j = int(np.argmin(np.abs(sent - tick)))
        assert abs(sent[j] - tick) < PERIOD / 2, (row, sent[j] - tick)
        np.testing.assert_allclose(ds.actions[row], rec.commands[j][1], rtol=1e-6)
        s = int(np.searchsorted(states, sent[j], side="right")) - 1
        np.testing.assert_allclose(ds.observations["state"][row], rec.states[s][1], rtol=1e-5)
        lo, hi = rec.joy_held
        joy_t = T0 + 2 * 10**6 + ((sent[j] - T0 - 2 * 10**6) // (5 * 10**7)) * 5 * 10**7
        assert (row in ds.metadata["intervened_rows"]) == (lo <= joy_t < hi), row


def test_sqlite3_and_mcap_bags_give_the_same_transitions_as_were_published(tmp_path: Path):
    mapping = mapping_from(MAPPING)
    out = {}
    for storage in ("sqlite3", "mcap"):
        rec = write_bag(tmp_path / storage, storage, reset_at=2.05)
        out[storage] = ds = convert_bag([str(tmp_path / storage)], mapping)
        assert ds.metadata["bags"][0]["storage"] == storage
        _check_against(ds, rec)
    a, b = out["sqlite3"], out["mcap"]
    for key in ("state", "top"):
        np.testing.assert_array_equal(a.observations[key], b.observations[key])
    np.testing.assert_array_equal(a.actions, b.actions)
    # 3 s of 10 Hz commands, split by the reset at 2.05 s: 21 + 9 ticks -> 20 + 8 transitions
    assert a.episode_lengths().tolist() == [20, 8]
    assert a.timeouts.sum() == 2 and not a.terminals.any()
    assert a.metadata["intervened_rows"], "the Joy window marks some steps"
    # frames: the newest one received by the command's send time (pixels hold the frame index)
    assert np.all(np.diff(a.observations["top"][:20, 0, 0, 0].astype(int)) >= 0)
    # next observations continue the episode
    np.testing.assert_array_equal(a.next_observations["state"][:19], a.observations["state"][1:20])


def test_commands_faster_than_the_control_rate_are_resampled_to_it(tmp_path: Path):
    rec = write_bag(tmp_path / "bag", "mcap", command_hz=50.0, seconds=2.0)
    ds = convert_bag([str(tmp_path / "bag")], mapping_from(MAPPING))
    assert len(ds) == 20  # commands over ~1.98 s: 21 ticks 0.1 s apart, the last within T/2
    sent = np.array([t for t, _ in rec.commands])
    start = ds.metadata["episode_start_ns"][0]
    for k in range(len(ds)):
        tick = start + k * PERIOD
        j = int(np.searchsorted(sent, tick + PERIOD // 2, side="right")) - 1
        assert 0 <= tick + PERIOD // 2 - sent[j] < PERIOD  # the newest within one period
        np.testing.assert_allclose(ds.actions[k], rec.commands[j][1], rtol=1e-6)


def test_a_silent_gap_ends_the_episode_and_joy_can_supply_the_action(tmp_path: Path):
    write_bag(tmp_path / "bag", gap=(1.2, 1.9))
    given = {"joy_axes": [0, 1], "joy_action": True, "joy_scale": 2.0, "max_age_s": 0.15}
    mapping = mapping_from({**MAPPING, **given})
    ds = convert_bag([str(tmp_path / "bag")], mapping)
    assert len(ds.episode_lengths()) == 2 and ds.timeouts.sum() == 2
    starts = ds.metadata["episode_start_ns"]
    first_len = int(ds.episode_lengths()[0])
    # held for at most max_age_s into the gap, then a new episode once data flows again
    assert starts[0] + first_len * PERIOD < T0 + 1.2e9 + 0.15e9 + PERIOD
    assert starts[1] >= T0 + 1.9e9
    rows = ds.metadata["intervened_rows"]
    assert rows
    np.testing.assert_allclose(ds.actions[rows], np.tile([1.0, -1.0], (len(rows), 1)))
    others = np.setdiff1d(np.arange(len(ds)), rows)
    assert not np.allclose(ds.actions[others], [1.0, -1.0])


def test_cli_converts_into_lerobot_and_npz_that_demos_accept(tmp_path: Path, capsys):
    write_bag(tmp_path / "bags" / "a", "sqlite3", seconds=2.0, seed=1)
    write_bag(tmp_path / "bags" / "b", "mcap", seconds=2.0, seed=2)
    assert bag_folders(str(tmp_path / "bags")) == [
        str(tmp_path / "bags" / "a"), str(tmp_path / "bags" / "b"),
    ]  # fmt: skip
    storage_file = next((tmp_path / "bags" / "b").glob("*.mcap"))
    assert bag_folders(str(storage_file)) == [str(tmp_path / "bags" / "b")]
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("rate_hz: 5\njoints: [gx, gy]\njoy_topic: /joy\n")
    args = [f"in={tmp_path / 'bags'}", f"mapping={mapping}", "rate_hz=10", f"cameras.top={CAMERA}"]
    assert main(["convert", *args, f"out=lerobot:{tmp_path / 'lr'}", "task=reach"]) == 0
    assert main(["convert", *args, f"out={tmp_path / 'demos.npz'}"]) == 0
    assert "2 episodes" in capsys.readouterr().out
    npz, lr = load_any(str(tmp_path / "demos.npz")), load_any(str(tmp_path / "lr"))
    assert npz.metadata["rate_hz"] == 10.0  # the command line over the file
    assert len(npz) == len(lr) == 38
    np.testing.assert_allclose(lr.actions, npz.actions, rtol=1e-6)
    np.testing.assert_allclose(lr.observations["state"], npz.observations["state"], rtol=1e-6)
    assert lr.metadata["intervened_rows"] == npz.metadata["intervened_rows"] != []
    info = json.loads((tmp_path / "lr/meta/info.json").read_text())
    assert info["fps"] == 10 and info["features"]["observation.images.top"]["shape"][:2] == [4, 6]
    import pyarrow.parquet as pq

    frames = pq.read_table(tmp_path / "lr/data/chunk-000/file-000.parquet").to_pydict()
    ts = np.array(frames["timestamp"])[np.array(frames["episode_index"]) == 1]
    np.testing.assert_allclose(np.diff(ts), 1 / RATE_HZ, atol=1e-6)  # one control period
    space = gym.spaces.Dict(
        {
            "state": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
            "top": gym.spaces.Box(0, 255, (4, 6, 3), np.uint8),
        }
    )
    for ds in (npz, lr):  # what `demos=` checks against the env before training
        check_dataset_spaces(ds, space, gym.spaces.Box(-1, 1, (2,), np.float32), "tabletop")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["rate_hz=10", "joy_butten=1"], "Did you mean 'joy_button'"),
        ([], "rate_hz= is required"),
        (["rate_hz=10", "state_topic=/joint_state"], "'/joint_state' is not a topic of the bag"),
        (["rate_hz=10", "command_topic=/joy"], "carries sensor_msgs/msg/Joy"),
        (["rate_hz=10", "joints=[gx,elbow]"], "['elbow'] never appear"),
        (["rate_hz=10", "cameras.top=/joint_states"], "also state_topic"),
        (["rate_hz=10", "joy_topic=/joy", "joy_button=7"], "joy_button=7"),
        (["rate_hz=10", "fields=[position,torque]"], "fields=['position', 'torque']"),
        (["rate_hz=10", "joy_action=true"], "joy_action=true"),
        (["rate_hz=10", "episode_end=done"], "expected one of timeout, terminal"),
    ],
)
def test_bad_mapping_is_named(tmp_path: Path, args: list[str], needle: str):
    bag = tmp_path / "bag"
    if not bag.exists():
        write_bag(bag, seconds=1.0)
    with pytest.raises((ConfigError, DatasetError)) as err:
        main(["convert", f"in={bag}", f"out={tmp_path / 'x.npz'}", *args])
    assert needle in str(err.value), str(err.value)
    assert not (tmp_path / "x.npz").exists()


def _command_bag(path: Path, kind: str) -> list[np.ndarray]:
    """JointState and commands of message type `kind` at 10 Hz; returns the sent actions."""
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    stamp = T["builtin_interfaces/msg/Time"](sec=0, nanosec=0)
    header = T["std_msgs/msg/Header"](stamp=stamp, frame_id="base_link")
    sent = []
    with Writer(path, version=9) as w:
        js = w.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=ts)
        topic = "/cmd_vel" if "Twist" in kind else "/arm/joint_trajectory"
        cmd = w.add_connection(topic, kind, typestore=ts)
        for k in range(12):
            t = T0 + k * PERIOD
            state = T["sensor_msgs/msg/JointState"](
                header=header, name=["a", "b"], position=np.array([k, -k], float),
                velocity=np.zeros(2), effort=np.zeros(0),
            )  # fmt: skip
            w.write(js, t, ts.serialize_cdr(state, "sensor_msgs/msg/JointState"))
            a = np.array([0.1 * k, -0.2 * k])
            if "Twist" in kind:
                twist = T["geometry_msgs/msg/Twist"](
                    linear=T["geometry_msgs/msg/Vector3"](x=a[0], y=0.0, z=0.0),
                    angular=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=a[1]),
                )
                msg = T[kind](header=header, twist=twist) if "Stamped" in kind else twist
            else:  # a trajectory naming its joints in the other order
                point = T["trajectory_msgs/msg/JointTrajectoryPoint"](
                    positions=a[::-1].copy(), velocities=np.zeros(0), accelerations=np.zeros(0),
                    effort=np.zeros(0), time_from_start=T["builtin_interfaces/msg/Duration"](
                        sec=0, nanosec=10**8),
                )  # fmt: skip
                msg = T[kind](header=header, joint_names=["b", "a"], points=[point])
            w.write(cmd, t + 10**6, ts.serialize_cdr(msg, kind))
            sent.append(a)
    return sent


@pytest.mark.parametrize(
    ("kind", "keys"),
    [
        ("geometry_msgs/msg/TwistStamped", {"command_topic": "/cmd_vel", "action_dim": 6}),
        ("geometry_msgs/msg/Twist", {"command_topic": "/cmd_vel", "action_dim": 6}),
        (
            "trajectory_msgs/msg/JointTrajectory",
            {"command_topic": "/arm/joint_trajectory", "command_joints": ["a", "b"]},
        ),
    ],
)
def test_twist_and_trajectory_commands_become_actions(tmp_path: Path, kind: str, keys: dict):
    sent = _command_bag(tmp_path / "bag", kind)
    ds = convert_bag([str(tmp_path / "bag")], mapping_from({"rate_hz": RATE_HZ, **keys}))
    assert len(ds) == 11 and ds.observations.shape == (11, 4)  # flat: no cameras
    np.testing.assert_allclose(ds.observations[:, :2], [[k, -k] for k in range(11)])
    if "Twist" in kind:  # [linear.xyz, angular.xyz]
        want = np.array([[a[0], 0, 0, 0, 0, a[1]] for a in sent[:11]])
    else:  # the trajectory's positions in command_joints order
        want = np.array(sent[:11])
    np.testing.assert_allclose(ds.actions, want, rtol=1e-6, atol=1e-7)

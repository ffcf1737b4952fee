"""A `roborl sim-robot` episode recorded off real DDS traffic into rosbag2 (sqlite3 and MCAP,
written by the `rosbags` library), converted with `roborl dataset convert`, and trained from
with `roborl train algo=rlpd demos=` (issue 50).

The recorder is a plain rclpy node (no roborl code), like `ros2 bag record`: it subscribes
to sim-robot's /joint_states and camera, and to the command and teleop topics, takes each
message's serialised CDR bytes and its DDS source timestamp (rosbag2's send_timestamp), and
writes them into both bags. It also plays the controller (Float64MultiArray on
/forward_command_controller/commands at 10 Hz, what roborl's robot bridge publishes for
`robot=tabletop`) and a person on sensor_msgs/Joy who holds
the dead-man button for a stretch, during which the command is the person's (as the safety
layer forwards it). The round trip is checked against what the recorder sent: every converted
step holds the command sent within one control period of the step's time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from cli_runner import roborl
from ros_peers import PRELUDE, peer

from roborl.plugins.datasets.cli import load_any, main

pytest.importorskip("rclpy")
pytest.importorskip("rosbags")

RATE_HZ = 10
STEPS = 40
PX = 16
CAMERA = "/camera/top/image_raw"
CMD = "/forward_command_controller/commands"
JOY_STEPS = (15, 25)  # the person holds button 0 on these control steps
START = 90.0

RECORDER = PRELUDE + textwrap.dedent(
    """
    from pathlib import Path
    import numpy as np
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore
    from sensor_msgs.msg import Image, JointState, Joy
    from std_msgs.msg import Float64MultiArray

    folder, rate, steps, lo, hi = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    topics = {
        "/joint_states": JointState, "/camera/top/image_raw": Image,
        "/forward_command_controller/commands": Float64MultiArray, "/joy": Joy,
    }
    got, lock = [], threading.Lock()

    def keep(topic):
        # stamped with DDS's source timestamp (what rosbag2 keeps as send_timestamp): the
        # recorder's own callback delay on a loaded machine (over half a period was seen)
        # would otherwise move a command onto the next control tick
        def cb(raw, info):
            with lock:
                got.append((info["source_timestamp"], topic, bytes(raw)))
        return cb

    for topic, kind in topics.items():
        node.create_subscription(kind, topic, keep(topic), 50, raw=True)
    cmd_pub = node.create_publisher(Float64MultiArray, "/forward_command_controller/commands", 10)
    joy_pub = node.create_publisher(Joy, "/joy", 10)

    def seen(topic):
        with lock:
            return any(t == topic for _, t, _ in got)

    if not wait(lambda: seen("/joint_states") and seen("/camera/top/image_raw")
                and cmd_pub.get_subscription_count() >= 2, 60):
        raise SystemExit("sim-robot never appeared")
    with lock:
        got.clear()
    sent, joys = [], []
    t0 = time.monotonic()
    for k in range(steps):
        time.sleep(max(0.0, t0 + k / rate - time.monotonic()))
        held = lo <= k < hi
        axes = [0.6, -0.4]
        value = axes if held else [0.8 * np.sin(0.3 * k), 0.8 * np.cos(0.2 * k)]
        joy = Joy(axes=[float(a) for a in axes], buttons=[int(held), 0])
        joy.header.stamp = node.get_clock().now().to_msg()
        joys.append(time.time_ns())
        joy_pub.publish(joy)
        time.sleep(0.002)  # the person's button, then the command it decided
        stamp = time.time_ns()
        cmd_pub.publish(Float64MultiArray(data=[float(v) for v in value]))
        sent.append((stamp, [float(v) for v in value]))
    time.sleep(0.5)
    with lock:
        msgs = sorted(got)
    ts = get_typestore(Stores.ROS2_KILTED)
    names = {t: f"{k.__module__.split('.')[0]}/msg/{k.__name__}" for t, k in topics.items()}
    for storage, plugin in (("mcap", StoragePlugin.MCAP), ("sqlite3", StoragePlugin.SQLITE3)):
        with Writer(folder / storage, version=9, storage_plugin=plugin) as w:
            conns = {t: w.add_connection(t, names[t], typestore=ts) for t in topics}
            for stamp, topic, raw in msgs:
                w.write(conns[topic], stamp, raw)
    counts = {t: sum(1 for _, x, _ in msgs if x == t) for t in topics}
    (folder / "sent.json").write_text(json.dumps({"sent": sent, "joys": joys, "counts": counts}))
    out(event="recorded", counts=counts)
    executor.shutdown()
    spinner.join(timeout=10)
    node.destroy_node()
    rclpy.shutdown()
    # Everything is written and flushed: end here, not in interpreter teardown, where a DDS
    # thread still unwinding once aborted the process ("terminate called without an active
    # exception") after a complete recording.
    import os
    os._exit(0)
    """
)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sim-robot (RoborlTabletop, a 16 px top camera) over rclpy on loopback, recorded."""
    root = tmp_path_factory.mktemp("rosbag")
    env = dict(os.environ)
    env.update(
        ROS_DOMAIN_ID=str(10 + os.getpid() % 30),  # below conftest's ranges and fixed ids
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
    )
    for key in ("ROS_LOCALHOST_ONLY", "RMW_IMPLEMENTATION"):
        env.pop(key, None)
    log = root / "sim_robot.log"
    with open(log, "w") as f:
        sim = subprocess.Popen(
            [
                sys.executable, "-m", "roborl.core.cli", "sim-robot", "env=tabletop",
                "transport=rclpy", f"cameras=[{{name: top, width: {PX}, height: {PX}}}]",
                "rate_hz=20", "command_timeout_s=2.0", "+env.kwargs.max_episode_steps=1000",
            ],
            env=env, stdout=f, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START
        while "sim_robot_start" not in log.read_text() and time.monotonic() < deadline:
            assert sim.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        rec = subprocess.run(
            peer(RECORDER, str(root), str(RATE_HZ), str(STEPS), *map(str, JOY_STEPS)),
            env=env, capture_output=True, text=True, timeout=START,
        )  # fmt: skip
        assert rec.returncode == 0, rec.stderr[-3000:] + log.read_text()[-2000:]
    finally:
        sim.terminate()
        try:
            sim.wait(timeout=20)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait()
    return root


def _convert(bag: Path, out: str) -> int:
    return main(
        [
            "convert", f"in={bag}", f"out={out}", f"rate_hz={RATE_HZ}", "joints=[gx,gy]",
            f"cameras.image={CAMERA}", "joy_topic=/joy", "task=reach the red block",
        ]
    )  # fmt: skip


def _sent_near(
    action: np.ndarray, at: float, times: np.ndarray, values: np.ndarray, period: float
) -> bool:
    """Whether `action` is a command the controller sent within one period of time `at`."""
    near = np.abs(times - at) < period
    return bool(np.any(np.all(np.isclose(values[near], action, atol=1e-6), axis=1)))


def _held_over_a_late_step(
    action: np.ndarray, at: float, times: np.ndarray, values: np.ndarray, period: float
) -> bool:
    """Whether `action` is the last command sent before `at` while the controller's next one
    came more than half a period late: the converter's zero-order hold (its docstring), as a
    robot would have kept executing the old command. The recorder's own Python loop runs late
    on a loaded machine."""
    before = np.flatnonzero(times <= at)
    late = not np.any((times > at) & (times <= at + period / 2))
    return bool(late and len(before) and np.allclose(values[before[-1]], action, atol=1e-6))


def _check_actions_at_ticks(actions: list, ticks: list, sent: list) -> None:
    """Each step's action is a command sent within one period of its tick, or, at a step
    where the controller ran late, the command held over it; the latter on at most half the
    steps. (The converter anchors its ticks on the first command: when that one was sent
    late, every later command has that much less slack, and on a loaded machine 11 of 39
    steps were held.)"""
    times = np.array([t for t, _ in sent])
    values = np.array([v for _, v in sent])
    period = 1e9 / RATE_HZ
    held = 0
    for k, (action, tick) in enumerate(zip(actions, ticks)):
        if not _sent_near(action, tick, times, values, period):
            assert _held_over_a_late_step(action, tick, times, values, period), k
            held += 1
    assert held <= len(ticks) // 2, (held, len(ticks))


def _check_person_flagged(
    actions: np.ndarray, rows: np.ndarray, ticks: np.ndarray, sent_ns: np.ndarray, joys_ns: list
) -> None:
    """The person's stretch is flagged, and a step is flagged exactly when its action is the
    person's command, except at the steps where the two may differ by the converter's rule:
    - between the person pressing or releasing the button (a Joy) and the command the
      controller sent after it, give or take a period: the bag holds the new Joy with the old
      command (a one-second stall between the two was seen under load);
    - while the controller stalled for longer than `joy_timeout_s` (0.5 s): the Joy expires
      while the command is held.

    Not a count of JOY_STEPS: a stall after the person's last command holds both that command
    and that Joy, so the stretch grows by the stalled ticks (15 rows for 10 steps was seen)."""
    stretch = JOY_STEPS[1] - JOY_STEPS[0]
    assert len(rows) >= stretch - 2, rows
    flagged = np.zeros(len(actions), bool)
    flagged[rows] = True
    person = np.all(np.isclose(actions, [0.6, -0.4], atol=1e-6), axis=1)
    assert person.sum() >= stretch - 2, actions
    period = 1e9 / RATE_HZ
    crossing = np.zeros(len(ticks), bool)
    for k in JOY_STEPS:  # the button changes on these steps
        crossing |= (ticks >= joys_ns[k] - period) & (ticks <= sent_ns[k] + period)
    newest = np.searchsorted(sent_ns, ticks + period / 2, side="right") - 1
    stalled = ticks - sent_ns[np.maximum(newest, 0)] > 0.4e9  # joy_timeout_s less 0.1 s
    mismatched = np.flatnonzero((flagged != person) & ~crossing & ~stalled)
    assert len(mismatched) <= 1, (mismatched, rows, actions[mismatched])


def test_recorded_episode_round_trips_within_one_control_period(recording: Path) -> None:
    recorded = json.loads((recording / "sent.json").read_text())
    sent = recorded["sent"]
    period = 1e9 / RATE_HZ
    out = {}
    for storage in ("mcap", "sqlite3"):
        assert _convert(recording / storage, str(recording / f"{storage}.npz")) == 0
        out[storage] = load_any(str(recording / f"{storage}.npz"))
    ds = out["mcap"]
    np.testing.assert_array_equal(ds.actions, out["sqlite3"].actions)
    np.testing.assert_array_equal(ds.observations["image"], out["sqlite3"].observations["image"])
    assert len(ds) >= STEPS - 5, len(ds)  # DDS may lose or delay a sample, not many
    assert ds.observations["image"].shape[1:] == (PX, PX, 3)
    assert ds.observations["image"].std() > 0  # rendered frames, not blanks
    # gx, gy positions then velocities: the gripper moved under the commands
    assert np.abs(ds.observations["state"][:, 2:]).max() > 0.01
    starts = ds.metadata["episode_start_ns"]
    steps = [
        (row, starts[e] + k * period)
        for e, sl in enumerate(ds.episodes())
        for k, row in enumerate(range(sl.start, sl.stop))
    ]
    _check_actions_at_ticks([ds.actions[row] for row, _ in steps], [t for _, t in steps], sent)
    ticks = np.zeros(len(ds.actions))
    ticks[[row for row, _ in steps]] = [t for _, t in steps]
    sent_ns = np.array([t for t, _ in sent], dtype=float)
    rows = np.asarray(ds.metadata["intervened_rows"])
    _check_person_flagged(ds.actions, rows, ticks, sent_ns, recorded["joys"])

    # into a LeRobotDataset: its frame timestamps are the steps' times after the episode start
    assert _convert(recording / "mcap", f"lerobot:{recording / 'lerobot'}") == 0
    import pyarrow.parquet as pq

    frames = pq.read_table(recording / "lerobot/data/chunk-000/file-000.parquet").to_pydict()
    ep0 = np.array(frames["episode_index"]) == 0
    stamps = starts[0] + np.array(frames["timestamp"])[ep0][:-1] * 1e9
    actions = np.array(frames["action"])[ep0][:-1]
    assert len(stamps) == int(ds.episode_lengths()[0])
    _check_actions_at_ticks(list(actions), list(stamps), sent)


def test_rlpd_trains_from_the_converted_bag(recording: Path, tmp_path: Path) -> None:
    demos = tmp_path / "demos"
    assert _convert(recording / "sqlite3", f"lerobot:{demos}") == 0
    roborl(
        "train", "algo=rlpd", "env=tabletop_reach_pixels_state", f"env.kwargs.image_size={PX}",
        f"demos={demos}", "algo.batch_size=8", "algo.hidden_sizes=[32,32]",
        "algo.conv_layers=1", "algo.conv_channels=8", "algo.num_critics=2", "algo.critic_steps=1",
        "total_steps=30", "learning_starts=20", "eval_every=0", "checkpoint_every=30",
        "log_every=10", "progress=false", "seed=0", "hydra.run.dir=run", cwd=tmp_path,
    )  # fmt: skip
    records = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    fractions = [r["train/demo_fraction"] for r in records if "train/demo_fraction" in r]
    assert fractions and all(f == 0.5 for f in fractions)
    assert all(np.isfinite(r["train/critic_loss"]) for r in records if "train/critic_loss" in r)
    assert json.loads((tmp_path / "run/summary.json").read_text())["updates"] > 0

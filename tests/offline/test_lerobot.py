"""LeRobotDataset v3 in and out, checked against files the real LeRobot library wrote and read.

tests/fixtures/lerobot/ holds what `lerobot-dataset` 0.4.4 itself produced here (see its
README.md and make_fixtures.py): a dataset LeRobot wrote from three demonstrations, the same
demonstrations written by roborl, and every frame LeRobot's own loader returned from roborl's.
`tests/fixtures/lerobot/check_live.py` runs the real library on what this checkout writes now
(outside CI, which has no LeRobot).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from cli_runner import roborl

from roborl.core.dataset_io import check_target, split_scheme
from roborl.core.datasets import OfflineDataset
from roborl.core.errors import DatasetError
from roborl.plugins.datasets.files import load_file
from roborl.plugins.datasets.lerobot import accepts, load_lerobot, load_lerobot_source, save_lerobot
from roborl.plugins.datasets.lerobot import schema as S
from roborl.plugins.datasets.lerobot.video import decode, encode
from roborl.plugins.demos.record import record

pq = pytest.importorskip("pyarrow.parquet")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lerobot"
SOURCE = FIXTURES / "source.npz"
LEROBOT_WRITTEN = FIXTURES / "lerobot_written"
ROBORL_WRITTEN = FIXTURES / "roborl_written"
# H.264 4:4:4 at CRF 10 on 16 px frames (measured: mean error 0.9, max 18 of 255).
MAX_PIXEL_ERROR, MEAN_PIXEL_ERROR = 40, 2.0


def pendulum(tmp_path: Path, episodes: int = 2) -> OfflineDataset:
    """Flat observations and time-limit ends, with a made-up cost and takeover rows."""
    env = gym.make("Pendulum-v1", max_episode_steps=7)
    env.action_space.seed(0)
    ds, _ = record(env, lambda o: env.action_space.sample(), episodes, seed=3, log=lambda m: None)
    assert ds is not None
    costs = np.abs(ds.actions[:, 0]).astype(np.float32)
    return ds.replace(costs=costs, metadata={"intervened_rows": [2, 9], "task": "swing up"})


def images_close(a: np.ndarray, b: np.ndarray) -> None:
    err = np.abs(a.astype(np.int16) - b.astype(np.int16))
    assert a.shape == b.shape and a.dtype == b.dtype == np.uint8
    assert err.max() <= MAX_PIXEL_ERROR and err.mean() < MEAN_PIXEL_ERROR, (err.max(), err.mean())


def test_flat_transitions_round_trip_exactly_with_one_extra_frame_per_episode(tmp_path):
    ds = pendulum(tmp_path)
    root = save_lerobot(ds, tmp_path / "pendulum")
    frames = pq.read_table(root / "data/chunk-000/file-000.parquet").to_pydict()
    # 2 episodes of 7 transitions -> 2 x 8 frames; frame 7 of each is its final observation
    assert len(frames["index"]) == 16 and frames["index"] == list(range(16))
    assert frames["frame_index"] == list(range(8)) * 2
    assert frames[S.FINAL] == ([False] * 7 + [True]) * 2
    final_obs = np.asarray(frames[S.STATE])[[7, 15]]
    np.testing.assert_array_equal(final_obs, ds.next_observations[[6, 13]])
    assert frames[S.DONE] == ([False] * 6 + [True, True]) * 2
    assert frames[S.TRUNCATED] == frames[S.DONE]  # Pendulum only ever times out
    assert frames[S.REWARD][7] == 0.0 and frames[S.COST][7] == 0.0
    assert frames[S.ACTION][7] == frames[S.ACTION][6]  # padded as LeRobot's recorder pads
    info = json.loads((root / S.INFO_PATH).read_text())
    assert info["codebase_version"] == "v3.0" and info["video_path"] is None
    assert (info["total_episodes"], info["total_frames"]) == (2, 16)
    assert set(S.INDEX_FEATURES) <= set(info["features"])

    back = load_lerobot(root)
    for name in ("observations", "next_observations", "actions", "rewards", "costs"):
        np.testing.assert_array_equal(getattr(back, name), getattr(ds, name), err_msg=name)
    np.testing.assert_array_equal(back.terminals, ds.terminals)
    np.testing.assert_array_equal(back.timeouts, ds.timeouts)
    assert back.metadata["intervened_rows"] == [2, 9] and back.metadata["task"] == "swing up"
    assert back.metadata["observation_space"] == ds.metadata["observation_space"]


def test_camera_frames_become_video_and_come_back_within_codec_error(tmp_path):
    src = load_file(SOURCE)
    root = save_lerobot(src, tmp_path / "cams")
    video = root / "videos/observation.images.image/chunk-000/file-000.mp4"
    frames, times = decode(video)
    assert len(frames) == len(src) + 3  # 3 episodes, one final observation each
    np.testing.assert_allclose(times, np.arange(len(frames)) / 10, atol=1e-6)
    back = load_lerobot_source(f"lerobot:{root}")  # the dataset=/demos= loader
    images_close(back.observations["image"], src.observations["image"])
    images_close(back.next_observations["image"], src.next_observations["image"])
    np.testing.assert_array_equal(back.observations["state"], src.observations["state"])
    np.testing.assert_array_equal(back.next_observations["state"], src.next_observations["state"])
    for key in ("success_rows", "intervened_rows", "tasks", "episode_task_index"):
        assert back.metadata[key] == src.metadata[key], key
    np.testing.assert_array_equal(back.terminals, src.terminals)
    np.testing.assert_array_equal(back.timeouts, src.timeouts)


def test_dataset_written_by_real_lerobot_reads_as_transitions():
    """LeRobot's frames are steps without a final observation: the two terminated episodes
    keep every frame, the time-limited one loses its last (its next observation was never
    recorded) and ends one frame earlier by time limit."""
    src = load_file(SOURCE)
    ds = load_lerobot(LEROBOT_WRITTEN)
    assert src.episode_lengths().tolist() == [4, 6, 5]
    assert ds.episode_lengths().tolist() == [4, 5, 5]
    kept = np.r_[0:4, 4:9, 10:15]  # source rows that survive
    np.testing.assert_array_equal(ds.actions, src.actions[kept])
    np.testing.assert_array_equal(ds.rewards, src.rewards[kept])
    np.testing.assert_array_equal(ds.observations["state"], src.observations["state"][kept])
    np.testing.assert_array_equal(ds.terminals, src.terminals[kept])
    assert ds.timeouts.nonzero()[0].tolist() == [8]
    # inside an episode the next observation is the next frame's; a terminal's is its own
    nxt = src.next_observations["state"][kept]
    np.testing.assert_array_equal(
        ds.next_observations["state"][[0, 1, 2, 4, 9]], nxt[[0, 1, 2, 4, 9]]
    )
    np.testing.assert_array_equal(ds.next_observations["state"][3], ds.observations["state"][3])
    # LeRobot's own encode (H.264, 4:2:0, CRF 30) is lossier than roborl's
    err = np.abs(ds.observations["image"].astype(int) - src.observations["image"][kept])
    assert err.mean() < 12
    assert ds.metadata["success_rows"] == [3, 13]
    assert ds.metadata["intervened_rows"] == [1, 2, 10]  # float 0/1 column, as recorded
    assert ds.metadata["tasks"] == ["reach the red block", "wander"]
    assert ds.metadata["episode_task_index"] == [0, 1, 0]
    assert ds.metadata["fps"] == 10


def test_real_lerobot_read_the_same_frames_actions_and_episodes_roborl_wrote():
    """What LeRobot's own `LeRobotDataset.__getitem__` (torchcodec for video) returned from
    roborl_written/ equals what roborl reads from it, frame for frame."""
    got = np.load(FIXTURES / "roborl_written_read_by_lerobot.npz")
    src = load_file(SOURCE)
    ours = load_lerobot(ROBORL_WRITTEN)
    lengths = ours.episode_lengths() + 1
    ends = np.cumsum(lengths)
    np.testing.assert_array_equal(got["episode_from"], ends - lengths)
    np.testing.assert_array_equal(got["episode_to"], ends)
    final = got[S.FINAL].astype(bool)
    assert final.nonzero()[0].tolist() == (ends - 1).tolist()
    np.testing.assert_array_equal(got["action"][~final], src.actions)
    np.testing.assert_array_equal(got["next.reward"][~final], src.rewards)
    np.testing.assert_array_equal(got["observation.state"][~final], src.observations["state"])
    last = ends - 2  # frames of each episode's last transition
    np.testing.assert_array_equal(
        got["observation.state"][final], src.next_observations["state"][last - np.arange(3)]
    )
    frames, _ = decode(ROBORL_WRITTEN / "videos/observation.images.image/chunk-000/file-000.mp4")
    np.testing.assert_array_equal(got["observation.images.image"], frames)  # same decode
    images_close(got["observation.images.image"][~final], src.observations["image"])
    assert got["tasks"].tolist() == ["reach the red block", "wander"]
    assert got["task"][~final].tolist() == [
        ["reach the red block", "wander", "reach the red block"][e]
        for e in got["episode_index"][~final]
    ]
    assert str(got["video_backend"]) == "torchcodec"


def test_what_roborl_writes_has_the_layout_the_real_library_read(tmp_path):
    """Guard against drift: writing the same demonstrations now gives the info.json features
    and parquet schemas of the committed dataset that LeRobot read."""
    root = save_lerobot(load_file(SOURCE), tmp_path / "now")
    for rel in (S.INFO_PATH, S.ROBORL_META_PATH):
        want = json.loads((ROBORL_WRITTEN / rel).read_text())
        assert json.loads((root / rel).read_text()) == want, rel
    for rel in (
        "data/chunk-000/file-000.parquet",
        S.TASKS_PATH,
        S.EPISODES_DIR + "/chunk-000/file-000.parquet",
    ):
        assert pq.read_schema(root / rel).equals(pq.read_schema(ROBORL_WRITTEN / rel)), rel


def test_demos_from_a_real_lerobot_dataset_train_rlpd(tmp_path):
    roborl(
        "train", "algo=rlpd", "env=tabletop_reach_pixels_state", "env.kwargs.image_size=16",
        f"demos={LEROBOT_WRITTEN}", "algo.batch_size=8", "algo.hidden_sizes=[32,32]",
        "algo.conv_layers=1", "algo.conv_channels=8", "algo.num_critics=2", "algo.critic_steps=1",
        "total_steps=30", "learning_starts=20", "eval_every=0", "checkpoint_every=30",
        "log_every=10", "progress=false", "seed=0", "hydra.run.dir=run", cwd=tmp_path,
    )  # fmt: skip
    records = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    fractions = [r["train/demo_fraction"] for r in records if "train/demo_fraction" in r]
    assert fractions and all(f == 0.5 for f in fractions)
    assert all(np.isfinite(r["train/critic_loss"]) for r in records if "train/critic_loss" in r)


def test_convert_both_ways_and_info_from_the_command_line(tmp_path):
    out = roborl(
        "dataset", "convert", f"in={SOURCE}", "out=lerobot:demos", "task=pick", cwd=tmp_path
    )
    assert "15 transitions, 3 episodes" in out.stdout
    info = json.loads(roborl("dataset", "info", "demos", cwd=tmp_path).stdout)
    assert (info["transitions"], info["episodes"], info["metadata"]["fps"]) == (15, 3, 10)
    roborl("dataset", "convert", f"in={LEROBOT_WRITTEN}", "out=back.hdf5", cwd=tmp_path)
    back = load_file(tmp_path / "back.hdf5")
    assert len(back) == 14 and back.metadata["tasks"] == ["reach the red block", "wander"]


def _broken(tmp_path: Path) -> Path:
    root = tmp_path / "broken"
    shutil.copytree(ROBORL_WRITTEN, root)
    return root


def _edit_info(root: Path, **changes) -> None:
    path = root / S.INFO_PATH
    info = json.loads(path.read_text())
    info.update(changes)
    path.write_text(json.dumps(info))


def test_missing_info_json_is_named(tmp_path):
    root = _broken(tmp_path)
    (root / S.INFO_PATH).unlink()
    assert accepts(str(root))  # still recognised, so the error says what is missing
    with pytest.raises(DatasetError, match=r"meta/info\.json' is missing"):
        load_lerobot(root)


def test_another_codebase_version_is_refused_with_the_version(tmp_path):
    root = _broken(tmp_path)
    _edit_info(root, codebase_version="v2.1")
    with pytest.raises(DatasetError, match=r"info\.json.*codebase_version is 'v2\.1'.*v3\.0"):
        load_lerobot(root)


def test_missing_feature_and_missing_column_are_named(tmp_path):
    root = _broken(tmp_path)
    info = json.loads((root / S.INFO_PATH).read_text())
    del info["features"]["next.reward"]
    _edit_info(root, features=info["features"])
    with pytest.raises(DatasetError, match=r"info\.json.*missing feature\(s\) next\.reward"):
        load_lerobot(root)
    root = _broken(tmp_path / "2")
    data = root / "data/chunk-000/file-000.parquet"
    pq.write_table(pq.read_table(data).drop_columns(["action"]), data)
    with pytest.raises(DatasetError, match=r"file-000\.parquet.*no column 'action'"):
        load_lerobot(root)


def test_video_frame_count_mismatch_names_the_file_and_episode(tmp_path):
    root = _broken(tmp_path)
    video = root / "videos/observation.images.image/chunk-000/file-000.mp4"
    frames, _ = decode(video)
    encode(frames[:-2], video, fps=10)  # the last episode loses two frames
    with pytest.raises(
        DatasetError, match=r"file-000\.mp4.*episode 2.*holds 4 frames.*has 6 frames"
    ):
        load_lerobot(root)


def test_episode_metadata_that_disagrees_with_the_frames_is_refused(tmp_path):
    root = _broken(tmp_path)
    data = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    pq.write_table(table.slice(0, table.num_rows - 1), data)
    with pytest.raises(DatasetError, match=r"total_frames is 18 but .*holds 17 frames"):
        load_lerobot(root)


def test_writer_refuses_an_existing_dataset_and_unknown_targets(tmp_path):
    ds = pendulum(tmp_path, episodes=1)
    with pytest.raises(DatasetError, match="already exists"):
        save_lerobot(ds, ROBORL_WRITTEN)
    assert [p.name for p in FIXTURES.iterdir() if p.name.startswith(".")] == []
    writers = {"lerobot": save_lerobot}
    assert split_scheme("lerobot:runs/x") == ("lerobot", "runs/x")
    assert split_scheme("runs/x:y.npz") == (None, "runs/x:y.npz")
    with pytest.raises(DatasetError, match=r"no dataset writer for 'minari'.*lerobot:TARGET"):
        check_target("minari:x", writers)
    with pytest.raises(DatasetError, match=r"unknown dataset file type '\.csv'"):
        check_target("demos.csv", writers)


def test_takeover_rows_of_a_lerobot_dataset_reach_the_demo_buffer():
    """``complementary_info.is_intervention`` -> metadata ``intervened_rows`` -> the demo
    buffer's ``intervened`` extra (HIL-SERL's flag), on the LeRobot-written fixture."""
    from types import SimpleNamespace

    from roborl.core.demos import load_demo_buffer

    ds = load_lerobot(LEROBOT_WRITTEN)
    ctx = SimpleNamespace(
        run=SimpleNamespace(demos=str(LEROBOT_WRITTEN), buffer_device=None),
        device="cpu",
        config={"env": {"id": "RoborlTabletop-v0"}},
        load_dataset=lambda path: load_lerobot_source(path),
    )
    space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (16, 16, 3), np.uint8),
            "state": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        }
    )
    buf = load_demo_buffer(ctx, space, gym.spaces.Box(-1, 1, (2,), np.float32))
    assert buf is not None and len(buf) == len(ds) == 14
    assert np.flatnonzero(np.asarray(buf.extras["intervened"][:14])).tolist() == [1, 2, 10]


def test_image_features_embedded_as_png_read_like_videos(tmp_path):
    """LeRobot's other camera storage, dtype ``image``: PNG bytes inside the parquet file (as
    `datasets.Image` embeds them). Made here from roborl_written's video, since the fixture
    LeRobot wrote has videos only."""
    import io

    import pyarrow as pa
    from PIL import Image

    root = _broken(tmp_path)
    frames, _ = decode(root / "videos/observation.images.image/chunk-000/file-000.mp4")
    shutil.rmtree(root / "videos")
    pngs = []
    for frame in frames:
        buf = io.BytesIO()
        Image.fromarray(frame).save(buf, format="PNG")
        pngs.append({"bytes": buf.getvalue(), "path": None})
    data = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    column = pa.array(pngs, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(table.append_column("observation.images.image", column), data)
    info = json.loads((root / S.INFO_PATH).read_text())
    info["features"]["observation.images.image"] = {
        "dtype": "image", "shape": [16, 16, 3], "names": ["height", "width", "channels"],
    }  # fmt: skip
    _edit_info(root, features=info["features"], video_path=None)
    ds = load_lerobot(root)
    via_video = load_lerobot(ROBORL_WRITTEN)
    np.testing.assert_array_equal(ds.observations["image"], via_video.observations["image"])
    np.testing.assert_array_equal(
        ds.next_observations["image"], via_video.next_observations["image"]
    )

"""Episode videos: `eval video=true` and `train video_every=N` write MP4s that decode to one
frame per step plus the reset frame; wandb gets them; robots and odd sizes are handled."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import av
import numpy as np
import pytest
from cli_runner import roborl

from roborl.core.errors import ConfigError
from roborl.core.video import (
    Mp4Writer,
    count_frames,
    latest_video,
    make_recording_env,
    render_config,
)

TINY = [
    "total_steps=400",
    "learning_starts=200",
    "eval_every=200",
    "eval_episodes=1",
    "checkpoint_every=400",
    "log_every=200",
    "algo.batch_size=32",
    "algo.hidden_sizes=[16,16]",
    "progress=false",
]


def decode(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def test_eval_video_decodes_to_one_frame_per_step_plus_each_reset(tmp_path: Path) -> None:
    roborl("train", *TINY, cwd=tmp_path)
    (summary,) = tmp_path.rglob("summary.json")
    run_dir = summary.parent
    proc = roborl(
        "eval", f"checkpoint={run_dir}", "episodes=3", "video=true", "video_episodes=2",
        cwd=tmp_path,
    )  # fmt: skip
    report = json.loads((run_dir / "eval.json").read_text())
    video = Path(report["video"])
    assert video == run_dir / "videos" / "eval_step_400_seed_0.mp4" and str(video) in proc.stdout
    frames = decode(video)
    # two recorded episodes: L1 + 1 and L2 + 1 frames (each starts with its reset frame)
    assert len(frames) == report["lengths"][0] + report["lengths"][1] + 2
    assert report["video_frames"] == len(frames)
    assert frames[0].shape == (480, 480, 3)
    assert frames[0].std() > 5  # a rendered scene, not a blank image
    assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).mean() > 0.5  # it moves
    assert latest_video(run_dir) == video
    assert not list((run_dir / "videos").glob(".*"))  # no temp file left


def test_train_video_every_records_evaluations_and_wandb_gets_them(tmp_path: Path) -> None:
    roborl("train", *TINY, "video_every=400", "logger=wandb", cwd=tmp_path)
    (summary,) = tmp_path.rglob("summary.json")
    run_dir = summary.parent
    assert sorted(p.name for p in (run_dir / "videos").iterdir()) == ["step_400.mp4"]
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last_eval = [r for r in records if "eval/length_mean" in r][-1]
    assert last_eval["step"] == 400
    assert count_frames(run_dir / "videos" / "step_400.mp4") == last_eval["eval/length_mean"] + 1
    (logged,) = run_dir.glob("wandb/offline-run-*/files/media/videos/eval/video_400_*.mp4")
    assert logged.read_bytes() == (run_dir / "videos" / "step_400.mp4").read_bytes()

    # `roborl report` embeds the run's latest video in its one-file HTML
    from roborl.plugins.report.cli import write_report

    write_report([run_dir], tmp_path / "report", reps=20, plots=False)
    page = (tmp_path / "report" / "report.html").read_text()
    embedded = page.split("<video", 1)[1].split("src='data:video/mp4;base64,", 1)[1].split("'")[0]
    assert base64.b64decode(embedded) == (run_dir / "videos" / "step_400.mp4").read_bytes()


def test_odd_frame_sizes_are_padded_and_an_unfinished_video_leaves_no_file(tmp_path: Path) -> None:
    writer = Mp4Writer(tmp_path / "odd.mp4", fps=10)
    for i in range(3):
        writer.write(np.full((5, 7, 3), 40 * i, np.uint8))
    assert writer.close() == tmp_path / "odd.mp4"
    frames = decode(tmp_path / "odd.mp4")
    assert len(frames) == 3 and frames[0].shape == (6, 8, 3)

    writer = Mp4Writer(tmp_path / "cut.mp4")
    writer.write(np.zeros((8, 8, 3), np.uint8))
    writer.abort()
    assert list(tmp_path.iterdir()) == [tmp_path / "odd.mp4"]


def test_recorder_counts_frames_and_records_only_the_asked_episodes(tmp_path: Path) -> None:
    from roborl.core.plugins import get_host

    env = make_recording_env(get_host().registry, {"env": {"id": "InvertedPendulum-v5"}}, 0)
    env.start(tmp_path / "v.mp4", episodes=1)
    lengths = []
    for seed in (0, 1):
        env.reset(seed=seed)
        done, n = False, 0
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done, n = terminated or truncated, n + 1
        lengths.append(n)
    path, frames = env.finish()
    env.close()
    assert frames == lengths[0] + 1 == count_frames(path)


def test_videos_of_a_robot_are_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="no renderer"):
        render_config({"robot": {"name": "ros2"}, "env": {"id": "x"}})
    cfg = render_config({"env": {"id": "Hopper-v5", "kwargs": {"width": 64}}})
    assert cfg["env"]["kwargs"] == {"width": 64, "render_mode": "rgb_array"}

"""Demonstrations: `roborl demos record`, `demos=` with RLPD's symmetric sampling, and
interventions routed to the demo buffer (HIL-SERL)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from cli_runner import roborl

import roborl.core.loops.offpolicy as offpolicy
from roborl.core.buffer import ReplayBuffer, Returns
from roborl.core.checkpoint import load_checkpoint
from roborl.core.demos import EXTRAS, add_interventions, load_demo_buffer, sample_mixed
from roborl.core.errors import ConfigError, DatasetError
from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner
from roborl.plugins.datasets.files import load_file
from roborl.plugins.demos.record import record

IMAGE = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
        "state": gym.spaces.Box(-1, 1, (2,), np.float32),
    }
)


def _filled(n: int, reward: float, seed: int) -> ReplayBuffer:
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(n, IMAGE, (1,), with_costs=True, extras=EXTRAS)
    obs = {
        "image": rng.integers(0, 255, (n + 1, 8, 8, 3), dtype=np.uint8),
        "state": rng.uniform(-1, 1, (n + 1, 2)).astype(np.float32),
    }
    buf.extend(
        {k: v[:-1] for k, v in obs.items()},
        rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        np.full(n, reward, np.float32),
        {k: v[1:] for k, v in obs.items()},
        np.zeros(n, np.float32),
    )
    return buf


@pytest.mark.parametrize(
    ("batch", "fraction", "n_step"),
    [(256, 0.5, 1), (256, 0.5, 3), (7, 0.5, 1), (10, 0.25, 1), (10, 0.0, 1), (10, 1.0, 1)],
)
def test_demo_rows_are_exactly_round_batch_times_fraction(batch, fraction, n_step):
    """Online rows carry reward 0 and demo rows reward 1, so the reward column shows where
    each row came from; `is_demo` must mark exactly those, round(batch*fraction) of them."""
    online, demos = _filled(300, 0.0, 0), _filled(50, 1.0, 1)
    gen = torch.Generator().manual_seed(0)
    b = sample_mixed(online, demos, batch, fraction, gen, Returns(gamma=0.9, n_step=n_step))
    assert len(b) == batch
    assert b.obs["image"].dtype == torch.uint8 and b.obs["image"].shape == (batch, 8, 8, 3)
    from_demo = b.rewards > 0
    assert int(b.extras["is_demo"].sum()) == round(batch * fraction)
    assert torch.equal(b.extras["is_demo"], from_demo)
    assert b.discount is not None and len(b.discount) == batch  # n_step 1 too: gamma
    if n_step == 1:
        assert torch.equal(b.discount, torch.full((batch,), 0.9))


class _Takeover(gym.Wrapper):
    """Pendulum where a person takes over every third step (as a robot's teleop channel
    reports it: `info["intervened"]`)."""

    flagged: list[int] = []

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.t = 0

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.t += 1
        taken = self.t % 3 == 0
        if taken:
            _Takeover.flagged.append(self.t)
        return obs, r, term, trunc, {**info, "intervened": taken}


gym.register("RoborlTestTakeover-v0", entry_point=lambda: _Takeover(gym.make("Pendulum-v1")))


def _pendulum_demos(path: Path) -> Path:
    env = gym.make("Pendulum-v1")
    ds, _ = record(env, lambda o: env.action_space.sample(), 1, seed=5, log=lambda m: None)
    assert ds is not None
    return ds.save(path)


def _takeover_run(demos_path, steps: int) -> dict:
    """SAC with demos on the takeover env, `steps` env steps, one checkpoint at the end."""
    return {
        "algo": {"name": "sac", "batch_size": 32},
        "env": {"id": "RoborlTestTakeover-v0"},
        "total_steps": steps, "learning_starts": 50, "eval_every": 0, "checkpoint_every": steps,
        "log_every": steps, "progress": False, "demos": str(demos_path), "demo_fraction": 0.5,
        "logger": {"name": "jsonl"},
    }  # fmt: skip


def test_offpolicy_loop_samples_half_demos_and_adds_interventions(tmp_path, monkeypatch):
    """A real SAC run with demos=: every update batch is exactly 50% demo rows, and every
    intervened transition the collector reported lands in the demo buffer too."""
    demos_path = _pendulum_demos(tmp_path / "demos.npz")
    seen: dict[str, list] = {"demo_rows": [], "buffers": [], "added": []}

    def spy_sample(*args, **kw):
        b = sample_mixed(*args, **kw)
        seen["demo_rows"].append((len(b), int(b.extras["is_demo"].sum())))
        return b

    def spy_load(*args, **kw):
        buf = load_demo_buffer(*args, **kw)
        seen["buffers"].append(buf)
        return buf

    def spy_add(demos, chunk):
        n = add_interventions(demos, chunk)
        seen["added"].append(n)
        return n

    monkeypatch.setattr(offpolicy, "sample_mixed", spy_sample)
    monkeypatch.setattr(offpolicy, "load_demo_buffer", spy_load)
    monkeypatch.setattr(offpolicy, "add_interventions", spy_add)
    _Takeover.flagged = []
    host = PluginHost()
    host.load_entry_points()
    cfg = _takeover_run(demos_path, 120)
    Runner(cfg, tmp_path / "run", host).execute()
    assert seen["demo_rows"] and all(rows == (32, 16) for rows in seen["demo_rows"])
    (demo_buf,) = seen["buffers"]
    taken = len([t for t in _Takeover.flagged if t <= 120])
    assert taken == 40 and sum(seen["added"]) == taken
    assert len(demo_buf) == 200 + taken  # one 200-step Pendulum episode + the takeovers
    assert bool(demo_buf.extras["intervened"][200 : 200 + taken].all())
    assert not bool(demo_buf.extras["intervened"][:200].any())


def test_demo_pretrain_updates_train_on_demo_rows_alone_before_the_first_env_step(
    tmp_path, monkeypatch
):
    """`demo_pretrain_updates=7`: the run's first 7 updates come before any env step (the
    online buffer is still empty) on batches that are demo rows only; then the usual 50/50."""
    demos_path = _pendulum_demos(tmp_path / "demos.npz")
    seen: list[tuple[int, int, int]] = []

    def spy_sample(online, *args, **kw):
        b = sample_mixed(online, *args, **kw)
        seen.append((len(online), len(b), int(b.extras["is_demo"].sum())))
        return b

    monkeypatch.setattr(offpolicy, "sample_mixed", spy_sample)
    host = PluginHost()
    host.load_entry_points()
    cfg = {**_takeover_run(demos_path, 80), "demo_pretrain_updates": 7}
    Runner(cfg, tmp_path / "run", host).execute()
    assert seen[:7] == [(0, 32, 32)] * 7
    assert len(seen) > 7 and all(rows[1:] == (32, 16) for rows in seen[7:])
    assert all(online >= 50 for online, _, _ in seen[7:])


def test_demo_pretrain_updates_without_demos_is_refused(tmp_path):
    host = PluginHost()
    host.load_entry_points()
    cfg = {**_takeover_run(None, 80), "demos": None, "demo_pretrain_updates": 5}
    with pytest.raises(ConfigError, match=r"demo_pretrain_updates=5 .*no demos= was given"):
        Runner(cfg, tmp_path / "run", host).execute()


def test_the_demo_buffer_with_its_interventions_is_checkpointed_and_resumed(tmp_path, monkeypatch):
    """The takeovers a person added to the demo buffer survive a resume: the checkpoint keeps
    the demo buffer, and the resumed run continues from it instead of reloading demos= alone."""
    demos_path = _pendulum_demos(tmp_path / "demos.npz")
    buffers = []

    def spy_load(*args, **kw):
        buffers.append(load_demo_buffer(*args, **kw))
        return buffers[-1]

    monkeypatch.setattr(offpolicy, "load_demo_buffer", spy_load)
    host = PluginHost()
    host.load_entry_points()
    cfg = _takeover_run(demos_path, 60)
    Runner(cfg, tmp_path / "run", host).execute()
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    saved = load_checkpoint(last)["demo_buffer"]
    assert saved["size"] == 200 + 20  # the 200 demo rows + a takeover every third step
    assert int(saved["extras"]["intervened"].sum()) == 20
    Runner({**cfg, "total_steps": 90}, tmp_path / "run", host).execute(resume_from=last)
    resumed = buffers[-1]
    assert len(resumed) == 200 + 20 + 10  # restored, then 10 more takeovers in steps 61-90
    assert int(resumed.extras["intervened"].sum()) == 30


class _UprightReward:
    """A reward model as a plugin ships one: success (reward 1) when the pendulum is near
    upright (cos theta > 0.9), else 0."""

    from roborl.core.hookspecs import hookimpl

    @hookimpl
    def roborl_rewards(self):
        def make():
            return lambda obs: (float(obs[0] > 0.9), bool(obs[0] > 0.9))

        return {"upright": make}


def test_learned_reward_relabels_demos_and_evaluation_measures_the_task(tmp_path, monkeypatch):
    """With reward=, demo rows carry the model's reward and terminal flags (computed on each
    next observation), not the env's dense reward they were recorded with; evaluation runs
    on the env's own reward and termination."""
    demos_path = _pendulum_demos(tmp_path / "demos.npz")
    stored = load_file(demos_path)
    seen = []

    def spy_load(*args, **kw):
        buf = load_demo_buffer(*args, **kw)
        seen.append(buf)
        return buf

    monkeypatch.setattr(offpolicy, "load_demo_buffer", spy_load)
    host = PluginHost()
    host.load_entry_points()
    host.add_plugin(_UprightReward(), "upright_reward")
    cfg = {
        "algo": {"name": "sac", "batch_size": 32},
        "env": {"id": "Pendulum-v1"}, "reward": {"name": "upright"},
        "total_steps": 60, "learning_starts": 50, "eval_every": 60, "eval_episodes": 1,
        "checkpoint_every": 60, "log_every": 60, "progress": False,
        "demos": str(demos_path), "demo_fraction": 0.5,
    }  # fmt: skip
    summary = Runner(cfg, tmp_path / "run", host).execute()
    (buf,) = seen
    upright = np.asarray(stored.next_observations)[:, 0] > 0.9
    rewards = buf.rewards[: len(stored)].cpu().numpy()
    np.testing.assert_array_equal(rewards, upright.astype(np.float32))
    np.testing.assert_array_equal(buf.terminated[: len(stored)].cpu().numpy() > 0, upright)
    assert np.asarray(stored.rewards).min() < -1.0  # what they were recorded with: dense
    # Pendulum's own return is negative; the model's reward is never below 0.
    assert summary["final_eval_return"] < 0.0, summary


def test_demos_of_another_task_are_refused_before_training(tmp_path):
    demos_path = _pendulum_demos(tmp_path / "demos.npz")  # 3-D observations
    host = PluginHost()
    host.load_entry_points()
    cfg = {
        "algo": {"name": "sac"}, "env": {"id": "InvertedPendulum-v5"}, "total_steps": 10,
        "learning_starts": 5, "eval_every": 0, "progress": False, "demos": str(demos_path),
        "logger": {"name": "jsonl"},
    }  # fmt: skip
    with pytest.raises(DatasetError, match=r"demos=.*demos\.npz.*observations"):
        Runner(cfg, tmp_path / "run", host).execute()


def test_demos_record_cli_writes_expert_pixel_demos(tmp_path):
    out = tmp_path / "demos.npz"
    proc = roborl(
        "demos", "record", f"out={out}", "episodes=3", "env=tabletop_reach_pixels",
        "env.kwargs.image_size=32", "seed=100", "successes_only=true", cwd=tmp_path,
    )  # fmt: skip
    assert "3 episodes" in proc.stdout
    ds = load_file(out)
    assert ds.dict_obs and ds.observations["image"].dtype == np.uint8
    assert ds.observations["image"].shape[1:] == (32, 32, 3)
    # successes_only keeps episodes that reach the block, which ends them: success rows (the
    # classifier's labels) are exactly the terminal rows, one per kept episode.
    assert ds.metadata["policy"] == "expert"
    assert sorted(ds.metadata["success_rows"]) == np.flatnonzero(ds.terminals).tolist()
    assert int(ds.terminals.sum()) == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_record_keeps_finished_episodes_when_interrupted(tmp_path):
    """Ctrl-C during the second episode: the first is kept and the file is whole."""
    env = gym.make("Pendulum-v1", max_episode_steps=20)
    calls = {"n": 0}

    def act(obs):
        calls["n"] += 1
        if calls["n"] == 25:
            raise KeyboardInterrupt
        return env.action_space.sample()

    ds, summary = record(env, act, 3, seed=0, log=lambda m: None)
    assert summary["interrupted"] and summary["episodes"] == 1
    path = ds.save(tmp_path / "d.npz")
    assert len(load_file(path)) == 20


def test_random_demos_of_the_same_seed_are_the_same_rows():
    """`policy=random seed=N` is reproducible: the classifier's random-scene frames (and so
    the classifier trained on them) came out different on every machine before."""
    from roborl.plugins.demos.record import make_policy

    def recorded(seed: int) -> np.ndarray:
        env = gym.make("Pendulum-v1", max_episode_steps=10)
        ds, _ = record(env, make_policy("random", env, None), 2, seed=seed, log=lambda m: None)
        env.close()
        return ds.actions

    np.testing.assert_array_equal(recorded(3), recorded(3))
    assert not np.array_equal(recorded(3), recorded(4))


def test_demos_record_cli_writes_a_lerobot_dataset(tmp_path):
    """out=lerobot:DIR: camera frames as video, the task string, success per frame; the
    directory loads back through demos=/dataset= as the same transitions."""
    pq = pytest.importorskip("pyarrow.parquet")
    proc = roborl(
        "demos", "record", "out=lerobot:demos", "episodes=2", "env=tabletop_reach_pixels",
        "env.kwargs.image_size=16", "seed=100", "task=reach the red block", cwd=tmp_path,
    )  # fmt: skip
    assert "2 episodes" in proc.stdout
    root = tmp_path / "demos"
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["fps"] == 10 and info["features"]["observation.images.image"]["dtype"] == "video"
    assert (root / "videos/observation.images.image/chunk-000/file-000.mp4").is_file()
    assert pq.read_table(root / "meta/tasks.parquet").column(1).to_pylist() == [
        "reach the red block"
    ]
    frames = pq.read_table(root / "data/chunk-000/file-000.parquet").to_pydict()
    host = PluginHost()
    host.load_entry_points()
    ds = host.registry.dataset_sources["lerobot"](str(root))
    assert len(frames["index"]) == len(ds) + 2
    success = [
        s
        for s, f in zip(frames["next.success"], frames["complementary_info.final_observation"])
        if not f
    ]
    assert np.flatnonzero(success).tolist() == ds.metadata["success_rows"]
    assert ds.metadata["task"] == "reach the red block" and ds.metadata["policy"] == "expert"
    assert "complementary_info.is_intervention" in frames  # sims report no takeovers: all False
    assert not any(frames["complementary_info.is_intervention"])


def test_stop_after_success_ends_each_episode_k_steps_after_its_first_success():
    """`stop_after_success=k`: the scripted FetchPush expert holds still once the block is in,
    so without it most of a 50-step demo is a still arm; with it each episode ends k steps
    after the first success, as a time limit (bootstrapped), never a terminal."""
    from roborl.sim.benchmarks.fetch_pixels import FetchPixelEnv

    env = FetchPixelEnv(
        "push", cameras=[], privileged_block=True, normalized_state=True, end_on_success=False
    )
    act = lambda obs: env.expert_action()  # noqa: E731
    k = 3
    full, _ = record(env, act, 2, seed=10_000, successes_only=True, log=lambda m: None)
    cut, _ = record(
        env, act, 2, seed=10_000, successes_only=True, log=lambda m: None, stop_after_success=k
    )
    env.close()
    assert len(full) == 100 and len(cut) < 100
    ends = np.flatnonzero(cut.timeouts).tolist()
    assert not cut.terminals.any() and len(ends) == 2 and ends[-1] == len(cut) - 1
    success = set(cut.metadata["success_rows"])
    for start, end in zip([0, ends[0] + 1], ends):
        first = min(r for r in range(start, end + 1) if r in success)
        assert end == first + k  # the same seeds, so the same first success as the full run
    # The rows kept are the full episodes' first rows, unchanged.
    first_len = ends[0] + 1
    assert np.array_equal(cut.actions[:first_len], full.actions[:first_len])

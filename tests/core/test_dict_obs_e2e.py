"""Dict (camera) observations end to end on the real RoborlTabletop (MuJoCo, EGL rendering):
vector env -> collector -> shared-storage buffer -> batches -> checkpoint -> resume -> eval,
and the refusal of a vector-observation algorithm."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from roborl.core.buffer import ReplayBuffer
from roborl.core.config import OffPolicyConfig
from roborl.core.envs import make_vec_env
from roborl.core.errors import ConfigError
from roborl.core.hookspecs import hookimpl
from roborl.core.interfaces import Algorithm, Batch, Policy
from roborl.core.loops.collectors import real_next_obs
from roborl.core.plugins import PluginHost
from roborl.core.policies import AlgorithmPolicy
from roborl.core.runner import Runner
from roborl.sim.tabletop.env import TabletopEnv

ENV = {
    "id": "RoborlTabletop-v0",
    "kwargs": {"obs_mode": "pixels_state", "tasks": [0], "image_size": 16, "max_episode_steps": 6},
    "max_episode_steps": 6,
}


@dataclass
class SeeConfig(OffPolicyConfig):
    batch_size: int = field(default=8)


class SeesPixels(Algorithm):
    """Acts like the scripted expert's direction (random), records what the loop hands it."""

    name = "test_sees_pixels"
    Config = SeeConfig
    loop = "offpolicy"
    accepts_dict_obs = True
    batches: list[Batch] = []

    def act(self, obs: Any, deterministic: bool = False) -> np.ndarray:
        assert isinstance(obs, Mapping) and obs["image"].dtype == np.uint8
        n = len(obs["image"])
        return np.tile(np.array([[0.5, -0.5]], np.float32), (n, 1))

    def update(self, batch: Batch) -> dict[str, float]:
        SeesPixels.batches.append(batch)
        return {"seen": float(len(batch))}

    def state_dict(self) -> dict[str, Any]:
        return {"w": torch.zeros(1)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass

    def policy(self) -> Policy:
        return AlgorithmPolicy(self)


class _Plugin:
    @hookimpl
    def roborl_algorithms(self) -> dict[str, type]:
        return {"test_sees_pixels": SeesPixels}


@pytest.fixture(scope="module")
def host() -> PluginHost:
    host = PluginHost()
    host.load_entry_points()
    host.add_plugin(_Plugin(), "test_dict_obs_e2e")
    return host


def _cfg(**over: Any) -> dict[str, Any]:
    return {
        "algo": {"name": "test_sees_pixels"}, "env": ENV, "seed": 0, "total_steps": 24,
        "num_envs": 2, "learning_starts": 12, "eval_every": 24, "eval_episodes": 1,
        "checkpoint_every": 12, "log_every": 12, "progress": False, **over,
    }  # fmt: skip


def test_obs_modes_and_bad_options():
    for mode, keys in [
        ("image_task", {"image", "task"}),
        ("pixels", {"image"}),
        ("pixels_state", {"image", "state"}),
    ]:
        env = TabletopEnv(obs_mode=mode, tasks=[0], image_size=16)
        obs, _ = env.reset(seed=1)
        assert set(obs) == keys and env.observation_space.contains(obs)
        nxt, *_ = env.step(np.ones(2, np.float32))
        assert not np.array_equal(obs["image"], nxt["image"])  # the camera sees the gripper move
        env.close()
    with pytest.raises(ConfigError, match="obs_mode='rgb'"):
        TabletopEnv(obs_mode="rgb")
    with pytest.raises(ConfigError, match="tasks=\\[9\\]"):
        TabletopEnv(tasks=[9])


def test_vector_env_final_frames_reach_the_buffer(host: PluginHost):
    """Episode ends on the real env: the stored next obs is the final frame, not the reset."""
    envs = make_vec_env(host.registry, {"env": ENV}, 2)
    obs, _ = envs.reset(seed=3)
    buf = ReplayBuffer(64, envs.single_observation_space, (2,))
    finals = []
    for _ in range(14):
        act = np.stack([e.unwrapped.expert_action() for e in envs.envs])
        nxt, rew, term, trunc, infos = envs.step(act)
        done = term | trunc
        stored = real_next_obs(nxt, infos, done)
        for i in np.flatnonzero(done):
            assert not np.array_equal(stored["image"][i], nxt["image"][i])
            finals.append((buf.pos + i, stored["image"][i].copy(), stored["state"][i].copy()))
        buf.add(obs, act, rew, stored, term.astype(np.float32))
        obs = nxt
    envs.close()
    assert finals
    slots = torch.tensor([s for s, _, _ in finals])
    got = buf.next_observation(slots)
    for row, (_, img, state) in enumerate(finals):
        assert np.array_equal(got["image"][row].numpy(), img)
        assert np.allclose(got["state"][row].numpy(), state)


def test_offpolicy_run_checkpoint_and_resume(host: PluginHost, tmp_path: Path):
    SeesPixels.batches = []
    run = tmp_path / "run"
    summary = Runner(_cfg(), run, host).execute()
    assert summary["steps"] == 24 and "final_eval_return" in summary
    batch = SeesPixels.batches[-1]
    assert batch.obs["image"].dtype == torch.uint8 and batch.obs["image"].shape[1:] == (16, 16, 3)
    assert batch.next_obs["state"].dtype == torch.float32
    ckpt = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["observation_space"]["type"] == "Dict"
    saved = ckpt["buffer"]
    assert saved["obs"]["image"].dtype == torch.uint8 and saved["size"] == 24
    assert "next_obs" not in saved  # frames are stored once
    # resume into a longer run: the buffer comes back and the run goes on
    again = Runner(_cfg(total_steps=36, eval_every=36), run, host)
    summary = again.execute(resume_from=run / "checkpoints" / "last.pt")
    assert summary["steps"] == 36


def test_vector_algorithms_refuse_dict_observations(host: PluginHost, tmp_path: Path):
    with pytest.raises(ConfigError, match=r"algo=sac takes flat vector.*pixel"):
        Runner(_cfg(algo={"name": "sac"}), tmp_path / "sac", host).execute()

"""Nested Dict observations (gym-hil's ``{"pixels": {...}, "agent_pos": ...}``) load: envs built
from config are flattened to ``"outer/inner"`` keys, which the buffer, the pixel encoders and
checkpoints handle; ``env.concat_obs=true`` gives vector algorithms one Box."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from roborl.core.envs import FlattenDictObservation, env_factory, make_vec_env
from roborl.core.errors import ConfigError
from roborl.core.hookspecs import hookimpl
from roborl.core.obs import check_obs_space, flatten_dict_obs, flatten_dict_space
from roborl.core.plugins import PluginHost
from roborl.core.runner import Runner

H = 16


class NestedEnv(gym.Env):
    """gym-hil's observation layout, small: a camera under "pixels", the arm's state beside it
    and a second level of nesting. The reward pulls `agent_pos` to the origin."""

    def __init__(self, images: bool = True) -> None:
        inner: dict[str, gym.Space] = {
            "agent_pos": gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
            "goal": gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float64)}),
        }
        if images:
            inner["pixels"] = gym.spaces.Dict(
                {"front": gym.spaces.Box(0, 255, (H, H, 3), np.uint8)}
            )
        self.observation_space = gym.spaces.Dict(inner)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.images = images
        self.pos = np.zeros(2, np.float32)

    def _obs(self) -> dict[str, Any]:
        obs: dict[str, Any] = {"agent_pos": self.pos.copy(), "goal": {"pos": np.zeros(2)}}
        if self.images:
            frame = np.zeros((H, H, 3), np.uint8)
            i, j = ((self.pos + 2.0) / 4.0 * (H - 1)).astype(int)
            frame[i, j] = 255
            obs["pixels"] = {"front": frame}
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict]:
        self.pos = np.clip(self.pos + 0.2 * np.asarray(action, np.float32), -2.0, 2.0)
        return self._obs(), -float(np.linalg.norm(self.pos)), False, False, {}


class _Plugin:
    @hookimpl
    def roborl_envs(self) -> dict[str, Callable[..., gym.Env]]:
        return {"TestNested-v0": NestedEnv}


@pytest.fixture(scope="module")
def host() -> PluginHost:
    host = PluginHost()
    host.load_entry_points()
    host.add_plugin(_Plugin(), "test_nested_dict_obs")
    return host


def test_nested_space_and_obs_flatten_to_slash_keys_in_nesting_order() -> None:
    env = NestedEnv()
    flat = flatten_dict_space(env.observation_space)
    assert list(flat.spaces) == ["agent_pos", "goal/pos", "pixels/front"]
    assert flat["pixels/front"] == env.observation_space["pixels"]["front"]
    obs, _ = env.reset(seed=0)
    assert flat.contains(flatten_dict_obs(obs))
    with pytest.raises(ConfigError, match=r"nested Dict.*FlattenDictObservation"):
        check_obs_space(env.observation_space)
    check_obs_space(flat)  # the flat one is what the buffer stores
    clash = gym.spaces.Dict(
        {"a/b": flat["agent_pos"], "a": gym.spaces.Dict({"b": flat["goal/pos"]})}
    )
    with pytest.raises(ConfigError, match="'a/b' appears twice"):
        flatten_dict_space(clash)
    wrapped = FlattenDictObservation(env)
    assert wrapped.observation_space.contains(wrapped.reset(seed=1)[0])


def test_envs_built_from_config_are_flattened(host: PluginHost) -> None:
    envs = make_vec_env(host.registry, {"env": {"id": "TestNested-v0"}}, 2)
    obs, _ = envs.reset(seed=0)
    assert set(obs) == {"agent_pos", "goal/pos", "pixels/front"}
    assert obs["pixels/front"].shape == (2, H, H, 3) and obs["pixels/front"].dtype == np.uint8
    obs, *_ = envs.step(envs.action_space.sample())
    assert all(
        envs.single_observation_space.contains({k: v[i] for k, v in obs.items()}) for i in range(2)
    )
    envs.close()


def test_concat_obs_joins_vector_entries_and_refuses_images(host: PluginHost) -> None:
    make = env_factory(
        host.registry, {"id": "TestNested-v0", "kwargs": {"images": False}, "concat_obs": True}
    )
    env = make()
    assert env.observation_space.shape == (4,)  # agent_pos (2) then goal/pos (2)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    np.testing.assert_allclose(obs[:2], env.unwrapped.pos)
    with pytest.raises(ConfigError, match=r"concat_obs=true.*\['pixels/front'\].*camera"):
        env_factory(host.registry, {"id": "TestNested-v0", "concat_obs": True})()


def _train_cfg(**over: Any) -> dict[str, Any]:
    return {
        "env": {"id": "TestNested-v0"}, "seed": 0, "total_steps": 60, "learning_starts": 30,
        "eval_every": 60, "eval_episodes": 1, "checkpoint_every": 60, "log_every": 30,
        "progress": False, **over,
    }  # fmt: skip


def test_pixel_sac_trains_on_a_nested_dict_env_and_reloads(
    host: PluginHost, tmp_path: Path
) -> None:
    """DrQ's encoder gets one conv net per flat image key ("pixels/front": a torch module name
    may not hold a dot, a slash is fine) and the checkpoint keeps the flat space."""
    algo = {"name": "drq", "batch_size": 16, "hidden_sizes": [32, 32]}
    cfg = _train_cfg(algo=algo, env={"id": "TestNested-v0", "max_episode_steps": 20})
    summary = Runner(cfg, tmp_path / "drq", host).execute()
    assert summary["steps"] == 60 and np.isfinite(summary["final_eval_return"])
    ckpt = torch.load(tmp_path / "drq" / "checkpoints" / "last.pt", weights_only=True)
    assert list(ckpt["observation_space"]["spaces"]) == ["agent_pos", "goal/pos", "pixels/front"]
    assert any(k.startswith("convs.pixels/front.") for k in ckpt["state"]["encoder"])


def test_vector_sac_is_pointed_to_concat_obs_then_trains_with_it(
    host: PluginHost, tmp_path: Path
) -> None:
    env = {"id": "TestNested-v0", "kwargs": {"images": False}, "max_episode_steps": 20}
    algo = {"name": "sac", "batch_size": 16, "hidden_sizes": [32, 32]}
    with pytest.raises(ConfigError, match=r"algo=sac takes flat.*\+env\.concat_obs=true"):
        Runner(_train_cfg(algo=algo, env=env), tmp_path / "refused", host).execute()
    cfg = _train_cfg(algo=algo, env={**env, "concat_obs": True})
    summary = Runner(cfg, tmp_path / "sac", host).execute()
    assert summary["steps"] == 60
    saved = json.loads((tmp_path / "sac" / "summary.json").read_text())
    assert np.isfinite(saved["final_eval_return"])

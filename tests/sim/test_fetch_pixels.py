"""The Fetch pixel tasks (HIL-SERL's setting on a standard benchmark, issue 33): a camera frame
that shows the block, proprioception without the block's pose, the task's own success ending
the episode, and a scripted expert that solves the task where random actions do not."""

from __future__ import annotations

import numpy as np
import pytest

from roborl.core.compose import compose_dict
from roborl.core.envs import env_factory
from roborl.core.errors import ConfigError
from roborl.core.plugins import get_host
from roborl.sim.benchmarks.fetch_pixels import FetchPixelEnv


def success_rate(env: FetchPixelEnv, act, episodes: int) -> float:
    wins = []
    for ep in range(episodes):
        env.reset(seed=ep)
        while True:
            _, reward, terminated, truncated, info = env.step(act())
            assert reward == float(info["success"])
            if terminated or truncated:
                assert terminated == info["success"]
                wins.append(info["success"])
                break
    return float(np.mean(wins))


def test_push_preset_builds_a_camera_and_state_dict_without_the_block_pose() -> None:
    host = get_host()
    env_cfg = compose_dict(host, ["env=fetch_push_pixels", "env.kwargs.image_size=32"], "train")
    env = env_factory(host.registry, env_cfg["env"])()
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert obs["image"].shape == (32, 32, 3) and obs["image"].std() > 0
    inner = env.unwrapped
    assert isinstance(inner, FetchPixelEnv)
    block = inner._raw["observation"][3:6]
    state = obs["state"]
    assert not any(np.allclose(state[i : i + 3], block, atol=1e-6) for i in range(len(state) - 2))
    np.testing.assert_allclose(state[-3:], inner._raw["desired_goal"], rtol=1e-6)
    # Moving the block changes the picture: the policy can see it.
    before = inner.render().astype(int)
    qpos = inner._inner._utils.get_joint_qpos(
        inner._inner.model, inner._inner.data, "object0:joint"
    )
    qpos[:2] += 0.1
    inner._inner._utils.set_joint_qpos(inner._inner.model, inner._inner.data, "object0:joint", qpos)
    inner._inner._mujoco.mj_forward(inner._inner.model, inner._inner.data)
    assert np.abs(inner.render().astype(int) - before).sum() > 0
    env.close()


def test_scripted_push_expert_succeeds_where_random_actions_do_not() -> None:
    env = FetchPixelEnv("push", image_size=16)
    expert = success_rate(env, env.expert_action, 10)
    env.action_space.seed(0)
    random = success_rate(env, env.action_space.sample, 10)
    env.close()
    assert expert >= 0.9 and random <= 0.5 and expert > random


@pytest.mark.parametrize("kwargs", [{"task": "pick"}, {"image_size": 8}, {"max_episode_steps": 0}])
def test_bad_arguments_name_the_argument(kwargs: dict) -> None:
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        FetchPixelEnv(**kwargs)


def test_playing_on_after_success_gives_many_success_frames_and_the_expert_holds_the_block() -> (
    None
):
    """`end_on_success=False` is how the classifier's frames are recorded: the episode runs to
    its step limit, reward and `info["success"]` follow the task each step, and the expert,
    once the block is on the goal, stops moving the gripper so the block stays there."""
    env = FetchPixelEnv("push", image_size=16, max_episode_steps=40, end_on_success=False)
    env.reset(seed=3)
    successes, steps, held = [], 0, []
    while True:
        was_success = env.success()
        action = env.expert_action()
        if was_success:
            held.append(np.abs(action[:3]).max())
        _, reward, terminated, truncated, info = env.step(action)
        steps += 1
        assert not terminated and reward == float(info["success"])
        successes.append(info["success"])
        if truncated:
            break
    env.close()
    assert steps == 40
    assert sum(successes) >= 10 and successes[-1]  # reached the goal and stayed there
    assert held and max(held) == 0.0

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
from roborl.sim.benchmarks.fetch_pixels import PUSH_DONE, WORKSPACE, FetchPixelEnv


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


def test_privileged_block_puts_the_block_and_its_offset_from_the_gripper_in_the_state() -> None:
    env = FetchPixelEnv("push", image_size=16, privileged_block=True)
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    raw = env._raw["observation"]
    block, grip = raw[3:6], raw[0:3]
    np.testing.assert_allclose(obs["state"][-9:-6], block, rtol=1e-6)
    np.testing.assert_allclose(obs["state"][-6:-3], block - grip, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(obs["state"][-3:], env._raw["desired_goal"], rtol=1e-6)
    plain = FetchPixelEnv("push", image_size=16)
    assert plain.observation_space["state"].shape[0] + 6 == obs["state"].shape[0]
    env.close()
    plain.close()


def test_normalized_state_puts_positions_in_workspace_units_and_keeps_the_information() -> None:
    raw = FetchPixelEnv("push", image_size=16, privileged_block=True)
    norm = FetchPixelEnv("push", image_size=16, privileged_block=True, normalized_state=True)
    raw_states, norm_states = [], []
    for env, states in ((raw, raw_states), (norm, norm_states)):
        obs, _ = env.reset(seed=5)
        for _ in range(30):
            states.append(obs["state"])
            obs, *_ = env.step(env.expert_action())
    env.close()
    raw_states, norm_states = np.array(raw_states), np.array(norm_states)
    # Same scene, same moves: an affine map of the raw state, gripper position first.
    centre = np.array([1.34, 0.75, 0.42])
    np.testing.assert_allclose(norm_states[:, :3], (raw_states[:, :3] - centre) / 0.15, atol=1e-5)
    np.testing.assert_allclose(norm_states[:, -3:], (raw_states[:, -3:] - centre) / 0.15, atol=1e-5)
    # The entries that move (gripper, its velocity, the block's offset) vary on a unit scale,
    # where the raw ones vary by centimetres.
    moving = raw_states.std(0) > 1e-4
    assert np.all(norm_states.std(0)[moving] > 3 * raw_states.std(0)[moving])
    assert np.abs(norm_states).max() < 10
    raw.close()
    norm.close()


def test_a_second_camera_is_image_side_and_renders_what_a_side_camera_env_renders() -> None:
    both = FetchPixelEnv("push", image_size=24, cameras=["front", "side"])
    front, side = FetchPixelEnv("push", image_size=24), FetchPixelEnv("push", 24, cameras="side")
    obs, _ = both.reset(seed=4)
    assert sorted(obs) == ["image", "image_side", "state"]
    assert both.observation_space.contains(obs)
    front.reset(seed=4)
    side.reset(seed=4)
    for _ in range(10):
        action = both.expert_action()
        obs, *_ = both.step(action)
        np.testing.assert_array_equal(obs["image"], front.step(action)[0]["image"])
        np.testing.assert_array_equal(obs["image_side"], side.step(action)[0]["image"])
    assert np.abs(obs["image"].astype(int) - obs["image_side"]).sum() > 0  # two different views
    np.testing.assert_array_equal(both.render(), obs["image"])
    for env in (both, front, side):
        env.close()


def test_the_side_camera_sees_the_block_the_gripper_hides_from_the_front_camera() -> None:
    """Pushing away from the front camera (these two seeds), the gripper hides the block from
    it for most of the episode; the side camera keeps it in view."""
    env = FetchPixelEnv("push", image_size=32, cameras=["front", "side"], end_on_success=False)
    front_seen, any_seen = [], []
    for seed in (3, 4):
        env.reset(seed=seed)
        for _ in range(50):
            env.step(env.expert_action())
            pixels = env.block_pixels()
            front_seen.append(pixels[0] > 0)
            any_seen.append(max(pixels) > 0)
    env.close()
    assert np.mean(front_seen) < 0.5 and np.mean(any_seen) > 0.9


@pytest.mark.parametrize(
    "kwargs",
    [
        {"task": "pick"},
        {"image_size": 8},
        {"max_episode_steps": 0},
        {"privileged_block": True, "task": "reach"},
        {"cameras": ["top"]},
        {"cameras": []},
        {"cameras": ["side", "side"]},
        {"reward_distance": 0.0},
        {"goal_offset": True},
        {"reward_distance": 0.08},
        {"goal_env": True},
        {"goal_env": True, "cameras": [], "privileged_block": True, "goal_offset": True},
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict) -> None:
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        FetchPixelEnv(**kwargs)


def test_playing_on_after_success_gives_many_success_frames_and_the_expert_holds_the_block() -> (
    None
):
    """`end_on_success=False` is how the classifier's frames are recorded: the episode runs to
    its step limit, reward and `info["success"]` follow the task each step, and the expert,
    once the block is within 3 cm of the goal, stops moving the gripper so the block stays
    there (inside Fetch's 5 cm but beyond 3 cm it pushes on)."""
    env = FetchPixelEnv("push", image_size=16, max_episode_steps=40, end_on_success=False)
    env.reset(seed=3)
    successes, steps, held = [], 0, []
    while True:
        done = env.progress() < PUSH_DONE
        action = env.expert_action()
        if done:
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


def test_without_a_camera_the_state_carries_the_block_issue_48s_state_gate() -> None:
    """`cameras=[]` with `privileged_block=true`: a Dict of the state alone (the block's
    position and its offset from the gripper included), no frame rendered; without the
    block in the state it is refused (nothing would show the block)."""
    env = FetchPixelEnv("push", cameras=[], privileged_block=True)
    obs, _ = env.reset(seed=0)
    assert list(obs) == ["state"] and env.observation_space.contains(obs)
    block = env._raw["observation"][3:6]
    np.testing.assert_allclose(obs["state"][10:13], block, atol=1e-6)
    with pytest.raises(ConfigError, match=r"cameras=\[\].*privileged_block=true"):
        FetchPixelEnv("push", cameras=[])


def test_the_workspace_box_keeps_the_gripper_inside() -> None:
    """HIL-SERL's workspace box (`workspace=`): random moves that take the gripper out of the
    box without it keep it inside with it (Fetch's mocap tracks the target within 1 cm), and
    every executed move's target lies inside the box."""
    box = np.array(WORKSPACE)

    def gripper_path(workspace) -> np.ndarray:
        env = FetchPixelEnv("push", cameras=[], privileged_block=True, workspace=workspace)
        env.reset(seed=0)
        rng, path = np.random.default_rng(0), []
        for _ in range(40):
            move = rng.uniform(-1, 1, 4).astype(np.float32)
            move[2] = 1.0  # upwards: out of the box's 15 cm within a few steps
            if workspace is not None:
                target = env._raw["observation"][:3] + 0.05 * env.clip_to_workspace(move[:3])
                assert np.all(target >= box[:3] - 1e-6) and np.all(target <= box[3:] + 1e-6)
            env.step(move)
            path.append(env._raw["observation"][:3].copy())
        return np.array(path)

    free, boxed = gripper_path(None), gripper_path(WORKSPACE)
    assert free[:, 2].max() > box[5] + 0.1
    assert np.all(boxed >= box[:3] - 0.01) and np.all(boxed <= box[3:] + 0.01)
    with pytest.raises(ConfigError, match="workspace"):
        FetchPixelEnv("push", workspace=[0, 0, 0, 1, 1])


def test_push_expert_leaves_the_block_on_the_goal_at_the_episodes_end() -> None:
    """The expert is issue 48's demonstrator and scripted person, scored as Fetch scores: the
    block within 5 cm at the end of 50 steps. Pushing at full speed to the 5 cm edge slid
    blocks past the goal or out again (4 of these 40 episodes, 13 of 100); slowing near the
    goal and aiming for 3 cm keeps them on it."""
    env = FetchPixelEnv(
        "push", cameras=[], privileged_block=True, end_on_success=False, max_episode_steps=50
    )
    ends = []
    for ep in range(40):
        env.reset(seed=ep)
        for _ in range(50):
            _, _, _, truncated, info = env.step(env.expert_action())
        assert truncated
        ends.append(info["success"])
    env.close()
    assert np.mean(ends) >= 0.95, np.flatnonzero(~np.array(ends))


def test_a_stricter_reward_distance_pays_inside_it_while_success_stays_fetchs() -> None:
    """`reward_distance=0.04`: the expert's push passes through the 4-5 cm band on its way to
    3 cm; there success is true (Fetch's 5 cm, what evaluation counts) and the reward 0."""
    env = FetchPixelEnv("push", image_size=16, end_on_success=False, reward_distance=0.04)
    band = 0
    for ep in range(3):
        env.reset(seed=ep)
        for _ in range(50):
            _, reward, _, _, info = env.step(env.expert_action())
            assert reward == float(env.progress() < 0.04)
            assert info["success"] == (env.progress() < 0.05)
            band += info["success"] and reward == 0.0
    env.close()
    assert band > 0


def test_goal_offset_puts_the_block_to_goal_offset_in_success_radii_in_the_state() -> None:
    env = FetchPixelEnv("push", image_size=16, privileged_block=True, goal_offset=True)
    obs, _ = env.reset(seed=4)
    assert env.observation_space["state"].shape == obs["state"].shape
    for _ in range(30):
        radii = float(np.linalg.norm(obs["state"][-3:]))
        assert radii == pytest.approx(env.progress() / 0.05, rel=1e-5)
        assert (radii < 1.0) == env.success()
        obs, *_ = env.step(env.expert_action())
    env.close()


def test_goal_env_is_the_gates_state_as_a_goal_dict_whose_reward_her_can_recompute() -> None:
    """`goal_env=true`: the same numbers as the gate's state, split into Gymnasium-Robotics'
    goal Dict (the policy's vector under her= is the state again), and `compute_reward` on
    the observed goals is the step's reward, on every step of expert pushes (successes and
    the 4-5 cm band under `reward_distance=0.04` included)."""
    kwargs = dict(cameras=[], privileged_block=True, normalized_state=True, end_on_success=False)
    plain = FetchPixelEnv("push", **kwargs, reward_distance=0.04)
    goal = FetchPixelEnv("push", **kwargs, reward_distance=0.04, goal_env=True)
    paid = 0.0
    for ep in range(2):
        state, _ = plain.reset(seed=ep)
        obs, _ = goal.reset(seed=ep)
        for _ in range(50):
            assert goal.observation_space.contains(obs)
            joined = np.concatenate([obs["observation"], obs["desired_goal"]])
            np.testing.assert_allclose(joined, state["state"], atol=1e-6)
            np.testing.assert_allclose(obs["achieved_goal"], state["state"][10:13], atol=1e-6)
            action = plain.expert_action()
            state, plain_reward, *_ = plain.step(action)
            obs, reward, *_ = goal.step(action)
            assert reward == plain_reward
            assert goal.compute_reward(obs["achieved_goal"], obs["desired_goal"], {}) == reward
            paid += reward
    # batched as her= calls it, against another goal: the block itself is always reached
    batch = np.stack([obs["achieved_goal"], obs["achieved_goal"] + 0.5])
    np.testing.assert_array_equal(goal.compute_reward(batch, obs["achieved_goal"], None), [1, 0])
    plain.close()
    goal.close()
    assert paid > 0

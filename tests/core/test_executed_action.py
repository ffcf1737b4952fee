"""The off-policy loop stores the action an env executed (`info["executed_action"]`: a
person's teleop command) instead of the policy's proposal, on ordinary steps and on the step
that ends an episode (whose info arrives in `final_info` under same-step autoreset), for the
one-env fast path and for a vector of envs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.loops.collectors import executed_actions
from roborl.core.single_vector import SingleEnvVector


class Overriding(gym.Env):
    """Executes -action on odd steps (reported as executed_action); episodes of 3 steps."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        info = {}
        if self.t % 2:
            info = {"executed_action": -np.asarray(action, np.float32), "intervened": True}
        return np.zeros(1, np.float32), 0.0, self.t == 3, False, info


@pytest.mark.parametrize("vector", ["single", "sync"])
def test_executed_action_replaces_the_proposal_including_the_last_step(vector: str) -> None:
    if vector == "single":
        envs = SingleEnvVector(Overriding)
    else:
        envs = gym.vector.SyncVectorEnv(
            [Overriding, Overriding], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
        )
    envs.reset(seed=0)
    n = envs.num_envs
    for t in range(1, 7):
        actions = np.full((n, 2), 0.25 * t, np.float32)
        _, _, terminated, truncated, infos = envs.step(actions)
        done = np.logical_or(terminated, truncated)
        stored = executed_actions(infos, done, actions)
        step_in_episode = (t - 1) % 3 + 1
        expected = -actions if step_in_episode % 2 else actions
        np.testing.assert_allclose(stored, expected)
        assert done.all() == (step_in_episode == 3)
    envs.close()

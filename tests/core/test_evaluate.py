"""`evaluate`: success at the end of an episode (Fetch's standard) beside success at any step
(what an episode that ends on its first success scores; issue 48)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from roborl.core.evaluate import eval_metrics, evaluate


class Scripted(gym.Env):
    """Five steps; `info["success"]` follows the script of the episode (by reset seed)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    SCRIPTS = {
        0: [False, False, False, False, True],  # succeeds at the end
        1: [False, True, True, False, False],  # reaches the goal, then knocks it off
        2: [False] * 5,  # never
        3: [True, True, True, True, True],  # throughout
    }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.script, self.t = self.SCRIPTS[seed], 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        success = self.script[self.t]
        self.t += 1
        return np.zeros(1, np.float32), float(success), False, self.t == 5, {"success": success}


def test_success_at_the_end_and_at_any_step_are_counted_apart() -> None:
    result = evaluate(lambda obs: np.zeros(1, np.float32), Scripted(), episodes=4, seed=0)
    assert result["success_rate"] == 0.5  # episodes 0 and 3
    assert result["success_any_rate"] == 0.75  # and episode 1
    metrics = eval_metrics(result)
    assert metrics["eval/success_rate"] == 0.5 and metrics["eval/success_any_rate"] == 0.75


def test_an_env_without_a_success_flag_reports_neither() -> None:
    env = gym.make("Pendulum-v1", max_episode_steps=3)
    result = evaluate(lambda obs: np.zeros(1, np.float32), env, episodes=1, seed=0)
    assert "success_rate" not in result and "success_any_rate" not in result

"""The runner closes the env it evaluates in: on a robot, close() sends the final stop command."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from roborl.core.context import TrainContext
from roborl.core.plugins import get_host
from roborl.core.runner import Runner


def test_eval_env_is_closed_when_the_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[gym.Env] = []
    closed: list[gym.Env] = []

    class Recorder(gym.Wrapper):
        def close(self) -> None:
            closed.append(self)
            super().close()

    make_env = TrainContext.make_env

    def recording_make_env(self: TrainContext, seed: int | None = None, **kw) -> gym.Env:
        env = Recorder(make_env(self, seed, **kw))
        made.append(env)
        return env

    monkeypatch.setattr(TrainContext, "make_env", recording_make_env)
    cfg = {
        "algo": {"name": "sac", "hidden_sizes": [16, 16]},
        "env": {"id": "InvertedPendulum-v5"},
        "total_steps": 60,
        "learning_starts": 20,
        "eval_every": 30,
        "eval_episodes": 1,
        "checkpoint_every": 60,
        "progress": False,
    }
    summary = Runner(cfg, tmp_path / "run", get_host()).execute()
    assert summary["final_eval_return"] is not None  # evaluation ran in one of the made envs
    assert made and all(env in closed for env in made)

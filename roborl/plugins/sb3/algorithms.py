"""stable-baselines3 algorithms inside the roborl host (`algo=sb3/ppo`, `sb3/sac`, ...).

SB3 keeps its own training loop; roborl supplies the env (built from config, so robots and
plugin envs work too), and a callback feeds roborl's step counter, `metrics.jsonl`, periodic
deterministic evaluation and atomic checkpoints. Checkpoints hold SB3's parameter and
optimiser state dicts and, for off-policy methods, the replay buffer, all as tensors, so they
load with `torch.load(weights_only=True)` (SB3's own zip format pickles Python objects).

Deviation: a resumed off-policy run continues with the saved buffer, but SB3's internal
counters that depend on `_last_obs` restart with a fresh episode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

import gymnasium as gym
import numpy as np
import torch

from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Algorithm, Policy

if TYPE_CHECKING:
    from roborl.core.context import TrainContext


@dataclass
class SB3Config:
    policy: str = "MlpPolicy"
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the SB3 constructor
    seed: int | None = field(default=None, metadata=rng(0, None))


class _SpacesOnlyEnv(gym.Env):
    """Lets SB3 build its networks from spaces alone (for eval/deploy, no real env needed)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        raise RuntimeError("placeholder env: SB3 is given the real env before training")

    def step(self, action):  # pragma: no cover - never stepped
        raise RuntimeError("placeholder env")


class SB3Policy(Policy):
    def __init__(self, model: Any, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.model, self.observation_space, self.action_space = (
            model,
            observation_space,
            action_space,
        )

    def act(self, obs: np.ndarray) -> np.ndarray:
        action, _ = self.model.predict(obs, deterministic=True)
        return action


class SB3Algorithm(Algorithm):
    """Base of the `sb3/*` algorithms; subclasses name the SB3 class."""

    Config = SB3Config
    loop = "own"
    sb3_class: ClassVar[str]
    off_policy: ClassVar[bool] = False
    discrete_only: ClassVar[bool] = False
    continuous_only: ClassVar[bool] = False

    def __init__(self, observation_space, action_space, config: SB3Config, device="cpu") -> None:
        super().__init__(observation_space, action_space, config, device)
        if self.discrete_only and not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(
                f"algo={self.name} needs a discrete action space, got {action_space}."
            )
        if self.continuous_only and not isinstance(action_space, gym.spaces.Box):
            raise ConfigError(
                f"algo={self.name} needs a continuous (Box) action space, got {action_space}."
            )
        import stable_baselines3

        cls = getattr(stable_baselines3, self.sb3_class)
        try:
            self.model = cls(
                config.policy,
                _SpacesOnlyEnv(observation_space, action_space),
                device=str(self.device),
                seed=config.seed,
                verbose=0,
                **config.kwargs,
            )
        except TypeError as exc:
            raise ConfigError(
                f"algo.kwargs rejected by stable-baselines3 {self.sb3_class}: {exc}"
            ) from None

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        action, _ = self.model.predict(obs, deterministic=deterministic)
        return action

    def policy(self) -> Policy:
        return SB3Policy(self.model, self.observation_space, self.action_space)

    def actor_graph(self) -> NoReturn:
        """Refused: see the error (SB3 owns the policy's preprocessing and scaling)."""
        raise ConfigError(
            f"algo={self.name} cannot be exported to ONNX by roborl: its policy is "
            "stable-baselines3's own object, whose observation preprocessing and action "
            "scaling live in SB3's predict(), not in a roborl tensor graph. Export it without "
            "format=onnx (safetensors), or follow SB3's own ONNX export guide."
        )

    # -- training through the host -----------------------------------------------------------

    def train(self, ctx: TrainContext) -> None:
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.logger import configure
        from stable_baselines3.common.vec_env import DummyVecEnv

        run = ctx.run
        seed = run.seed if self.config.seed is None else self.config.seed
        vec = DummyVecEnv([lambda i=i: ctx.make_env(seed=seed + i) for i in range(run.num_envs)])
        vec.seed(seed)
        self.model.set_env(vec)
        self.model.set_logger(configure(None, []))
        algo = self

        class HostCallback(BaseCallback):
            """SB3's callback hook driving roborl's counters and its one schedule (`ctx.due`)."""

            def _on_step(self) -> bool:
                ctx.advance(env_steps=self.training_env.num_envs)
                for info in self.locals.get("infos", []):
                    if "episode" in info:
                        ctx.record_episode(float(info["episode"]["r"]), int(info["episode"]["l"]))
                if ctx.due("log"):
                    values = self.model.logger.name_to_value
                    record = {f"train/{k.split('/')[-1]}": float(v) for k, v in values.items()}
                    n_updates = int(getattr(self.model, "_n_updates", 0))
                    ctx.advance(updates=max(n_updates - ctx.updates, 0))
                    ctx.log(record)
                if ctx.due("eval"):
                    ctx.evaluate(algo)
                if ctx.due("checkpoint"):
                    ctx.checkpoint(algo)
                return not ctx.finished

        remaining = max(run.total_steps - ctx.step, 0)
        self.model.learn(
            total_timesteps=remaining, callback=HostCallback(), reset_num_timesteps=False
        )
        ctx.advance(updates=max(int(getattr(self.model, "_n_updates", 0)) - ctx.updates, 0))
        ctx.finish(self)
        vec.close()

    # -- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "parameters": self.model.get_parameters(),
            "num_timesteps": int(self.model.num_timesteps),
        }
        buffer = getattr(self.model, "replay_buffer", None)
        if self.off_policy and buffer is not None:
            size = buffer.buffer_size if buffer.full else buffer.pos
            state["replay_buffer"] = {
                name: torch.from_numpy(np.ascontiguousarray(getattr(buffer, name)[:size]))
                for name in (
                    "observations",
                    "next_observations",
                    "actions",
                    "rewards",
                    "dones",
                    "timeouts",
                )
                if getattr(buffer, name, None) is not None
            }
            state["replay_buffer_pos"] = int(buffer.pos)
            state["replay_buffer_full"] = bool(buffer.full)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.set_parameters(
            dict(state["parameters"]), exact_match=True, device=str(self.device)
        )
        self.model.num_timesteps = int(state.get("num_timesteps", 0))
        saved = state.get("replay_buffer")
        buffer = getattr(self.model, "replay_buffer", None)
        if saved is not None and buffer is not None:
            for name, tensor in saved.items():
                getattr(buffer, name)[: len(tensor)] = tensor.numpy()
            buffer.pos = int(state["replay_buffer_pos"])
            buffer.full = bool(state["replay_buffer_full"])


def _make(
    name: str, sb3_class: str, off_policy: bool, discrete: bool = False, continuous: bool = False
):
    return type(
        f"SB3{sb3_class}",
        (SB3Algorithm,),
        {
            "name": name,
            "sb3_class": sb3_class,
            "off_policy": off_policy,
            "discrete_only": discrete,
            "continuous_only": continuous,
            "__doc__": f"stable-baselines3 {sb3_class} through the roborl host.",
        },
    )


SB3_ALGORITHMS: dict[str, type[SB3Algorithm]] = {
    "sb3/ppo": _make("sb3/ppo", "PPO", off_policy=False),
    "sb3/a2c": _make("sb3/a2c", "A2C", off_policy=False),
    "sb3/sac": _make("sb3/sac", "SAC", off_policy=True, continuous=True),
    "sb3/td3": _make("sb3/td3", "TD3", off_policy=True, continuous=True),
    "sb3/ddpg": _make("sb3/ddpg", "DDPG", off_policy=True, continuous=True),
    "sb3/dqn": _make("sb3/dqn", "DQN", off_policy=True, discrete=True),
}

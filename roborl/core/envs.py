"""Building environments from config: a plugin's factory, a Gymnasium id, or a robot.

Resolution order for ``env.id``: a factory registered by a plugin under that id, then the
Gymnasium registry. ``robot=NAME`` (when set) builds a real-robot env from the robot plugin
instead; those come wrapped in the safety layer by their plugin. A robot is one physical env
with one driver, so a run shares one instance among its users (`SharedEnv`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.utils import seeding

from roborl.core.errors import ConfigError, did_you_mean
from roborl.core.plugins import Registry
from roborl.core.rewards import with_learned_reward
from roborl.core.single_vector import SingleEnvVector


def _gym_ids() -> list[str]:
    return sorted(gym.envs.registry.keys())


def env_factory(registry: Registry, env_cfg: Mapping[str, Any]) -> Callable[[], gym.Env]:
    """A zero-argument constructor for one env as described by the `env` config group."""
    env_id = env_cfg.get("id")
    if not env_id:
        raise ConfigError(
            "env.id is not set: pass env=<name> (e.g. env=halfcheetah) or env.id=<id>."
        )
    kwargs = dict(env_cfg.get("kwargs") or {})
    max_steps = env_cfg.get("max_episode_steps")
    stack = int(env_cfg.get("frame_stack") or 1)
    if env_id in registry.envs:
        factory = registry.get("envs", env_id)  # raises if two plugins claim the id

        def make_plugin_env() -> gym.Env:
            env = factory(**kwargs)
            if max_steps:
                env = gym.wrappers.TimeLimit(env, max_episode_steps=int(max_steps))
            return frame_stacked(env, stack)

        return make_plugin_env
    if env_id not in gym.envs.registry:
        plugin_ids = sorted(registry.envs)
        hint = did_you_mean(env_id, plugin_ids + _gym_ids())
        raise ConfigError(
            f"unknown env id {env_id!r}.{hint} It is neither registered by a roborl plugin "
            f"({', '.join(plugin_ids) or 'none'}) nor by Gymnasium. Short names: "
            "env=halfcheetah, hopper, walker2d, ant, humanoid, inverted_pendulum, "
            "inverted_double_pendulum, reacher, pusher; or any registered id via env.id=."
        )

    def make_gym_env() -> gym.Env:
        extra = {"max_episode_steps": int(max_steps)} if max_steps else {}
        try:
            return frame_stacked(gym.make(env_id, **kwargs, **extra), stack)
        except TypeError as exc:
            raise ConfigError(f"env {env_id!r} rejected env.kwargs={kwargs}: {exc}") from None

    return make_gym_env


def frame_stacked(env: gym.Env, k: int) -> gym.Env:
    """`+env.frame_stack=k`: the last k observations on a new leading axis (gymnasium's
    FrameStackObservation, the first repeated after a reset), so a camera entry becomes
    (k, H, W, C), the frame stack pixel algorithms (algo=drq/rlpd) take."""
    if k < 1:
        raise ConfigError(f"env.frame_stack={k} must be at least 1 (1 = no stacking)")
    return env if k == 1 else gym.wrappers.FrameStackObservation(env, stack_size=k)


def robot_factory(registry: Registry, robot_cfg: Mapping[str, Any]) -> Callable[[], gym.Env]:
    name = robot_cfg.get("name")
    factory = registry.get("robots", name)
    return lambda: factory(robot_cfg)


def make_env(
    registry: Registry,
    cfg: Mapping[str, Any],
    seed: int | None = None,
    learned_reward: bool = True,
) -> gym.Env:
    """One env (robot when `robot` is configured, else `env`), with episode statistics;
    `learned_reward=False` leaves out `reward=` (evaluation measures the task itself)."""
    robot_cfg = cfg.get("robot")
    if robot_cfg:
        maker = robot_factory(registry, robot_cfg)
    else:
        maker = env_factory(registry, cfg["env"])
    if learned_reward:
        maker = with_learned_reward(registry, cfg, maker)
    env = gym.wrappers.RecordEpisodeStatistics(maker())
    if seed is not None:
        env.action_space.seed(seed)
    return env


def make_vec_env(
    registry: Registry, cfg: Mapping[str, Any], num_envs: int, mode: str = "sync"
) -> gym.vector.VectorEnv:
    """A vector env whose finished sub-envs reset in the same step (final obs in `info`)."""
    if cfg.get("robot"):
        if num_envs != 1:
            raise ConfigError(f"num_envs={num_envs} with a real robot: a robot is one env, use 1.")
        makers = [robot_factory(registry, cfg["robot"])]
    else:
        makers = [env_factory(registry, cfg["env"])] * num_envs
    with_stats = [_with_episode_statistics(with_learned_reward(registry, cfg, m)) for m in makers]
    if mode != "async" and num_envs == 1:
        return SingleEnvVector(with_stats[0])
    vec_cls = gym.vector.AsyncVectorEnv if mode == "async" else gym.vector.SyncVectorEnv
    return vec_cls(with_stats, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def _with_episode_statistics(maker: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
    return lambda: gym.wrappers.RecordEpisodeStatistics(ResetRecorder(maker()))


class ResetRecorder(gym.Wrapper):
    """Keeps the env RNG's state at the start of its last reset (`reset_rng_state`).

    Checkpoints store this state, not the RNG's current one: a resumed run restores it and
    resets, so its first episode starts from the initial state that the interrupted episode
    started from. At an episode boundary (a same-step autoreset in the last step before the
    checkpoint) that is exactly the episode an uninterrupted run plays next; with the current
    state instead, the resumed reset drew a different initial state and the runs diverged.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.reset_rng_state: dict[str, Any] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        try:
            if seed is None:
                self.reset_rng_state = self.env.unwrapped.np_random.bit_generator.state
            else:  # what `Env.reset(seed=seed)` seeds before drawing
                self.reset_rng_state = seeding.np_random(seed)[0].bit_generator.state
        except AttributeError:  # an env without a NumPy generator
            self.reset_rng_state = None
        return self.env.reset(seed=seed, options=options)


def env_rng_state(env: gym.Env) -> dict[str, Any] | None:
    """What checkpoints keep of a training sub-env's RNG: the state at its last reset where a
    `ResetRecorder` knows it, else the current state (None where the env has no generator)."""
    inner: Any = env
    while isinstance(inner, gym.Wrapper):
        if isinstance(inner, ResetRecorder) and inner.reset_rng_state is not None:
            return inner.reset_rng_state
        inner = inner.env
    try:
        return env.unwrapped.np_random.bit_generator.state
    except AttributeError:
        return None


class SharedEnv(gym.Wrapper):
    """One env instance that several users of a run share: a robot has one driver.

    The collector, the evaluator and an algorithm's own loop all get this same object from
    `TrainContext.make_env`, so no second driver ever commands the robot. A user's `close()`
    therefore only pauses it (the robot holds, see `pause`) and keeps the connection; the
    run's owner ends it with `release()`.
    """

    def pause(self) -> None:
        """Between users or episodes: send the robot's hold command if it has one."""
        hold = getattr(self.env.unwrapped, "hold", None)
        if callable(hold):
            hold()

    def close(self) -> None:
        self.pause()

    def release(self) -> None:
        """Really close the env (final stop command, disconnect); only the owner calls it."""
        self.env.close()

"""Building environments from config: a plugin's factory, a Gymnasium id, or a robot.

Resolution order for ``env.id``: a factory registered by a plugin under that id, then the
Gymnasium registry (``module:EnvId`` imports the module that registers the id first, as
`gymnasium.make` does). ``robot=NAME`` (when set) builds a real-robot env from the robot plugin
instead; those come wrapped in the safety layer by their plugin. A robot is one physical env
with one driver, so a run shares one instance among its users (`SharedEnv`).

Every env built from config gets the same observation treatment (`standard_obs`): a nested
Dict is flattened (`FlattenDictObservation`), ``env.concat_obs=true`` concatenates a Dict of
vectors into one Box (with ``her=``, a goal env's ``concat(observation, desired_goal)`` instead,
`roborl.core.goals.GoalObservation`), ``env.frame_stack=k`` stacks frames.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.utils import seeding

from roborl.core.errors import ConfigError, did_you_mean
from roborl.core.goals import GoalObservation, her_options
from roborl.core.obs import (
    flatten_dict_obs,
    flatten_dict_space,
    image_keys,
    is_nested_dict_space,
)
from roborl.core.plugins import Registry
from roborl.core.rewards import with_learned_reward
from roborl.core.single_vector import SingleEnvVector
from roborl.core.training_wrappers import with_training_wrappers

ENV_KEYS = frozenset(
    {
        "id",
        "kwargs",
        "max_episode_steps",
        "concat_obs",
        "frame_stack",
        "ref_min_score",
        "ref_max_score",
    }
)  # every key of the env section that roborl reads; the env's own arguments go in `kwargs`


def check_env_section(env_cfg: Any) -> None:
    """Refuse unknown keys in the env section (`+env.kwarg=1` for `env.kwargs.kwarg=1`), which
    nothing would read: the run would start without the setting the user asked for."""
    if not isinstance(env_cfg, Mapping):
        return
    unknown = sorted(set(env_cfg) - ENV_KEYS)
    if unknown:
        key = unknown[0]
        raise ConfigError(
            f"unknown env config key(s): {', '.join(unknown)}.{did_you_mean(key, ENV_KEYS)} "
            f"The env section accepts {', '.join(sorted(ENV_KEYS))}; the env's own arguments "
            f"go in env.kwargs (e.g. env.kwargs.{key}=...)."
        )


def _gym_ids() -> list[str]:
    return sorted(gym.envs.registry.keys())


def _max_episode_steps(value: Any) -> int | None:
    """`env.max_episode_steps`: a positive whole number, or null for the env's own limit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"env.max_episode_steps={value!r} is not accepted: expected a whole number >= 1 "
            "(steps before an episode is truncated), or null for the env's own limit."
        )
    return value


def env_factory(
    registry: Registry, env_cfg: Mapping[str, Any], goal_obs: bool = False
) -> Callable[[], gym.Env]:
    """A zero-argument constructor for one env as described by the `env` config group
    (`goal_obs`: the goal env's policy view for HER, `standard_obs`)."""
    env_id = env_cfg.get("id")
    if not env_id:
        raise ConfigError(
            "env.id is not set: pass env=<name> (e.g. env=halfcheetah) or env.id=<id>."
        )
    kwargs = dict(env_cfg.get("kwargs") or {})
    max_steps = _max_episode_steps(env_cfg.get("max_episode_steps"))
    if env_id in registry.envs:
        factory = registry.get("envs", env_id)  # raises if two plugins claim the id

        def make_plugin_env() -> gym.Env:
            env = factory(**kwargs)
            if max_steps:
                env = gym.wrappers.TimeLimit(env, max_episode_steps=int(max_steps))
            return standard_obs(env, env_cfg, goal_obs)

        return make_plugin_env
    module = env_id.partition(":")[0] if ":" in env_id else None
    if module is None and env_id not in gym.envs.registry:
        plugin_ids = sorted(registry.envs)
        hint = did_you_mean(env_id, plugin_ids + _gym_ids())
        raise ConfigError(
            f"unknown env id {env_id!r}.{hint} It is neither registered by a roborl plugin "
            f"({', '.join(plugin_ids) or 'none'}) nor by Gymnasium. Short names: "
            "env=halfcheetah, hopper, walker2d, ant, humanoid, inverted_pendulum, "
            "inverted_double_pendulum, reacher, pusher, and with roborl[benchmarks] "
            "fetch_reach, fetch_push, fetch_slide, fetch_pick_and_place, dmc_cartpole_swingup, "
            "dmc_walker_walk, dmc_cheetah_run; or any registered id via env.id= "
            "(env.id=MODULE:ID imports the module that registers it first)."
        )

    def make_gym_env() -> gym.Env:
        extra = {"max_episode_steps": int(max_steps)} if max_steps else {}
        try:
            env = gym.make(env_id, **kwargs, **extra)
        except TypeError as exc:
            raise ConfigError(f"env {env_id!r} rejected env.kwargs={kwargs}: {exc}") from None
        except ModuleNotFoundError as exc:
            if module is None:
                raise
            raise ConfigError(  # `module:EnvId` with the module not installed
                f"env.id={env_id!r} imports {module!r} to register the env, but that failed "
                f"({exc}); install the package that provides it."
            ) from None
        except gym.error.UnregisteredEnv as exc:  # `module:EnvId`: no such id in the module
            raise ConfigError(f"env.id={env_id!r}: {exc}") from None
        return standard_obs(env, env_cfg, goal_obs)

    return make_gym_env


def standard_obs(env: gym.Env, env_cfg: Mapping[str, Any], goal_obs: bool = False) -> gym.Env:
    """The observation wrappers every env built from config gets, in this order: nested Dicts
    flattened, then ``env.concat_obs`` (or, with `goal_obs`, `GoalObservation` in its place:
    HER relabels goals, so the goal structure must survive) and ``env.frame_stack``."""
    if is_nested_dict_space(env.observation_space):
        env = FlattenDictObservation(env)
    if goal_obs:
        env = GoalObservation(env)
    elif env_cfg.get("concat_obs"):
        env = concatenated(env)
    return frame_stacked(env, int(env_cfg.get("frame_stack") or 1))


class FlattenDictObservation(gym.ObservationWrapper):
    """A nested Dict observation as a flat Dict, inner keys joined with "/".

    gym-hil's ``{"pixels": {"front": img, "wrist": img}, "agent_pos": vec}`` becomes
    ``{"pixels/front", "pixels/wrist", "agent_pos"}``: the flat Dict of Box entries that the
    buffer, the pixel encoders (one conv net per image key), checkpoints and policies already
    handle, so nested envs need nothing new downstream. Applied by `standard_obs`.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = flatten_dict_space(env.observation_space)

    def observation(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        return flatten_dict_obs(observation)


def concatenated(env: gym.Env) -> gym.Env:
    """`+env.concat_obs=true`: a Dict of state vectors as one Box (gymnasium's
    FlattenObservation: entries in the Dict's key order, each flattened), so vector algorithms
    (algo=sac, ...) train on Fetch's goal Dicts and dm_control's named readings.

    Camera images are refused: flattened pixels in an MLP's input are almost never meant; a
    pixel algorithm encodes them instead.
    """
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict):
        return env  # already a vector: nothing to concatenate
    images = image_keys(space)
    if images:
        raise ConfigError(
            f"env.concat_obs=true, but the observation entries {images} are camera images; "
            "a pixel algorithm encodes them (drop env.concat_obs)."
        )
    bad = [k for k, sub in space.spaces.items() if not isinstance(sub, gym.spaces.Box)]
    if bad:
        raise ConfigError(f"env.concat_obs=true: the entries {bad} are not Box spaces")
    return gym.wrappers.FlattenObservation(env)


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
        maker = env_factory(registry, cfg["env"], goal_obs=her_options(cfg) is not None)
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
        makers = [env_factory(registry, cfg["env"], goal_obs=her_options(cfg) is not None)]
        makers = makers * num_envs
    makers = [with_learned_reward(registry, cfg, m) for m in makers]
    # Training envs only (a person in the loop): evaluation (`make_env`) runs the policy alone.
    makers = [with_training_wrappers(registry, cfg, m) for m in makers]
    with_stats = [_with_episode_statistics(m) for m in makers]
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

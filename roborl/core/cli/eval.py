"""`roborl eval`: a checkpoint's, an export folder's or a checkpoint-free algorithm's policy on
its env, written as a JSON report (and optionally an MP4)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roborl.core.cli import logs
from roborl.core.cli.common import algo_prefix_to_algo, command_options, load_host, wants_help
from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.core.secrets import redact

if TYPE_CHECKING:
    from roborl.core.policy_source import PolicySource


@dataclass
class EvalOptions:
    """`roborl eval checkpoint=PATH [episodes=N] ...` (or `algo=NAME` without a checkpoint)."""

    checkpoint: str | None = field(
        default=None, metadata={"help": "a .pt file or a run directory (its checkpoints/last.pt)"}
    )
    episodes: int = field(default=10, metadata=rng(1, 100_000, "evaluation episodes"))
    seed: int = field(default=0, metadata=rng(0, None, "seed of the first episode"))
    out: str | None = field(
        default=None, metadata={"help": "report path (default: RUN_DIR/eval.json, ./eval.json)"}
    )
    device: str = field(
        default="cpu", metadata={"torch_device": True, "help": "torch device for the policy"}
    )
    model: str | None = field(
        default=None,
        metadata={"help": "a folder written by `roborl export` (safetensors; no unpickling)"},
    )
    video: bool = field(
        default=False,
        metadata={"help": "record episodes to an MP4 in videos/ beside the report (MuJoCo, EGL)"},
    )
    video_episodes: int = field(
        default=1, metadata=rng(1, 100_000, "with video=true: how many episodes to record")
    )
    runtime: str = field(
        default="torch",
        metadata={
            "choices": ["torch", "onnx"],
            "help": "with model=DIR: onnx runs its policy.onnx with onnxruntime (roborl "
            "export ... format=onnx; pip install 'roborl[onnx]')",
        },
    )
    trust_model_config: bool = field(
        default=False,
        metadata={
            "help": "use the model folder's or checkpoint's server URL, API-key variable, "
            "model path and robot section as saved (default: local config; docs/security.md)"
        },
    )


EVAL_SECTIONS = ("algo", "env", "robot")


def eval_help() -> str:
    from roborl.core.help import field_lines, section

    return (
        "usage: roborl eval checkpoint=PATH [episodes=N] [seed=S] [out=PATH] [env.KEY=V ...]\n"
        "       roborl eval model=DIR ...      (a folder written by roborl export)\n"
        "       roborl eval model=DIR runtime=onnx ...   (its policy.onnx, onnxruntime)\n"
        "       roborl eval algo=NAME [algo.KEY=V ...] [env=NAME] ...   (checkpoint-free algos)\n\n"
        "Deterministic-policy evaluation; writes a JSON report with every episode's return.\n\n"
        + section("Keys", field_lines(EvalOptions))
        + "\nConfig overrides: env=NAME / env.KEY=V change the checkpoint's env; robot=NAME\n"
        "[robot.KEY=V ...] evaluates on your robot with your local robot config (a saved robot\n"
        "section is never used unless trust_model_config=true; robot=null evaluates the saved\n"
        "env in simulation). algo=NAME (e.g. algo=llm llm.model=PATH) evaluates an algorithm\n"
        "that acts without training; its algo.* keys are those of `roborl train algo=NAME\n"
        "--help`. With checkpoint= or model=, algo.KEY=V sets only the keys saved data may not\n"
        "decide (algo=llm: base_url, api_key_env, api_key, model); see docs/security.md.\n"
        + logs.HELP
    )


def cmd_eval(args: list[str]) -> int:
    import numpy as np

    from roborl.core.checkpoint import atomic_write_json
    from roborl.core.policy_source import PolicySource, load_policy
    from roborl.core.saved_data import LocalSettings, algo_overrides

    if wants_help(args):
        print(eval_help())
        return 0
    args = algo_prefix_to_algo(args)
    opts, rest = command_options(EvalOptions, args, "eval", passthrough=EVAL_SECTIONS)
    # algo=NAME picks a checkpoint-free algorithm only without checkpoint=/model=; beside them
    # `algo_overrides` refuses it with the reason.
    free = not opts.checkpoint and not opts.model
    algo = next((a.split("=", 1)[1] for a in rest if a.startswith("algo=")), None) if free else None
    policy_source = PolicySource(
        "eval", checkpoint=opts.checkpoint, model=opts.model, runtime=opts.runtime, algo=algo
    )
    if policy_source.kind == "algo":
        return _eval_checkpoint_free(rest, opts, policy_source)
    algo_values, rest = algo_overrides(rest, "eval")
    if algo_values and opts.runtime == "onnx":
        raise ConfigError(
            f"roborl eval: algo.{next(iter(algo_values))}= with runtime=onnx: policy.onnx runs "
            "without the algorithm's config, so algo.* keys do not apply."
        )
    settings = LocalSettings(algo=algo_values, trust=opts.trust_model_config)
    host = load_host()
    loaded = load_policy(policy_source, host, opts.device, settings)
    ckpt, source = loaded.metadata, loaded.description
    cfg = _local_robot_config(host, dict(ckpt.get("config") or {}), rest, opts, source)
    episodes, seed = opts.episodes, opts.seed
    ckpt_path = Path(ckpt["path"])
    run_dir = (
        ckpt_path.parent.parent if ckpt_path.parent.name == "checkpoints" else ckpt_path.parent
    )
    # A model folder may be a read-only download: its report goes to the working directory.
    out = Path(opts.out or ("eval.json" if opts.model else run_dir / "eval.json"))
    step = (ckpt.get("runner") or {}).get("step")
    video = _video_path(opts, out, f"eval_step_{step}_seed_{seed}" if step else f"eval_seed_{seed}")
    result, recorded = _run_eval(host, cfg, loaded.policy, opts, video, ckpt, source)
    report = {
        "checkpoint": None if opts.model else str(ckpt_path),
        **({"model": str(ckpt_path)} if opts.model else {}),
        "runtime": opts.runtime,
        "algo": ckpt["algo"],
        "env": (cfg.get("env") or {}).get("id"),
        "episodes": episodes,
        "seed": seed,
        "step": step,
        **({"video": str(recorded[0]), "video_frames": recorded[1]} if recorded else {}),
        **{k: v for k, v in result.items()},
    }
    atomic_write_json(out, report)
    line = (
        f"return {result['return_mean']:.2f} +- {result['return_std']:.2f} over {episodes} episodes"
    )
    if "cost_mean" in result:
        line += f", cost {result['cost_mean']:.2f}"
    if "success_rate" in result:
        line += f", success {100 * result['success_rate']:.0f}%"
    print(
        f"{line} (min {np.min(result['returns']):.2f}, max {np.max(result['returns']):.2f}); wrote {out}"
    )
    _print_video(recorded)
    return 0


def _local_robot_config(
    host: Any, cfg: dict[str, Any], rest: list[str], opts: EvalOptions, source: str
) -> dict[str, Any]:
    """The saved run config with the command line's env/robot overrides, where a saved robot
    section is never used as is: a robot section picks topics, joints and safety limits and
    drives whatever answers on them, so it comes from `robot=NAME` (the local preset and
    robot.KEY=V), `robot=null` or `env=NAME` evaluate in simulation, and the differing keys
    are named. `trust_model_config=true` keeps the saved section (the old behaviour)."""
    from roborl.core.compose import (
        compose_dict,
        compose_saved,
        override_key,
        override_value,
        parse_overrides,
    )
    from roborl.core.saved_data import TRUST_OPTION, warn_robot_differences

    saved_robot = cfg.get("robot")
    parsed = list(zip(rest, parse_overrides(rest, "eval"), strict=True))
    no_robot = [a for a, ov in parsed if override_key(ov) == "robot" and override_value(ov) is None]
    if no_robot:  # robot=null: the saved env, in simulation (Hydra takes no null group option)
        cfg["robot"] = None
        rest = [a for a in rest if a not in no_robot]
    groups = [a for a, ov in parsed if override_key(ov) in ("env", "robot") and a not in no_robot]
    if saved_robot and not opts.trust_model_config and not (groups or no_robot):
        name = saved_robot.get("name") if isinstance(saved_robot, dict) else saved_robot
        raise ConfigError(
            f"roborl eval: the {source} was saved with a robot section (robot.name={name!r}); "
            "its topics, joints and safety limits are not used from saved data. Give "
            "robot=NAME [robot.KEY=V ...] to evaluate on your robot with your local config, "
            "robot=null (or env=NAME) to evaluate in simulation, or "
            f"{TRUST_OPTION}=true to use the saved robot section as is."
        )
    if groups:  # env=NAME / robot=NAME: that option's section replaces the checkpoint's
        fresh = compose_dict(host, groups, "eval")
        cfg.update({k: fresh.get(k) for k in ("env", "robot")})
    if rest:
        cfg = compose_saved(host, cfg, [a for a in rest if a not in groups], "eval")
    if saved_robot and cfg.get("robot") and not (opts.trust_model_config and not groups):
        warn_robot_differences(saved_robot, cfg["robot"], source)
    return cfg


def check_saved_spaces(
    saved: Mapping[str, Any], env: Any, cfg: Mapping[str, Any], source: str
) -> None:
    """Refuse an env whose observations or actions the saved policy cannot take.

    Why: `env=NAME` (or `env.id=`) may pick another task than the checkpoint's; its policy
    would otherwise fail at the first step with a bare tensor-size error. A different
    structure (Box/Discrete/Dict, Dict keys), shape, Discrete size or dtype kind (integer
    images vs floats) raises ConfigError naming the env and both spaces. Box bounds and float
    precision (float32 vs float64) may differ: envs of one task vary in them and the policy
    takes either. As for datasets (`roborl.core.dataset_spaces`), a flat observation of the
    same size as the saved shape is accepted. Saved data without spaces is not checked.
    """
    from roborl.core.spaces import space_from_dict

    robot = cfg.get("robot") or {}
    env_name = f"robot:{robot['name']}" if robot.get("name") else (cfg.get("env") or {}).get("id")
    for key, what in (("observation_space", "observes"), ("action_space", "takes actions in")):
        spec = saved.get(key)
        if not isinstance(spec, Mapping):
            continue
        want = space_from_dict(dict(spec))
        have = getattr(env, key)
        problem = _space_difference(want, have, flat_ok=key == "observation_space")
        if problem:
            raise ConfigError(
                f"roborl eval: env {env_name!r} {what} {_describe(have)}, but the {source} "
                f"was trained with {key} {_describe(want)} ({problem}); the policy cannot act "
                "on it. Evaluate on the env it was trained on (leave out env=, or pick the "
                "matching env=NAME / env.id=)."
            )


def _space_difference(want: Any, have: Any, flat_ok: bool, at: str = "") -> str | None:
    """What makes space `have` unusable where `want` was saved, or None when it is usable."""
    import gymnasium as gym
    import numpy as np

    def kind(space: Any) -> str:
        for cls in (gym.spaces.Dict, gym.spaces.Discrete, gym.spaces.Box):
            if isinstance(space, cls):
                return cls.__name__
        return type(space).__name__

    where = f" at key {at!r}" if at else ""
    if kind(want) != kind(have):
        return f"space type{where}: saved {kind(want)}, env {kind(have)}"
    if isinstance(want, gym.spaces.Dict):
        if set(want.spaces) != set(have.spaces):
            return f"keys{where}: saved {sorted(want.spaces)}, env {sorted(have.spaces)}"
        for k in want.spaces:
            sub = _space_difference(want[k], have[k], False, f"{at}/{k}" if at else k)
            if sub:
                return sub
        return None
    if isinstance(want, gym.spaces.Discrete):
        if int(want.n) != int(have.n) or int(want.start) != int(have.start):
            return f"size{where}: saved {want}, env {have}"
        return None
    w_shape, h_shape = tuple(want.shape or ()), tuple(have.shape or ())
    same_size = int(np.prod(w_shape)) == int(np.prod(h_shape)) and len(h_shape) == 1
    if w_shape != h_shape and not (flat_ok and same_size):
        return f"shape{where}: saved {w_shape}, env {h_shape}"
    w_kind, h_kind = np.dtype(want.dtype), np.dtype(have.dtype)
    if w_kind != h_kind and not (w_kind.kind == h_kind.kind == "f"):
        return f"dtype{where}: saved {w_kind}, env {h_kind}"
    return None


def _describe(space: Any) -> str:
    """A space in a few words: `Box(shape (11,), float64)`, `Dict(image: ..., state: ...)`."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        inner = ", ".join(f"{k}: {_describe(v)}" for k, v in space.spaces.items())
        return f"Dict({inner})"
    if isinstance(space, gym.spaces.Box):
        return f"Box(shape {tuple(space.shape)}, {space.dtype})"
    return str(space)


def _video_path(opts: EvalOptions, out: Path, stem: str) -> Path | None:
    """`videos/<stem>.mp4` beside the eval report, when `video=true`."""
    from roborl.core.video import VIDEO_DIR

    return out.parent / VIDEO_DIR / f"{stem}.mp4" if opts.video else None


def _run_eval(
    host: Any,
    cfg: dict[str, Any],
    policy: Any,
    opts: EvalOptions,
    video: Path | None,
    saved: Mapping[str, Any],
    source: str,
) -> tuple[dict[str, Any], tuple[Path, int] | None]:
    """Evaluate `policy` on the config's env; with `video`, record the first episodes to it.
    The env's spaces are first checked against those `saved` with the policy (`source`)."""
    from roborl.core.evaluate import evaluate

    env = _eval_env(host, cfg, opts, video)
    try:
        check_saved_spaces(saved, env, cfg, source)
        result = evaluate(policy.act, env, opts.episodes, seed=opts.seed, reset_policy=policy.reset)
        recorded = _finish_video(env)
    finally:
        env.close()
    return result, recorded


def _eval_env(host: Any, cfg: dict[str, Any], opts: EvalOptions, video: Path | None) -> Any:
    """The eval env; with `video`, one that renders and records its first episodes there."""
    from roborl.core.envs import make_env
    from roborl.core.video import make_recording_env

    if video is None:
        return make_env(host.registry, cfg, opts.seed)
    recorder = make_recording_env(host.registry, cfg, opts.seed)
    recorder.start(video, episodes=min(opts.video_episodes, opts.episodes))
    return recorder


def _finish_video(env: Any) -> tuple[Path, int] | None:
    from roborl.core.video import EpisodeRecorder

    return env.finish() if isinstance(env, EpisodeRecorder) else None


def _print_video(recorded: tuple[Path, int] | None) -> None:
    if recorded is not None:
        print(f"video: {recorded[0]} ({recorded[1]} frames)")


def compose_checkpoint_free(
    host: Any, args: Sequence[str], groups: Sequence[str], command: str
) -> dict[str, Any]:
    """Compose the run config for an algorithm that acts without a checkpoint (`algo=llm`).

    `args` are `key=value` overrides; only those of `groups` are used. Raises ConfigError when
    the algorithm learns its weights (it then needs checkpoint=PATH).
    """
    from roborl.core.compose import compose_dict
    from roborl.core.policy_source import require_checkpoint_free

    args = algo_prefix_to_algo(args)
    name = next((a.split("=", 1)[1] for a in args if a.startswith("algo=")), None)
    if not name:
        raise ConfigError(f"roborl {command}: give checkpoint=PATH or algo=NAME.")
    require_checkpoint_free(host, name, command)
    overrides = [a for a in args if _key_of(a).split(".")[0].split("/")[0] in groups]
    return compose_dict(host, overrides, command)


def _key_of(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+~")


def _eval_checkpoint_free(args: Sequence[str], opts: EvalOptions, source: PolicySource) -> int:
    """Evaluate an algorithm built from config alone (class attribute `checkpoint_free`)."""
    from dataclasses import replace

    from roborl.core.checkpoint import atomic_write_json
    from roborl.core.evaluate import evaluate
    from roborl.core.policy_source import LoadedPolicy, load_policy

    host = load_host()
    cfg = compose_checkpoint_free(host, args, EVAL_SECTIONS, "eval")
    source = replace(source, algo=cfg["algo"]["name"], algo_config=cfg["algo"])
    episodes, seed = opts.episodes, opts.seed
    out = Path(opts.out or "eval.json")
    video = _video_path(opts, out, f"eval_{str(cfg['algo']['name']).replace('/', '-')}_seed_{seed}")
    env = _eval_env(host, cfg, opts, video)
    loaded: LoadedPolicy | None = None
    try:
        spaces = (env.observation_space, env.action_space)
        loaded = load_policy(source, host, opts.device, spaces=spaces)
        policy = loaded.policy
        result = evaluate(policy.act, env, episodes, seed=seed, reset_policy=policy.reset)
        recorded = _finish_video(env)
    finally:
        env.close()
        if loaded is not None:
            loaded.close()
    metrics = getattr(policy, "metrics", None)
    report = {
        "checkpoint": None,
        "algo": cfg["algo"]["name"],
        "algo_config": redact(dict(cfg["algo"])),  # secrets stay out of eval.json
        "env": (cfg.get("env") or {}).get("id"),
        "episodes": episodes,
        "seed": seed,
        **(metrics() if metrics is not None else {}),
        **({"video": str(recorded[0]), "video_frames": recorded[1]} if recorded else {}),
        **dict(result.items()),
    }
    atomic_write_json(out, report)
    print(
        f"return {result['return_mean']:.2f} +- {result['return_std']:.2f} over {episodes} "
        f"episodes (min {min(result['returns']):.2f}, max {max(result['returns']):.2f}); "
        f"wrote {out}"
    )
    _print_video(recorded)
    return 0

"""The `roborl` console script.

Every subcommand takes Hydra-style overrides (`key=value`, parsed by Hydra's grammar in
`roborl.core.compose`) and composes its config there; `train` runs through `@hydra.main` for
`-m` sweeps, launchers and run directories. `roborl X --help` lists X's keys with defaults and
meanings from the config dataclasses. Plugins add subcommands (`dataset`, `deploy`,
`sim-robot`, `report`, ...) through the `roborl_cli_commands` hook; `roborl --help` shows
each one's `summary` attribute or the first line of its docstring.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from roborl.core.compose import split_overrides
from roborl.core.config import RunConfig, build_config, rng
from roborl.core.errors import ConfigError, RoborlError, did_you_mean, missing_extra
from roborl.core.help import first_line
from roborl.core.secrets import redact, redact_hydra_dir

T = TypeVar("T")

USAGE = """\
usage: roborl <command> [key=value ...]     (roborl <command> --help: its keys and defaults)

{commands}
Examples:
  roborl train algo=sac env=halfcheetah seed=3 total_steps=50000 num_envs=4 logger=wandb
  roborl train -m seed=0,1,2
  roborl train algo=iql --cfg job          (print the composed config, every key)
"""

BUILTIN_SUMMARIES = {
    "train": "train an algorithm (default: SAC on InvertedPendulum-v5); -m for sweeps",
    "eval": "evaluate a checkpoint (or a checkpoint-free algo=NAME), writes eval.json",
    "resume": "continue an interrupted run from its checkpoints/last.pt",
    "plugins": "list loaded plugins; --check validates them",
}

HELP_FLAGS = ("-h", "--help")


def _wants_help(args: Sequence[str]) -> bool:
    return any(a in HELP_FLAGS for a in args)


# -- argument helpers ------------------------------------------------------------------------


def command_options(
    cls: type[T], args: Sequence[str], command: str, passthrough: Sequence[str] = ()
) -> tuple[T, list[str]]:
    """A command's own options (dataclass `cls`) from `key=value` args, typed and checked.

    Overrides whose top-level key is in `passthrough` (config sections such as `env`) are
    returned for composition; any other key is an error with a did-you-mean.
    """
    from roborl.core.compose import override_key, parse_overrides

    keys = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    own, rest = split_overrides(args, keys, command)
    for ov in parse_overrides(rest, command):
        top = override_key(ov).split(".")[0].split("/")[0]
        if top not in passthrough:
            accepted = sorted([*keys, *passthrough])
            raise ConfigError(
                f"roborl {command}: unknown argument {override_key(ov)!r}."
                f"{did_you_mean(top, accepted)} Accepted: {', '.join(accepted)} "
                f"(roborl {command} --help lists them)."
            )
    return build_config(cls, own), rest


def _disabled_from_args(args: Sequence[str]) -> list[str]:
    """`plugins.disable=[a,b]` is needed before composition (it decides what loads)."""
    from roborl.core.compose import override_value, parse_overrides

    given = [a for a in args if a.startswith(("plugins.disable=", "+plugins.disable="))]
    for ov in parse_overrides(given[-1:], "train"):
        value = override_value(ov)
        return [str(v) for v in (value if isinstance(value, list) else [value])]
    return []


def _host(args: Sequence[str] = (), disable: Sequence[str] = ()) -> Any:
    from roborl.core.plugins import get_host

    host = get_host([*_disabled_from_args(args), *disable])
    for info in host.failures():
        print(f"roborl: warning: {host.format_failure(info)}", file=sys.stderr)
    for key in host.registry.conflicts:
        print(f"roborl: warning: {host.registry.conflict_message(*key)}", file=sys.stderr)
    return host


# -- train -----------------------------------------------------------------------------------

BUDGETS = """\
Budgets: total_steps counts env steps (SAC, DSAC-T, SAC-Lagrangian, SB3),
total_updates counts gradient updates of offline methods (IQL, RIQL, BC, FISOR); an
offline-to-online method (WSRL) pre-trains for algo.pretrain_steps updates, then runs
total_steps online env steps. eval_every/checkpoint_every/log_every use the same clock."""


LOOP_BUDGETS = {
    "offpolicy": "runs total_steps env steps (utd_ratio updates per env step after "
    "learning_starts)",
    "offline": "trains for total_updates gradient updates on dataset=PATH; total_steps is "
    "not used, and eval_every/checkpoint_every/log_every count updates",
    "own": "runs total_steps env steps inside the library's own training loop",
}


def _budget_line(name: str, loop: str) -> str:
    if name.startswith("wsrl"):
        return (
            f"algo={name} pre-trains for algo.pretrain_steps gradient updates (offline), then runs "
            "total_steps online env steps; both are logged under their own names."
        )
    text = LOOP_BUDGETS.get(
        loop,
        f"drives its own loop ({loop}): its budget is among the algo.* keys below "
        "(where it counts env steps, total_steps is the name)",
    )
    return f"algo={name} {text}."


def train_help(host: Any, args: Sequence[str]) -> str:
    """`roborl train --help`: run keys, the chosen algorithm's keys, config groups."""
    from omegaconf import OmegaConf

    from roborl.core.compose import compose, group_options
    from roborl.core.help import field_lines, section

    overrides = [a for a in args if a not in HELP_FLAGS and "=" in a and not a.startswith("-")]
    cfg = OmegaConf.to_container(compose(host, overrides, "train"), resolve=False)
    assert isinstance(cfg, dict)
    algo = dict(cfg.get("algo") or {})
    name = str(algo.pop("name", "sac"))
    cls = host.registry.get("algorithms", name)
    loop = cls.loop
    doc = first_line(cls.__doc__).rstrip(".")
    run_values = {k: v for k, v in cfg.items() if not isinstance(v, dict)}
    algos = sorted({*host.registry.algorithms, *group_options(host, "algo")})
    text = [
        "usage: roborl train [-m] [key=value ...] [--cfg job|hydra|all] [--hydra-help]",
        "",
        "Train one run (or a sweep with -m: seed=0,1,2, seed=range(5), algo=glob(*sac*)).",
        "Overrides use Hydra's grammar: key=value, +new_key=value, ~key, group=option.",
        "",
        section("Run keys (top level; RunConfig)", field_lines(RunConfig, values=run_values)),
        BUDGETS,
        _budget_line(name, str(loop)),
        "",
        section(
            f"algo={name} keys ({doc or cls.__name__}; loop: {loop}; algo=NAME shows another's)",
            field_lines(cls.Config, "algo.", algo),
        )
        if dataclasses.is_dataclass(getattr(cls, "Config", None))
        else "",
        section(
            "Config groups",
            [
                f"  algo=  {', '.join(algos)}",
                f"  env=   {', '.join(group_options(host, 'env'))} (or env.id=ANY_GYMNASIUM_ID)",
                f"  logger={', '.join(group_options(host, 'logger'))}",
                f"  robot= {', '.join(group_options(host, 'robot'))}",
            ],
        ),
        "Hydra flags: --cfg job (print the composed config), --info, --hydra-help, -m.",
    ]
    return "\n".join(text)


def _train_overrides(args: Sequence[str]) -> list[str]:
    """The override arguments among Hydra's flags (`--cfg job`, `-m`, ...)."""
    return [a for a in args if not a.startswith("-") and ("=" in a or a.startswith("~"))]


def cmd_train(args: list[str]) -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from omegaconf import DictConfig

    from roborl.core.compose import PRIMARY, compose, first_point, parse_overrides, register_configs
    from roborl.core.runner import Runner

    host = _host(args)
    if _wants_help(args):
        print(train_help(host, args))
        return 0
    # Compose once before Hydra runs, so a bad key or option is roborl's one-paragraph error
    # (a sweep is checked at its first point).
    overrides = _train_overrides(args)
    compose(host, first_point(overrides, "train"), "train")
    sampled = [o.input_line for o in parse_overrides(overrides, "train") if o.is_interval_sweep()]
    if sampled and not any(a.startswith("hydra/sweeper=") for a in overrides):
        raise ConfigError(
            f"roborl train: {sampled[0]!r} is an interval, which a grid sweep cannot enumerate; "
            "sample it with `roborl tune ... --num-samples N` (Ray Tune), or give a sampling "
            "sweeper (hydra/sweeper=optuna, if installed)."
        )
    register_configs(host)

    @hydra.main(config_path="../configs", config_name=PRIMARY, version_base="1.3")
    def train_job(cfg: DictConfig) -> float | None:
        run_dir = HydraConfig.get().runtime.output_dir
        redact_hydra_dir(run_dir)  # Hydra saved the overrides, secrets included
        try:
            summary = Runner(cfg, run_dir, host).execute()
        except RoborlError as exc:
            print(error_line("train", exc), file=sys.stderr)
            sys.exit(exc.exit_code)
        except ModuleNotFoundError as exc:  # a feature whose extra is not installed
            if (missing := missing_extra(exc)) is None:
                raise
            print(error_line("train", missing), file=sys.stderr)
            sys.exit(missing.exit_code)
        print(_summary_line(run_dir, summary))
        return summary.get("final_eval_return")

    saved = sys.argv
    sys.argv = ["roborl train", *args]
    try:
        train_job()
    except (ValueError, HydraException) as exc:  # Hydra's flag and sweep checks
        raise ConfigError(f"roborl train: {exc}") from None
    finally:
        sys.argv = saved
    return 0


def _summary_line(run_dir: str, summary: dict[str, Any]) -> str:
    ret = summary.get("final_eval_return")
    ret_s = "n/a" if ret is None else f"{ret:.1f}"
    # An offline run steps no env: its budget is gradient updates, so count those instead.
    steps, updates = summary.get("steps") or 0, summary.get("updates") or 0
    work = f"{steps} steps" if steps else f"{updates} updates (offline)"
    if steps and updates:
        work += f", {updates} updates"
    return (
        f"roborl: {summary['status']}: {summary['algo']} on {summary['env']}, "
        f"{work} in {summary['wall_time_s']:.0f}s, final eval return {ret_s}; "
        f"run directory: {run_dir}"
    )


# -- resume ----------------------------------------------------------------------------------


@dataclass
class ResumeOptions:
    """`roborl resume run_dir=PATH [RUN_KEY=VALUE ...]`."""

    run_dir: str | None = field(
        default=None, metadata={"help": "run directory of an interrupted run (required)"}
    )


def resume_help(args: Sequence[str]) -> str:
    """Run keys with the run's saved values when `run_dir=` is given, else RunConfig's."""
    from roborl.core.help import field_lines, section

    given = [a for a in args if a.startswith("run_dir=")]
    saved_cfg = Path(given[-1].split("=", 1)[1]) / "config.yaml" if given else None
    saved: dict[str, Any] = {}
    if saved_cfg is not None and saved_cfg.is_file():
        saved = dict(yaml.safe_load(saved_cfg.read_text()) or {})
    title = (
        "Run keys (the run's saved values)"
        if saved
        else "Run keys (RunConfig defaults; a resumed run keeps its saved values, which "
        "roborl resume run_dir=PATH --help shows)"
    )
    values = {k: v for k, v in saved.items() if k in RunConfig.__dataclass_fields__}
    return (
        "usage: roborl resume run_dir=PATH [RUN_KEY=VALUE ...]\n\n"
        "Continue a run from RUN_DIR/checkpoints/last.pt with its saved config.yaml; run-level\n"
        "keys may be changed (e.g. total_steps=50000 to extend it), the algorithm may not.\n\n"
        + section("Keys", field_lines(ResumeOptions))
        + "\n"
        + section(title, field_lines(RunConfig, values=values))
    )


def cmd_resume(args: list[str]) -> int:
    from roborl.core.compose import compose_saved
    from roborl.core.runner import Runner

    run_keys = sorted(RunConfig.__dataclass_fields__)
    if _wants_help(args):
        print(resume_help(args))
        return 0
    opts, rest = command_options(ResumeOptions, args, "resume", passthrough=run_keys)
    if not opts.run_dir:
        raise ConfigError(
            "roborl resume: run_dir=PATH is required (a run directory of a previous run)."
        )
    run_dir = Path(opts.run_dir)
    config_path = run_dir / "config.yaml"
    last = run_dir / "checkpoints" / "last.pt"
    if not config_path.exists():
        raise ConfigError(
            f"roborl resume: {str(run_dir)!r} has no config.yaml; is it a roborl run directory?"
        )
    if not last.exists():
        raise ConfigError(
            f"roborl resume: {str(run_dir)!r} has no checkpoints/last.pt yet (the run stopped "
            "before its first checkpoint); start it again with roborl train."
        )
    saved = yaml.safe_load(config_path.read_text()) or {}
    host = _host(disable=(saved.get("plugins") or {}).get("disable") or [])
    cfg = compose_saved(host, saved, rest, "resume")
    summary = Runner(cfg, run_dir, host).execute(resume_from=last)
    print(_summary_line(str(run_dir), summary))
    return 0


# -- eval ------------------------------------------------------------------------------------


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
    device: str = field(default="cpu", metadata={"help": "torch device for the policy"})
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
        + "\nConfig overrides: env=NAME / env.KEY=V / robot.KEY=V change the checkpoint's env;\n"
        "algo=NAME (e.g. algo=llm llm.model=PATH) evaluates an algorithm that acts without\n"
        "training; its algo.* keys are those of `roborl train algo=NAME --help`."
    )


def cmd_eval(args: list[str]) -> int:
    import numpy as np

    from roborl.core.algorithms import algorithm_from_checkpoint
    from roborl.core.checkpoint import atomic_write_json
    from roborl.core.compose import compose_dict, compose_saved, override_key, parse_overrides
    from roborl.core.model_dir import algorithm_from_model_dir, is_model_dir

    if _wants_help(args):
        print(eval_help())
        return 0
    args = _algo_prefix_to_algo(args)
    opts, rest = command_options(EvalOptions, args, "eval", passthrough=EVAL_SECTIONS)
    if opts.checkpoint and opts.model:
        raise ConfigError("roborl eval: give checkpoint=PATH or model=DIR, not both.")
    if opts.runtime == "onnx" and not opts.model:
        raise ConfigError(
            "roborl eval: runtime=onnx runs the policy.onnx of an export folder: give model=DIR "
            "(written by roborl export ... format=onnx); checkpoint= and algo= run on torch."
        )
    if not opts.checkpoint and not opts.model:
        if any(a.startswith("algo=") for a in rest):
            return _eval_checkpoint_free(rest, opts)
        raise ConfigError(
            "roborl eval: checkpoint=PATH is required (a .pt file or a run directory), or "
            "model=DIR (a folder written by roborl export), or algo=NAME for an algorithm that "
            "acts without training (e.g. algo=llm)."
        )
    algo_args = [a for a in rest if _key_of(a).split(".")[0].split("/")[0] == "algo"]
    if algo_args:
        raise ConfigError(
            f"roborl eval: {algo_args[0]!r} with checkpoint=: the algorithm and its config come "
            "from the checkpoint; algo= overrides are for checkpoint-free algorithms (algo=llm)."
        )
    host = _host()
    policy: Any = None  # runtime=onnx: no algorithm, its policy.onnx alone
    if opts.model and opts.runtime == "onnx":
        from roborl.core.onnx_policy import onnx_policy_from_model_dir

        policy, ckpt = onnx_policy_from_model_dir(opts.model)
    elif opts.model:
        algo, ckpt = algorithm_from_model_dir(host, opts.model, opts.device)
    else:
        assert opts.checkpoint is not None
        if is_model_dir(opts.checkpoint):
            raise ConfigError(
                f"roborl eval: {opts.checkpoint!r} is a folder written by roborl export; load it "
                f"with model={opts.checkpoint} (checkpoint= takes a .pt file or a run directory)."
            )
        algo, ckpt = algorithm_from_checkpoint(host, opts.checkpoint, opts.device)
    cfg = dict(ckpt.get("config") or {})
    if rest:
        groups = [
            a
            for a, ov in zip(rest, parse_overrides(rest, "eval"), strict=True)
            if override_key(ov) in ("env", "robot")
        ]
        if groups:  # env=NAME: that option's section replaces the checkpoint's
            fresh = compose_dict(host, groups, "eval")
            cfg.update({k: fresh.get(k) for k in ("env", "robot")})
        cfg = compose_saved(host, cfg, [a for a in rest if a not in groups], "eval")
    episodes, seed = opts.episodes, opts.seed
    ckpt_path = Path(ckpt["path"])
    run_dir = (
        ckpt_path.parent.parent if ckpt_path.parent.name == "checkpoints" else ckpt_path.parent
    )
    # A model folder may be a read-only download: its report goes to the working directory.
    out = Path(opts.out or ("eval.json" if opts.model else run_dir / "eval.json"))
    step = (ckpt.get("runner") or {}).get("step")
    video = _video_path(opts, out, f"eval_step_{step}_seed_{seed}" if step else f"eval_seed_{seed}")
    if policy is None:
        policy = algo.policy()
    result, recorded = _run_eval(host, cfg, policy, opts, video)
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


def _video_path(opts: EvalOptions, out: Path, stem: str) -> Path | None:
    """`videos/<stem>.mp4` beside the eval report, when `video=true`."""
    from roborl.core.video import VIDEO_DIR

    return out.parent / VIDEO_DIR / f"{stem}.mp4" if opts.video else None


def _run_eval(
    host: Any, cfg: dict[str, Any], policy: Any, opts: EvalOptions, video: Path | None
) -> tuple[dict[str, Any], tuple[Path, int] | None]:
    """Evaluate `policy` on the config's env; with `video`, record the first episodes to it."""
    from roborl.core.evaluate import evaluate

    env = _eval_env(host, cfg, opts, video)
    try:
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


def _algo_prefix_to_algo(args: Sequence[str]) -> list[str]:
    """`NAME.key=v` is `algo.key=v` when `algo=NAME` is given (`algo=llm llm.model=PATH`)."""
    name = next((a.split("=", 1)[1] for a in args if a.startswith("algo=")), None)
    if not name:
        return list(args)
    return [f"algo.{a[len(name) + 1 :]}" if a.startswith(name + ".") else a for a in args]


def compose_checkpoint_free(
    host: Any, args: Sequence[str], groups: Sequence[str], command: str
) -> dict[str, Any]:
    """Compose the run config for an algorithm that acts without a checkpoint (`algo=llm`).

    `args` are `key=value` overrides; only those of `groups` are used. Raises ConfigError when
    the algorithm learns its weights (it then needs checkpoint=PATH).
    """
    from roborl.core.compose import compose_dict

    args = _algo_prefix_to_algo(args)
    name = next((a.split("=", 1)[1] for a in args if a.startswith("algo=")), None)
    if not name:
        raise ConfigError(f"roborl {command}: give checkpoint=PATH or algo=NAME.")
    cls = host.registry.get("algorithms", name)
    if not cls.checkpoint_free:
        raise ConfigError(
            f"roborl {command}: algo={name} learns its weights, so it needs "
            "checkpoint=PATH; only algorithms that act without training (e.g. algo=llm) can run "
            "from config alone."
        )
    overrides = [a for a in args if _key_of(a).split(".")[0].split("/")[0] in groups]
    return compose_dict(host, overrides, command)


def _key_of(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+~")


def _eval_checkpoint_free(args: Sequence[str], opts: EvalOptions) -> int:
    """Evaluate an algorithm built from config alone (class attribute `checkpoint_free`)."""
    from roborl.core.algorithms import build_algorithm
    from roborl.core.checkpoint import atomic_write_json
    from roborl.core.evaluate import evaluate

    host = _host()
    cfg = compose_checkpoint_free(host, args, EVAL_SECTIONS, "eval")
    episodes, seed = opts.episodes, opts.seed
    out = Path(opts.out or "eval.json")
    video = _video_path(opts, out, f"eval_{str(cfg['algo']['name']).replace('/', '-')}_seed_{seed}")
    env = _eval_env(host, cfg, opts, video)
    algo = None
    try:
        algo = build_algorithm(
            host, cfg["algo"], env.observation_space, env.action_space, opts.device
        )
        policy = algo.policy()
        result = evaluate(policy.act, env, episodes, seed=seed, reset_policy=policy.reset)
        recorded = _finish_video(env)
    finally:
        env.close()
        if algo is not None:
            algo.close()
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


# -- plugins ---------------------------------------------------------------------------------


def cmd_plugins(args: list[str]) -> int:
    from roborl.core.hookspecs import HOOKSPEC_VERSION
    from roborl.core.plugins import get_host

    if _wants_help(args):
        print(
            "usage: roborl plugins [--check] [--json]\n\n"
            "List the loaded plugins (entry points of group roborl.plugins) with what each\n"
            "provides and its config dirs.\n\n"
            "Keys:\n"
            "  --check                         validate hooks, names and types; exit 1 on a problem\n"
            "  --json                          machine-readable listing\n"
            "  ROBORL_DISABLE_PLUGINS=a,b      (environment) skip plugins by name"
        )
        return 0
    as_json = "--json" in args
    check = "--check" in args
    unknown = [a for a in args if a not in ("--json", "--check")]
    if unknown:
        raise ConfigError(
            f"roborl plugins: unknown option(s) {' '.join(unknown)}; accepted: --check, --json."
        )
    host = get_host()
    infos = list(host.infos.values())
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "name": i.name,
                        "distribution": i.distribution,
                        "version": i.version,
                        "provides": i.provides,
                        "config_dirs": i.config_dirs,
                        "error": i.error,
                        "disabled": i.disabled,
                    }
                    for i in infos
                ],
                indent=2,
            )
        )
    else:
        print(f"roborl plugins (hookspec {HOOKSPEC_VERSION}):")
        for i in infos:
            state = "disabled" if i.disabled else ("FAILED" if i.error else "ok")
            print(f"  {i.name:<16} {i.distribution} {i.version}  [{state}]")
            for kind, names in sorted(i.provides.items()):
                print(f"      {kind}: {', '.join(sorted(names))}")
            if i.config_dirs:
                print(f"      configs: {', '.join(i.config_dirs)}")
            if i.error:
                print(f"      error: {i.error}")
    if check:
        problems = host.check()
        if problems:
            print("\nproblems:", file=sys.stderr)
            for p in problems:
                print(f"  - {p}", file=sys.stderr)
            return 1
        print("\nall plugins valid")
    return 0


BUILTIN_COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "train": cmd_train,
    "eval": cmd_eval,
    "resume": cmd_resume,
    "plugins": cmd_plugins,
}


def error_line(command: str, exc: BaseException) -> str:
    """`roborl X: error: ...`, the form argparse-based plugin commands print too."""
    message = str(exc)
    prefix = f"roborl {command}: "
    if message.startswith(prefix):  # messages that already name their command
        message = message[len(prefix) :]
    return f"{prefix}error: {message}" if command else f"roborl: error: {message}"


def main_help() -> str:
    from roborl.core.help import summary_of

    lines = [f"  {name:<12} {text}" for name, text in BUILTIN_SUMMARIES.items()]
    try:
        from roborl.core.plugins import get_host

        cmds = get_host().registry.commands
        lines += [f"  {name:<12} {summary_of(fn)}" for name, fn in sorted(cmds.items())]
    except RoborlError:
        pass
    return USAGE.format(commands="commands:\n" + "\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    running = ""  # the command, once it is known to exist (names it in error lines)
    try:
        if not args or args[0] in ("-h", "--help", "help"):
            print(main_help())
            return 0
        command, rest = args[0], args[1:]
        if command in BUILTIN_COMMANDS:
            running = command
            return BUILTIN_COMMANDS[command](rest)
        host = _host()
        commands = host.registry.commands
        if command in commands:
            running = command
            return int(commands[command](rest) or 0)
        known = sorted([*BUILTIN_COMMANDS, *commands])
        raise ConfigError(
            f"unknown command {command!r}.{did_you_mean(command, known)} Commands: {', '.join(known)}."
        )
    except RoborlError as exc:
        print(error_line(running, exc), file=sys.stderr)
        return exc.exit_code
    except ModuleNotFoundError as exc:  # a feature whose extra is not installed
        if (missing := missing_extra(exc)) is None:
            raise
        print(error_line(running, missing), file=sys.stderr)
        return missing.exit_code
    except KeyboardInterrupt:
        print(
            "roborl: interrupted; the last checkpoint and summary.json were written.",
            file=sys.stderr,
        )
        return 130
    except BrokenPipeError:  # `roborl train --help | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())

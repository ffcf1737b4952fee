"""The `roborl` console script.

`train` goes through Hydra (overrides, `-m` sweeps, run directories); `eval`, `resume` and
`plugins` take simple ``key=value`` arguments. Plugins add subcommands (`dataset`, `deploy`,
`sim-robot`, `report`, ...) through the `roborl_cli_commands` hook.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from roborl.core.errors import ConfigError, RoborlError, did_you_mean

USAGE = """\
usage: roborl <command> [args]

  train [hydra overrides]          train (default: SAC on InvertedPendulum-v5); -m for sweeps
  eval checkpoint=PATH [episodes=N] evaluate a checkpoint, writes eval.json
  resume run_dir=PATH              continue an interrupted run from checkpoints/last.pt
  plugins [--check]                list loaded plugins (and validate them)
{extra}
Examples:
  roborl train algo=sac env=halfcheetah seed=3 total_steps=50000 num_envs=4 logger=wandb
  roborl train -m seed=0,1,2
"""


# -- argument helpers ------------------------------------------------------------------------


def parse_key_values(args: Sequence[str], allowed: dict[str, type], command: str) -> dict[str, Any]:
    """`key=value` pairs, typed; an unknown key or bad value is a clear error."""
    out: dict[str, Any] = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(
                f"roborl {command}: expected key=value, got {arg!r}. Accepted keys: "
                f"{', '.join(sorted(allowed))}."
            )
        key, value = arg.split("=", 1)
        base = key.split(".")[0]
        if key not in allowed and base not in allowed:
            raise ConfigError(
                f"roborl {command}: unknown argument {key!r}.{did_you_mean(key, allowed)} "
                f"Accepted: {', '.join(sorted(allowed))}."
            )
        tp = allowed.get(key, allowed.get(base, str))
        try:
            parsed = yaml.safe_load(value) if tp is not str else value
            if tp is int:
                if isinstance(parsed, bool) or not isinstance(parsed, int):
                    raise ValueError
            elif tp is float:
                parsed = float(parsed)
        except (ValueError, TypeError, yaml.YAMLError):
            raise ConfigError(
                f"roborl {command}: {key}={value!r} is not a valid {tp.__name__}."
            ) from None
        out[key] = parsed
    return out


def _disabled_from_args(args: Sequence[str]) -> list[str]:
    for arg in args:
        if arg.startswith(("plugins.disable=", "+plugins.disable=")):
            value = yaml.safe_load(arg.split("=", 1)[1])
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


def _search_path_override(dirs: Sequence[str]) -> list[str]:
    entries = []
    for d in dirs:
        if "://" in d:
            entries.append(d)
        else:
            entries.append(f"file://{Path(d).resolve()}")
    if not entries:
        return []
    quoted = ",".join(f"'{e}'" for e in entries)
    return [f"hydra.searchpath=[{quoted}]"]


def cmd_train(args: list[str]) -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    from roborl.core.runner import Runner

    host = _host(args)
    # `algo=sb3/sac` and `env.id=ALE/Pong-v5` must not create nested run directories.
    OmegaConf.register_new_resolver("slug", lambda s: str(s).replace("/", "-"), replace=True)

    @hydra.main(config_path="../configs", config_name="config", version_base="1.3")
    def train_job(cfg: DictConfig) -> float | None:
        run_dir = HydraConfig.get().runtime.output_dir
        try:
            summary = Runner(cfg, run_dir, host).execute()
        except RoborlError as exc:
            print(f"roborl: error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)
        print(_summary_line(run_dir, summary))
        return summary.get("final_eval_return")

    saved = sys.argv
    sys.argv = ["roborl train", *args, *_search_path_override(host.config_dirs)]
    try:
        train_job()
    finally:
        sys.argv = saved
    return 0


def _summary_line(run_dir: str, summary: dict[str, Any]) -> str:
    ret = summary.get("final_eval_return")
    ret_s = "n/a" if ret is None else f"{ret:.1f}"
    return (
        f"roborl: {summary['status']}: {summary['algo']} on {summary['env']}, "
        f"{summary['steps']} steps in {summary['wall_time_s']:.0f}s, final eval return {ret_s}; "
        f"run directory: {run_dir}"
    )


# -- resume ----------------------------------------------------------------------------------


def cmd_resume(args: list[str]) -> int:
    from omegaconf import OmegaConf

    from roborl.core.runner import Runner

    opts = parse_key_values(
        args, {"run_dir": str, "total_steps": int, "progress": bool, "device": str}, "resume"
    )
    if "run_dir" not in opts:
        raise ConfigError(
            "roborl resume: run_dir=PATH is required (a run directory of a previous run)."
        )
    run_dir = Path(opts.pop("run_dir"))
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
    cfg = OmegaConf.to_container(OmegaConf.load(config_path), resolve=True)
    assert isinstance(cfg, dict)
    cfg.update(opts)
    host = _host(disable=(cfg.get("plugins") or {}).get("disable") or [])
    summary = Runner(cfg, run_dir, host).execute(resume_from=last)
    print(_summary_line(str(run_dir), summary))
    return 0


# -- eval ------------------------------------------------------------------------------------


def cmd_eval(args: list[str]) -> int:
    import numpy as np

    from roborl.core.checkpoint import atomic_write_json
    from roborl.core.envs import make_env
    from roborl.core.evaluate import evaluate
    from roborl.core.runner import algorithm_from_checkpoint

    allowed = {
        "checkpoint": str,
        "episodes": int,
        "seed": int,
        "out": str,
        "device": str,
        "env": str,
        "robot": str,
        "algo": str,
    }
    args = _algo_prefix_to_algo(args)
    opts = parse_key_values(args, allowed, "eval")
    if "checkpoint" not in opts:
        if "algo" in opts:
            return _eval_checkpoint_free(args, opts)
        raise ConfigError(
            "roborl eval: checkpoint=PATH is required (a .pt file or a run directory), or "
            "algo=NAME for an algorithm that acts without training (e.g. algo=llm)."
        )
    host = _host()
    algo, ckpt = algorithm_from_checkpoint(host, opts["checkpoint"], opts.get("device", "cpu"))
    cfg = dict(ckpt.get("config") or {})
    for key, value in opts.items():
        if key.startswith(("env.", "robot.")):
            section, sub = key.split(".", 1)
            cfg.setdefault(section, {})
            cfg[section] = {**(cfg[section] or {}), sub: value}
    episodes = int(opts.get("episodes", 10))
    seed = int(opts.get("seed", 0))
    env = make_env(host.registry, cfg, seed)
    policy = algo.policy()
    try:
        result = evaluate(policy.act, env, episodes, seed=seed, reset_policy=policy.reset)
    finally:
        env.close()
    ckpt_path = Path(ckpt["path"])
    run_dir = (
        ckpt_path.parent.parent if ckpt_path.parent.name == "checkpoints" else ckpt_path.parent
    )
    out = Path(opts.get("out") or run_dir / "eval.json")
    report = {
        "checkpoint": str(ckpt_path),
        "algo": ckpt["algo"],
        "env": (cfg.get("env") or {}).get("id"),
        "episodes": episodes,
        "seed": seed,
        "step": (ckpt.get("runner") or {}).get("step"),
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
    return 0


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
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    args = _algo_prefix_to_algo(args)
    name = next((a.split("=", 1)[1] for a in args if a.startswith("algo=")), None)
    if not name:
        raise ConfigError(f"roborl {command}: give checkpoint=PATH or algo=NAME.")
    cls = host.registry.get("algorithms", name)
    if not getattr(cls, "checkpoint_free", False):
        raise ConfigError(
            f"roborl {command}: algo={name} learns its weights, so it needs "
            "checkpoint=PATH; only algorithms that act without training (e.g. algo=llm) can run "
            "from config alone."
        )
    overrides = [a for a in args if a.split("=", 1)[0].split(".")[0] in groups]
    OmegaConf.register_new_resolver("slug", lambda s: str(s).replace("/", "-"), replace=True)
    with initialize_config_module("roborl.configs", version_base="1.3"):
        composed = compose(
            "config", overrides=[*overrides, *_search_path_override(host.config_dirs)]
        )
    return OmegaConf.to_container(composed, resolve=False)


def _eval_checkpoint_free(args: Sequence[str], opts: dict[str, Any]) -> int:
    """Evaluate an algorithm built from config alone (class attribute `checkpoint_free`)."""
    from roborl.core.checkpoint import atomic_write_json
    from roborl.core.envs import make_env
    from roborl.core.evaluate import evaluate
    from roborl.core.runner import build_algorithm

    host = _host()
    cfg = compose_checkpoint_free(host, args, ("algo", "env", "robot"), "eval")
    episodes = int(opts.get("episodes", 10))
    seed = int(opts.get("seed", 0))
    env = make_env(host.registry, cfg, seed)
    algo = None
    try:
        algo = build_algorithm(
            host, cfg["algo"], env.observation_space, env.action_space, opts.get("device", "cpu")
        )
        policy = algo.policy()
        result = evaluate(policy.act, env, episodes, seed=seed, reset_policy=policy.reset)
    finally:
        env.close()
        close = getattr(algo, "close", None)
        if close is not None:
            close()
    out = Path(opts.get("out") or "eval.json")
    metrics = getattr(policy, "metrics", None)
    report = {
        "checkpoint": None,
        "algo": cfg["algo"]["name"],
        "algo_config": {  # secrets stay out of eval.json
            k: ("***" if "api_key" in k and v not in (None, "", "EMPTY") else v)
            for k, v in cfg["algo"].items()
        },
        "env": (cfg.get("env") or {}).get("id"),
        "episodes": episodes,
        "seed": seed,
        **(metrics() if metrics is not None else {}),
        **dict(result.items()),
    }
    atomic_write_json(out, report)
    print(
        f"return {result['return_mean']:.2f} +- {result['return_std']:.2f} over {episodes} "
        f"episodes (min {min(result['returns']):.2f}, max {max(result['returns']):.2f}); "
        f"wrote {out}"
    )
    return 0


# -- plugins ---------------------------------------------------------------------------------


def cmd_plugins(args: list[str]) -> int:
    from roborl.core.hookspecs import HOOKSPEC_VERSION
    from roborl.core.plugins import get_host

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


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HYDRA_FULL_ERROR", "0")
    try:
        if not args or args[0] in ("-h", "--help", "help"):
            extra = ""
            try:
                from roborl.core.plugins import get_host

                cmds = get_host().registry.commands
                extra = "".join(f"  {name:<32} (plugin command)\n" for name in sorted(cmds))
            except RoborlError:
                pass
            print(USAGE.format(extra=extra))
            return 0
        command, rest = args[0], args[1:]
        if command in BUILTIN_COMMANDS:
            return BUILTIN_COMMANDS[command](rest)
        host = _host()
        commands = host.registry.commands
        if command in commands:
            return int(commands[command](rest) or 0)
        known = sorted([*BUILTIN_COMMANDS, *commands])
        raise ConfigError(
            f"unknown command {command!r}.{did_you_mean(command, known)} Commands: {', '.join(known)}."
        )
    except RoborlError as exc:
        print(f"roborl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(
            "roborl: interrupted; the last checkpoint and summary.json were written.",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())

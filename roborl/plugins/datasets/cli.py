"""`roborl dataset collect|info|convert|corrupt` with ``key=value`` arguments (Hydra's grammar)."""

from __future__ import annotations

import json
import sys
from typing import Any

from roborl.core.datasets import OfflineDataset
from roborl.core.errors import ConfigError, DatasetError

USAGE = """usage:
  roborl dataset collect env=ENV out=OUT [key=value ...]
  roborl dataset info PATH
  roborl dataset convert in=PATH out=OUT [task=TEXT] [fps=N]
  roborl dataset corrupt in=PATH out=OUT field=obs|action|reward|dynamics [key=value ...]

  PATH: *.npz, *.hdf5, a Minari dataset directory or id, a LeRobotDataset v3 directory
  OUT:  *.npz, *.hdf5, minari:DATASET_ID, lerobot:DIR (a new LeRobotDataset v3 directory)
"""

# Meanings of the keys; the defaults are read from `collect`'s and `corrupt`'s signatures.
COLLECT_HELP = {
    "env": "env config name (hopper, safe_point_goal) or a Gymnasium id (required)",
    "out": "output: *.npz, *.hdf5, minari:DATASET_ID or lerobot:DIR (required)",
    "quality": "random|medium|expert|medium-replay|medium-expert|safe-mixed (D4RL recipe)",
    "policy": "sac (train one), random, a CHECKPOINT path, or a checkpoint-free ALGO",
    "steps": "transitions recorded (medium-replay: the training run's, up to medium)",
    "train_steps": "env steps of the expert's training run",
    "learning_starts": "random-action steps before the expert's updates",
    "eval_every": "env steps between snapshots (medium = 1/3 of the way to expert)",
    "ref_episodes": "episodes for the random/expert reference returns",
    "seed": "seed of the env, the policy and the recorder",
    "ref_expert": "expert reference return (null: the trained expert's own return)",
    "cost_limits": "safe-mixed: SAC-Lagrangian cost budgets (null: [5, 25])",
    "algo.KEY": "config of the expert's algorithm (roborl train algo=NAME --help)",
}
CONVERT_HELP = {
    "in": "input dataset (required)",
    "out": "output (required)",
    "task": "LeRobotDataset task string (default: the input's, else 'roborl')",
    "fps": "LeRobotDataset frame rate (default: the input's, else 30)",
}
CORRUPT_HELP = {
    "in": "input dataset (required)",
    "out": "output path (required)",
    "field": "obs|action|reward|dynamics (dynamics = next observations) (required)",
    "kind": "random or adversarial (RIQL protocol)",
    "rate": "fraction of transitions corrupted",
    "scale": "corruption size, in units of the field's std",
    "seed": "seed of the corruption",
    "attack_steps": "adversarial: gradient steps of the attack's critic",
    "attack_iters": "adversarial: Adam steps of the attack itself, from a random start",
}


def _signature_lines(fn: Any, helps: dict[str, str], skip: tuple[str, ...]) -> list[str]:
    import inspect

    from roborl.core.help import key_line

    params = inspect.signature(fn).parameters
    lines = []
    for key, text in helps.items():
        param = params.get(key)
        required = param is None or param.default is inspect.Parameter.empty
        default = "REQUIRED" if required else param.default
        if key not in skip:
            lines.append(key_line(key, "VALUE" if key == "algo.KEY" else default, text))
    return lines


def help_text() -> str:
    from roborl.core.help import key_line, section
    from roborl.plugins.datasets.collect import collect
    from roborl.plugins.datasets.corruption import corrupt

    return (
        USAGE
        + "\n"
        + section("collect keys", _signature_lines(collect, COLLECT_HELP, ()))
        + "\n"
        + section(
            "convert keys",
            [
                key_line(k, "REQUIRED" if k in ("in", "out") else None, t)
                for k, t in CONVERT_HELP.items()
            ],
        )
        + "\n"
        + section("corrupt keys", _signature_lines(corrupt, CORRUPT_HELP, ()))
    )


def _parse(argv: list[str], command: str) -> dict[str, Any]:
    """`key=value` arguments in Hydra's override grammar (the one all subcommands share)."""
    from roborl.core.compose import override_key, override_value, parse_overrides

    out: dict[str, Any] = {}
    for ov in parse_overrides(argv, f"dataset {command}"):
        if ov.is_sweep_override() or ov.is_delete():
            raise ConfigError(f"`roborl dataset {command}`: {ov.input_line!r} needs one value.")
        value = override_value(ov)
        out[override_key(ov)] = None if value == "" else value
    return out


def load_any(path: str) -> OfflineDataset:
    """Load through the registry's dataset sources (same path as `roborl train dataset=`)."""
    from roborl.core.plugins import get_host

    for loader in get_host().registry.dataset_sources.values():
        accepts = getattr(loader, "accepts", None)
        if accepts is not None and not accepts(path):
            continue
        return loader(path)
    raise DatasetError(
        f"no dataset source accepts {path!r}: give a .npz/.hdf5 file, a Minari dataset "
        "directory or id under $MINARI_DATASETS_PATH, or a LeRobotDataset v3 directory."
    )


def save_any(ds: OfflineDataset, out: str) -> str:
    """Write through the registry's dataset writers (`out=minari:ID`, `out=lerobot:DIR`)."""
    from roborl.core.dataset_io import save_dataset
    from roborl.core.plugins import get_host

    return str(save_dataset(ds, out, get_host().registry.dataset_writers))


def check_out(out: str) -> None:
    """Refuse an unwritable `out=` before collecting or converting anything."""
    from roborl.core.dataset_io import check_target
    from roborl.core.plugins import get_host

    check_target(out, get_host().registry.dataset_writers)


def main(argv: list[str]) -> int:
    """build, inspect, convert and corrupt datasets: roborl dataset collect|info|convert|corrupt"""
    if not argv or any(a in ("-h", "--help") for a in argv):
        print(help_text())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "info":
        if len(rest) != 1:
            raise ConfigError(f"`roborl dataset info` takes one PATH.\n{USAGE}")
        info = load_any(rest[0]).info()
        print(json.dumps(info, indent=2, default=str))
        return 0
    args = _parse(rest, cmd)
    if cmd == "collect":
        from roborl.plugins.datasets.collect import collect

        for key in ("env", "out"):
            if not args.get(key):
                raise ConfigError(f"`roborl dataset collect` needs {key}=.\n{USAGE}")
        algo_over = {k[5:]: args.pop(k) for k in list(args) if k.startswith("algo.")}
        env, out = str(args.pop("env")), str(args.pop("out"))
        known = {
            "quality", "policy", "steps", "train_steps", "learning_starts", "eval_every",
            "ref_episodes", "seed", "ref_expert", "cost_limits",
        }  # fmt: skip
        bad = set(args) - known
        if bad:
            raise ConfigError(
                f"unknown collect argument(s) {sorted(bad)}; accepted: {sorted(known)}."
            )
        check_out(out)
        ds = collect(env, algo_overrides=algo_over, log=lambda m: print(m, file=sys.stderr), **args)
        path = save_any(ds, out)
        info = ds.info()
        print(
            f"wrote {path}: {info['transitions']} transitions, {info['episodes']} episodes, "
            f"return mean {info['return_mean']:.1f}, reference returns {ds.reference_returns}"
        )
        return 0
    if cmd == "convert":
        src, out = args.pop("in", None), args.pop("out", None)
        if not src or not out:
            raise ConfigError(f"`roborl dataset convert` needs in= and out=.\n{USAGE}")
        bad = set(args) - set(CONVERT_HELP)
        if bad:
            raise ConfigError(
                f"unknown convert argument(s) {sorted(bad)}; accepted: {sorted(CONVERT_HELP)}."
            )
        check_out(str(out))
        ds = load_any(str(src))
        meta: dict[str, Any] = {k: args[k] for k in ("task", "fps") if args.get(k) is not None}
        if "task" in meta:  # one task for every episode, over a multi-task input's own
            meta["tasks"] = meta["episode_task_index"] = None
        if meta:
            ds = ds.replace(metadata=meta)
        path = save_any(ds, str(out))
        print(f"wrote {path}: {len(ds)} transitions, {len(ds.episode_lengths())} episodes")
        return 0
    if cmd == "corrupt":
        from roborl.plugins.datasets.corruption import corrupt

        src, out = args.pop("in", None), args.pop("out", None)
        if not src or not out or "field" not in args:
            raise ConfigError(f"`roborl dataset corrupt` needs in=, out= and field=.\n{USAGE}")
        check_out(str(out))
        ds = corrupt(load_any(str(src)), **args)
        path = save_any(ds, str(out))
        print(f"wrote {path}: {ds.metadata['corruption']}")
        return 0
    raise ConfigError(
        f"unknown `roborl dataset` command {cmd!r}; accepted: collect, info, convert, "
        f"corrupt.\n{USAGE}"
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

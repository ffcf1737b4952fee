"""`roborl dataset collect|info|convert|corrupt` with ``key=value`` arguments (Hydra's grammar)."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from roborl.core.config import rng
from roborl.core.datasets import OfflineDataset
from roborl.core.errors import ConfigError, DatasetError

USAGE = """usage:
  roborl dataset collect env=ENV out=OUT [key=value ...]
  roborl dataset info path=PATH          (or: roborl dataset info PATH)
  roborl dataset convert in=PATH out=OUT [key=value ...]
  roborl dataset convert in=BAG out=OUT rate_hz=HZ [mapping=FILE.yaml] [key=value ...]
  roborl dataset corrupt in=PATH out=OUT field=obs|action|reward|dynamics [key=value ...]

  PATH: *.npz, *.hdf5, a Minari dataset directory or id, a LeRobotDataset v3 directory
  BAG:  a rosbag2 folder (sqlite3 or MCAP storage), or a folder of them (one recording each)
  OUT:  *.npz, *.hdf5, minari:DATASET_ID, lerobot:DIR (a new LeRobotDataset v3 directory)
"""

# Meanings of the keys; the defaults are read from `collect`'s and `corrupt`'s signatures.
COLLECT_HELP = {
    "env": "env config name (hopper, safe_point_goal) or a Gymnasium id (required)",
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
    "task": "LeRobotDataset task string (default: the input's, else 'roborl')",
    "fps": "LeRobotDataset frame rate (default: the input's, else 30)",
}
CORRUPT_HELP = {
    "field": "obs|action|reward|dynamics (dynamics = next observations) (required)",
    "kind": "random or adversarial (RIQL protocol)",
    "rate": "fraction of transitions corrupted",
    "scale": "corruption size, in units of the field's std",
    "seed": "seed of the corruption",
    "attack_steps": "adversarial: gradient steps of the attack's critic",
    "attack_iters": "adversarial: Adam steps of the attack itself, from a random start",
}


def options_of(fn: Any, helps: dict[str, str], skip: tuple[str, ...]) -> type:
    """A dataclass of `fn`'s keyword arguments (types and defaults from its signature, the
    meanings from `helps`), so `command_options` types and checks them as for every command.
    A required argument becomes `X | None = None`, checked by the command."""
    import inspect
    from dataclasses import field, make_dataclass
    from typing import get_type_hints

    hints = get_type_hints(fn)
    fields = []
    for name, param in inspect.signature(fn).parameters.items():
        if name in skip:
            continue
        required = param.default is inspect.Parameter.empty
        tp = hints[name] | None if required else hints[name]  # type: ignore[operator]
        default = None if required else param.default
        meta = {"help": helps.get(name, "")}
        fields.append((name, tp, field(default=default, metadata=meta)))
    return make_dataclass(f"{fn.__name__.title()}Options", fields)


def collect_options() -> type:
    from roborl.plugins.datasets.collect import collect

    return options_of(collect, COLLECT_HELP, ("algo_overrides", "log"))


def corrupt_options() -> type:
    from roborl.plugins.datasets.corruption import corrupt

    return options_of(corrupt, CORRUPT_HELP, ("ds",))


@dataclass
class ConvertOptions:
    """`roborl dataset convert` keys besides in= and out=."""

    task: str | None = field(default=None, metadata={"help": CONVERT_HELP["task"]})
    fps: int | None = field(default=None, metadata=rng(1, None, CONVERT_HELP["fps"]))


def _paths_lines(keys: tuple[str, ...]) -> list[str]:
    from roborl.core.help import key_line

    helps = {
        "in": "input dataset (required)",
        "out": "output: *.npz, *.hdf5, minari:DATASET_ID or lerobot:DIR (required)",
        "path": "the dataset to describe (required)",
    }
    return [key_line(k, "PATH", helps[k]) for k in keys]


def help_text() -> str:
    from roborl.core.cli import logs
    from roborl.core.help import field_lines, key_line, section

    algo = key_line("algo.KEY", "VALUE", COLLECT_HELP["algo.KEY"])
    return (
        USAGE
        + "\n"
        + section("collect keys", [*_paths_lines(("out",)), *field_lines(collect_options()), algo])
        + "\n"
        + section("info keys", _paths_lines(("path",)))
        + "\n"
        + section("convert keys", [*_paths_lines(("in", "out")), *field_lines(ConvertOptions)])
        + "\n"
        + section("convert keys, in= a rosbag2 folder (or a folder of them)", _bag_help())
        + "\n"
        + section("corrupt keys", [*_paths_lines(("in", "out")), *field_lines(corrupt_options())])
        + logs.HELP
    )


def _bag_help() -> list[str]:
    from roborl.plugins.datasets.rosbag.command import help_lines

    return help_lines()


def _bag_folders(path: str) -> list[str] | None:
    """The rosbag2 folders `in=` names (None: not bag input, a dataset as before)."""
    from roborl.plugins.datasets.rosbag import bag_folders

    return bag_folders(path)


def _paths(args: list[str], command: str, keys: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The values of `in=`/`out=` (paths; `in` is a Python keyword, so no dataclass field) and
    the other arguments; a missing or empty one is an error naming it."""
    from roborl.core.compose import override_value, parse_overrides

    found: dict[str, str] = {}
    rest = []
    for arg in args:
        key = arg.split("=", 1)[0]
        if key in keys and "=" in arg:
            (ov,) = parse_overrides([arg], f"dataset {command}")
            value = override_value(ov)
            if value in ("", None) or ov.is_sweep_override():
                raise ConfigError(f"roborl dataset {command}: {key}= needs one PATH.")
            found[key] = str(value)
        else:
            rest.append(arg)
    missing = [k for k in keys if k not in found]
    if missing:
        raise ConfigError(
            f"roborl dataset {command}: {' and '.join(f'{k}=PATH' for k in missing)} "
            f"{'is' if len(missing) == 1 else 'are'} required (roborl dataset --help)."
        )
    return [found[k] for k in keys], rest


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
    from roborl.core.cli import command_options

    if not argv or any(a in ("-h", "--help") for a in argv):
        print(help_text())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "info":
        if len(rest) == 1 and "=" not in rest[0]:  # `info PATH`, the short form
            rest = [f"path={rest[0]}"]
        (path,), extra = _paths(rest, "info", ("path",))
        if extra:
            raise ConfigError(
                f"roborl dataset info: unknown argument {extra[0]!r}; accepted: path=PATH."
            )
        print(json.dumps(load_any(path).info(), indent=2, default=str))
        return 0
    if cmd == "collect":
        from roborl.core.compose import override_key, override_value, parse_overrides
        from roborl.plugins.datasets.collect import collect

        opts, args = command_options(
            collect_options(), rest, "dataset collect", passthrough=("out", "algo")
        )
        (out,), algo_args = _paths(args, "collect", ("out",))
        if not opts.env:
            raise ConfigError("roborl dataset collect: env= is required (roborl dataset --help).")
        algo_over = {
            override_key(ov).split(".", 1)[1]: override_value(ov)
            for ov in parse_overrides(algo_args, "dataset collect")
        }
        kwargs = dataclasses.asdict(opts)
        check_out(out)
        ds = collect(algo_overrides=algo_over, log=lambda m: print(m, file=sys.stderr), **kwargs)
        path = save_any(ds, out)
        info = ds.info()
        print(
            f"wrote {path}: {info['transitions']} transitions, {info['episodes']} episodes, "
            f"return mean {info['return_mean']:.1f}, reference returns {ds.reference_returns}"
        )
        return 0
    if cmd == "convert":
        (src, out), others = _paths(rest, "convert", ("in", "out"))
        bags = _bag_folders(src)
        if bags is not None:  # a rosbag2 folder (or a folder of them): topics -> transitions
            from roborl.plugins.datasets.rosbag.command import convert_command

            return convert_command(bags, out, others, save_any)
        conv, _ = command_options(
            ConvertOptions, others, "dataset convert", passthrough=("in", "out")
        )
        check_out(out)
        ds = load_any(src)
        meta: dict[str, Any] = {k: v for k, v in dataclasses.asdict(conv).items() if v is not None}
        if "task" in meta:  # one task for every episode, over a multi-task input's own
            meta["tasks"] = meta["episode_task_index"] = None
        if meta:
            ds = ds.replace(metadata=meta)
        path = save_any(ds, out)
        print(f"wrote {path}: {len(ds)} transitions, {len(ds.episode_lengths())} episodes")
        return 0
    if cmd == "corrupt":
        from roborl.plugins.datasets.corruption import corrupt

        opts, args = command_options(
            corrupt_options(), rest, "dataset corrupt", passthrough=("in", "out")
        )
        (src, out), _ = _paths(args, "corrupt", ("in", "out"))
        if not opts.field:
            raise ConfigError(
                "roborl dataset corrupt: field= is required (obs|action|reward|dynamics)."
            )
        check_out(out)
        ds = corrupt(load_any(src), **dataclasses.asdict(opts))
        path = save_any(ds, out)
        print(f"wrote {path}: {ds.metadata['corruption']}")
        return 0
    raise ConfigError(
        f"unknown `roborl dataset` command {cmd!r}; accepted: collect, info, convert, "
        "corrupt (roborl dataset --help)."
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

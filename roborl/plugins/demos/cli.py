"""`roborl demos record out=PATH [episodes=N policy=expert|random|MODEL] [env=... | robot=...]`.

The env (or robot) comes from the same config as `roborl train`, so every `env=`/`robot=`
override and option works here too.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from roborl.core.config import rng
from roborl.core.errors import ConfigError, DatasetError


@dataclass
class RecordOptions:
    """`roborl demos record` keys; every other key=value configures the env or robot."""

    out: str | None = field(
        default=None,
        metadata={
            "help": "*.npz, *.hdf5, or lerobot:DIR for a LeRobotDataset v3 directory (camera "
            "frames as MP4); written atomically, Ctrl-C keeps the finished episodes (required)"
        },
    )
    episodes: int = field(default=20, metadata=rng(1, None, "episodes to keep"))
    policy: str = field(
        default="expert",
        metadata={
            "help": "expert (the env's scripted expert_action), random, a model folder "
            "(roborl export) or a checkpoint .pt; on robot= the executed action is recorded, "
            "so a person's teleop takeover is what is stored"
        },
    )
    noise: float = field(
        default=0.1,
        metadata=rng(0.0, None, "expert only: Gaussian action noise (diverse demonstrations)"),
    )
    seed: int = field(
        default=10_000,
        metadata=rng(
            0,
            None,
            "seed of the first episode (then +1 per episode); keep it away from evaluation seeds",
        ),
    )
    successes_only: bool = field(
        default=False,
        metadata={"help": "drop episodes that never report info['success'] (up to 3x attempts)"},
    )
    stop_after_success: int | None = field(
        default=None,
        metadata=rng(
            0,
            None,
            "end each episode this many steps after its first info['success'], as a time "
            "limit (SERL's demos end at success: 0); null: play on to the env's end",
        ),
    )
    task: str | None = field(
        default=None,
        metadata={
            "help": "what the demonstrations do, in words (LeRobotDataset's task string; "
            "null: the env id)"
        },
    )


def usage() -> str:
    from roborl.core.cli import logs
    from roborl.core.help import field_lines, section

    return (
        "usage: roborl demos record out=PATH [key=value ...] [env=NAME | robot=NAME]\n"
        "                           [env/robot overrides ...]\n\n"
        + section("Keys", field_lines(RecordOptions))
        + logs.HELP
    )


def main(argv: list[str]) -> int:
    """record demonstrations into roborl's dataset format: roborl demos record ..."""
    from roborl.core.cli import command_options

    if not argv or any(a in ("-h", "--help") for a in argv):
        print(usage())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd != "record":
        raise ConfigError(
            f"unknown `roborl demos` command {cmd!r}; accepted: record (roborl demos --help)."
        )
    from roborl.core.compose import compose_dict
    from roborl.core.dataset_io import check_target, save_dataset
    from roborl.core.envs import make_env
    from roborl.core.plugins import get_host
    from roborl.plugins.demos.record import make_policy, record

    opts, overrides = command_options(RecordOptions, rest, "demos record", passthrough=None)
    out = opts.out
    if not out:
        raise ConfigError(
            "roborl demos record: out=PATH is required (*.npz, *.hdf5 or lerobot:DIR)."
        )
    host = get_host()
    writers = host.registry.dataset_writers
    try:
        check_target(str(out), writers)
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None
    cfg = compose_dict(host, overrides, "demos record")
    env = make_env(host.registry, cfg)
    try:
        act = make_policy(opts.policy, env, host, opts.noise)
        ds, summary = record(
            env,
            act,
            opts.episodes,
            seed=opts.seed,
            successes_only=opts.successes_only,
            stop_after_success=opts.stop_after_success,
            log=lambda m: print(m, file=sys.stderr),
        )
    finally:
        env.close()
    if ds is None:
        print(f"no episode recorded; nothing written to {out}", file=sys.stderr)
        return 130 if summary["interrupted"] else 1
    ds.metadata["policy"] = opts.policy
    ds.metadata["task"] = str(opts.task or ds.metadata.get("env_id") or "roborl demos")
    path = save_dataset(ds, str(out), writers)
    print(
        f"wrote {path}: {summary['episodes']} episodes, {len(ds)} transitions, "
        f"success rate {summary['success_rate']:.2f}"
    )
    return 130 if summary["interrupted"] else 0

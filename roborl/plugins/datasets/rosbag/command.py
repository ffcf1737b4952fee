"""`roborl dataset convert in=BAG out=OUT rate_hz=HZ [mapping keys]`: the bag branch of
`convert`, with the same `key=value` grammar as every command (and a `mapping=FILE.yaml`
holding the same keys, which the command line overrides)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

from roborl.core.errors import ConfigError, did_you_mean
from roborl.plugins.datasets.rosbag import convert_bag, mapping_from
from roborl.plugins.datasets.rosbag.mapping import BagMapping

EXTRA_HELP = {
    "mapping": "a YAML file of these keys (the command line overrides it)",
    "task": "LeRobotDataset task string (default: 'roborl')",
}


def help_lines() -> list[str]:
    """The keys `convert` takes when in= is a rosbag2 folder."""
    from roborl.core.help import field_lines, key_line

    extra = [key_line(k, None, v) for k, v in EXTRA_HELP.items()]
    return [*extra, *field_lines(BagMapping)]


def bag_options(args: Sequence[str]) -> tuple[dict[str, Any], str | None, str | None]:
    """(mapping keys given, mapping file, task) from `key=value` arguments; an unknown key is
    an error with a did-you-mean. `cameras.KEY=TOPIC` adds one camera."""
    from roborl.core.compose import override_key, override_value, parse_overrides

    keys = {f.name for f in dataclasses.fields(BagMapping)} | set(EXTRA_HELP)
    own: dict[str, Any] = {}
    cameras: dict[str, Any] = {}
    for arg, ov in zip(args, parse_overrides(list(args), "dataset convert"), strict=True):
        key = override_key(ov).lstrip("+")
        if arg.endswith("=") and key in keys:
            raise ConfigError(
                f"roborl dataset convert: {arg!r} has no value; give {key}=VALUE or drop it."
            )
        if ov.is_sweep_override():
            raise ConfigError(f"roborl dataset convert: {arg!r} is a sweep; give one value.")
        if key.startswith("cameras.") and key.count(".") == 1:
            cameras[key.split(".", 1)[1]] = override_value(ov)
        elif key in keys:
            own[key] = override_value(ov)
        else:
            accepted = sorted([*keys, "in", "out"])
            raise ConfigError(
                f"roborl dataset convert: unknown argument {key!r} for a rosbag2 input."
                f"{did_you_mean(key, accepted)} Accepted: {', '.join(accepted)} "
                "(roborl dataset --help lists them)."
            )
    if cameras:
        own["cameras"] = {**dict(own.get("cameras") or {}), **cameras}
    file, task = own.pop("mapping", None), own.pop("task", None)
    return own, (None if file is None else str(file)), (None if task is None else str(task))


def convert_command(
    paths: list[str], out: str, args: Sequence[str], save: Callable[[Any, str], str]
) -> int:
    """Convert the bags at `paths` into `out` (checked before reading) with `save`."""
    from roborl.plugins.datasets.cli import check_out

    values, file, task = bag_options(args)
    mapping = mapping_from(values, file)
    check_out(out)
    ds = convert_bag(paths, mapping, log=lambda m: print(m, file=sys.stderr))
    if task is not None:
        ds = ds.replace(metadata={"task": task})
    path = save(ds, out)
    print(f"wrote {path}: {len(ds)} transitions, {len(ds.episode_lengths())} episodes")
    return 0

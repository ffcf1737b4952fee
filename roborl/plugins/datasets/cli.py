"""`roborl dataset collect|info|corrupt` with ``key=value`` arguments."""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

from roborl.core.datasets import OfflineDataset
from roborl.core.errors import ConfigError, DatasetError

USAGE = """usage:
  roborl dataset collect env=ENV out=PATH [quality=random|medium|expert|medium-replay|medium-expert|safe-mixed]
        [policy=sac|random|CHECKPOINT|ALGO] [steps=N] [train_steps=N] [learning_starts=N]
        [eval_every=N] [ref_episodes=N] [ref_expert=R] [seed=S] [algo.KEY=VALUE ...]
        [cost_limits=[5,25]]   (safe-mixed: SAC + SAC-Lagrangian at each budget, safe tasks)
        (out=*.npz|*.hdf5, or out=minari:DATASET_ID for a Minari dataset)
  roborl dataset info PATH
  roborl dataset corrupt in=PATH out=PATH field=obs|action|reward|dynamics
        [kind=random|adversarial] [rate=0.3] [scale=1.0] [seed=0] [attack_steps=2000]
"""


def _parse(argv: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arg in argv:
        if "=" not in arg:
            raise ConfigError(f"argument {arg!r} is not key=value.\n{USAGE}")
        k, v = arg.split("=", 1)
        out[k] = yaml.safe_load(v) if v else None
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
        "directory, or a Minari dataset id under $MINARI_DATASETS_PATH."
    )


def save_any(ds: OfflineDataset, out: str) -> str:
    if out.startswith("minari:"):
        from roborl.plugins.datasets.sources import save_minari

        return str(save_minari(ds, out[len("minari:") :]))
    return str(ds.save(out))


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "info":
        if len(rest) != 1:
            raise ConfigError(f"`roborl dataset info` takes one PATH.\n{USAGE}")
        info = load_any(rest[0]).info()
        print(json.dumps(info, indent=2, default=str))
        return 0
    args = _parse(rest)
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
        ds = collect(env, algo_overrides=algo_over, log=lambda m: print(m, file=sys.stderr), **args)
        path = save_any(ds, out)
        info = ds.info()
        print(
            f"wrote {path}: {info['transitions']} transitions, {info['episodes']} episodes, "
            f"return mean {info['return_mean']:.1f}, reference returns {ds.reference_returns}"
        )
        return 0
    if cmd == "corrupt":
        from roborl.plugins.datasets.corruption import corrupt

        src, out = args.pop("in", None), args.pop("out", None)
        if not src or not out or "field" not in args:
            raise ConfigError(f"`roborl dataset corrupt` needs in=, out= and field=.\n{USAGE}")
        ds = corrupt(load_any(str(src)), **args)
        path = save_any(ds, str(out))
        print(f"wrote {path}: {ds.metadata['corruption']}")
        return 0
    raise ConfigError(
        f"unknown `roborl dataset` command {cmd!r}; accepted: collect, info, corrupt.\n{USAGE}"
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

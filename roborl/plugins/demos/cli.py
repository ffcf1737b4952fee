"""`roborl demos record out=PATH [episodes=N policy=expert|random|MODEL] [env=... | robot=...]`.

The env (or robot) comes from the same config as `roborl train`, so every `env=`/`robot=`
override and option works here too.
"""

from __future__ import annotations

import sys
from typing import Any

from roborl.core.errors import ConfigError, DatasetError

USAGE = """usage:
  roborl demos record out=PATH [episodes=20] [policy=expert] [noise=0.1] [seed=10000]
        [successes_only=false] [task=TEXT] [env=NAME | robot=NAME] [env/robot overrides ...]

  out=            *.npz, *.hdf5, or lerobot:DIR for a LeRobotDataset v3 directory (camera
                  frames as MP4); written atomically, Ctrl-C keeps the finished episodes
  episodes=       episodes to keep
  policy=         expert (the env's scripted expert_action), random, a model folder
                  (roborl export) or a checkpoint .pt; on robot= the executed action is
                  recorded, so a person's teleop takeover is what is stored
  noise=          expert only: Gaussian action noise (diversity of the demonstrations)
  seed=           seed of the first episode (then +1 per episode); keep it away from
                  evaluation seeds
  successes_only= drop episodes that never report info["success"] (up to 3x attempts)
  task=           what the demonstrations do, in words (LeRobotDataset's task string;
                  default: the env id)
"""

OWN = {"out": None, "episodes": 20, "policy": "expert", "noise": 0.1, "seed": 10_000,
       "successes_only": False, "task": None}  # fmt: skip


def main(argv: list[str]) -> int:
    """record demonstrations into roborl's dataset format: roborl demos record ..."""
    if not argv or any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd != "record":
        raise ConfigError(f"unknown `roborl demos` command {cmd!r}; accepted: record.\n{USAGE}")
    from roborl.core.compose import compose_dict, split_overrides
    from roborl.core.dataset_io import check_target, save_dataset
    from roborl.core.envs import make_env
    from roborl.core.plugins import get_host
    from roborl.plugins.demos.record import make_policy, record

    own, overrides = split_overrides(rest, OWN, "demos record")
    opts: dict[str, Any] = {**OWN, **own}
    out = opts["out"]
    if not out:
        raise ConfigError(
            f"`roborl demos record` needs out=PATH (*.npz, *.hdf5 or lerobot:DIR).\n{USAGE}"
        )
    for key in ("episodes", "seed"):
        if isinstance(opts[key], bool) or not isinstance(opts[key], int):
            raise ConfigError(f"{key}={opts[key]!r} must be an integer.")
    host = get_host()
    writers = host.registry.dataset_writers
    try:
        check_target(str(out), writers)
    except DatasetError as exc:
        raise ConfigError(str(exc)) from None
    cfg = compose_dict(host, overrides, "demos record")
    env = make_env(host.registry, cfg)
    try:
        act = make_policy(str(opts["policy"]), env, host, float(opts["noise"]))
        ds, summary = record(
            env,
            act,
            int(opts["episodes"]),
            seed=int(opts["seed"]),
            successes_only=bool(opts["successes_only"]),
            log=lambda m: print(m, file=sys.stderr),
        )
    finally:
        env.close()
    if ds is None:
        print(f"no episode recorded; nothing written to {out}", file=sys.stderr)
        return 130 if summary["interrupted"] else 1
    ds.metadata["policy"] = str(opts["policy"])
    ds.metadata["task"] = str(opts["task"] or ds.metadata.get("env_id") or "roborl demos")
    path = save_dataset(ds, str(out), writers)
    print(
        f"wrote {path}: {summary['episodes']} episodes, {len(ds)} transitions, "
        f"success rate {summary['success_rate']:.2f}"
    )
    return 130 if summary["interrupted"] else 0

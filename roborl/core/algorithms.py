"""From a config to an algorithm: split the run-level keys off, resolve `algo.name` through the
registry, validate its config dataclass, build it, or rebuild it from a checkpoint.

The runner, `roborl eval`/`deploy`, the robot nodes and the dataset collector all build
algorithms the same way, so these functions live on their own rather than inside the runner.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
from omegaconf import DictConfig, ListConfig, OmegaConf

from roborl.core.checkpoint import load_checkpoint
from roborl.core.config import RunConfig, build_config
from roborl.core.errors import ConfigError
from roborl.core.interfaces import Algorithm
from roborl.core.lazy_dynamo import defer_dynamo_import
from roborl.core.obs import check_algorithm_obs
from roborl.core.plugins import PluginHost
from roborl.core.saved_data import (
    LocalSettings,
    current_settings,
    local_algo_config,
    warn_robot_differences,
)
from roborl.core.spaces import space_from_dict

RUN_KEYS = {f for f in RunConfig.__dataclass_fields__}
# Core's own top-level sections. A plugin's (`ray`, `actor_learner`, ...) are declared by the
# plugin through the `roborl_config_sections` hook and read from the registry.
CORE_SECTIONS = frozenset({"algo", "env", "robot", "logger", "plugins", "hydra"})
SECTION_KEYS = CORE_SECTIONS  # the name before issue 49; plugin sections: `config_sections()`
REMOVED_KEYS = {
    "max_episode_steps": "it was never read; set env.max_episode_steps to cap episode length",
}


@functools.cache
def shipped_sections() -> frozenset[str]:
    """Top-level sections roborl's root config.yaml ships defaults for. Such a section stays in
    every composed config even when the plugin that reads it is disabled
    (`ROBORL_DISABLE_PLUGINS=ray`); nothing reads it then, so it is accepted, not an error."""
    import roborl

    root = OmegaConf.load(Path(roborl.__file__).parent / "configs" / "config.yaml")
    return frozenset(str(k) for k in root if k != "defaults") - RUN_KEYS


def config_sections(host: PluginHost | None = None) -> set[str]:
    """Every accepted top-level section: core's own, those that the host's plugins declare
    (`roborl_config_sections`; default host: `get_host()`) and those roborl's root config
    ships defaults for (`shipped_sections`)."""
    if host is None:
        from roborl.core.plugins import get_host

        host = get_host()
    return set(CORE_SECTIONS) | set(host.registry.config_sections) | shipped_sections()


def split_config(
    cfg: Mapping[str, Any], host: PluginHost | None = None
) -> tuple[RunConfig, dict[str, Any]]:
    """Validate the run-level keys; returns (RunConfig, the whole config as a plain dict).

    A top-level key must be a run-level key or a section (`config_sections(host)`: core's own
    or one a plugin declares); `host` defaults to the process-wide one (`get_host()`)."""
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    # A plain dict may still hold OmegaConf nodes (`{**dict_config, ...}`); they would reach
    # checkpoints, which `torch.load(weights_only=True)` then refuses to read.
    cfg = {
        k: OmegaConf.to_container(v, resolve=True) if isinstance(v, (DictConfig, ListConfig)) else v
        for k, v in cfg.items()
    }
    for key, why in REMOVED_KEYS.items():
        if key in cfg:
            raise ConfigError(f"top-level {key}= was removed: {why}.")
    run_values = {k: v for k, v in cfg.items() if k in RUN_KEYS}
    unknown = set(cfg) - RUN_KEYS - config_sections(host)
    unknown.discard("run_dir")
    if unknown:
        declared = sorted(config_sections(host) - CORE_SECTIONS - {"hydra"})
        theirs = f"; plugins declare {', '.join(declared)}" if declared else ""
        raise ConfigError(
            f"unknown top-level config key(s): {', '.join(sorted(unknown))}. Run-level keys are "
            f"{', '.join(sorted(RUN_KEYS))}; sections are algo, env, robot, logger, plugins"
            f"{theirs}. A plugin declares its own section with the roborl_config_sections hook "
            "(`roborl plugins` lists them)."
        )
    from roborl.core.envs import check_env_section  # envs imports the plugin machinery

    check_env_section(cfg.get("env"))
    return build_config(RunConfig, run_values), cfg


def resolve_algorithm(host: PluginHost, algo_cfg: Mapping[str, Any]) -> tuple[type[Algorithm], Any]:
    """The algorithm class named by `algo.name` and its validated config dataclass."""
    algo_cfg = dict(algo_cfg or {})
    name = algo_cfg.pop("name", None)
    if not name:
        raise ConfigError("algo.name is not set: pass algo=<name>, e.g. algo=sac.")
    cls = host.registry.get("algorithms", name)
    return cls, build_config(cls.Config, algo_cfg, prefix="algo.")


def build_algorithm(
    host: PluginHost,
    algo_cfg: Mapping[str, Any],
    observation_space: gym.Space,
    action_space: gym.Space,
    device: str,
) -> Algorithm:
    """Resolve and construct in one go (eval, deploy, rollout workers)."""
    cls, config = resolve_algorithm(host, algo_cfg)
    check_algorithm_obs(cls, observation_space)
    defer_dynamo_import()
    return cls(observation_space, action_space, config, device)


def algorithm_from_checkpoint(
    host: PluginHost,
    path: str | Path,
    device: str = "cpu",
    settings: LocalSettings | None = None,
) -> tuple[Algorithm, dict[str, Any]]:
    """Rebuild an algorithm (weights, no env needed) from a checkpoint written by a run.

    A checkpoint is data, possibly someone else's: its local-only config fields (server URLs,
    secrets, outside paths) come from `settings` (default: `current_settings()`), as for a
    model folder (`roborl.core.model_dir.local_algo_config`)."""
    settings = current_settings(settings)
    ckpt = load_checkpoint(path, map_location=device)
    source = f"checkpoint {str(ckpt.get('path', path))!r}"
    cls = host.registry.get("algorithms", ckpt["algo"])
    algo_config = local_algo_config(cls, ckpt["algo_config"], source, settings)
    algo_cfg = {"name": ckpt["algo"], **algo_config}
    obs_space = space_from_dict(ckpt["observation_space"])
    act_space = space_from_dict(ckpt["action_space"])
    algo = build_algorithm(host, algo_cfg, obs_space, act_space, device)
    algo.load_state_dict(ckpt["state"])
    if settings.robot is not None:
        saved = (ckpt.get("config") or {}).get("robot")
        warn_robot_differences(saved, settings.robot, source)
    return algo, ckpt

"""One way to build a config: Hydra's compose over defaults taken from the dataclasses.

Every subcommand (`train`, `eval`, `resume`, `deploy`, `sim-robot`, `dataset collect`, `tune`)
builds its config here, so they share one override grammar (Hydra's: `key=v`, `+key=v`,
`~key`, `group=option`, sweeps `a,b`, `range()`, `glob()`) and one set of error messages.

Where defaults live: an algorithm's `Config` dataclass is the only home of its defaults. Each
registered algorithm is stored in Hydra's ConfigStore as `algo/<name>` (the dataclass defaults
plus `name`) and as `algo_defaults/<name>`. A YAML file in an `algo/` config dir is a *preset*
that lists only what differs: either under a new name (`defaults: [wsrl, _self_]`, then the
differences) or under the algorithm's own name, then starting with
`defaults: [/algo_defaults/<name>@_here_, _self_]` (a file shadows the ConfigStore entry).
The stored nodes are the defaults as plain values, not typed structured configs, so that a bad
value reaches `build_config` and gets roborl's message (range, choices, did-you-mean) rather
than OmegaConf's.

The primary config `roborl` (ConfigStore) starts from `RunConfig`'s defaults, then includes
`config.yaml` (which lists what differs), and carries
`hydra.searchpath` with every plugin's config dir, so no override has to be appended to the
user's command line (an appended override broke `roborl train algo=iql --cfg job`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from roborl.core.errors import ConfigError, did_you_mean, unknown_name

PRIMARY = "roborl"
ALGO_DEFAULTS = "algo_defaults"
CONFIG_MODULE = "roborl.configs"


# -- defaults from dataclasses -----------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A dataclass default as OmegaConf accepts it (tuples become lists, a nested config
    dataclass a plain mapping, so its values reach roborl's validation untyped)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def field_defaults(cls: type) -> dict[str, Any]:
    """`{field: default}` of a config dataclass; a field without a default is `???`."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.default is not dataclasses.MISSING:
            out[f.name] = _plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = _plain(f.default_factory())
        else:
            out[f.name] = "???"
    return out


def algo_defaults(name: str, cls: type) -> dict[str, Any]:
    """The `algo` section an algorithm gets before any preset or override."""
    config = getattr(cls, "Config", None)
    values = field_defaults(config) if dataclasses.is_dataclass(config) else {}
    return {"name": name, **values}


# -- where config files live -------------------------------------------------------------------


def config_roots(host: Any) -> list[Path]:
    """roborl's own config dir, then every installed plugin's (`roborl_config_dirs`)."""
    import roborl

    roots = [Path(roborl.__file__).parent / "configs"]
    for entry in host.config_dirs:
        if entry.startswith("pkg://"):
            spec = importlib.util.find_spec(entry[len("pkg://") :])
            if spec is not None and spec.submodule_search_locations:
                roots.extend(Path(p) for p in spec.submodule_search_locations)
        elif entry.startswith("file://"):
            roots.append(Path(entry[len("file://") :]))
        else:
            roots.append(Path(entry))
    return roots


def yaml_options(host: Any, group: str) -> list[str]:
    """Names of the YAML options of a config group across all config dirs (`env`, `algo`)."""
    names = set()
    for root in config_roots(host):
        base = root / group
        if base.is_dir():
            names.update(str(p.relative_to(base))[: -len(".yaml")] for p in base.rglob("*.yaml"))
    return sorted(names)


# Config groups whose options a plugin can register by name through its hook, with no YAML.
PLUGIN_GROUPS = {"env": "envs", "robot": "robots", "reward": "rewards", "logger": "loggers"}


def group_options(host: Any, group: str) -> list[str]:
    """Every option of a config group: its YAML files and the names plugins register for it."""
    names = set(yaml_options(host, group))
    if group in PLUGIN_GROUPS:
        names.update(getattr(host.registry, PLUGIN_GROUPS[group]))
    return sorted(names)


def plugin_group_node(group: str, name: str, obj: Any) -> dict[str, Any]:
    """The config a plugin's registered name gets when no YAML file names it.

    Its options come from the object's `Config` dataclass when it has one (as an algorithm's
    do), so `logger=NAME`, `env=NAME`, `robot=NAME` and `reward=NAME` work for any registered
    name. An env's options are its constructor's keyword arguments (`env.kwargs`); a logger's
    sit under its own name, so that `logger=[jsonl,NAME]` composes.
    """
    config = getattr(obj, "Config", None)
    options = field_defaults(config) if dataclasses.is_dataclass(config) else {}
    if group == "env":
        return {"id": name, "kwargs": options, "max_episode_steps": None}
    if group == "logger":
        return {name: options}
    return {"name": name, **options}


def _search_path(host: Any) -> list[str]:
    out = []
    for d in host.config_dirs:
        out.append(d if "://" in d else f"file://{Path(d).resolve()}")
    return out


# -- ConfigStore -------------------------------------------------------------------------------


def register_configs(host: Any) -> None:
    """Store the primary config and every algorithm's defaults in Hydra's ConfigStore."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    # `algo=sb3/sac` and `env.id=ALE/Pong-v5` must not create nested run directories.
    OmegaConf.register_new_resolver("slug", lambda s: str(s).replace("/", "-"), replace=True)
    cs = ConfigStore.instance()
    for group, kind in PLUGIN_GROUPS.items():
        files = set(yaml_options(host, group))
        for name, obj in getattr(host.registry, kind).items():
            sub, _, leaf = name.rpartition("/")
            node = plugin_group_node(group, name, obj)
            # `<group>_defaults/<name>` always: a same-named YAML preset starts from it.
            cs.store(group="/".join(filter(None, [f"{group}_defaults", sub])), name=leaf, node=node)
            if name not in files:
                cs.store(group="/".join(filter(None, [group, sub])), name=leaf, node=node)
    files = set(yaml_options(host, "algo"))
    for name, cls in host.registry.algorithms.items():
        node = algo_defaults(name, cls)
        sub, _, leaf = name.rpartition("/")
        cs.store(group="/".join(filter(None, [ALGO_DEFAULTS, sub])), name=leaf, node=node)
        if name not in files:  # a same-named YAML preset includes algo_defaults itself
            cs.store(group="/".join(filter(None, ["algo", sub])), name=leaf, node=node)
    from roborl.core.config import RunConfig

    search = {"hydra": {"searchpath": _search_path(host)}}
    # Run-level keys start from RunConfig; config.yaml (after `_self_`) lists what differs.
    primary = {"defaults": ["_self_", "config"], **field_defaults(RunConfig), **search}
    cs.store(name=PRIMARY, node=primary)
    for name, node in COMMAND_CONFIGS.items():
        cs.store(name=name, node={**node, **search})


# Primary configs of subcommands other than `train` (registered by their modules).
COMMAND_CONFIGS: dict[str, dict[str, Any]] = {}


def register_command_config(name: str, cls: type, groups: Mapping[str, str | None]) -> None:
    """A subcommand's primary config: its option dataclass plus config groups (`env`, `robot`)."""
    defaults: list[Any] = [{g: option} for g, option in groups.items()]
    COMMAND_CONFIGS[name] = {"defaults": [*defaults, "_self_"], **field_defaults(cls)}


# -- overrides ---------------------------------------------------------------------------------


def parse_overrides(args: Sequence[str], command: str) -> list[Any]:
    """Hydra's override grammar for every subcommand; a syntax error is a ConfigError."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    bad = [a for a in args if a.startswith("-")]
    if bad:
        raise ConfigError(
            f"roborl {command}: unknown option {bad[0]!r}; arguments are key=value overrides "
            f"(see roborl {command} --help)."
        )
    try:
        return list(OverridesParser.create().parse_overrides(list(args)))
    except OverrideParseException as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(
            f"roborl {command}: cannot parse the override {exc.override!r}: {first} "
            "(expected key=value, e.g. seed=3 or algo.hidden_sizes=[64,64])."
        ) from None


def override_key(override: Any) -> str:
    """`algo.lr` for `algo.lr=3`, `+algo.lr=3` and `~algo.lr`; `algo` for `algo=sac`."""
    return str(override.key_or_group)


def override_value(override: Any) -> Any:
    """The typed value of a plain (non-sweep) override (`seed=3` -> 3, `x=[1,2]` -> [1, 2])."""
    value = override.value()
    return _plain(value) if isinstance(value, (list, tuple, Mapping)) else value


def split_overrides(
    args: Sequence[str], keys: Iterable[str], command: str
) -> tuple[dict[str, Any], list[str]]:
    """Separate a command's own `key=value` options from the config overrides that remain."""
    keys = set(keys)
    own: dict[str, Any] = {}
    rest: list[str] = []
    for arg, ov in zip(args, parse_overrides(args, command), strict=True):
        if override_key(ov) in keys and ov.package is None and not ov.is_delete():
            if ov.is_sweep_override():
                raise ConfigError(f"roborl {command}: {arg!r} is a sweep; give one value.")
            own[override_key(ov)] = override_value(ov)
        else:
            rest.append(arg)
    return own, rest


# -- composition ------------------------------------------------------------------------------

_NOT_IN_STRUCT = re.compile(r"Could not (?:override|append to|delete from) '([^']+)'")
# "find" for `group=typo`, "load" for a typo inside a list (`logger=[wandb,typo]`).
_MISSING_OPTION = re.compile(r"Could not (?:find|load) '([^']+)/([^'/]+)'")


def compose(
    host: Any,
    overrides: Sequence[str],
    command: str = "train",
    config_name: str = PRIMARY,
    config_dir: str | Path | None = None,
) -> Any:
    """Compose `config_name` with `overrides` (Hydra's compose API); errors are ConfigErrors.

    `config_dir` composes from a directory instead of roborl's configs (`resume` composes the
    run directory's saved config.yaml). Returns an OmegaConf DictConfig, unresolved. The
    primary config leaves out a `tuned` preset picked for another env id
    (`tuned_for_other_env`).
    """
    return _compose(host, overrides, command, config_name, config_dir)[0]


def tuned_overrides(host: Any, overrides: Sequence[str], command: str = "train") -> list[str]:
    """`["~tuned"]` when the primary config composed with `overrides` would apply a tuned
    preset for another env id, else `[]`: for a caller that hands the overrides to Hydra
    itself (`roborl train`'s `@hydra.main`), which `compose` does not reach."""
    return _compose(host, overrides, command, PRIMARY, None)[1]


def _compose(
    host: Any,
    overrides: Sequence[str],
    command: str,
    config_name: str,
    config_dir: str | Path | None,
) -> tuple[Any, list[str]]:
    """The composed config and the overrides `compose` added (`~tuned`) to get it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup
    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException

    register_configs(host)
    parse_overrides(overrides, command)
    # Works inside a running Hydra job too: its global state is put back afterwards.
    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        init = (
            initialize_config_dir(str(Path(config_dir).resolve()), version_base="1.3")
            if config_dir is not None
            else initialize_config_module(CONFIG_MODULE, version_base="1.3")
        )
        with init:
            if config_name != PRIMARY or config_dir is not None:
                return hydra_compose(config_name, overrides=list(overrides)), []
            cfg = hydra_compose(config_name, overrides=list(overrides), return_hydra_config=True)
            if tuned_for_other_env(cfg, overrides, lambda ov: hydra_compose(config_name, ov)):
                added = ["~tuned"]
                return hydra_compose(config_name, overrides=[*overrides, *added]), added
            with open_dict(cfg):
                del cfg["hydra"]
            return cfg, []
    except (HydraException, OmegaConfBaseException) as exc:
        raise _explain(host, exc, overrides, command, config_name, config_dir) from None
    finally:
        restore_gh_from_backup(backup)


def tuned_for_other_env(
    cfg: Any, overrides: Sequence[str], compose_with: Callable[[list[str]], Any]
) -> bool:
    """Whether the `tuned` preset in composed `cfg` (with its `hydra` node) was picked for an
    env other than the composed `env.id`; then the caller composes again with `~tuned`.

    Why: config.yaml's `optional tuned: ${algo}_${env}` keys the preset on the env *group*
    option, so `roborl train env.id=Pendulum-v1` (group still inverted_pendulum) would get the
    settings tuned for InvertedPendulum-v5. The preset is for the id its env option names
    (`compose_with(["env=OPTION"])`, a composition without the command line's `env.*` values).
    A `tuned=`/`~tuned` on the command line is the user's choice and is kept.
    """
    choices = cfg.hydra.runtime.choices
    tuned, env_option = choices.get("tuned"), choices.get("env")
    if not tuned or not env_option:
        return False
    if any(_key_of(o).split(".")[0].split("/")[0] == "tuned" for o in overrides):
        return False
    env_id = (cfg.get("env") or {}).get("id")
    if not any(_key_of(o).startswith("env.") or _key_of(o) == "env" for o in overrides):
        return False  # the env option's own id
    tuned_id = (compose_with([f"env={env_option}"]).get("env") or {}).get("id")
    return bool(env_id != tuned_id)


def _explain(
    host: Any,
    exc: BaseException,
    overrides: Sequence[str],
    command: str,
    config_name: str,
    config_dir: str | Path | None,
) -> ConfigError:
    """Hydra's message turned into roborl's: the bad key or option, and what would be accepted."""
    message = str(exc)
    match = _NOT_IN_STRUCT.search(message)
    if match:  # `algo.lr=3` for a key that does not exist: the same error as `+algo.lr=3` gets
        key = match.group(1)
        parent, _, leaf = key.rpartition(".")
        others = [o for o in overrides if _key_of(o) != key]
        try:
            cfg = compose(host, others, command, config_name, config_dir)
        except ConfigError as inner:
            return inner
        from omegaconf import DictConfig, OmegaConf

        node = OmegaConf.select(cfg, parent) if parent else cfg
        accepted = [str(k) for k in node] if isinstance(node, DictConfig) else []
        if parent == "algo":  # as build_config lists them: `name` is the algorithm, not a key
            accepted = [k for k in accepted if k != "name"]
        listed = f" Accepted keys: {', '.join(sorted(accepted))}." if accepted else ""
        hint = did_you_mean(leaf, accepted)
        if parent and parent.split(".")[0] != "algo" and not hint:
            # A section composed from a partial dict (`scripted_person={window_s:0.4}`) lists
            # only what was given; its owner checks the full set of keys after composing.
            given = next((o for o in overrides if _key_of(o) == key), f"{key}=VALUE")
            listed += f" To add a key this section does not list yet, write +{given.lstrip('+~')}."
        return ConfigError(f"unknown config key {key!r}.{hint}{listed}")
    match = _MISSING_OPTION.search(message)
    if match:
        group, option = match.group(1), match.group(2)
        choices = group_options(host, group)
        if group == "algo":  # worded as the registry words it (`algo.name=` typos)
            choices = sorted({*choices, *host.registry.algorithms})
            return unknown_name("algorithm", option, choices)
        return unknown_name(f"{group} config", option, choices)
    first = message.strip().splitlines()[0] if message.strip() else type(exc).__name__
    return ConfigError(f"roborl {command}: {first}")


def _key_of(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+~")


def compose_dict(
    host: Any, overrides: Sequence[str], command: str, config_name: str = PRIMARY
) -> dict[str, Any]:
    """`compose` as a plain dict with interpolations resolved (what runners and tools take)."""
    from omegaconf import OmegaConf

    cfg = compose(host, overrides, command, config_name)
    out = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(out, dict)
    return out


def compose_saved(
    host: Any, saved: Mapping[str, Any], overrides: Sequence[str], command: str
) -> dict[str, Any]:
    """Compose a saved config (a run's config.yaml, a checkpoint's config) with overrides."""
    from omegaconf import OmegaConf

    with tempfile.TemporaryDirectory(prefix="roborl-compose-") as tmp:
        (Path(tmp) / "saved.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(dict(saved))))
        cfg = compose(host, overrides, command, "saved", tmp)
    out = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(out, dict)
    return out


# -- sweeps -------------------------------------------------------------------------------------


def first_point(args: Sequence[str], command: str = "train") -> list[str]:
    """One point of a sweep (first value of each `a,b` / `choice()` / `range()`), to validate
    the keys before a multirun starts; `interval()`, `glob()` and `hydra` keys are left out."""
    from hydra.core.override_parser.types import ValueType

    out = []
    for arg, ov in zip(args, parse_overrides(args, command), strict=True):
        key = override_key(ov)
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            continue
        if not ov.is_sweep_override():
            out.append(arg)
            continue
        if ov.is_interval_sweep() or ov.value_type == ValueType.GLOB_CHOICE_SWEEP:
            continue  # a sampler, or options only Hydra's sweeper lists
        prefix = arg.split("=", 1)[0]
        values = list(ov.sweep_string_iterator())
        if values:
            out.append(f"{prefix}={values[0]}")
    return out

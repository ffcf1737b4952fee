"""What a model folder or checkpoint may decide: data, not configuration.

Saved data may not decide where requests go, which secret is read or what is loaded from
outside it. Config fields marked ``metadata={"local_only": KIND}`` (the LLM policy's
``base_url``, ``api_key_env``, ``api_key`` and ``model``) are therefore taken from the command
line (`LocalSettings.algo`) or their defaults when an algorithm is rebuilt from saved data,
unless the user opts in with ``trust_model_config=true``; `local_algo_config` does that for both
loaders (`model_dir.algorithm_from_model_dir`, `algorithms.algorithm_from_checkpoint`), and
`warn_robot_differences` names the keys in which a saved robot section differs from the local
robot config that is used instead (docs/security.md).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roborl.core.errors import ConfigError

log = logging.getLogger("roborl.model")

LOCAL_ONLY = "local_only"
"""Config field metadata key. ``metadata={"local_only": KIND}`` marks a field whose value
reaches the network (``"network"``: a server URL), a secret (``"secret"``: a key, or the name
of the environment variable a key is read from) or files and downloads outside the folder
(``"path"``: a model path or hub id). Saved data cannot set it: see `local_algo_config`."""
LOCAL_KINDS = {
    "network": "where requests go",
    "secret": "which secret is read or sent",
    "path": "what is loaded from outside the folder",
}
TRUST_OPTION = "trust_model_config"
"""The command-line opt-in (`roborl eval` / `roborl deploy`) to use saved values as they are."""


@dataclass(frozen=True)
class LocalSettings:
    """What the user said, on this machine, about loading a model folder or checkpoint.

    `algo`: ``algo.KEY=VALUE`` from the command line, for local-only fields; `trust`:
    ``trust_model_config=true``, saved values are used as they are; `robot`: the local robot
    config that is used, to name where the saved robot section differs (None: not compared).
    """

    algo: Mapping[str, Any] = field(default_factory=dict)
    trust: bool = False
    robot: Mapping[str, Any] | None = None


_SETTINGS: ContextVar[LocalSettings | None] = ContextVar("roborl_model_settings", default=None)


@contextmanager
def local_settings(settings: LocalSettings) -> Iterator[None]:
    """Make `settings` what the loaders use when their caller passes none (deploy's node
    loads the policy itself, from the options it was given)."""
    token = _SETTINGS.set(settings)
    try:
        yield
    finally:
        _SETTINGS.reset(token)


def current_settings(settings: LocalSettings | None = None) -> LocalSettings:
    """`settings`, else those of the innermost `local_settings` block (default: none given)."""
    if settings is None:
        settings = _SETTINGS.get()
    return settings if settings is not None else LocalSettings()


def local_only_fields(config_cls: Any) -> dict[str, str]:
    """``{field: kind}`` of a config dataclass's fields marked `LOCAL_ONLY`."""
    if not (dataclasses.is_dataclass(config_cls) and isinstance(config_cls, type)):
        return {}
    return {
        f.name: str(f.metadata[LOCAL_ONLY])
        for f in dataclasses.fields(config_cls)
        if f.metadata.get(LOCAL_ONLY)
    }


def _field_default(config_cls: Any, name: str) -> Any:
    f = {f.name: f for f in dataclasses.fields(config_cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _path_inside(folder: Path, value: Any) -> str | None:
    """`value` as an absolute path when it is a relative path to something inside `folder`
    (a model shipped with it); None for anything else (absolute, ``..``, a hub id, missing)."""
    if not isinstance(value, str) or not value or os.path.isabs(value):
        return None
    root = folder.resolve()
    target = (root / value).resolve()
    if target == root or not target.is_relative_to(root) or not target.exists():
        return None
    return str(target)


def _shown(key: str, value: Any) -> str:
    """`algo.KEY='VALUE'` for a message, a secret redacted (placeholders such as EMPTY kept)."""
    from roborl.core.secrets import redact

    return f"algo.{key}={redact({key: value})[key]!r}"


def local_algo_config(
    algo_cls: Any,
    algo_config: Mapping[str, Any],
    source: str,
    settings: LocalSettings | None = None,
    folder: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """The saved `algo_config` with each local-only field set by the user, not the saved data.

    Per field: the command line's value (``settings.algo``); else, with ``settings.trust``, the
    saved one; else a ``"path"`` that points inside the model `folder` (made absolute); else the
    field's default. One warning names the saved values that are not used. `source` names the
    data in messages ("model folder 'DIR'", "checkpoint 'PATH'").
    """
    settings = current_settings(settings)
    config_cls = getattr(algo_cls, "Config", None)
    kinds = local_only_fields(config_cls)
    extra = sorted(set(settings.algo) - set(kinds))
    if extra:
        accepted = ", ".join(f"algo.{k}" for k in kinds) or "none for this algorithm"
        raise ConfigError(
            f"algo.{extra[0]}={settings.algo[extra[0]]!r} with a model folder or checkpoint: "
            f"the algorithm and its config come from the {source}; on the command line only "
            f"the keys it may not decide itself can be given ({accepted})."
        )
    out = dict(algo_config)
    ignored: dict[str, tuple[Any, Any]] = {}  # field -> (saved, used)
    for name, kind in kinds.items():
        saved = algo_config.get(name, dataclasses.MISSING)
        inside = _path_inside(Path(folder), saved) if kind == "path" and folder else None
        if name in settings.algo:
            value = settings.algo[name]
        elif settings.trust:
            continue
        elif inside is not None:
            value = inside
        else:
            value = _field_default(config_cls, name)
        out[name] = value
        if saved is not dataclasses.MISSING and saved != value and inside != value:
            ignored[name] = (saved, value)
    if ignored:
        why = sorted({LOCAL_KINDS.get(kinds[name], kinds[name]) for name in ignored})
        log.warning(
            "%s sets %s, which saved data may not decide (%s): using %s from the command line "
            "or the defaults instead; give algo.KEY=VALUE to choose, or %s=true to use the "
            "saved values.",
            source,
            ", ".join(_shown(k, saved) for k, (saved, _) in ignored.items()),
            ", ".join(why),
            ", ".join(_shown(k, used) for k, (_, used) in ignored.items()),
            TRUST_OPTION,
        )
    return out


def _flatten(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}"))
        return out
    return {prefix: value}


def robot_differences(saved: Any, local: Any) -> list[str]:
    """Dotted keys (``robot.safety.high``) whose value in the saved robot section differs
    from the local robot config (keys the saved section does not state are not compared)."""
    if not isinstance(saved, Mapping):
        return []
    mine = _flatten(local if isinstance(local, Mapping) else {}, "robot")
    missing = object()
    return [k for k, v in _flatten(saved, "robot").items() if not _same(mine.get(k, missing), v)]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def warn_robot_differences(saved: Any, local: Any, source: str) -> list[str]:
    """Warn (one line) when a saved robot section differs from the local robot config that is
    used instead; returns the differing keys."""
    keys = robot_differences(saved, local)
    if keys:
        shown = ", ".join(keys[:12]) + (f" and {len(keys) - 12} more" if len(keys) > 12 else "")
        log.warning(
            "%s was saved with a robot section that differs from the local robot config in %s; "
            "the local config (robot=NAME and robot.KEY=VALUE on the command line) is used, "
            "never the saved one.",
            source,
            shown,
        )
    return keys


def algo_overrides(args: Sequence[str], command: str) -> tuple[dict[str, Any], list[str]]:
    """Split ``algo.KEY=VALUE`` arguments (given with checkpoint= or model=) from the rest:
    ``({KEY: VALUE}, rest)``; ``algo=NAME``, nested keys and deletions are refused."""
    from roborl.core.compose import override_key, override_value, parse_overrides

    values: dict[str, Any] = {}
    rest: list[str] = []
    for arg, ov in zip(args, parse_overrides(args, command), strict=True):
        key = override_key(ov)
        if key.split(".")[0].split("/")[0] != "algo":
            rest.append(arg)
            continue
        parts = key.split(".")
        if len(parts) != 2 or ov.is_delete() or ov.is_sweep_override():
            raise ConfigError(
                f"roborl {command}: {arg!r} with checkpoint= or model=: the algorithm and its "
                "config come from there; only algo.KEY=VALUE for the keys it may not decide "
                "(e.g. algo.base_url of algo=llm) can be given."
            )
        values[parts[1]] = override_value(ov)
    return values, rest

"""Loading plugins from entry points into a pluggy PluginManager and a name registry.

Built-in and third-party plugins go through the same path: the entry-point group
``roborl.plugins``. A plugin that fails to import, or whose hooks do not match the specs, is
recorded with its name, distribution and error; the others still load.
"""

from __future__ import annotations

import importlib.metadata as importlib_metadata
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from roborl.core import hookspecs
from roborl.core.errors import PluginError, unknown_name

ENTRY_POINT_GROUP = "roborl.plugins"
DISABLE_ENV_VAR = "ROBORL_DISABLE_PLUGINS"


@dataclass
class PluginInfo:
    """What `roborl plugins` shows for one plugin."""

    name: str
    distribution: str
    version: str
    provides: dict[str, list[str]] = field(default_factory=dict)
    config_dirs: list[str] = field(default_factory=list)
    error: str | None = None
    disabled: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.disabled


@dataclass
class Registry:
    """Names to things, per kind, remembering which plugin registered each name."""

    algorithms: dict[str, Any] = field(default_factory=dict)
    envs: dict[str, Any] = field(default_factory=dict)
    robots: dict[str, Any] = field(default_factory=dict)
    loggers: dict[str, Any] = field(default_factory=dict)
    dataset_sources: dict[str, Any] = field(default_factory=dict)
    dataset_writers: dict[str, Any] = field(default_factory=dict)
    commands: dict[str, Any] = field(default_factory=dict)
    loops: dict[str, Any] = field(default_factory=dict)
    collectors: dict[str, Any] = field(default_factory=dict)
    rewards: dict[str, Any] = field(default_factory=dict)
    training_wrappers: dict[str, Any] = field(default_factory=dict)
    # Top-level config section -> a one-line description (`roborl_config_sections`).
    config_sections: dict[str, Any] = field(default_factory=dict)
    owners: dict[tuple[str, str], str] = field(default_factory=dict)
    # (kind, name) -> every plugin that registered it, when more than one did.
    conflicts: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def add(self, kind: str, name: str, obj: Any, plugin: str) -> None:
        """Record a name; a second plugin claiming it makes the name a conflict, which is an
        error when the name is used (not at load time, so `roborl plugins` still lists both)."""
        table: dict[str, Any] = getattr(self, kind)
        if name in table:
            claimants = self.conflicts.setdefault((kind, name), [self.owners[(kind, name)]])
            claimants.append(plugin)
            return
        table[name] = obj
        self.owners[(kind, name)] = plugin

    def conflict_message(self, kind: str, name: str) -> str:
        who = self.conflicts[(kind, name)]
        names = " and ".join(repr(w) for w in who)
        return (
            f"two plugins register the {kind[:-1].replace('_', ' ')} {name!r}: {names}. "
            f"Uninstall one, or disable one by name with {DISABLE_ENV_VAR}={who[-1]} "
            f"(or plugins.disable=[{who[-1]}])."
        )

    def get(self, kind: str, name: str) -> Any:
        table: dict[str, Any] = getattr(self, kind)
        if (kind, name) in self.conflicts:
            raise PluginError(self.conflict_message(kind, name))
        if name not in table:
            raise unknown_name(kind[:-1].replace("_", " "), name, table)
        return table[name]


def disabled_names(extra: Iterable[str] = ()) -> set[str]:
    """Plugins switched off by `ROBORL_DISABLE_PLUGINS=a,b` or by config."""
    from_env = os.environ.get(DISABLE_ENV_VAR, "")
    names = {n.strip() for n in from_env.split(",") if n.strip()}
    return names | {str(n) for n in extra}


class PluginHost:
    """The pluggy manager plus the registry it fills."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.registry = Registry()
        self.config_dirs: list[str] = []

    # -- loading -----------------------------------------------------------------------------

    def load_entry_points(self, disable: Iterable[str] = ()) -> None:
        off = disabled_names(disable)
        eps = importlib_metadata.entry_points(group=ENTRY_POINT_GROUP)
        for ep in sorted(eps, key=lambda e: e.name):
            if ep.name in self.infos:
                continue
            dist = ep.dist.name if ep.dist else "?"
            version = ep.dist.version if ep.dist else "?"
            info = PluginInfo(name=ep.name, distribution=dist, version=version)
            self.infos[ep.name] = info
            if ep.name in off:
                info.disabled = True
                self.pm.set_blocked(ep.name)
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin must not take the host down
                info.error = f"import failed: {type(exc).__name__}: {exc}"
                continue
            self.register(plugin, info)
        self._collect()

    def register(self, plugin: Any, info: PluginInfo) -> bool:
        """Register one plugin object; record (not raise) version and signature errors."""
        self.infos.setdefault(info.name, info)
        wanted = getattr(plugin, "ROBORL_HOOKSPEC_VERSION", None)
        have_major = hookspecs.HOOKSPEC_VERSION.split(".")[0]
        if wanted is not None and str(wanted).split(".")[0] != have_major:
            info.error = (
                f"needs roborl hookspec version {wanted}, this roborl provides "
                f"{hookspecs.HOOKSPEC_VERSION}"
            )
            return False
        try:
            self.pm.register(plugin, name=info.name)
        except pluggy.PluginValidationError as exc:
            info.error = f"invalid hook implementation: {exc}"
            return False
        except ValueError as exc:
            info.error = f"could not register: {exc}"
            return False
        return True

    def add_plugin(self, plugin: Any, name: str, distribution: str = "(local)") -> PluginInfo:
        """Register a plugin object directly (tests, notebooks); entry points stay the norm."""
        info = PluginInfo(name=name, distribution=distribution, version="-")
        self.register(plugin, info)
        self._collect()
        return info

    def _collect(self) -> None:
        """Ask every plugin what it provides, one implementation at a time, so each name is
        attributed to its plugin and a plugin that raises is isolated."""
        self.registry = Registry()
        self.config_dirs = []
        for info in self.infos.values():
            info.provides = {}
            info.config_dirs = []
        for hook_name, kind in hookspecs.PROVIDER_HOOKS.items():
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                info = self.infos[impl.plugin_name]
                if info.error:
                    continue
                try:
                    provided = dict(impl.function() or {})
                except Exception as exc:
                    info.error = f"{hook_name}() raised {type(exc).__name__}: {exc}"
                    continue
                for name, obj in provided.items():
                    self.registry.add(kind, name, obj, info.name)
                    info.provides.setdefault(kind, []).append(name)
        for impl in self.pm.hook.roborl_config_dirs.get_hookimpls():
            info = self.infos[impl.plugin_name]
            if info.error:
                continue
            try:
                dirs = list(impl.function() or [])
            except Exception as exc:
                info.error = f"roborl_config_dirs() raised {type(exc).__name__}: {exc}"
                continue
            info.config_dirs.extend(dirs)
            self.config_dirs.extend(dirs)

    # -- checks ------------------------------------------------------------------------------

    def check(self) -> list[str]:
        """Problems with installed plugins, one line each (empty when all is well)."""
        from roborl.core.interfaces import Algorithm, Logger

        problems = [
            f"{i.name} ({i.distribution}): {i.error}" for i in self.infos.values() if i.error
        ]
        problems += self.unknown_hooks()
        problems += [self.registry.conflict_message(*key) for key in self.registry.conflicts]
        expected = {"algorithms": Algorithm, "loggers": Logger}
        for kind, base in expected.items():
            for name, obj in getattr(self.registry, kind).items():
                if not (isinstance(obj, type) and issubclass(obj, base)):
                    owner = self.registry.owners[(kind, name)]
                    problems.append(
                        f"{owner}: {kind[:-1]} {name!r} is {obj!r}, not a subclass of "
                        f"{base.__module__}.{base.__name__}"
                    )
        kinds = (
            "envs", "robots", "dataset_sources", "dataset_writers", "commands", "loops",
            "collectors", "rewards", "training_wrappers",
        )  # fmt: skip
        for kind in kinds:
            for name, obj in getattr(self.registry, kind).items():
                if not callable(obj):
                    owner = self.registry.owners[(kind, name)]
                    problems.append(f"{owner}: {kind[:-1]} {name!r} is not callable")
        problems += self._section_problems()
        for name, cls in self.registry.algorithms.items():
            if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
                continue  # reported above
            loop = cls.loop
            if loop not in self.registry.loops:
                owner = self.registry.owners[("algorithms", name)]
                problems.append(
                    f"{owner}: algorithm {name!r} declares loop {loop!r}, which no plugin "
                    f"registers (loops: {', '.join(sorted(self.registry.loops)) or 'none'})"
                )
        return problems

    def _section_problems(self) -> list[str]:
        """A declared config section needs a string description and a name that is not
        already core's (a run-level key or one of core's own sections)."""
        from roborl.core.algorithms import CORE_SECTIONS, RUN_KEYS

        problems = []
        for name, about in self.registry.config_sections.items():
            owner = self.registry.owners[("config_sections", name)]
            if not isinstance(about, str):
                problems.append(
                    f"{owner}: config section {name!r} is described by {about!r}, not a string"
                )
            if name in RUN_KEYS or name in CORE_SECTIONS:
                what = "run-level key" if name in RUN_KEYS else "core config section"
                problems.append(
                    f"{owner}: config section {name!r} is already a {what}; pick another name"
                )
        return problems

    def unknown_hooks(self) -> list[str]:
        """Hooks no spec knows (a typo such as ``roborl_algoritms``), one line per plugin and
        hook; `pm.check_pending()` would stop at the first and name the module, not the plugin."""
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError:
            pass
        else:
            return []
        found = []
        for hook_name in sorted(self.pm.hook.__dict__):
            if hook_name.startswith("_"):
                continue
            caller = getattr(self.pm.hook, hook_name)
            if caller.has_spec():
                continue
            for impl in caller.get_hookimpls():
                if impl.optionalhook:
                    continue
                info = self.infos.get(impl.plugin_name)
                dist = info.distribution if info else "?"
                found.append(
                    f"{impl.plugin_name} ({dist}): unknown hook {hook_name!r}; roborl "
                    f"{hookspecs.HOOKSPEC_VERSION} has no such hookspec (see "
                    f"docs/writing-plugins.md for the list)"
                )
        return found

    def failures(self) -> list[PluginInfo]:
        return [i for i in self.infos.values() if i.error]

    def format_failure(self, info: PluginInfo) -> str:
        return f"plugin {info.name!r} from {info.distribution} {info.version}: {info.error}"


_HOST: PluginHost | None = None


def get_host(disable: Iterable[str] = (), reload: bool = False) -> PluginHost:
    """The process-wide host, loading entry points on first use."""
    global _HOST
    if _HOST is None or reload:
        host = PluginHost()
        host.load_entry_points(disable)
        _HOST = host
    return _HOST

"""Where a command's policy comes from, and the one loader every command uses.

`roborl eval`, `deploy`, `export`, `demos record` and `dataset collect` all turn the same user
options into a policy: ``checkpoint=PATH``, ``model=DIR`` (``runtime=onnx`` for its
policy.onnx) or ``algo=NAME`` for an algorithm that acts without training. `PolicySource`
checks those options once, with the same messages for every command, and `load_policy` builds
the policy from them, so a new kind of source (or a fix to one) lands in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Algorithm, Policy
from roborl.core.plugins import PluginHost
from roborl.core.saved_data import LocalSettings

Kind = Literal["checkpoint", "model", "onnx", "algo"]


@dataclass(frozen=True)
class PolicySource:
    """The policy options one command was given, checked when built.

    `command` names the command in messages (``roborl {command}: ...``); `algo` is the name of
    a checkpoint-free algorithm and `algo_config` its composed section (default: the name
    alone); `accepts_model` is False for commands without ``model=`` (export), which changes
    only the hint given for a model folder passed as ``checkpoint=``.
    """

    command: str
    checkpoint: str | None = None
    model: str | None = None
    runtime: str = "torch"
    algo: str | None = None
    algo_config: Mapping[str, Any] | None = None
    accepts_model: bool = True

    def __post_init__(self) -> None:
        from roborl.core.model_dir import is_model_dir

        head = f"roborl {self.command}:"
        given = [x for x in (self.checkpoint, self.model, self.algo) if x]
        if len(given) > 1:
            if self.algo:
                raise ConfigError(f"{head} give one of checkpoint=PATH, model=DIR or algo=NAME.")
            raise ConfigError(f"{head} give checkpoint=PATH or model=DIR, not both.")
        if self.runtime == "onnx" and not self.model:
            raise ConfigError(
                f"{head} runtime=onnx runs the policy.onnx of an export folder: give model=DIR "
                "(written by roborl export ... format=onnx); checkpoint= and algo= run on torch."
            )
        if not given:
            raise ConfigError(
                f"{head} checkpoint=PATH is required (a .pt file or a run directory), or "
                "model=DIR (a folder written by roborl export), or algo=NAME for an algorithm "
                "that acts without training (e.g. algo=llm)."
            )
        if self.checkpoint and is_model_dir(self.checkpoint):
            path = self.checkpoint
            hint = (
                f"load it with model={path} " if self.accepts_model else "it is already exported "
            )
            raise ConfigError(
                f"{head} {path!r} is a folder written by roborl export; {hint}(checkpoint= "
                "takes a .pt file or a run directory)."
            )

    @classmethod
    def from_path(cls, path: str | Path, command: str) -> PolicySource:
        """A path that is either a model folder or a checkpoint (demos' and collect's
        ``policy=PATH``)."""
        from roborl.core.model_dir import is_model_dir

        if is_model_dir(path):
            return cls(command, model=str(path))
        return cls(command, checkpoint=str(path))

    @property
    def kind(self) -> Kind:
        if self.model:
            return "onnx" if self.runtime == "onnx" else "model"
        return "checkpoint" if self.checkpoint else "algo"

    def check_algorithm(self, host: PluginHost) -> None:
        """Refuse an ``algo=NAME`` that learns its weights (it needs checkpoint=PATH); callers
        run this before composing or opening anything, `load_policy` runs it again."""
        if self.algo:
            require_checkpoint_free(host, self.algo, self.command)


def require_checkpoint_free(host: PluginHost, name: str, command: str) -> None:
    """Raise ConfigError unless algorithm `name` acts without training (`checkpoint_free`)."""
    if not host.registry.get("algorithms", name).checkpoint_free:
        raise ConfigError(
            f"roborl {command}: algo={name} learns its weights, so it needs "
            "checkpoint=PATH; only algorithms that act without training (e.g. algo=llm) can run "
            "from config alone."
        )


@dataclass
class LoadedPolicy:
    """A loaded policy: its algorithm (None for runtime=onnx, which runs policy.onnx alone),
    the checkpoint's data or the model folder's config.json data (``path``, ``algo``,
    ``config``, ``runner``; for algo=NAME only ``algo``), and words for messages."""

    source: PolicySource
    algorithm: Algorithm | None
    metadata: dict[str, Any]
    description: str
    _policy: Policy | None = field(default=None, repr=False)

    @property
    def policy(self) -> Policy:
        """The deployable policy; asked of the algorithm on first use only, since building
        one may start an engine (algo=llm) that export, say, never needs."""
        if self._policy is None:
            assert self.algorithm is not None
            self._policy = self.algorithm.policy()
        return self._policy

    def close(self) -> None:
        """Release the algorithm's resources (an LLM engine or server session)."""
        if self.algorithm is not None:
            self.algorithm.close()


def load_policy(
    source: PolicySource,
    host: PluginHost,
    device: str = "cpu",
    settings: LocalSettings | None = None,
    spaces: tuple[gym.Space, gym.Space] | None = None,
) -> LoadedPolicy:
    """Build the policy `source` names on `device`.

    `settings` decide what saved data may not (`roborl.core.saved_data`; default: those of the
    enclosing `local_settings` block). A checkpoint-free ``algo=NAME`` has no saved spaces:
    `spaces` (observation, action) come from the env or robot it will act on.
    """
    from roborl.core.saved_data import current_settings, warn_robot_differences

    kind = source.kind
    if kind == "onnx":
        from roborl.core.onnx_policy import onnx_policy_from_model_dir

        assert source.model is not None
        onnx, meta = onnx_policy_from_model_dir(source.model)
        description = f"model folder {source.model!r}"
        local = current_settings(settings).robot
        if local is not None:  # no algorithm is built, so its loader cannot compare them
            warn_robot_differences((meta.get("config") or {}).get("robot"), local, description)
        return LoadedPolicy(source, None, meta, description, onnx)
    if kind == "model":
        from roborl.core.model_dir import algorithm_from_model_dir

        assert source.model is not None
        algo, meta = algorithm_from_model_dir(host, source.model, device, settings)
        return LoadedPolicy(source, algo, meta, f"model folder {source.model!r}")
    if kind == "checkpoint":
        from roborl.core.algorithms import algorithm_from_checkpoint

        assert source.checkpoint is not None
        algo, meta = algorithm_from_checkpoint(host, source.checkpoint, device, settings)
        return LoadedPolicy(source, algo, meta, f"checkpoint {str(meta['path'])!r}")
    return _checkpoint_free(source, host, device, spaces)


def _checkpoint_free(
    source: PolicySource,
    host: PluginHost,
    device: str,
    spaces: tuple[gym.Space, gym.Space] | None,
) -> LoadedPolicy:
    from roborl.core.algorithms import build_algorithm

    assert source.algo is not None
    source.check_algorithm(host)
    if spaces is None:
        raise TypeError(f"load_policy: algo={source.algo} needs spaces=(observation, action)")
    algo_cfg = dict(source.algo_config or {"name": source.algo})
    algo = build_algorithm(host, algo_cfg, spaces[0], spaces[1], device)
    return LoadedPolicy(source, algo, {"algo": source.algo}, f"algo={source.algo}")

"""Secrets never leave the process: config values under secret-looking keys are redacted.

Everything roborl writes from a run's config (`config.yaml`, checkpoints, `eval.json`, what
loggers upload, `roborl export` pushes) goes through `redact` first. A key is secret when its
last word is one of `api_key`, `apikey`, `access_key`, `secret`, `secret_key`, `password`,
`passwd`, `passphrase`, `token`, `auth_token`, `credentials` (case-insensitive; `max_tokens`,
`tokenizer` or `api_key_env`, which names an environment variable, are not). Placeholders that
hold no secret (`None`, `""`, `"EMPTY"`) are kept so configs stay readable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"
_SECRET_KEY = re.compile(
    r"(^|[_.\-])(api_?key|access_?key|secret(_?key)?|password|passwd|passphrase|"
    r"(auth_?|access_?|bearer_?)?token|credentials?)$",
    re.IGNORECASE,
)
_PLACEHOLDERS = ("", "EMPTY", REDACTED)


def is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY.search(key))


_OVERRIDE = re.compile(r"([\w.+~\-/]+)=([^,\s]+)")


def redact_overrides(text: str) -> str:
    """`KEY=VALUE` words (CLI overrides, Hydra's override_dirname) with a secret key redacted."""

    def sub(m: re.Match[str]) -> str:
        leaf = m.group(1).lstrip("+~").rsplit(".", 1)[-1]
        return f"{m.group(1)}={REDACTED}" if is_secret_key(leaf) else m.group(0)

    return _OVERRIDE.sub(sub, text) if "=" in text else text


def redact(obj: Any) -> Any:
    """A copy of `obj` (mappings, lists, tuples) with every secret-keyed value replaced."""
    if isinstance(obj, Mapping):
        return {
            k: (
                REDACTED
                if is_secret_key(k)
                and v is not None
                and not isinstance(v, Mapping)
                and not (isinstance(v, str) and v in _PLACEHOLDERS)
                else redact(v)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact(v) for v in obj)
    if isinstance(obj, str):
        return redact_overrides(obj)
    return obj


def redact_hydra_dir(run_dir: str | os.PathLike[str]) -> None:
    """Redact the files Hydra wrote before the job (`.hydra/config.yaml`, `hydra.yaml`,
    `overrides.yaml`): a key given as `llm.api_key=...` is in all three."""
    import yaml

    for path in sorted((Path(run_dir) / ".hydra").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        clean = redact(data)
        if clean != data:
            path.write_text(yaml.safe_dump(clean, sort_keys=False))

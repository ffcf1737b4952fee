"""Secrets never leave the process: config values under secret-looking keys are redacted.

Everything roborl writes from a run's config (`config.yaml`, checkpoints, `eval.json`, what
loggers upload, `roborl export` pushes) goes through `redact` first. A key is secret when its
last word is one of `api_key`, `apikey`, `access_key`, `secret`, `secret_key`, `password`,
`passwd`, `passphrase`, `token`, `auth_token`, `credentials` (case-insensitive; `max_tokens`,
`tokenizer` or `api_key_env`, which names an environment variable, are not). Placeholders that
hold no secret (`None`, `""`, `"EMPTY"`) are kept so configs stay readable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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
    return obj

"""`roborl export ... push=REPO_ID`: upload an exported folder to the Hugging Face Hub.

Uses `huggingface_hub`'s `HfApi` (`create_repo`, then `upload_folder`). Everything before those
two network calls (the token and offline checks, which files go up, the commit message) is in
`upload_plan`, so it is tested without a network; the upload itself is not tested here.

The repo is **private** unless `private=false` is given. What goes up is a staged copy of the
export whose `config.json` is `sanitize`d: secrets redacted, no absolute paths (basenames
instead), no hosts or addresses (URLs, IPs, `*host`/`*address`/`bind`/`*url` keys), no
deployment sections (`actor_learner`, `ray`, `hydra`; of `robot` only its name). The local
export keeps the full config, which `roborl eval model=DIR` may need.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from roborl.core.errors import ConfigError
from roborl.core.model_dir import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE
from roborl.core.onnx_policy import ONNX_FILE
from roborl.core.secrets import REDACTED, redact

UPLOADED = (WEIGHTS_FILE, CONFIG_FILE, CARD_FILE)
UPLOADED_IF_PRESENT = (ONNX_FILE,)
"""Files an export has only with some options (format=onnx); uploaded when there."""
DROPPED_SECTIONS = ("actor_learner", "ray", "hydra")
_HOST_KEY = re.compile(
    r"(^|[_.\-])(host|hostname|hosts|address|addr|bind|ip|url|uri|urls|endpoint|connect)$",
    re.IGNORECASE,
)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_IPV4 = re.compile(r"\b\d{1,3}(\.\d{1,3}){3}\b")
_WIN_ABS = re.compile(r"^[A-Za-z]:[\\/]|^\\\\")


def is_host_key(key: str) -> bool:
    return bool(_HOST_KEY.search(key))


def sanitize_value(value: str) -> str:
    """A string without a host (URL, IP) or absolute path (its basename instead)."""
    if _URL.match(value) or _IPV4.search(value):
        return REDACTED
    if value.startswith(("/", "~")):
        return PurePosixPath(value).name or REDACTED
    if _WIN_ABS.match(value):
        return PureWindowsPath(value).name or REDACTED
    return value


def sanitize(obj: Any, key: str | None = None) -> Any:
    """`obj` (a run's or algorithm's config) fit to publish: see the module docstring."""
    if isinstance(obj, Mapping):
        out = {}
        for k, v in redact(obj).items():
            if key is None and k in DROPPED_SECTIONS:
                continue
            if key is None and k == "robot" and isinstance(v, Mapping):
                v = {"name": v.get("name")}
            out[k] = sanitize(v, str(k))
        return out
    if isinstance(obj, (list, tuple)):
        return [sanitize(v, key) for v in obj]
    if isinstance(obj, str):
        if key is not None and is_host_key(key) and obj:
            return REDACTED
        return sanitize_value(obj)
    return obj


def present_optional(folder: str | Path) -> list[str]:
    """The `UPLOADED_IF_PRESENT` files that `folder` has."""
    return [name for name in UPLOADED_IF_PRESENT if (Path(folder) / name).is_file()]


def stage(folder: str | Path, into: str | Path) -> Path:
    """Copy the export into `into` for upload, its config.json sanitised."""
    folder, into = Path(folder), Path(into)
    for name in (WEIGHTS_FILE, CARD_FILE, *present_optional(folder)):
        try:
            os.link(folder / name, into / name)
        except OSError:
            shutil.copy2(folder / name, into / name)
    meta = json.loads((folder / CONFIG_FILE).read_text())
    meta["config"] = sanitize(meta.get("config") or {})
    meta["algo_config"] = sanitize(meta.get("algo_config") or {}, "algo")
    (into / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return into


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise ConfigError("push= needs huggingface_hub: pip install huggingface_hub.") from None
    return huggingface_hub


def upload_plan(folder: str | Path, repo_id: str, private: bool = True) -> dict[str, Any]:
    """Check that an upload can start and return its arguments (no network used).

    Raises ConfigError for a malformed repo id, offline mode, a missing token or a folder
    without the exported files.
    """
    hub = _hub()
    folder = Path(folder)
    missing = [f for f in UPLOADED if not (folder / f).is_file()]
    if missing:
        raise ConfigError(f"{folder} lacks {', '.join(missing)}; export it first.")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(
            f"push={repo_id!r} is not a Hub repo id: expected NAMESPACE/NAME (e.g. you/sac-hopper)."
        )
    try:
        from huggingface_hub.utils import validate_repo_id

        validate_repo_id(repo_id)
    except ImportError:
        pass
    except Exception as exc:  # HFValidationError: the Hub's own naming rules
        raise ConfigError(f"push={repo_id!r}: {exc}") from None
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise ConfigError(
            "push= needs the network, but HF_HUB_OFFLINE is set; unset it (the export "
            f"itself is written: {folder})."
        )
    if not hub.get_token():
        raise ConfigError(
            "push= needs a Hugging Face token: run `hf auth login` or set HF_TOKEN (the "
            f"export itself is written: {folder})."
        )
    return {
        "create_repo": {
            "repo_id": repo_id,
            "repo_type": "model",
            "private": private,
            "exist_ok": True,
        },
        "upload_folder": {
            "repo_id": repo_id,
            "repo_type": "model",
            "folder_path": str(folder),
            "allow_patterns": [*UPLOADED, *present_optional(folder)],
            "commit_message": f"roborl export: {folder.name}",
        },
    }


def push(
    folder: str | Path,
    repo_id: str,
    private: bool = True,
    api_factory: Callable[[], Any] | None = None,
) -> str:
    """Upload `folder` (a sanitised copy of it) to `repo_id`; returns the Hub's commit URL."""
    plan = upload_plan(folder, repo_id, private)
    api = (api_factory or _hub().HfApi)()
    with tempfile.TemporaryDirectory(prefix="roborl-push-") as tmp:
        staged = stage(folder, tmp)
        api.create_repo(**plan["create_repo"])
        info = api.upload_folder(**{**plan["upload_folder"], "folder_path": str(staged)})
    return str(getattr(info, "commit_url", info))

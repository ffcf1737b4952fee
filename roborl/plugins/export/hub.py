"""`roborl export ... push=REPO_ID`: upload an exported folder to the Hugging Face Hub.

Uses `huggingface_hub`'s `HfApi` (`create_repo`, then `upload_folder`). Everything before those
two network calls (the token and offline checks, which files go up, the commit message) is in
`upload_plan`, so it is tested without a network; the upload itself is not tested here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from roborl.core.errors import ConfigError
from roborl.core.model_dir import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE

UPLOADED = (WEIGHTS_FILE, CONFIG_FILE, CARD_FILE)


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise ConfigError("push= needs huggingface_hub: pip install huggingface_hub.") from None
    return huggingface_hub


def upload_plan(folder: str | Path, repo_id: str, private: bool = False) -> dict[str, Any]:
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
            "allow_patterns": list(UPLOADED),
            "commit_message": f"roborl export: {folder.name}",
        },
    }


def push(
    folder: str | Path,
    repo_id: str,
    private: bool = False,
    api_factory: Callable[[], Any] | None = None,
) -> str:
    """Upload `folder` to `repo_id`; returns the commit URL the Hub reports."""
    plan = upload_plan(folder, repo_id, private)
    api = (api_factory or _hub().HfApi)()
    api.create_repo(**plan["create_repo"])
    info = api.upload_folder(**plan["upload_folder"])
    return str(getattr(info, "commit_url", info))

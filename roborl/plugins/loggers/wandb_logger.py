"""Weights & Biases logger that never blocks a run: offline unless the user is logged in.

A run directory is one W&B run: the logger saves the W&B run id in `RUN_DIR/wandb/run_id`
and, when that file is there (`roborl resume run_dir=RUN_DIR`), continues the same W&B run
(`id=`, `resume="allow"`) instead of starting a second one. Offline runs keep the id too, so
`wandb sync` uploads the resumed part into the same run.
"""

from __future__ import annotations

import netrc
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roborl.core.errors import ConfigError
from roborl.core.interfaces import Logger

MODES = ("auto", "online", "offline", "disabled")
RUN_ID_FILE = Path("wandb") / "run_id"


def saved_run_id(run_dir: str | Path) -> str | None:
    """The W&B run id an earlier part of this run saved in its run directory, if any."""
    path = Path(run_dir) / RUN_ID_FILE
    try:
        run_id = path.read_text().strip()
    except FileNotFoundError:
        return None
    return run_id or None


def save_run_id(run_dir: str | Path, run_id: str) -> None:
    """Atomically (temp file + rename): a crash leaves no half-written id."""
    path = Path(run_dir) / RUN_ID_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(run_id + "\n")
    os.replace(tmp, path)


def logged_in() -> bool:
    """True when wandb has credentials (env var or ~/.netrc), without touching the network."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def resolve_mode(mode: str | None) -> str:
    env_mode = os.environ.get("WANDB_MODE")
    if mode in (None, "auto"):
        if env_mode in MODES[1:]:
            return env_mode  # type: ignore[return-value]
        return "online" if logged_in() else "offline"
    if mode not in MODES:
        raise ConfigError(
            f"logger.mode={mode!r} is not accepted: expected one of {', '.join(MODES)}."
        )
    return mode


class WandbLogger(Logger):
    def __init__(
        self,
        run_dir: str,
        config: Mapping[str, Any],
        project: str = "roborl",
        entity: str | None = None,
        mode: str | None = "auto",
        group: str | None = None,
        tags: list[str] | None = None,
    ) -> None:
        import wandb

        self.mode = resolve_mode(mode)
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        # A resumed run (its directory has the id) continues the same W&B run.
        run_id = saved_run_id(run_dir) if self.mode != "disabled" else None
        self.resumed = run_id is not None
        self._run = wandb.init(
            id=run_id,
            resume="allow" if run_id else None,
            project=project,
            entity=entity,
            group=group,
            tags=list(tags or []),
            dir=run_dir,
            mode=self.mode,  # type: ignore[arg-type]
            config=dict(config),
            name=Path(run_dir).name,
            reinit="finish_previous",
            settings=wandb.Settings(init_timeout=60, silent=True, console="off"),
        )
        if self.mode != "disabled" and run_id is None:
            save_run_id(run_dir, self._run.id)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def log_video(self, key: str, path: str, step: int) -> None:
        """The MP4 as a wandb Video (wandb copies the file; nothing is re-encoded)."""
        import wandb

        self._run.log({key: wandb.Video(path, format="mp4")}, step=step)

    def close(self) -> None:
        self._run.finish()

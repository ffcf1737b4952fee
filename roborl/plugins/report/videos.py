"""The report's "Videos" section: the latest MP4 of each run (`video_every=`, `eval video=true`).

Kept apart from the HTML builder so the report can call it in one line. Videos are embedded as
data URIs, like the report's plots, so report.html stays one file that can be mailed or
archived; a video larger than `MAX_EMBED_BYTES` is linked by its path instead.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from typing import Any

from roborl.core.video import latest_video

MAX_EMBED_BYTES = 16 * 1024 * 1024


def video_section(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """HTML for each run's latest video (`runs` are report.json's run entries); [] if none."""
    parts: list[str] = []
    for run in runs:
        path = latest_video(run["path"])
        if path is None:
            continue
        size = path.stat().st_size
        if size <= MAX_EMBED_BYTES:
            src = "data:video/mp4;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
        else:
            src = path.resolve().as_uri()
        caption = f"{run.get('algo')} on {run.get('env')}, seed {run.get('seed')}: {path.name}"
        parts.append(
            f"<figure><video controls muted loop preload='metadata' src='{src}' "
            f"title='{html.escape(str(path))}'></video>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    return ["<h2>Videos</h2>", *parts] if parts else []

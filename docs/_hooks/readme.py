"""mkdocs hook: the site's home page is the README, so the two never drift apart.

docs/index.md holds only a marker; this hook replaces it with README.md and rewrites the
README's `docs/...` links (relative to the repository root) to be relative to docs/.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MARKER = "<!-- README -->"


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    readme = Path(config["config_file_path"]).parent / "README.md"
    text = re.sub(r"\]\(docs/", "](", readme.read_text(encoding="utf-8"))
    return markdown.replace(MARKER, text)

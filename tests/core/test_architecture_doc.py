"""docs/ARCHITECTURE.md is drawn from the code: its hook list and hookspec version are the ones
in `roborl/core/hookspecs.py`, and every module path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

from roborl.core import hookspecs

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text()


def _hooks_in_code() -> set[str]:
    return {name for name in dir(hookspecs) if name.startswith("roborl_")}


def test_hookspec_version_in_the_doc_is_the_code_s() -> None:
    assert f"now {hookspecs.HOOKSPEC_VERSION})" in DOC, hookspecs.HOOKSPEC_VERSION


def test_every_hook_is_documented_and_no_other() -> None:
    in_doc = set(re.findall(r"`(roborl_[a-z_]+)`", DOC))
    assert in_doc == _hooks_in_code(), in_doc ^ _hooks_in_code()


def test_every_path_named_in_the_doc_exists() -> None:
    paths = set(re.findall(r"\b(roborl/[\w/]+(?:\.py)?)", DOC))
    assert paths, "the doc names no module"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing

"""Finished runs kept in the repository, so a benchmark longer than one machine's life adds up.

The pixel headline (`hil_manipulation.py`) is ten runs of about an hour each on two cores; the
machine that runs it may be a fresh one next time, with `--work` gone. What a finished run
contributes to the report is small (its `summary.json`, `metrics.jsonl`, `config.yaml` and the
reward's precision on the frames it fired on), so `save` copies that into the archive and
`restore` puts it back into a new `--work`, where `roborl compare` counts the run as finished
(it only runs seeds whose `summary.json` says so) and the report reads it as before.

Runs are pooled only if they trained on the same inputs: the archive's `prep.json` holds the
SHA-256 of each prepared file (the demos, the reward classifier's weights) and `restore`
refuses, naming the files, when this machine's preparation differs.

The preparation is deterministic on one machine, but across machines the classifier's weights
depend on which CPU kernels torch picks: on 2026-12-07 an AVX-512 machine trained different
bytes from the same demos than the AVX2 machine that made the archive, and the same AVX-512
machine reproduced the archive's classifier exactly with the AVX2 kernels forced.
`pin_cpu_kernels` forces them for everything the benchmark starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

RUN_FILES = ("summary.json", "metrics.jsonl", "config.yaml")
PREP = "prep.json"
EXTRA = "extra.json"  # per run: what the report computed from files not kept (fired frames)
# torch's own kernels (ATen), oneDNN's convolutions and MKL's BLAS, each held to AVX2.
AVX2_KERNELS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def pin_cpu_kernels(
    environ: MutableMapping[str, str] | None = None, cpuinfo: Path = Path("/proc/cpuinfo")
) -> dict[str, str]:
    """Hold torch to its AVX2 kernels on x86-64 machines that have them, so the preparation's
    bytes (and each run's numbers) do not depend on whether the machine also has AVX-512.
    Sets, in `environ` (this process's environment by default, which its children inherit),
    only what is not already set. Returns what is in force (empty where the machine is not
    x86-64 with AVX2)."""
    environ = os.environ if environ is None else environ
    try:
        flags = cpuinfo.read_text()
    except OSError:
        return {}
    if platform.machine() not in ("x86_64", "AMD64") or " avx2" not in flags:
        return {}
    return {k: environ.setdefault(k, v) for k, v in AVX2_KERNELS.items()}


def fingerprint(files: Mapping[str, Path]) -> dict[str, str]:
    """Name -> SHA-256 of each prepared file."""
    return {name: hashlib.sha256(Path(p).read_bytes()).hexdigest() for name, p in files.items()}


def finished(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status") == "finished"
    except (OSError, json.JSONDecodeError):
        return False


def save(
    runs: Path, archive: Path, prep: dict[str, str], extra: Callable[[Path], dict[str, Any]]
) -> list[Path]:
    """Copy every finished run under `runs` (its `RUN_FILES` and `extra(run_dir)`) to the same
    relative place under `archive`; returns the runs archived now."""
    check(archive, prep)
    saved = []
    for summary in sorted(runs.glob("**/summary.json")):
        run_dir = summary.parent
        dest = archive / run_dir.relative_to(runs)
        if not finished(run_dir) or finished(dest):
            continue
        if not (archive / PREP).exists():  # the inputs are pinned by the first run kept
            archive.mkdir(parents=True, exist_ok=True)
            (archive / PREP).write_text(json.dumps(prep, indent=1) + "\n")
        dest.mkdir(parents=True, exist_ok=True)
        (dest / EXTRA).write_text(json.dumps(extra(run_dir), indent=1) + "\n")
        for name in (*RUN_FILES[1:], RUN_FILES[0]):  # the summary last: it marks the copy done
            shutil.copyfile(run_dir / name, dest / name)
        saved.append(dest)
    return saved


def restore(archive: Path, runs: Path, prep: dict[str, str]) -> list[Path]:
    """Put the archived runs missing under `runs` back; returns the restored run dirs."""
    if not (archive / PREP).exists():
        return []
    check(archive, prep)
    restored = []
    for summary in sorted(archive.glob("**/summary.json")):
        src = summary.parent
        dest = runs / src.relative_to(archive)
        if finished(dest):
            continue
        if dest.exists():  # an interrupted leftover of the same seed: the archive's is whole
            shutil.rmtree(dest)
        shutil.copytree(src, dest)
        restored.append(dest)
    return restored


def extra_of(run_dir: Path) -> dict[str, Any] | None:
    """The `extra` a run was archived with (None for a run trained here)."""
    path = run_dir / EXTRA
    return json.loads(path.read_text()) if path.exists() else None


def check(archive: Path, prep: dict[str, str]) -> None:
    """Refuse to pool with archived runs that trained on other inputs."""
    path = archive / PREP
    if not path.exists():
        return
    theirs = json.loads(path.read_text())
    differ = sorted(k for k in {*theirs, *prep} if theirs.get(k) != prep.get(k))
    if differ:
        raise SystemExit(
            f"the archived runs in {archive} trained on other inputs than this --work's: "
            f"{', '.join(differ)} differ (SHA-256 in {path}). Pooling them would mix two "
            "setups: use the same preparation (on x86-64 with the AVX2 kernels, `pin_cpu_kernels`), "
            "or another --archive."
        )

"""benchmarks/run_archive.py: finished runs survive a fresh machine, unfinished ones are not
kept, and runs of another preparation are never pooled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import run_archive  # noqa: E402


def run(root: Path, rel: str, status: str, final: float) -> Path:
    d = root / rel
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text(json.dumps({"step": 100, "eval/success_rate": final}))
    (d / "config.yaml").write_text(f"seed: {rel[-1]}\n")
    (d / "summary.json").write_text(json.dumps({"status": status}))
    (d / "checkpoints").mkdir()
    (d / "checkpoints" / "last.pt").write_bytes(b"weights")
    return d


def test_finished_runs_come_back_on_a_fresh_work_dir_and_unfinished_ones_do_not(
    tmp_path: Path,
) -> None:
    work, archive, fresh = tmp_path / "work", tmp_path / "archive", tmp_path / "fresh"
    prep_file = tmp_path / "demos.npz"
    prep_file.write_bytes(b"demos")
    prep = run_archive.fingerprint({"demos": prep_file})
    run(work, "g/hil/seed0", "finished", 0.5)
    run(work, "g/hil/seed2", "running", 0.1)
    assert run_archive.save(work / "g/hil/seed2", archive, prep, dict) == []
    assert not archive.exists()  # nothing finished: nothing pins the inputs yet
    saved = run_archive.save(work, archive, prep, lambda d: {"seen": d.name})
    assert [d.relative_to(archive).as_posix() for d in saved] == ["g/hil/seed0"]
    assert not (archive / "g/hil/seed0/checkpoints").exists()  # only what the report reads
    assert run_archive.save(work, archive, prep, lambda d: {}) == []  # already there
    restored = run_archive.restore(archive, fresh, prep)
    assert [d.relative_to(fresh).as_posix() for d in restored] == ["g/hil/seed0"]
    back = fresh / "g/hil/seed0"
    assert run_archive.finished(back)
    assert (back / "metrics.jsonl").read_text() == (work / "g/hil/seed0/metrics.jsonl").read_text()
    assert run_archive.extra_of(back) == {"seen": "seed0"}
    # a leftover of the same seed (cut off on this machine) gives way to the finished copy
    run(work, "g/hil/seed4", "finished", 0.7)
    run_archive.save(work, archive, prep, lambda d: {})
    run(fresh, "g/hil/seed4", "running", 0.0)
    assert [d.name for d in run_archive.restore(archive, fresh, prep)] == ["seed4"]
    assert run_archive.finished(fresh / "g/hil/seed4")
    assert run_archive.restore(archive, fresh, prep) == []


def test_runs_of_another_preparation_are_refused_naming_what_differs(tmp_path: Path) -> None:
    work, archive = tmp_path / "work", tmp_path / "archive"
    run(work, "g/hil/seed0", "finished", 0.5)
    run_archive.save(work, archive, {"demos": "aa", "classifier": "bb"}, lambda d: {})
    with pytest.raises(SystemExit, match=r"classifier differ"):
        run_archive.restore(archive, tmp_path / "fresh", {"demos": "aa", "classifier": "cc"})
    with pytest.raises(SystemExit, match=r"classifier differ"):
        run_archive.save(work, archive, {"demos": "aa", "classifier": "cc"}, lambda d: {})
    assert run_archive.restore(tmp_path / "none", tmp_path / "fresh", {"demos": "aa"}) == []


def test_cpu_kernels_are_held_to_avx2_where_the_machine_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive's classifier was trained with AVX2 kernels; an AVX-512 machine trains other
    bytes unless torch is held to AVX2 (run_archive's docstring has the measurement)."""
    monkeypatch.setattr(run_archive.platform, "machine", lambda: "x86_64")
    no_avx2 = tmp_path / "old_cpuinfo"
    no_avx2.write_text("flags\t\t: fpu sse sse2 avx\n")
    environ: dict[str, str] = {}
    assert run_archive.pin_cpu_kernels(environ, no_avx2) == {} and environ == {}
    avx512 = tmp_path / "cpuinfo"
    avx512.write_text("flags\t\t: fpu sse sse2 avx avx2 avx512f avx512bw\n")
    environ = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}  # the user's own choice stays
    pinned = run_archive.pin_cpu_kernels(environ, avx512)
    assert pinned == {**run_archive.AVX2_KERNELS, "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
    assert environ == pinned


def test_torch_runs_its_avx2_kernels_under_the_pin() -> None:
    """The variables' names and values are the ones this torch reads: a child process started
    under the pin reports AVX2 as its CPU capability (on this x86-64 machine with AVX2)."""
    environ = {k: v for k, v in os.environ.items() if k not in run_archive.AVX2_KERNELS}
    assert run_archive.pin_cpu_kernels(environ), "the test machines are x86-64 with AVX2"
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=environ
    ).stdout.strip()
    assert out == "AVX2"

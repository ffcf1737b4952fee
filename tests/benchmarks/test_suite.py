"""benchmarks/suite.py's records (rows, ratios, machine, skipped peers) and the GPU section's
CPU dry run, which must work the first time it meets a GPU box (issue 23)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(relpath: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def suite() -> ModuleType:
    return load("benchmarks/suite.py", "roborl_bench_suite")


@pytest.fixture(scope="module")
def gpu() -> ModuleType:
    return load("benchmarks/gpu/sac_gpu.py", "roborl_bench_gpu")


def no_cuda_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OUT": str(tmp_path)}


def test_gpu_section_dry_run_without_cuda(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/gpu/sac_gpu.py")],
        env=no_cuda_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "no CUDA" in lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written


def test_gpu_runner_script_dry_run_without_cuda(tmp_path: Path) -> None:
    """run.sh must not install anything (or fail) on a machine without CUDA."""
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks/gpu/run.sh")],
        env={**no_cuda_env(tmp_path), "PYTHON": sys.executable, "WHEELS": str(tmp_path / "none")},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA" in proc.stdout and "pip" not in proc.stdout


def test_gpu_speed_windows_and_summary(gpu: ModuleType) -> None:
    marks = [(500, 0.0), (1000, 1.0), (1500, 3.0), (2000, 4.0)]
    assert gpu.window_sps(marks, 1000) == [250.0, 500.0]  # windows before 1000 are dropped
    summary = gpu.summarise(
        {"roborl_eager": {"train_sps_median": 200.0}, "sb3": {"train_sps_median": 50.0},
         "roborl_compile": None}
    )  # fmt: skip
    assert summary["roborl_eager"]["ratio_to_sb3_same_run"] == 4.0
    assert summary["sb3"]["ratio_to_sb3_same_run"] == 1.0
    low, high = summary["roborl_eager"]["ratio_to_leanrl_h100_low_high"]
    assert low == pytest.approx(200 / 383) and high == pytest.approx(200 / 469)
    assert "roborl_compile" not in summary


def test_rows_are_same_run_ratios_with_the_machine(suite: ModuleType) -> None:
    machine = suite.machine_record()
    assert machine["cores"] == os.cpu_count() and machine["cpu_model"]
    assert machine["sgemm_256_gflops_1thread"] > 0.1
    assert len(machine["loadavg_start"]) == 3
    row = suite.make_row("runner", "env steps/s", "roborl", 300.0, "bare", 400.0, machine, note="n")
    assert row["ratio"] == 0.75 and row["machine"] is machine and row["note"] == "n"
    slower = suite.make_row(
        "control", "p99 ms", "a", 2.0, "b", 1.0, machine, higher_is_better=False
    )
    report = {
        "command": "python benchmarks/suite.py --quick", "quick": True, "machine": machine,
        "loadavg_end": [99.0, 0.0, 0.0], "wall_s": 1.0,
        "rows": [row, slower, suite.skipped_row("iql", "CORL absent", machine)],
    }  # fmt: skip
    md = suite.markdown(report)
    assert "| runner | env steps/s | roborl | 300 | bare | 400 | **0.75** | n |" in md
    assert "p99 ms (lower is better)" in md and "**2.00**" in md
    assert "skipped | CORL absent" in md
    assert "shared with other jobs" in md  # a loaded machine is said so in the table
    assert machine["cpu_model"] in md


def test_absent_peer_gives_a_skipped_row(
    suite: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(suite.PEER_REPOS, "DSAC-v2", str(tmp_path / "no-such-repo"))
    monkeypatch.setitem(suite.PEER_REPOS, "CORL", str(tmp_path / "no-such-repo"))
    args = argparse.Namespace(quick=True, peers=tmp_path / "peers")
    s = suite.Suite(args)
    s.dsac_v2()
    s.iql()
    assert [r["group"] for r in s.rows] == ["dsac_v2", "iql"]
    for r in s.rows:
        assert "git clone" in r["skipped"] and "ratio" not in r
        assert r["machine"]["cores"] == os.cpu_count()
    assert not (tmp_path / "peers" / "DSAC-v2").exists()  # a failed clone leaves nothing


def test_present_peer_is_used_without_cloning(suite: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "CORL" / "algorithms").mkdir(parents=True)
    path, how = suite.peer_checkout("CORL", tmp_path)
    assert path == tmp_path / "CORL" and how == "present"


def test_peak_rss_is_the_child_own(suite: ModuleType) -> None:
    """A contender's peak RSS is its own, not the (torch-loaded) parent's pages at fork."""
    import torch  # noqa: F401  (the parent holds torch, hundreds of MB, as the suite does)

    code = (
        "import time; b = bytearray(60 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.3)"
    )
    out, wall, rss = suite.run_process([sys.executable, "-c", code + "; print('ok')"])
    assert out.strip() == "ok" and wall > 0.3
    assert 60 <= rss < 160

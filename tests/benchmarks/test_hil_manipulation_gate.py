"""benchmarks/hil_manipulation_gate.py (issue 48's state gate): the run's command carries the
state-only task and the levers, and the report's figures come from the runs' own metrics
(success at the end and at any step, IQM over seeds, intervention rate over time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import hil_manipulation_gate as gate  # noqa: E402


def fake_run(run_dir: Path, finals: tuple[float, float], rates: list[float]) -> Path:
    """A run directory as `roborl train` leaves it: evaluations at 1000 and 2000 steps (the
    last with `finals` = (at the end, at any step)) and the person's rate per 500 steps."""
    run_dir.mkdir(parents=True)
    rows = [{"step": 500 * (i + 1), "updates": 1, "time/sps": 10.0,
             "train/intervention_rate": r} for i, r in enumerate(rates)]  # fmt: skip
    rows += [
        {"step": 1000, "eval/success_rate": 0.1, "eval/success_any_rate": 0.2},
        {"step": 2000, "eval/success_rate": finals[0], "eval/success_any_rate": finals[1]},
    ]
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (run_dir / "summary.json").write_text(json.dumps({"status": "finished", "wall_time_s": 60}))
    return run_dir


def test_report_reads_both_successes_the_iqm_and_the_intervention_rate(tmp_path: Path) -> None:
    finals = [(0.9, 1.0), (0.95, 0.95), (1.0, 1.0), (0.85, 0.9), (0.2, 0.6)]
    dirs = [fake_run(tmp_path / f"seed{i}", f, [0.4, 0.3, 0.2, 0.1]) for i, f in enumerate(finals)]
    args = gate.argparse.Namespace(log_every=500, machine="test box", steps=2000, reps=50)
    result = gate.build_result(args, {"gate": dirs}, "gate", wall_s=1.0)
    s = result["summary"]["gate"]
    assert s["finals_end"] == [f[0] for f in finals]
    assert s["finals_any"] == [f[1] for f in finals]
    iqm = sorted(f[0] for f in finals)[1:4]  # the middle three of five seeds
    assert abs(result["headline"]["gate_iqm"] - sum(iqm) / 3) < 1e-9
    assert result["headline"]["gate_seeds"] == 5 and result["headline"]["gate_steps"] == 2000
    assert result["headline"]["gate_passed"]  # 0.90 over 5 seeds at 2,000 <= 12,000 steps
    assert s["intervention_by_window"] == [(2000, 0.25)]  # window = 4 x log_every
    md = gate.markdown(result)
    assert "test box" in md and "2000: 0.90/1.00" in md
    # --extend: a new arm beside the recorded ones, whose directories are gone
    for d in dirs:
        for f in d.iterdir():
            f.unlink()
    new = [fake_run(tmp_path / f"her{i}", (1.0, 1.0), [0.1]) for i in range(3)]
    more = gate.build_result(
        args, {"her": new}, "gate", 1.0, previous=json.loads(json.dumps(result))
    )
    assert list(more["summary"]) == ["gate", "her"]
    assert more["summary"]["gate"]["finals_end"] == s["finals_end"]
    assert more["headline"] == json.loads(json.dumps(result["headline"]))
    assert more["summary"]["her"]["finals_end"] == [1.0, 1.0, 1.0]
    assert more["earlier_commands"] == [result["command"]]


def test_print_command_carries_the_state_task_and_the_levers(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/hil_manipulation_gate.py"), "--print-command",
         "--work", str(tmp_path), "--taper-episodes", "10", "--workspace", "--n-step", "3"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for part in ("env.kwargs.cameras=[]", "env.kwargs.privileged_block=true", "algo=serl",
                 "algo.n_step=3", "taper_episodes:10", "env.kwargs.workspace=[", "demos=",
                 "algo.bc_weight=10.0", "algo.bc_q_filter=true", "algo.batch_size=256"):  # fmt: skip
        assert part in out, part


def test_the_gate_env_with_the_workspace_box_composes_and_builds() -> None:
    """`--workspace` gives `env.kwargs.workspace=[...]`, which Hydra refused as an unknown key
    until the env config listed it; the env built from the composed config clips to the box."""
    import argparse

    from roborl.core.compose import compose_dict
    from roborl.core.envs import make_env
    from roborl.core.plugins import get_host

    overrides = gate.env_args(argparse.Namespace(workspace=True))
    cfg = compose_dict(get_host(), overrides, "train")
    env = make_env(get_host().registry, cfg, seed=0)
    try:
        assert list(env.unwrapped.workspace) == gate._workspace()
    finally:
        env.close()

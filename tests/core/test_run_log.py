"""`roborl train` leaves a cli.log that carries the run's event lines (it used to be empty),
while the console stays quiet apart from warnings and the one-line summary."""

from __future__ import annotations

from typing import Any


def test_cli_log_carries_the_run_events(cli: Any) -> None:
    proc = cli("train", *cli.FAST)
    (run_dir,) = cli.run_dirs()
    text = (run_dir / "cli.log").read_text()
    assert "new run of algo=sac (loop offpolicy)" in text
    assert text.count("eval at step") == 2  # eval_every=300 of total_steps=600, once each
    assert text.count("checkpoints/last.pt at step 600") == 1  # not rewritten at the end
    assert "run finished: 600 env steps" in text
    assert "eval at step" not in proc.stdout + proc.stderr

"""One CLI: every subcommand that `roborl --help` lists takes --help, exits 0 and lists its keys."""

from __future__ import annotations

import re

import pytest

from roborl.core.cli import main

# A key each command's help must show (with its default where it has one); commands from
# other plugins must at least show one `key=default` line.
EXPECTED = {
    "train": "total_steps=16000",
    "eval": "episodes=10",
    "resume": "run_dir=",
    "plugins": "check=false",
    "dataset": "quality=medium-replay",
    "deploy": "on_watchdog=exit",
    "sim-robot": "on_terminate=reset",
    "tune": "num_samples=1",
    "report": "metric=null",
    "llm": "out=",
}
KEY_LINE = re.compile(r"^\s+[\w.-]+=\S*", re.MULTILINE)


def _listed_commands(capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    block = out.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    return dict(line.strip().split(None, 1) for line in block.splitlines() if line.strip())


def test_main_help_lists_commands_with_summaries(capsys: pytest.CaptureFixture[str]) -> None:
    commands = _listed_commands(capsys)
    assert set(EXPECTED) <= set(commands), commands
    for name, summary in commands.items():
        assert summary and "(plugin command)" not in summary, (name, summary)


def test_every_listed_command_has_help_with_keys(capsys: pytest.CaptureFixture[str]) -> None:
    for command in _listed_commands(capsys):
        code = main([command, "--help"])
        out = capsys.readouterr().out
        assert code == 0, (command, out)
        assert KEY_LINE.search(out), (command, out)
        if command in EXPECTED:
            assert EXPECTED[command] in out, (command, out)


def test_train_help_shows_meanings_and_the_chosen_algorithm(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["train", "algo=iql", "--help"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"total_steps=\d+\s+env steps", out), out
    assert re.search(r"total_updates=\d+\s+gradient updates", out), out
    assert "algo.expectile=" in out and "algo.actor_lr=" not in out.split("algo=iql keys")[0]

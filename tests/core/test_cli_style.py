"""One argument style for every `roborl` command: `key=value` keys that `--help` lists, an
unknown key refused in one line naming it, `-v`/`-q` everywhere, the older `--flag value`
spellings still accepted for one release with a warning naming the new one. In-process."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from roborl.core.cli import BUILTIN_COMMANDS, logs, main
from roborl.core.plugins import get_host

# Arguments that reach each command's key check with one unknown key, `bogus_key=1` (commands
# with subcommands, or whose required paths are checked first, get those too).
UNKNOWN_KEY: dict[str, list[str]] = {
    "train": [],
    "eval": [],
    "resume": [],
    "plugins": [],
    "report": [],
    "compare": ["algo=sac", "algo=random"],
    "tune": ["seed=0"],
    "export": [],
    "dataset": ["collect", "out=x.npz"],
    "demos": ["record", "out=x.npz"],
    "reward": ["train"],
    "llm": ["prepare-model"],
    "actor": [],
    "deploy": [],
    "sim-robot": [],
    "scripted-human": [],
}


def _options_classes() -> dict[str, list[type]]:
    """The dataclasses that hold each command's keys (their fields must be in its --help)."""
    from roborl.core.cli.eval import EvalOptions
    from roborl.core.cli.plugins import PluginsOptions
    from roborl.core.cli.resume import ResumeOptions
    from roborl.plugins.datasets.cli import ConvertOptions, collect_options, corrupt_options
    from roborl.plugins.demos.cli import RecordOptions
    from roborl.plugins.export.cli import ExportOptions
    from roborl.plugins.llm.model import PrepareModelOptions
    from roborl.plugins.ray.sweep import TuneOptions
    from roborl.plugins.report.cli import ReportOptions
    from roborl.plugins.report.compare import CompareOptions
    from roborl.plugins.rewards.cli import RelabelOptions
    from roborl.robots.nodes.deploy import DeployOptions
    from roborl.robots.nodes.scripted_human import ScriptedHumanOptions
    from roborl.robots.nodes.sim_robot import SimRobotOptions
    from roborl.robots.training.actor_learner.actor import ActorOptions, KeysOptions

    return {
        "eval": [EvalOptions],
        "resume": [ResumeOptions],
        "plugins": [PluginsOptions],
        "report": [ReportOptions],
        "compare": [CompareOptions],
        "tune": [TuneOptions],
        "export": [ExportOptions],
        "dataset": [collect_options(), ConvertOptions, corrupt_options()],
        "demos": [RecordOptions],
        "reward": [RelabelOptions],
        "llm": [PrepareModelOptions],
        "actor": [ActorOptions, KeysOptions],
        "deploy": [DeployOptions],
        "sim-robot": [SimRobotOptions],
        "scripted-human": [ScriptedHumanOptions],
    }


def test_every_registered_command_is_covered() -> None:
    registered = {*BUILTIN_COMMANDS, *get_host().registry.commands}
    assert registered == set(UNKNOWN_KEY), "add the new command to this file's tables"


@pytest.mark.parametrize("command", sorted(UNKNOWN_KEY))
def test_command_style(
    command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # --help exits 0 and names every key of the command's options (-v accepted)
    for flags in ([], ["-v"]):
        assert main([command, *flags, "--help"]) == 0, command
        out = capsys.readouterr().out
        for cls in _options_classes().get(command, []):
            for f in dataclasses.fields(cls):
                assert f"  {f.name}=" in out, (command, f.name, out)
        assert "-v/--verbose" in out and "-q/--quiet" in out, (command, out)
    if command == "train":
        assert "total_steps=" in out and "algo.actor_lr=" in out
    # an unknown key: a one-line error naming it, no traceback (-q accepted)
    code = main(["-q", command, *UNKNOWN_KEY[command], "bogus_key=1"])
    err = capsys.readouterr().err
    assert code != 0, (command, err)
    assert len(err.strip().splitlines()) == 1 and "bogus_key" in err, (command, err)
    assert err.startswith(f"roborl {command}"), (command, err)


def test_missing_value_names_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "runs", "out="]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("roborl report: error: 'out=' has no value; give out=VALUE"), err
    assert "\n" not in err


def test_verbosity_sets_the_level_for_the_command_only(
    monkeypatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[int] = []

    def probe(args: list[str]) -> int:
        log = logging.getLogger("roborl.probe")
        seen.append(log.getEffectiveLevel())
        log.debug("debug line")
        log.info("info line")
        log.warning("warning line")
        return 0

    monkeypatch.setitem(BUILTIN_COMMANDS, "probe", probe)
    before = logging.getLogger("roborl").level
    for args, shown, hidden in (
        (["probe"], ["info line", "warning line"], ["debug line"]),
        (["-v", "probe"], ["debug line", "info line"], []),
        (["probe", "--quiet"], ["warning line"], ["info line", "debug line"]),
    ):
        assert main(args) == 0
        err = capsys.readouterr().err
        assert all(s in err for s in shown) and not any(h in err for h in hidden), (args, err)
    assert seen == [logging.INFO, logging.DEBUG, logging.WARNING]
    assert logging.getLogger("roborl").level == before  # nothing left behind
    assert main(["probe", "-v", "-q"]) == 2
    assert "not both" in capsys.readouterr().err


def test_ros_arguments_keep_their_flags() -> None:
    level, rest = logs.split_verbosity(["rate_hz=5", "-q", "--ros-args", "-v", "-p", "x:=1"])
    assert level == logging.WARNING and rest == ["rate_hz=5", "--ros-args", "-v", "-p", "x:=1"]


def test_train_verbosity_is_said_to_hydra() -> None:
    for level, expected in (
        (logging.DEBUG, ["hydra.job_logging.handlers.console.level=DEBUG"]),
        (logging.INFO, []),
        (logging.WARNING, ["hydra.hydra_logging.root.level=WARNING", "progress=false"]),
    ):
        with logs.configured(level):
            assert logs.hydra_overrides(["seed=1"]) == expected
    with logs.configured(logging.WARNING):
        assert "progress=false" not in logs.hydra_overrides(["progress=true"])


def test_deprecated_flags_still_work_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    from roborl.plugins.ray.sweep import parse_args as tune_args
    from roborl.plugins.report.cli import parse_args as report_args

    # tests/packaging/test_wheel.py's spelling
    opts, overrides = tune_args(["--out", "tune", "--cpus-per-trial", "1", "seed=0", "x=1"])
    assert (opts.out, opts.cpus_per_trial, overrides) == ("tune", 1.0, ["seed=0", "x=1"])
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "roborl tune: warning: '--out tune' is deprecated and goes in the next release; "
        "write 'out=tune'.",
        "roborl tune: warning: '--cpus-per-trial 1' is deprecated and goes in the next "
        "release; write 'cpus_per_trial=1'.",
    ]
    opts, runs, labels = report_args(["runs", "--no-plots", "--label", "a=r/a*", "--reps=50"])
    assert (opts.plots, opts.reps, runs, labels) == (False, 50, ["runs"], {"a": "r/a*"})
    assert "write 'label.a=r/a*'" in capsys.readouterr().err
    _, _, labels = report_args(["label.fast='runs/a*'", "label.slow=runs/b*"])
    assert labels == {"fast": "runs/a*", "slow": "runs/b*"}
    assert main(["plugins", "--check"]) == 0
    assert "write 'check=true'" in capsys.readouterr().err


def test_reward_options_keep_train_classifier_defaults() -> None:
    import inspect

    from roborl.plugins.rewards.cli import TrainOptions
    from roborl.plugins.rewards.train import train_classifier

    params = inspect.signature(train_classifier).parameters
    for f in dataclasses.fields(TrainOptions):
        if params[f.name].default is not inspect.Parameter.empty:
            assert f.default == params[f.name].default, f.name

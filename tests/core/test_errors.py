"""Every bad input gets a one-paragraph error naming the bad value, never a traceback."""

from __future__ import annotations

import pytest

from roborl.core.config import RunConfig, build_config
from roborl.core.errors import ConfigError
from roborl.core.runner import resolve_algorithm, split_config


def _assert_clean_error(proc, *needles: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


def test_unknown_algo_lists_available(cli) -> None:
    proc = cli("train", "algo=sacc", check=False)
    _assert_clean_error(proc, "sacc", "sac")


def test_unknown_env_id_lists_short_names(cli) -> None:
    proc = cli("train", *cli.FAST, "env.id=HalfCheeta-v5", check=False)
    _assert_clean_error(proc, "HalfCheeta-v5", "HalfCheetah-v5", "halfcheetah")


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("algo.gamma=1.5", ("algo.gamma=1.5", "out of range")),
        ("algo.batch_size=big", ("algo.batch_size", "integer")),
        ("algo.taux=0.1", ("algo.taux", "tau")),
        ("total_steps=-5", ("total_steps=-5", "out of range")),
    ],
)
def test_bad_values_name_key_and_accepted_values(
    cli, override: str, needles: tuple[str, ...]
) -> None:
    proc = cli("train", *cli.FAST, override, check=False)
    _assert_clean_error(proc, *needles)


def test_validation_in_process() -> None:
    from roborl.core.plugins import get_host

    host = get_host()
    with pytest.raises(ConfigError, match=r"algo\.tau=2\.0 is out of range"):
        resolve_algorithm(host, {"name": "sac", "tau": 2.0})
    with pytest.raises(ConfigError, match="expected true or false"):
        resolve_algorithm(host, {"name": "sac", "autotune_alpha": "yes"})
    with pytest.raises(ConfigError, match="vector_mode='fast' is not accepted"):
        build_config(RunConfig, {"vector_mode": "fast"})
    with pytest.raises(ConfigError, match="unknown top-level config key"):
        split_config({"totl_steps": 5})


def test_bad_checkpoint_is_reported_not_traced(cli, tmp_path) -> None:
    bad = tmp_path / "garbage.pt"
    bad.write_bytes(b"this is not a checkpoint")
    proc = cli("eval", f"checkpoint={bad}", check=False)
    _assert_clean_error(proc, "garbage.pt", "could not be read")
    proc = cli("eval", f"checkpoint={tmp_path / 'missing.pt'}", check=False)
    _assert_clean_error(proc, "missing.pt", "does not exist")


def test_resume_of_a_non_run_directory(cli, tmp_path) -> None:
    proc = cli("resume", f"run_dir={tmp_path}", check=False)
    _assert_clean_error(proc, "config.yaml")


def test_unknown_command_and_argument(cli) -> None:
    _assert_clean_error(cli("trian", check=False), "trian", "train")
    _assert_clean_error(cli("eval", "checkpiont=x", check=False), "checkpiont", "checkpoint")


@pytest.mark.parametrize("override", ["algo.lr=abc", "+algo.lr=abc"])
def test_unknown_key_same_clear_error_with_or_without_plus(cli, override: str) -> None:
    """Without `+`, Hydra used to print its raw "Key 'lr' is not in struct ... use +algo.lr"."""
    proc = cli("train", *cli.FAST, override, check=False)
    _assert_clean_error(proc, "unknown config key 'algo.lr'", "actor_lr")
    assert "not in struct" not in proc.stderr and "+algo.lr" not in proc.stderr, proc.stderr


def test_a_key_missing_from_a_partial_section_points_to_plus(cli) -> None:
    """`scripted_person={window_s:0.4} scripted_person.recover=1` listed window_s as the only
    accepted key; recover is a real option that the dict simply did not set."""
    person = ["env=fetch_push_pixels", "scripted_person={window_s:0.4}"]
    proc = cli("train", *person, "scripted_person.recover=1.0", check=False)
    _assert_clean_error(proc, "'scripted_person.recover'", "write +scripted_person.recover=1.0")
    proc = cli("train", *person, "scripted_person.windw_s=1.0", check=False)
    _assert_clean_error(proc, "Did you mean 'window_s'")
    assert "write +" not in proc.stderr  # a near miss is a typo, not a key to add


def test_bad_override_syntax_and_unknown_group_option(cli) -> None:
    _assert_clean_error(cli("train", "env=hopperr", check=False), "hopperr", "hopper")
    _assert_clean_error(cli("eval", "checkpoint=[x", check=False), "cannot parse", "[x")


def test_corrupt_last_checkpoint_falls_back_to_the_one_it_replaced(cli, tmp_path) -> None:
    """Two checkpoints: last.pt and previous.pt (the one last.pt replaced). A corrupt last.pt
    makes eval use previous.pt and say so; with no previous.pt the error says there is none
    (the old message promised a previous one that did not exist)."""
    run = tmp_path / "run"
    cli("train", *cli.FAST, f"hydra.run.dir={run}")
    ckpts = run / "checkpoints"
    assert {p.name for p in ckpts.iterdir()} == {"last.pt", "previous.pt"}
    (ckpts / ".last.pt.stale.tmp").write_bytes(b"left by a killed writer")
    cli("resume", f"run_dir={run}", "total_steps=900")
    assert not list(ckpts.glob(".*.tmp")), "writing a checkpoint removes stale temp files"
    (ckpts / "last.pt").write_bytes(b"torn")
    proc = cli("eval", f"checkpoint={run}", "episodes=1")
    assert "previous.pt" in proc.stderr and "could not be read" in proc.stderr, proc.stderr
    (ckpts / "previous.pt").unlink()
    proc = cli("eval", f"checkpoint={run}", "episodes=1", check=False)
    _assert_clean_error(proc, "last.pt", "could not be read", "no earlier checkpoint")
    assert "should still be intact" not in proc.stderr

"""One source of defaults: algorithm YAML presets hold only what differs from the dataclass."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from cli_server import run_roborl

from roborl.core.compose import compose, config_roots, field_defaults
from roborl.core.plugins import get_host


def _algo_yamls() -> list[tuple[str, Path]]:
    """(option name, file) for every algo YAML of roborl and every installed plugin."""
    found = []
    for root in config_roots(get_host()):
        base = root / "algo"
        if base.is_dir():
            for path in sorted(base.rglob("*.yaml")):
                found.append((str(path.relative_to(base))[: -len(".yaml")], path))
    return found


def test_there_are_presets_to_check() -> None:
    names = {name for name, _ in _algo_yamls()}
    assert {"wsrl_rlpd", "sb3/sac"} <= names, names


@pytest.mark.parametrize(("option", "path"), _algo_yamls(), ids=lambda v: str(v))
def test_algo_yaml_repeats_no_dataclass_default(option: str, path: Path) -> None:
    host = get_host()
    composed = compose(host, [f"algo={option}"], "test")
    name = composed.algo.name
    cls = host.registry.get("algorithms", name)
    defaults = field_defaults(cls.Config)
    # The composed preset still has every key of the dataclass (a file named like the
    # algorithm must include /algo_defaults/NAME, or keys would go missing).
    assert set(defaults) <= set(composed.algo), sorted(set(defaults) - set(composed.algo))
    raw = yaml.safe_load(path.read_text()) or {}
    repeated = [
        key
        for key, value in raw.items()
        if key not in ("defaults", "name") and key in defaults and value == defaults[key]
    ]
    assert not repeated, f"{path} repeats the {cls.Config.__name__} defaults of {repeated}"
    unknown = [k for k in raw if k not in ("defaults", "name") and k not in defaults]
    assert not unknown, f"{path} sets keys {cls.Config.__name__} does not have: {unknown}"


def test_every_algorithm_composes_with_its_full_defaults() -> None:
    host = get_host()
    for name, cls in host.registry.algorithms.items():
        algo = compose(host, [f"algo={name}"], "test").algo
        assert algo.name == name
        assert set(field_defaults(cls.Config)) <= set(algo), name


def _roborl(*args: str) -> subprocess.CompletedProcess[str]:
    return run_roborl(args, timeout=300)


@pytest.mark.parametrize(
    "args",
    [
        ("train", "--cfg", "job", "algo=sac", "env=hopper"),
        ("train", "algo=sac", "env=hopper", "--cfg", "job"),
        ("train", "algo=sac", "seed=4", "env=hopper", "--cfg", "job"),
    ],
)
def test_cfg_job_shows_defaulted_keys_in_either_order(args: tuple[str, ...]) -> None:
    proc = _roborl(*args)
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["algo"]["name"] == "sac"
    assert cfg["algo"]["actor_lr"] == 3.0e-4  # only in SACConfig (tuned/ has no sac_hopper)
    assert "total_updates" in cfg and "learning_starts" in cfg  # RunConfig defaults
    if "seed=4" in args:
        assert cfg["seed"] == 4


def test_cfg_job_after_override_of_offline_algo() -> None:
    proc = _roborl("train", "algo=iql", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr
    assert "unrecognized arguments" not in proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["algo"]["name"] == "iql" and "expectile" in cfg["algo"]

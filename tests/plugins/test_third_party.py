"""Third-party plugins: installed from examples/, broken ones isolated, disabling by name."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_server import run_roborl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "roborl-example-plugin"


def roborl(*args: str, cwd: Path, env: dict | None = None, check: bool = True):
    """`python -m roborl.core.cli ARGS` from the worker's fork server (tests/cli_server.py):
    plugins are discovered in the command, after the fork, so a PYTHONPATH site or a
    ROBORL_DISABLE_PLUGINS given here is seen as in a fresh interpreter."""
    proc = run_roborl(args, cwd=cwd, env={**os.environ, **(env or {})}, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def example_installed() -> None:
    """pip-install the example plugin from its folder, as a user would (`make install` does it
    too; skipped when it is already installed)."""
    try:
        importlib.metadata.distribution("roborl-example-plugin")
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(EXAMPLE)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip


def test_example_plugin_runs_like_a_builtin(example_installed, tmp_path: Path) -> None:
    listing = json.loads(roborl("plugins", "json=true", cwd=tmp_path).stdout)
    example = next(p for p in listing if p["name"] == "example")
    assert example["distribution"] == "roborl-example-plugin" and example["error"] is None
    assert example["provides"] == {
        "algorithms": ["example_td3"],
        "envs": ["ExamplePointReach-v0"],
        "collectors": ["example_episodes"],
        "loggers": ["example_csv"],
    }

    roborl(
        "train", "algo=example_td3", "env=example_point_reach", "total_steps=1500",
        "learning_starts=300", "eval_every=500", "checkpoint_every=500", "algo.hidden_sizes=[64,64]",
        "progress=false", cwd=tmp_path,
    )  # fmt: skip
    (summary_path,) = tmp_path.rglob("summary.json")
    run_dir = summary_path.parent
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/return_mean"] for r in records if "eval/return_mean" in r]
    assert evals[-1] > evals[0], "TD3 from the plugin should improve on the point-reach task"
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["algo"] == "example_td3"
    out = roborl("eval", f"checkpoint={run_dir}", "episodes=2", cwd=tmp_path).stdout
    assert "over 2 episodes" in out


def _fake_distribution(site: Path, dist: str, module: str, source: str) -> None:
    """A minimal installed distribution (dist-info + entry point) on a PYTHONPATH entry."""
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[roborl.plugins]\n{module} = {module}\n")


@pytest.fixture
def broken_site(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    _fake_distribution(
        site, "raises-on-import", "raises_on_import", "raise ImportError('needs libfoo')\n"
    )
    _fake_distribution(
        site, "bad-signature", "bad_signature",
        "from roborl.core.hookspecs import hookimpl\n\n"
        "@hookimpl\ndef roborl_algorithms(registry):\n    return {}\n",
    )  # fmt: skip
    _fake_distribution(
        site, "unknown-hook", "unknown_hook",
        "from roborl.core.hookspecs import hookimpl\n\n"
        "@hookimpl\ndef roborl_algoritms():\n    return {}\n",
    )  # fmt: skip
    return {"PYTHONPATH": str(site)}


def test_broken_plugins_are_reported_and_others_load(broken_site, tmp_path: Path) -> None:
    check = roborl("plugins", "check=true", cwd=tmp_path, env=broken_site, check=False)
    out = check.stdout
    assert "raises_on_import" in out and "raises-on-import" in out and "needs libfoo" in out
    assert "bad_signature" in out and "registry" in out
    assert re.search(r"algorithms: (\S+, )*sac(,|\n)", out), "built-ins still load"
    assert check.returncode == 1
    for name in ("raises_on_import", "bad_signature", "roborl_algoritms"):
        assert name in check.stderr, (name, check.stderr)
    # A run still works, with a one-line warning per broken plugin.
    run = roborl(
        "train", "total_steps=200", "learning_starts=100", "eval_every=200", "eval_episodes=1",
        "algo.batch_size=32", "algo.hidden_sizes=[16,16]", "progress=false",
        cwd=tmp_path, env=broken_site,
    )  # fmt: skip
    assert "warning: plugin 'raises_on_import'" in run.stderr


def test_disable_by_name_in_config_and_environment(broken_site, tmp_path: Path) -> None:
    env = {**broken_site, "ROBORL_DISABLE_PLUGINS": "raises_on_import,bad_signature,unknown_hook"}
    # Judged on these plugins only, so a peer built-in's state cannot fail this test.
    check = roborl("plugins", "check=true", "json=true", cwd=tmp_path, env=env, check=False)
    listed = {p["name"]: p for p in json.loads(check.stdout.split("\nall plugins valid")[0])}
    for name in ("raises_on_import", "bad_signature", "unknown_hook"):
        assert listed[name]["disabled"] is True and listed[name]["error"] is None
        assert name not in check.stderr, check.stderr
    proc = roborl("train", "plugins.disable=[sac]", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "unknown algorithm 'sac'" in proc.stderr
    listing = json.loads(
        roborl("plugins", "json=true", cwd=tmp_path, env={"ROBORL_DISABLE_PLUGINS": "sac"}).stdout
    )
    assert next(p for p in listing if p["name"] == "sac")["disabled"] is True


def test_two_plugins_claiming_one_name_is_a_clear_error(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _fake_distribution(
        site, "my-sac", "my_sac",
        "from roborl.core.hookspecs import hookimpl\n"
        "from roborl.core.interfaces import Algorithm\n\n"
        "class MySAC(Algorithm):\n    name = 'sac'\n\n"
        "@hookimpl\ndef roborl_algorithms():\n    return {'sac': MySAC}\n",
    )  # fmt: skip
    env = {"PYTHONPATH": str(site)}
    check = roborl("plugins", "check=true", cwd=tmp_path, env=env, check=False)
    assert check.returncode == 1
    assert "two plugins register the algorithm 'sac': 'my_sac' and 'sac'" in check.stderr or (
        "two plugins register the algorithm 'sac': 'sac' and 'my_sac'" in check.stderr
    ), check.stderr
    run = roborl("train", "total_steps=100", "progress=false", cwd=tmp_path, env=env, check=False)
    assert run.returncode != 0 and "'my_sac'" in run.stderr and "Traceback" not in run.stderr
    # Disabling one of them by name resolves the clash.
    ok = {**env, "ROBORL_DISABLE_PLUGINS": "my_sac"}
    fixed = roborl("plugins", "check=true", cwd=tmp_path, env=ok, check=False)
    assert "two plugins register" not in fixed.stderr and "[disabled]" in fixed.stdout


def test_entry_point_logger_and_env_work_by_name_with_no_yaml(example_installed, tmp_path) -> None:
    """`logger=example_csv` alone and beside jsonl, and `env=<registered id>`: the example
    plugin ships no YAML for either, so the names come from its hooks and the options from
    the logger's Config dataclass (`logger.example_csv.filename`)."""
    short = ["total_steps=300", "learning_starts=100", "eval_every=300", "eval_episodes=1"]
    short += ["algo.batch_size=32", "algo.hidden_sizes=[16,16]", "progress=false"]
    for i, selection in enumerate(["logger=example_csv", "logger=[jsonl,example_csv]"]):
        out = tmp_path / f"run{i}"
        roborl(
            "train", selection, "env=ExamplePointReach-v0", f"hydra.run.dir={out}",
            f"logger.example_csv.filename=m{i}.csv", *short, cwd=tmp_path,
        )  # fmt: skip
        rows = (out / f"m{i}.csv").read_text().splitlines()
        jsonl = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        evals = [r for r in jsonl if "eval/return_mean" in r]
        assert rows[0] == "step,key,value"
        assert f"{evals[-1]['step']},eval/return_mean,{evals[-1]['eval/return_mean']}" in rows
        assert json.loads((out / "summary.json").read_text())["env"] == "ExamplePointReach-v0"
    typo = roborl("train", "logger=example_cvs", *short, cwd=tmp_path, check=False)
    assert typo.returncode != 0 and "did you mean 'example_csv'" in typo.stderr.lower()


def test_robot_and_reward_registered_by_hook_compose_from_their_config(tmp_path: Path) -> None:
    """`robot=NAME` and `reward=NAME` for names only a hook registers: the composed config
    holds the Config dataclass's defaults, and overrides reach them."""
    site = tmp_path / "site"
    site.mkdir()
    _fake_distribution(
        site, "acme-robot", "acme_robot",
        "from dataclasses import dataclass\n"
        "from roborl.core.hookspecs import hookimpl\n\n"
        "@dataclass\nclass BotConfig:\n    port: str = '/dev/ttyACM0'\n    rate_hz: float = 30.0\n\n"
        "def make_bot(cfg):\n    raise RuntimeError('no hardware here')\n"
        "make_bot.Config = BotConfig\n\n"
        "@dataclass\nclass ShapingConfig:\n    scale: float = 2.0\n\n"
        "def make_shaping(**kw):\n    raise RuntimeError('not built in this test')\n"
        "make_shaping.Config = ShapingConfig\n\n"
        "@hookimpl\ndef roborl_robots():\n    return {'acme_bot': make_bot}\n\n"
        "@hookimpl\ndef roborl_rewards():\n    return {'acme_shaping': make_shaping}\n",
    )  # fmt: skip
    env = {"PYTHONPATH": str(site)}
    proc = roborl(
        "train", "robot=acme_bot", "robot.rate_hz=50", "reward=acme_shaping", "--cfg", "job",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    import yaml

    cfg = yaml.safe_load(proc.stdout)
    assert cfg["robot"] == {"name": "acme_bot", "port": "/dev/ttyACM0", "rate_hz": 50}
    assert cfg["reward"] == {"name": "acme_shaping", "scale": 2.0}

"""Top-level config sections: core names only its own; a plugin declares its own
(`roborl_config_sections`), and a section no plugin declares is refused as before."""

from __future__ import annotations

import json

import pytest

from roborl.core.algorithms import CORE_SECTIONS, config_sections, split_config
from roborl.core.compose import compose_dict
from roborl.core.errors import ConfigError
from roborl.core.hookspecs import hookimpl
from roborl.core.plugins import PluginHost


class DeclaresSection:
    @hookimpl
    def roborl_config_sections(self):
        return {"mine": "the example's own settings"}


class BadSections:
    @hookimpl
    def roborl_config_sections(self):
        return {"odd": 3, "algo": "core's already"}


@pytest.fixture(scope="module")
def builtins() -> PluginHost:
    host = PluginHost()
    host.load_entry_points()
    return host


def test_builtin_plugins_declare_the_sections_core_used_to_name(builtins) -> None:
    owners = {name: builtins.registry.owners[("config_sections", name)] for name in
              builtins.registry.config_sections}  # fmt: skip
    assert owners == {"ray": "ray", "actor_learner": "robots", "scripted_person": "hil"}
    assert not {"ray", "actor_learner", "scripted_person"} & CORE_SECTIONS
    assert all(isinstance(v, str) and v for v in builtins.registry.config_sections.values())
    assert not builtins.check()


def test_a_declared_section_passes_through_and_an_undeclared_one_is_refused() -> None:
    host = PluginHost()
    host.load_entry_points()
    cfg = compose_dict(host, ["+mine.rate=3", "total_steps=10"], "train")
    with pytest.raises(ConfigError, match=r"unknown top-level config key\(s\): mine\. "):
        split_config(cfg, host)

    host.add_plugin(DeclaresSection(), "declares_mine")
    assert "mine" in config_sections(host)
    run, out = split_config(cfg, host)
    assert out["mine"] == {"rate": 3} and run.total_steps == 10
    # The built-in sections, and a typo, are as before.
    assert out["ray"]["num_workers"] == 2 and out["actor_learner"]["port"] == 5555
    with pytest.raises(ConfigError, match=r"unknown top-level config key.*totl_steps"):
        split_config({**cfg, "totl_steps": 5}, host)


def test_without_a_host_the_process_wide_one_is_asked() -> None:
    with pytest.raises(ConfigError, match="unknown top-level config key"):
        split_config({"totl_steps": 5})
    run, out = split_config({"ray": {"num_workers": 1}, "seed": 4})
    assert run.seed == 4 and out["ray"] == {"num_workers": 1}


def test_bad_declarations_are_reported_by_name() -> None:
    host = PluginHost()
    host.add_plugin(BadSections(), "bad")
    problems = host.check()
    assert any("bad: config section 'odd'" in p and "not a string" in p for p in problems)
    assert any("bad: config section 'algo'" in p and "core config section" in p for p in problems)


def test_disabling_ray_leaves_its_shipped_section_inert(monkeypatch) -> None:
    monkeypatch.setenv("ROBORL_DISABLE_PLUGINS", "ray")
    host = PluginHost()
    host.load_entry_points()
    assert host.infos["ray"].disabled and "ray" not in host.registry.config_sections
    cfg = compose_dict(host, ["total_steps=10"], "train")
    run, out = split_config(cfg, host)  # roborl's config.yaml still ships ray's defaults
    assert run.total_steps == 10 and "ray" in out
    with pytest.raises(ConfigError, match="unknown top-level config key"):
        split_config({**cfg, "mine": {}}, host)


def test_train_runs_with_the_ray_plugin_disabled(cli) -> None:
    cli("train", *cli.FAST, "total_steps=300", "checkpoint_every=300", "plugins.disable=[ray]")
    (run_dir,) = cli.run_dirs()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 300

"""The plugin host isolates broken plugins and refuses ambiguous names."""

from __future__ import annotations

import pytest

from roborl.core.errors import PluginError
from roborl.core.hookspecs import hookimpl
from roborl.core.plugins import PluginHost


class Raising:
    @hookimpl
    def roborl_algorithms(self):
        raise RuntimeError("boom in provider")


class BadSignature:
    @hookimpl
    def roborl_envs(self, unexpected_argument):
        return {}


class ProvidesEnv:
    @hookimpl
    def roborl_envs(self):
        return {"MyEnv-v0": lambda: None}


def test_raising_and_invalid_plugins_are_isolated() -> None:
    host = PluginHost()
    host.load_entry_points()
    raising = host.add_plugin(Raising(), "raising")
    bad = host.add_plugin(BadSignature(), "bad_sig")
    good = host.add_plugin(ProvidesEnv(), "good")
    assert "boom in provider" in raising.error
    assert "unexpected_argument" in bad.error
    assert good.ok and host.registry.envs["MyEnv-v0"] is not None
    assert "sac" in host.registry.algorithms, "built-ins still load"
    problems = host.check()
    assert any("raising" in p for p in problems) and any("bad_sig" in p for p in problems)


def test_duplicate_names_name_both_plugins() -> None:
    host = PluginHost()
    host.add_plugin(ProvidesEnv(), "first")
    host.add_plugin(ProvidesEnv(), "second")  # both load; the clash is reported on use
    assert any("first" in p and "second" in p for p in host.check())
    with pytest.raises(PluginError, match=r"'first' and 'second'"):
        host.registry.get("envs", "MyEnv-v0")


def test_disable_by_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROBORL_DISABLE_PLUGINS", "sac")
    host = PluginHost()
    host.load_entry_points()
    assert host.infos["sac"].disabled
    assert "sac" not in host.registry.algorithms

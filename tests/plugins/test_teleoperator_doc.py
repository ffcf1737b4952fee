"""docs/hil.md, "Add a teleoperator", tried from the docs alone: its `device_teleop.py` is
taken from the page verbatim and put in front of an env with `Teleoperated`; the person's
mapped command is executed and flagged while the dead-man button is held, the policy's
otherwise. Also: the scripted experts are found by name."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from roborl.core.errors import ConfigError
from roborl.hil.experts import expert_for, expert_names
from roborl.hil.intervention import InputMap
from roborl.hil.teleoperator import Teleoperated, Teleoperator

DOCS = Path(__file__).resolve().parents[2] / "docs" / "hil.md"


def docs_example() -> dict:
    text = DOCS.read_text()
    found = re.search(
        r"<!-- add-a-teleoperator: device_teleop.py -->\n```python\n(.*?)```", text, re.S
    )
    assert found, "docs/hil.md lost its 'Add a teleoperator' example"
    namespace: dict = {"__name__": "device_teleop"}
    exec(compile(found.group(1), "device_teleop.py", "exec"), namespace)
    return namespace


def test_the_docs_teleoperator_drives_while_its_button_is_held() -> None:
    held = {"axes": [0.5, 0.0], "buttons": [1]}
    mapping = InputMap.parse({"axes": [0], "button": 0, "scale": 2.0}, 1, "keyboard")
    device = docs_example()["PolledDevice"](lambda: (held["axes"], held["buttons"]), mapping)
    assert isinstance(device, Teleoperator)
    env = Teleoperated(gym.make("Pendulum-v1"), device)
    env.reset(seed=0)
    policy = np.array([-0.3], np.float32)
    *_, info = env.step(policy)
    assert info["intervened"] and np.allclose(info["executed_action"], [1.0])
    held["buttons"] = [0]
    *_, info = env.step(policy)
    assert not info["intervened"] and np.allclose(info["executed_action"], policy)
    env.close()


def test_scripted_experts_are_found_by_name() -> None:
    assert {"tabletop", "fetch_push"} <= set(expert_names())
    fetch = expert_for("fetch_push")
    names = fetch.joints  # type: ignore[attr-defined]
    fetch.set_state(names, [0.0, 0.0, 0.4, 0.1, 0.0, 0.4, 0.3, 0.0, 0.4])
    assert fetch.n_action == 4 and fetch.error() == pytest.approx(0.2)
    assert fetch.action().shape == (4,)
    with pytest.raises(ConfigError, match="accepted are"):
        expert_for("no_such_expert")

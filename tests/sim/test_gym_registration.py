"""roborl's own envs fit Gymnasium (issue 50): each is registered as ``roborl/<Name>-v0``
(roborl/sim/registration.py), builds what its Hydra preset builds, passes Gymnasium's
``check_env``, and ``gymnasium.make`` finds it the way docs/envs.md tells users to.

What counts as "an env roborl ships" is read from the code, not typed here: the env names that
roborl's plugin modules register (every ``def roborl_envs`` under roborl/), less those that only
call ``gymnasium.make`` on another package's id (Gymnasium's MuJoCo tasks, Fetch, dm_control);
each such env has presets (configs/env/*.yaml anywhere under roborl/), and each preset is one
named task, so one registered id (its CamelCase name).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import yaml
from gymnasium.envs.registration import load_env_creator
from gymnasium.utils.env_checker import check_env

import roborl
from roborl.core.envs import env_factory
from roborl.core.plugins import Registry
from roborl.sim import benchmarks, gym_mujoco, registration
from roborl.sim.benchmarks.fetch_pixels import FetchPixelEnv

PACKAGE = Path(roborl.__file__).parent
DOCS = PACKAGE.parent / "docs" / "envs.md"

# Factories that only call `gymnasium.make` on another package's id: not roborl's envs.
OTHER_PACKAGES = {gym_mujoco._make, benchmarks.make_fetch, benchmarks.make_dmc}

# check_env's one heuristic warning that is not an API violation: unbounded observation
# entries (velocities, positions relative to a goal, as in Gymnasium's own MuJoCo envs). A
# finite bound there would be a claim the env cannot keep.
UNBOUNDED_OBS = r".*A Box observation space (minimum|maximum) value is -?infinity"


def _plugin_modules() -> list[str]:
    """Every module under roborl/ that registers envs with roborl's plugin host."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if re.search(r"@hookimpl\s+def roborl_envs\(", path.read_text(encoding="utf-8")):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _roborl_env_factories() -> dict[str, Any]:
    factories: dict[str, Any] = {}
    for module in _plugin_modules():
        factories.update(importlib.import_module(module).roborl_envs())
    return factories


FACTORIES = _roborl_env_factories()
ROBORL_ENVS = sorted(
    name
    for name, factory in FACTORIES.items()
    if not (isinstance(factory, partial) and factory.func in OTHER_PACKAGES)
)
PRESETS = {
    path.stem: yaml.safe_load(path.read_text(encoding="utf-8"))
    for path in sorted(PACKAGE.rglob("configs/env/*.yaml"))
}
ROBORL_PRESETS = sorted(stem for stem, cfg in PRESETS.items() if cfg["id"] in ROBORL_ENVS)
REGISTERED = sorted(k for k in gym.envs.registry if k.startswith(f"{registration.NAMESPACE}/"))


def _squashed(name: str) -> str:
    """``roborl/TabletopReachPixels-v0`` and ``tabletop_reach_pixels`` -> ``tabletopreachpixels``"""
    name = name.rpartition("/")[2]
    return re.sub(r"-v\d+$", "", name).replace("_", "").lower()


def _id_of(preset: str) -> str:
    matches = [env_id for env_id in REGISTERED if _squashed(env_id) == _squashed(preset)]
    assert len(matches) == 1, f"preset {preset}: registered ids {matches}"
    return matches[0]


def test_every_env_roborl_ships_has_a_registered_id_per_preset() -> None:
    assert "RoborlTabletop-v0" in ROBORL_ENVS and "halfcheetah" not in ROBORL_ENVS  # the split
    no_preset = [n for n in ROBORL_ENVS if not any(c["id"] == n for c in PRESETS.values())]
    assert not no_preset, f"{no_preset}: add a configs/env preset and its roborl/ id"
    assert registration.env_ids() == REGISTERED
    assert sorted(map(_squashed, REGISTERED)) == sorted(map(_squashed, ROBORL_PRESETS))


def test_velocity_table_is_the_safety_plugin_s() -> None:
    from roborl.sim.safety.velocity import SAFE_VELOCITY_IDS

    assert registration.VELOCITY_TASKS == SAFE_VELOCITY_IDS


def _limit(env: gym.Env) -> int | None:
    """The episode limit an env enforces: its outermost TimeLimit's, else the env's own."""
    inner: Any = env
    while isinstance(inner, gym.Wrapper):
        if isinstance(inner, gym.wrappers.TimeLimit):
            return inner._max_episode_steps
        inner = inner.env
    return getattr(env.unwrapped, "max_episode_steps", None)


def _settings(env: gym.Env) -> dict[str, Any]:
    """The raw env's public plain-data attributes: its constructor arguments, as these classes
    keep them (``tasks``, ``reward_type``, ``end_on_success``, ``n_hazards``, ...)."""
    plain = (bool, int, float, str, list, tuple, type(None))
    return {
        k: v
        for k, v in vars(env.unwrapped).items()
        if not k.startswith("_") and isinstance(v, plain)
    }


def _rollout(env: gym.Env, steps: int = 3) -> list[Any]:
    """reset(seed=0) and a few seeded random steps: observations, rewards, ends and infos."""
    out = [env.reset(seed=0)]
    env.action_space.seed(0)
    for _ in range(steps):
        out.append(env.step(env.action_space.sample()))
    return out


@pytest.mark.parametrize("preset", ROBORL_PRESETS)
def test_id_builds_what_its_preset_builds(preset: str) -> None:
    """Same class, settings, spaces, episode limit and first steps (observations, rewards,
    ends, infos) as ``env=<preset>`` in roborl."""
    registry = Registry()
    for name, factory in FACTORIES.items():
        registry.add("envs", name, factory, "roborl")
    ours = env_factory(registry, PRESETS[preset])()
    theirs = gym.make(_id_of(preset))
    try:
        assert type(theirs.unwrapped) is type(ours.unwrapped)
        assert _settings(theirs) == _settings(ours)
        assert theirs.observation_space == ours.observation_space
        assert theirs.action_space == ours.action_space
        assert theirs.spec.max_episode_steps == _limit(ours)
        own = getattr(theirs.unwrapped, "max_episode_steps", None)
        assert own in (None, theirs.spec.max_episode_steps)  # one limit, not two
        for a, b in zip(_rollout(theirs), _rollout(ours), strict=True):
            assert gym.utils.env_checker.data_equivalence(a, b, exact=True)
        if getattr(ours.unwrapped, "reports_cost", False):
            assert "cost" in theirs.step(theirs.action_space.sample())[4]
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("env_id", REGISTERED)
def test_check_env(env_id: str) -> None:
    """Gymnasium's checker on the raw env (``env.unwrapped``, as its docs ask), then a few
    steps through ``gymnasium.make``'s wrappers (its passive checker, TimeLimit, roborl's cost
    wrapper): every warning is an error except `UNBOUNDED_OBS`."""
    creator = load_env_creator(gym.spec(env_id).entry_point)  # outside: import warnings
    if creator is FetchPixelEnv:  # Gymnasium-Robotics: glfw warns on import without a display
        benchmarks._import_gymnasium_robotics()
    # Camera envs at 16 px: the checks are about the API, not the picture (faster renders).
    small = {"image_size": 16} if "image_size" in inspect.signature(creator).parameters else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=UNBOUNDED_OBS)
        env = gym.make(env_id, **small)
        # The velocity tasks' raw env is Gymnasium's own MuJoCo robot, whose declared "human"
        # mode opens a window (GLFW aborts the process without a display); roborl's wrapper
        # passes rendering through untouched, so their render check is Gymnasium's business.
        gymnasium_robot = "human" in env.metadata["render_modes"]
        check_env(env.unwrapped, skip_render_check=gymnasium_robot)
        obs, _ = env.reset(seed=1)
        for _ in range(2):
            obs, *_ = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        env.close()
        if env.spec.additional_wrappers:  # the velocity tasks' cost wrapper: rebuilt from the spec
            rebuilt = gym.make(env.spec)
            assert str(rebuilt) == str(env)
            rebuilt.close()


def _doc_examples() -> list[str]:
    section = DOCS.read_text(encoding="utf-8").split("## With `gymnasium.make`")[1]
    section = section.split("\n## ")[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_docs_name_every_id() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert [i for i in REGISTERED if f"`{i}`" not in text] == []


def test_docs_examples_run_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """The examples in docs/envs.md, as written, in a Python that has not imported roborl, on
    a headless machine without MUJOCO_GL set (roborl picks EGL)."""
    examples = _doc_examples()
    assert len(examples) == 2 and "roborl:roborl/" in examples[0]
    # Gymnasium 1.x loads no plugins: without roborl imported, its ids are unknown.
    probe = (
        "import gymnasium as gym\nassert not any(k.startswith('roborl/') for k in gym.registry)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "DISPLAY")}
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    procs = [
        subprocess.Popen([sys.executable, "-c", probe + code], cwd=tmp_path, env=env, **pipes)
        for code in examples
    ]
    for code, proc in zip(examples, procs, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "Traceback" not in err, f"{code}\n{err[-3000:]}"
    assert out.strip() in ("0.0", "1.0")  # the second example prints the step's cost

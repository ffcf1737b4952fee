"""`sim-robot cameras=` is checked before anything is published: a MuJoCo env's camera names
and offscreen buffer, or an env's own view (`render`) at the size it renders; every mistake
is a ConfigError that names the entry and what would be accepted."""

from __future__ import annotations

import pytest

from roborl.core.errors import ConfigError
from roborl.robots.nodes.sim_cameras import camera_specs
from roborl.sim.benchmarks.fetch_pixels import FetchPixelEnv
from roborl.sim.tabletop.env import TabletopEnv


@pytest.fixture(scope="module")
def fetch() -> FetchPixelEnv:
    env = FetchPixelEnv("push", image_size=24)
    env.reset(seed=0)
    yield env
    env.close()


@pytest.fixture(scope="module")
def tabletop() -> TabletopEnv:
    env = TabletopEnv()
    env.reset(seed=0)
    yield env
    env.close()


def test_an_env_that_describes_itself_publishes_its_render_view_at_its_size(fetch) -> None:
    (cam,) = camera_specs(["render"], fetch)
    assert (cam.name, cam.topic, cam.width, cam.height) == (
        "render", "/camera/render/image_raw", 24, 24,
    )  # fmt: skip
    (cam,) = camera_specs([{"name": "render", "width": 24, "rate_hz": 10}], fetch)
    assert cam.rate_hz == 10.0


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ("top", r"cameras\[0\]\.name='top'.*'render'"),
        ({"name": "render", "width": 64}, r"64x24 differs from the 24x24"),
        ({"name": "render", "zoom": 2}, r"unknown keys \['zoom'\]"),
        ({"name": "render", "rate_hz": 0}, r"rate_hz=0 must be > 0"),
        (3, r"give a camera name or a mapping"),
    ],
)
def test_bad_render_entries_name_the_mistake(fetch, entry, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        camera_specs([entry], fetch)


def test_mujoco_cameras_are_checked_against_the_model(tabletop) -> None:
    (cam,) = camera_specs(["top"], tabletop)
    assert (cam.name, cam.width, cam.height) == ("top", 64, 64)
    with pytest.raises(ConfigError, match=r"'render' is not a camera of the model: it has"):
        camera_specs(["render"], tabletop)
    with pytest.raises(ConfigError, match="offscreen buffer"):
        camera_specs([{"name": "top", "width": 100000}], tabletop)
    with pytest.raises(ConfigError, match="two cameras publish on the same topic"):
        camera_specs(["top", {"name": "top"}], tabletop)

"""sim-robot's cameras: `cameras=` checked against the MuJoCo model, and each camera rendered
offscreen at its rate and published as sensor_msgs/Image (rgb8) with the JointState's stamp.
An env that describes itself as a robot (`robot_joints()`) has one camera, `render`: its own
`render()` frame, whose size is the env's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from roborl.core.errors import ConfigError

SIM_CAMERA_KEYS = ("name", "topic", "width", "height", "rate_hz", "frame_id")
RENDER = "render"
"""The camera name of an env's own `render()` view."""


@dataclass
class SimCamera:
    """A MuJoCo camera that sim-robot renders and publishes."""

    name: str
    topic: str
    width: int
    height: int
    rate_hz: float | None
    frame_id: str


def camera_specs(value: list[Any], base: Any) -> list[SimCamera]:
    """`cameras=` checked against the env: a MuJoCo model's camera names and offscreen buffer
    size, or for an env with `robot_joints()` its `render` view at the size it renders."""
    described = callable(getattr(base, "robot_joints", None))
    size_of = _render_view(base) if described else _model_camera(base.model)
    out = []
    for i, item in enumerate(value):
        at = f"cameras[{i}]"
        item = {"name": item} if isinstance(item, str) else item
        if not isinstance(item, dict):
            raise ConfigError(f"{at}={item!r}: give a camera name or a mapping.")
        bad = [k for k in item if k not in SIM_CAMERA_KEYS]
        if bad:
            raise ConfigError(f"{at} has unknown keys {bad}: accepted are {SIM_CAMERA_KEYS}.")
        name = str(item.get("name") or "")
        w, h = size_of(at, name, item)
        rate = item.get("rate_hz")
        if rate is not None and not float(rate) > 0:
            raise ConfigError(f"{at}.rate_hz={rate!r} must be > 0 (null: every step).")
        out.append(
            SimCamera(
                name=name,
                topic=str(item.get("topic") or f"/camera/{name}/image_raw"),
                width=w,
                height=h,
                rate_hz=float(rate) if rate is not None else None,
                frame_id=str(item.get("frame_id") or f"{name}_camera"),
            )
        )
    if len({c.topic for c in out}) != len(out):
        raise ConfigError(f"cameras={value!r}: two cameras publish on the same topic.")
    return out


def _model_camera(model: Any) -> Callable[[str, str, dict], tuple[int, int]]:
    """(at, name, item) -> (width, height) for a camera of the MuJoCo model (64x64 unless
    given), within its offscreen buffer."""
    import mujoco

    names = [model.camera(i).name for i in range(model.ncam)]
    max_w, max_h = int(model.vis.global_.offwidth), int(model.vis.global_.offheight)

    def size_of(at: str, name: str, item: dict) -> tuple[int, int]:
        if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name) < 0:
            raise ConfigError(f"{at}.name={name!r} is not a camera of the model: it has {names}.")
        w, h = int(item.get("width") or 64), int(item.get("height") or 64)
        if not (0 < w <= max_w and 0 < h <= max_h):
            raise ConfigError(
                f"{at}: {w}x{h} does not fit the model's offscreen buffer {max_w}x{max_h} "
                "(<visual><global offwidth offheight> in its XML)."
            )
        return w, h

    return size_of


def _render_view(base: Any) -> Callable[[str, str, dict], tuple[int, int]]:
    """(at, name, item) -> (width, height) for the env's own view: the camera `render`, at the
    size the env renders."""
    h, w = base.render().shape[:2]

    def size_of(at: str, name: str, item: dict) -> tuple[int, int]:
        if name != RENDER:
            raise ConfigError(
                f"{at}.name={name!r}: {type(base).__name__} publishes its own view as the "
                f"camera {RENDER!r} (its render()), not MuJoCo cameras."
            )
        size = (int(item.get("width") or w), int(item.get("height") or h))
        if size != (w, h):
            raise ConfigError(
                f"{at}: {size[0]}x{size[1]} differs from the {w}x{h} frames the env renders "
                "(set the env's image size, e.g. env.kwargs.image_size, instead)."
            )
        return w, h

    return size_of


class CameraPublisher:
    """Renders each camera at its rate with MuJoCo's offscreen renderer and publishes it.

    Rendering happens on sim-robot's loop thread (an OpenGL context belongs to one thread)."""

    def __init__(self, cams: list[SimCamera], base: Any, transport: Any, qos: Any) -> None:
        import mujoco

        from roborl.robots.transport import msgs

        self.base = base
        self.items = []
        for cam in cams:
            if cam.name == RENDER and callable(getattr(base, "robot_joints", None)):
                renderer = None  # the env renders its own view
                pub = transport.publisher(cam.topic, msgs.Image, qos)
                self.items.append([cam, renderer, pub, -float("inf")])
                continue
            try:
                renderer = mujoco.Renderer(base.model, cam.height, cam.width)
            except Exception as exc:  # no EGL/OSMesa: say what to install, not a GL trace
                raise ConfigError(
                    f"cannot render camera {cam.name!r} offscreen ({exc}); MuJoCo needs "
                    "MUJOCO_GL=egl (libEGL) or MUJOCO_GL=osmesa (libosmesa6)."
                ) from None
            pub = transport.publisher(cam.topic, msgs.Image, qos)
            self.items.append([cam, renderer, pub, -float("inf")])
        self.published = 0

    def publish(self, stamp: Any) -> None:
        from roborl.robots.env.cameras import encode_image

        now = time.monotonic()
        for item in self.items:
            cam, renderer, pub, next_t = item
            if cam.rate_hz is not None and now < next_t:
                continue
            item[3] = max(next_t + 1.0 / cam.rate_hz, now) if cam.rate_hz else now
            if renderer is None:
                frame = self.base.render()
            else:
                renderer.update_scene(self.base.data, camera=cam.name)
                frame = renderer.render()
            pub(encode_image(frame, stamp, cam.frame_id))
            self.published += 1

    def close(self) -> None:
        for _, renderer, _, _ in self.items:
            if renderer is not None:
                renderer.close()

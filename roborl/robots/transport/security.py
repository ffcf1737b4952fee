"""DDS security (SROS2) for roborl's nodes: enforced where the DDS has it, refused clearly
where it does not.

ROS 2 itself is unauthenticated: anyone on the network can publish commands or call
`~/estop`. SROS2 fixes that with DDS-Security (authentication PKI-DH, access control,
encryption), configured by a keystore and an enclave. `robot.security.require=true` makes a
node start only inside its enclave with `ROS_SECURITY_STRATEGY=Enforce`; when the installed DDS
has no DDS-Security plugins it refuses to start and says why. The PyPI Fast DDS wheel
(`ros-fastdds`, what `pip install roborl[ros2]` brings) is built without them (its library has no
`DDS:Auth:PKI-DH` builtin); a distribution's ROS 2, or Fast DDS built with `-DSECURITY=ON`, has
them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from roborl.core.errors import ConfigError

if TYPE_CHECKING:
    from roborl.robots.config import SecurityConfig

AUTH_PLUGIN = b"DDS:Auth:PKI-DH"


def fastdds_library() -> Path | None:
    """The Fast DDS shared library rclpy's default RMW loads (None when not found)."""
    import importlib.util

    for module in ("rclpy", "rmw_fastrtps_cpp"):
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin:
            continue
        for parent in Path(spec.origin).resolve().parents:
            for lib in sorted(parent.glob("lib/libfastdds.so*")) + sorted(
                parent.glob("libfastdds.so*")
            ):
                return lib
    return None


def dds_has_security(library: Path | None = None) -> bool:
    """Whether the Fast DDS library carries the DDS-Security builtins (PKI-DH auth)."""
    library = library or fastdds_library()
    if library is None or not library.exists():
        return False
    with open(library, "rb") as fh:
        return AUTH_PLUGIN in fh.read()


def apply_security(security: SecurityConfig, transport: str) -> list[str]:
    """Check `robot.security` before a node starts; return the extra ROS arguments (the
    enclave) and set the SROS2 environment. Refuses (ConfigError) when security is required
    and cannot be had."""
    if not security.require:
        return []
    keystore, enclave = security.keystore, security.enclave
    if transport == "dds":
        raise ConfigError(
            "robot.security.require=true, but transport=dds (roborl's raw Cyclone DDS) has no "
            "SROS2 support: use transport=rclpy on a ROS 2 install with DDS-Security."
        )
    library = fastdds_library()
    if not dds_has_security(library):
        raise ConfigError(
            "robot.security.require=true, but the installed DDS has no DDS-Security plugins: "
            f"{library or 'no Fast DDS library found'} lacks the {AUTH_PLUGIN.decode()} "
            "builtin (the PyPI ros-fastdds wheel is built without security). An "
            "unauthenticated node could command this robot or clear its e-stop, so roborl "
            "will not start. Use a distribution's ROS 2 (or Fast DDS built with "
            "-DSECURITY=ON) and a keystore made with `ros2 security create_keystore`, or set "
            "robot.security.require=false knowingly."
        )
    if not keystore or not Path(keystore).is_dir():
        raise ConfigError(
            f"robot.security.keystore={keystore!r} is not a directory: create one with "
            "`ros2 security create_keystore DIR` and `ros2 security create_enclave DIR ENCLAVE`."
        )
    os.environ.update(
        ROS_SECURITY_KEYSTORE=str(keystore),
        ROS_SECURITY_ENABLE="true",
        ROS_SECURITY_STRATEGY="Enforce",
    )
    return ["--enclave", str(enclave)] if enclave else []

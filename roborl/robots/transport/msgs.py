"""ROS 2 message types as plain DDS types, so the bridge speaks ROS 2 without a ROS 2 install.

ROS 2's rmw layers map `pkg/msg/Type` to the DDS type `pkg::msg::dds_::Type_` (final structs,
plain XCDR1), so Cyclone DDS IdlStructs with those names and field orders interoperate with
rclpy/rclcpp nodes on any RMW. Python 3.10-compatible on purpose (rclpy on Humble).
"""

from dataclasses import dataclass, field
from typing import Any

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import byte, float32, float64, int32, sequence, uint8, uint32


@dataclass
class Time(IdlStruct, typename="builtin_interfaces::msg::dds_::Time_"):
    sec: int32 = 0
    nanosec: uint32 = 0


@dataclass
class Duration(IdlStruct, typename="builtin_interfaces::msg::dds_::Duration_"):
    sec: int32 = 0
    nanosec: uint32 = 0


@dataclass
class Header(IdlStruct, typename="std_msgs::msg::dds_::Header_"):
    stamp: Time = field(default_factory=Time)
    frame_id: str = ""


@dataclass
class Bool(IdlStruct, typename="std_msgs::msg::dds_::Bool_"):
    data: bool = False


@dataclass
class MultiArrayDimension(IdlStruct, typename="std_msgs::msg::dds_::MultiArrayDimension_"):
    label: str = ""
    size: uint32 = 0
    stride: uint32 = 0


@dataclass
class MultiArrayLayout(IdlStruct, typename="std_msgs::msg::dds_::MultiArrayLayout_"):
    dim: sequence[MultiArrayDimension] = field(default_factory=list)
    data_offset: uint32 = 0


@dataclass
class Float64MultiArray(IdlStruct, typename="std_msgs::msg::dds_::Float64MultiArray_"):
    layout: MultiArrayLayout = field(default_factory=MultiArrayLayout)
    data: sequence[float64] = field(default_factory=list)


@dataclass
class JointState(IdlStruct, typename="sensor_msgs::msg::dds_::JointState_"):
    header: Header = field(default_factory=Header)
    name: sequence[str] = field(default_factory=list)
    position: sequence[float64] = field(default_factory=list)
    velocity: sequence[float64] = field(default_factory=list)
    effort: sequence[float64] = field(default_factory=list)


@dataclass
class JointTrajectoryPoint(IdlStruct, typename="trajectory_msgs::msg::dds_::JointTrajectoryPoint_"):
    positions: sequence[float64] = field(default_factory=list)
    velocities: sequence[float64] = field(default_factory=list)
    accelerations: sequence[float64] = field(default_factory=list)
    effort: sequence[float64] = field(default_factory=list)
    time_from_start: Duration = field(default_factory=Duration)


@dataclass
class JointTrajectory(IdlStruct, typename="trajectory_msgs::msg::dds_::JointTrajectory_"):
    header: Header = field(default_factory=Header)
    joint_names: sequence[str] = field(default_factory=list)
    points: sequence[JointTrajectoryPoint] = field(default_factory=list)


@dataclass
class Vector3(IdlStruct, typename="geometry_msgs::msg::dds_::Vector3_"):
    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0


@dataclass
class Twist(IdlStruct, typename="geometry_msgs::msg::dds_::Twist_"):
    linear: Vector3 = field(default_factory=Vector3)
    angular: Vector3 = field(default_factory=Vector3)


#: ROS 2 type name ("pkg/msg/Type") -> DDS type, used by transports and tests.
TYPES = {
    "builtin_interfaces/msg/Time": Time,
    "builtin_interfaces/msg/Duration": Duration,
    "std_msgs/msg/Header": Header,
    "std_msgs/msg/Bool": Bool,
    "std_msgs/msg/Float64MultiArray": Float64MultiArray,
    "sensor_msgs/msg/JointState": JointState,
    "trajectory_msgs/msg/JointTrajectory": JointTrajectory,
    "geometry_msgs/msg/Twist": Twist,
}


def stamp_now(t: float) -> Time:
    sec = int(t)
    return Time(sec=sec, nanosec=int((t - sec) * 1e9))


# -- appended for the ROS-native nodes (issue 19): /clock and /diagnostics -------------------


@dataclass
class Clock(IdlStruct, typename="rosgraph_msgs::msg::dds_::Clock_"):
    clock: Time = field(default_factory=Time)


@dataclass
class KeyValue(IdlStruct, typename="diagnostic_msgs::msg::dds_::KeyValue_"):
    key: str = ""
    value: str = ""


@dataclass
class DiagnosticStatus(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticStatus_"):
    level: byte = 0  # OK = 0, WARN = 1, ERROR = 2, STALE = 3
    name: str = ""
    message: str = ""
    hardware_id: str = ""
    values: sequence[KeyValue] = field(default_factory=list)


@dataclass
class DiagnosticArray(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticArray_"):
    header: Header = field(default_factory=Header)
    status: sequence[DiagnosticStatus] = field(default_factory=list)


TYPES.update(
    {
        "rosgraph_msgs/msg/Clock": Clock,
        "diagnostic_msgs/msg/KeyValue": KeyValue,
        "diagnostic_msgs/msg/DiagnosticStatus": DiagnosticStatus,
        "diagnostic_msgs/msg/DiagnosticArray": DiagnosticArray,
    }
)


# -- appended for cameras (issue 20): sensor_msgs/Image ----------------------------------------


@dataclass
class Image(IdlStruct, typename="sensor_msgs::msg::dds_::Image_"):
    """sensor_msgs/msg/Image in ROS 2's IDL order. `data` is declared `sequence<uint8>` (the
    type information peers see) but carried as `bytes` (see `_octets_as_bytes`)."""

    header: Header = field(default_factory=Header)
    height: uint32 = 0
    width: uint32 = 0
    encoding: str = ""
    is_bigendian: uint8 = 0
    step: uint32 = 0  # bytes per row
    data: sequence[uint8] = field(default_factory=bytes)


class _OctetsMachine:
    """CDR of a `sequence<uint8>` (uint32 length, then the bytes), read and written in one
    copy. Cyclone's Python binding packs `sequence[uint8]` element by element into a list of
    ints (about 0.24 s per 640x480 RGB frame); its fast `bytes` field has no XTypes type
    object, so a topic of it cannot be created. Same bytes on the wire either way."""

    alignment = 4

    def __init__(self, fallback: Any) -> None:
        self.fallback = fallback  # key scanning and defaults stay Cyclone's own

    def serialize(self, buffer: Any, value: Any, *args: Any, **kwargs: Any) -> None:
        raw = value if isinstance(value, bytes) else bytes(bytearray(value))
        buffer.align(4)
        buffer.write("I", 4, len(raw))
        buffer.write_bytes(raw)

    def deserialize(self, buffer: Any, *args: Any, **kwargs: Any) -> bytes:
        buffer.align(4)
        return buffer.read_bytes(buffer.read("I", 4))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fallback, name)


def _octets_as_bytes(cls: type, member: str) -> bool:
    """Swap the machine of `cls.member` (a `sequence[uint8]`) for `_OctetsMachine`; False
    (and the slow, equally correct element-wise machine) if the binding's internals differ."""
    try:
        idl = cls.__idl__  # type: ignore[attr-defined]
        idl.populate()
        machines = [idl.v1_machine, idl.v2_machine]
        if not all(member in getattr(m, "members_machines", {}) for m in machines):
            return False
        for m in machines:
            m.members_machines[member] = _OctetsMachine(m.members_machines[member])
    except Exception:  # pragma: no cover - another cyclonedds version
        return False
    return True


FAST_IMAGE_DATA = _octets_as_bytes(Image, "data")
TYPES["sensor_msgs/msg/Image"] = Image


# -- appended for interventions (issue 21): sensor_msgs/Joy -------------------------------------


@dataclass
class Joy(IdlStruct, typename="sensor_msgs::msg::dds_::Joy_"):
    """sensor_msgs/msg/Joy: a gamepad's (or teleop device's) axes and buttons."""

    header: Header = field(default_factory=Header)
    axes: sequence[float32] = field(default_factory=list)
    buttons: sequence[int32] = field(default_factory=list)


TYPES["sensor_msgs/msg/Joy"] = Joy


# -- appended for stamped velocity commands (issue 50): geometry_msgs/TwistStamped ---------------


@dataclass
class TwistStamped(IdlStruct, typename="geometry_msgs::msg::dds_::TwistStamped_"):
    """geometry_msgs/msg/TwistStamped: what diff_drive_controller (Jazzy and later), Nav2 and
    MoveIt Servo take on `cmd_vel`."""

    header: Header = field(default_factory=Header)
    twist: Twist = field(default_factory=Twist)


TYPES["geometry_msgs/msg/TwistStamped"] = TwistStamped

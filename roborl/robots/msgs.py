"""ROS 2 message types as plain DDS types, so the bridge speaks ROS 2 without a ROS 2 install.

ROS 2's rmw layers map `pkg/msg/Type` to the DDS type `pkg::msg::dds_::Type_` (final structs,
plain XCDR1), so Cyclone DDS IdlStructs with those names and field orders interoperate with
rclpy/rclcpp nodes on any RMW. Python 3.10-compatible on purpose (rclpy on Humble).
"""

from dataclasses import dataclass, field

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import byte, float64, int32, sequence, uint32


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

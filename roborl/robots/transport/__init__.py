"""The ROS 2 transports: how roborl's robot code reaches the robot's topics and services.

`protocol.Transport` is the surface the driver and the nodes use; `rclpy_node.RclpyTransport`
(a real ROS 2 node) and `dds.DDSTransport` (ROS 2's wire protocol over plain Cyclone DDS)
both satisfy it. `common` picks one (`make_transport`) and holds the settings both read
(domain id, QoS, `--ros-args`); `msgs` are the message types; `security` is SROS2.
"""

"""The robot as a `gymnasium.Env`: driver, safety layer, cameras, interventions and episodes.

`robot_env.RobotEnv` is what `roborl train robot=...`, the actor and `deploy` step; it owns a
`roborl.robots.robot.Robot` (the ROS 2 one: `driver.Ros2Driver`, JointState in, commands out)
and a `safety.SafetyLayer` that every command passes through.
"""

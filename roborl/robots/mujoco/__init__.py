"""`robot=mujoco`: a MuJoCo task as an in-process robot, without ROS or DDS.

`robot.MujocoRobot` implements `roborl.robots.robot.Robot` on the physics `roborl sim-robot`
serves (a registered env such as `inverted_pendulum`, or a plain MJCF model such as the
built-in position arm), stepped on its own thread at the simulation rate, so `RobotEnv`, the
safety layer, `roborl deploy` and `roborl train robot=mujoco` run as on a real robot: a way to
rehearse a robot run without ROS. `sim` holds the two physics backends, `kind` opens the robot.
"""

"""Real robots through ROS 2: driver, transports (rclpy or plain DDS), safety layer, nodes.

Registers the `ros2` and `mujoco` robots (`robot=ros2`, `robot=mujoco`: `robot.RobotKind`),
the `sim-robot`, `deploy` and `scripted-human` commands, and the `robot/` Hydra config group.
Heavy imports (cyclonedds, mujoco) happen only when used.
"""

from __future__ import annotations

from typing import Any

from roborl.core.hookspecs import hookimpl


@hookimpl
def roborl_robots() -> dict[str, Any]:
    """`ros2`: a ros2_control robot over ROS 2 (`env.driver.Ros2Driver`); `mujoco`: a MuJoCo
    task as an in-process robot without ROS (`mujoco.robot.MujocoRobot`). Both open a
    `robot.Robot` behind the same `RobotEnv` and safety layer; their typed config is the
    only home of the defaults (the YAML presets list what differs)."""
    from roborl.robots.env.ros2_kind import open_driver, ros2_lifecycle
    from roborl.robots.mujoco.kind import open_mujoco
    from roborl.robots.mujoco.options import MujocoRobotConfig
    from roborl.robots.robot import RobotKind

    return {
        "ros2": RobotKind(open_driver, lifecycle=ros2_lifecycle),
        "mujoco": RobotKind(open_mujoco, MujocoRobotConfig),
    }


@hookimpl
def roborl_cli_commands() -> dict[str, Any]:
    from roborl.robots.nodes.deploy import deploy_cmd
    from roborl.robots.nodes.scripted_human import scripted_human_cmd
    from roborl.robots.nodes.sim_robot import sim_robot_cmd
    from roborl.robots.training.actor_learner.actor import actor_cmd

    return {
        "sim-robot": sim_robot_cmd,
        "deploy": deploy_cmd,
        "scripted-human": scripted_human_cmd,
        "actor": actor_cmd,
    }


@hookimpl
def roborl_config_dirs() -> list[str]:
    return ["pkg://roborl.robots.configs"]


def _robot_collector(ctx: Any) -> Any:
    from roborl.robots.training.collector import RobotCollector

    return RobotCollector(ctx)


def _actor_learner_collector(ctx: Any) -> Any:
    from roborl.robots.training.actor_learner.learner import ActorLearnerCollector

    return ActorLearnerCollector(ctx)


@hookimpl
def roborl_collectors() -> dict[str, Any]:
    """`robot`: whole episodes, updates while the robot holds (the default with robot=);
    `actor_learner`: an actor process at the control rate, this process learns."""
    return {"robot": _robot_collector, "actor_learner": _actor_learner_collector}


@hookimpl
def roborl_config_sections() -> dict[str, str]:
    return {
        "actor_learner": "the actor-learner split for collector=actor_learner (ports, keys, "
        "timeouts)"
    }

"""Real robots through ROS 2: driver, transports (rclpy or plain DDS), safety layer, nodes.

Registers the `ros2` robot (`robot=ros2`), the `sim-robot`, `deploy` and `scripted-human`
commands, and the `robot/` Hydra config group. Heavy imports (cyclonedds, mujoco) happen only
when used.
"""

from __future__ import annotations

from typing import Any

from roborl.core.hookspecs import hookimpl


def _make_ros2(robot_cfg: Any) -> Any:
    """The robot env for `train robot=ros2`: a `roborl_driver` node whose ROS parameters
    (defaults: the robot config) decide the config the safety layer uses."""
    from roborl.robots.env.driver import Ros2Driver
    from roborl.robots.env.robot_env import make_robot_env

    driver, cfg = Ros2Driver.open(robot_cfg)
    try:
        env = make_robot_env(cfg, driver=driver)
    except BaseException:
        driver.close()
        raise
    driver.serve_safety(env.safety, clear=env.reset_estop, activate=env.activate)
    return env


def _robot_config() -> type:
    from roborl.robots.config import RobotConfig

    return RobotConfig


@hookimpl
def roborl_robots() -> dict[str, Any]:
    # The typed config is the only home of the robot's defaults (robot/ros2.yaml lists only
    # what differs for the sim-robot pendulum).
    _make_ros2.Config = _robot_config()  # type: ignore[attr-defined]
    return {"ros2": _make_ros2}


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

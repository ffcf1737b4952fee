"""`deploy` (node `roborl_deploy`, a managed lifecycle node over rclpy) loads a checkpoint's
policy and runs it at a fixed rate through the safety layer, commanding only while active;
by default it configures and activates itself at start (`autostart=true`, for the command
line). It prints JSON events (start, lifecycle, watchdog_stop, estop, estop_cleared, done),
offers `~/estop` (std_srvs/SetBool), publishes /diagnostics, and writes control-loop latency
statistics to `stats=PATH`.

This module is the command (options, composition, checks); `deploy_node.DeployNode` is the node
and its lifecycle, `deploy_loop.ControlLoop` its fixed-rate loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roborl.core.compose import register_command_config
from roborl.core.config import rng
from roborl.core.errors import ConfigError
from roborl.robots.nodes.common import (
    DEPLOY_CONFIG,
    ROS_ARGS_HELP,
    command_help,
    compose_options,
    guard_command,
)
from roborl.robots.nodes.deploy_node import DeployNode


@dataclass
class DeployOptions:
    """`roborl deploy` options (the `robot` group describes the robot; `algo=` is optional)."""

    checkpoint: str | None = field(
        default=None,
        metadata={"help": "policy checkpoint (or algo=NAME for a checkpoint-free one)"},
    )
    model: str | None = field(
        default=None,
        metadata={"help": "a folder written by `roborl export` (safetensors; no unpickling)"},
    )
    runtime: str = field(
        default="torch",
        metadata={
            "choices": ["torch", "onnx"],
            "help": "with model=DIR: onnx runs its policy.onnx with onnxruntime (export with "
            "format=onnx; pip install 'roborl[onnx]')",
        },
    )
    rate_hz: float | None = field(
        default=None, metadata=rng(1e-3, None, "control rate (null: robot.rate_hz)")
    )
    duration_s: float | None = field(
        default=None, metadata=rng(0.0, None, "stop after this many seconds (null: Ctrl-C)")
    )
    stats: str | None = field(
        default=None, metadata={"help": "write control-loop latency statistics (JSON) here"}
    )
    on_watchdog: str = field(
        default="exit",
        metadata={
            "choices": ["exit", "hold"],
            "help": "exit (code 3) or keep holding when the safety watchdog stops the robot",
        },
    )
    node_name: str = field(default="roborl_deploy", metadata={"help": "ROS 2 node name"})
    namespace: str = field(default="", metadata={"help": "ROS 2 namespace of the node"})
    autostart: bool = field(
        default=True,
        metadata={
            "help": "configure and activate the lifecycle node at start (false: wait for "
            "lifecycle transitions over ROS, e.g. from a launch file or a lifecycle manager)"
        },
    )
    trust_model_config: bool = field(
        default=False,
        metadata={
            "help": "use the model folder's or checkpoint's server URL, API-key variable and "
            "model path as saved (default: local config; docs/security.md)"
        },
    )


register_command_config(DEPLOY_CONFIG, DeployOptions, {"robot": "ros2", "algo": None})


def deploy(argv: list[str]) -> int:
    """`roborl deploy checkpoint=PATH robot=ros2 robot.joints=[...] [rate_hz=N] [duration_s=S]
    [--ros-args -p rate_hz:=N ...]`.

    `algo=NAME` instead of `checkpoint=` deploys an algorithm that acts without training
    (`algo=llm llm.model=PATH`); its config composes like `roborl eval algo=llm`.
    """
    from roborl.core.cli.common import algo_prefix_to_algo
    from roborl.core.policy_source import PolicySource
    from roborl.core.saved_data import LocalSettings, algo_overrides, local_settings
    from roborl.robots.transport.common import split_ros_args

    if any(a in ("-h", "--help") for a in argv):
        print(
            command_help(
                "usage: roborl deploy checkpoint=PATH [robot=ros2] [robot.KEY=VALUE ...] "
                "[key=value ...] [--ros-args ...]\n"
                "       roborl deploy algo=NAME [NAME.KEY=VALUE ...] ...   (checkpoint-free)\n\n"
                "Run a policy on a robot at a fixed rate through the safety layer, as the\n"
                "lifecycle node roborl_deploy (commands only while active; autostart=true\n"
                "configures and activates it at start). ~/estop (std_srvs/SetBool) latches\n"
                "(true) or clears (false) the e-stop; /diagnostics carries the safety state.\n"
                "ROS parameters: the robot config's rate_hz, joints, fields, state_topic,\n"
                "estop_topic, command.*, safety.*, plus autostart and on_watchdog.\n"
                + ROS_ARGS_HELP,
                DeployOptions,
                "Config groups: robot=NAME (default ros2; robot=mujoco runs an in-process "
                "MuJoCo robot without ROS; robot.joints, robot.safety.*, robot.qos.*, ...), "
                "algo=NAME.",
            )
        )
        return 0
    argv, ros_args = split_ros_args(argv)
    argv = algo_prefix_to_algo(argv)
    # checkpoint=/model=: algo.KEY=V sets only what saved data may not decide (algo.base_url)
    algo_values: dict[str, Any] = {}
    if not any(a.startswith("algo=") for a in argv):
        algo_values, argv = algo_overrides(argv, "deploy")
    # Composed (and checked) before any ROS traffic starts.
    opts, cfg = compose_options(argv, DeployOptions, DEPLOY_CONFIG, "deploy")
    algo_cfg = cfg.get("algo")
    if algo_values and not (opts.checkpoint or opts.model):
        raise ConfigError(
            f"deploy: algo.{next(iter(algo_values))}= without algo=NAME: give algo=NAME (e.g. "
            "algo=llm llm.model=PATH), or checkpoint=/model= for the keys saved data may not "
            "decide."
        )
    if algo_values and opts.runtime == "onnx":
        raise ConfigError(
            f"deploy: algo.{next(iter(algo_values))}= with runtime=onnx: policy.onnx runs "
            "without the algorithm's config, so algo.* keys do not apply."
        )
    source = PolicySource(
        "deploy",
        checkpoint=opts.checkpoint,
        model=opts.model,
        runtime=opts.runtime,
        algo=(algo_cfg or {}).get("name"),
        algo_config=algo_cfg,
    )
    robot_cfg = dict(cfg["robot"])
    if opts.rate_hz:
        robot_cfg["rate_hz"] = float(opts.rate_hz)
    # The robot is always the local config; the policy's loader names where the saved one
    # differs.
    settings = LocalSettings(algo=algo_values, trust=opts.trust_model_config, robot=robot_cfg)
    with local_settings(settings):
        node = DeployNode(opts, robot_cfg, source, ros_args)
    try:
        return node.run()
    finally:
        node.teardown()


deploy_cmd = guard_command(
    deploy, "deploy", "run a checkpoint's policy on a robot through the safety layer"
)

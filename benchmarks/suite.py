"""roborl's performance suite: one command, one JSON, one Markdown table, every row a ratio to a
peer measured in the same run on the same machine.

    nice -n 10 python benchmarks/suite.py [--quick] [--only offpolicy runner ...]
        [--before-rev REV] [--out benchmarks/results/suite.json]

Groups (`--only` picks some):
- `offpolicy`: roborl SAC and DSAC-T vs stable-baselines3 SAC, updates/s and env steps/s at 1
  and 2 torch threads, each contender in its own process (benchmarks/offpolicy_speed.py's
  workers), so each has its own peak RSS;
- `update_efficiency`: F2's benchmarks/update_efficiency.py, when that file exists;
- `dsac_v2`: roborl DSAC-T vs the official DSAC-v2 code (github.com/Jingliang-Duan/DSAC-v2) with
  the same networks (3x256 GELU, batch 256), updates/s;
- `iql`: roborl IQL vs CORL's single-file IQL (github.com/tinkoff-ai/CORL), updates/s on the
  same random 17/6-dim data;
- `runner`: whole-process env steps/s of `roborl train` with random actions and no updates vs
  a bare Gymnasium loop (`env.step(env.action_space.sample())`) vs raw `mujoco.mj_step`, on
  HalfCheetah-v5; with `--before-rev`, the same command at an older commit too;
- `control`: `roborl deploy` <-> `roborl sim-robot` p50/p99 latency over rclpy vs raw DDS
  (benchmarks/control_loop.py);
- `llm`: LLM policy actions/s at batch 1 and 32, vLLM (CPU) vs the transformers backend, with
  the shipped SmolLM2-135M (benchmarks/llm_policy.py).

Peer code (DSAC-v2, CORL) is fetched at benchmark time with `git clone` into
benchmarks/.peers/ (ignored, never committed); `--peers DIR` points elsewhere. A row whose peer
is absent or unreachable is kept as a `skipped` row that says why.

Every row carries the machine record (CPU model, cores, 256^3 sgemm GFLOP/s at 1 thread
measured at the start of this run, load average), so figures from different machines are never
mixed. The GPU part lives in benchmarks/gpu/ (it needs CUDA).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
PEERS = HERE / ".peers"
ENV_ID = "HalfCheetah-v5"
PEER_REPOS = {
    "DSAC-v2": "https://github.com/Jingliang-Duan/DSAC-v2",
    "CORL": "https://github.com/tinkoff-ai/CORL",
}
GROUPS = ("offpolicy", "update_efficiency", "dsac_v2", "iql", "runner", "control", "llm")


# -- records ------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sgemm_gflops(n: int = 256, reps: int = 400, threads: int = 1) -> float:
    """256^3 float32 matmuls per second, the bound on any MLP update on this CPU."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        for _ in range(20):
            a @ b
        best = 0.0
        for _ in range(3):  # best of 3: background load only ever slows it down
            t0 = time.perf_counter()
            for _ in range(reps):
                a @ b
            best = max(best, reps * 2 * n**3 / (time.perf_counter() - t0) / 1e9)
        return best
    finally:
        torch.set_num_threads(before)


def machine_record() -> dict[str, Any]:
    """Where the numbers come from; stored in every row."""
    import torch

    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "sgemm_256_gflops_1thread": round(sgemm_gflops(), 2),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": str(torch.__version__),
    }


def make_row(
    group: str,
    metric: str,
    contender: str,
    value: float,
    peer: str,
    peer_value: float,
    machine: dict[str, Any],
    higher_is_better: bool = True,
    ratio: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One table row: `ratio` = value / peer_value (or a paired ratio the benchmark computed,
    e.g. a median of same-round ratios), measured in this run on `machine`."""
    if ratio is None:
        ratio = value / peer_value if peer_value else float("nan")
    return {
        "group": group,
        "metric": metric,
        "contender": contender,
        "value": value,
        "peer": peer,
        "peer_value": peer_value,
        "ratio": ratio,
        "higher_is_better": higher_is_better,
        "machine": machine,
        **extra,
    }


def skipped_row(group: str, reason: str, machine: dict[str, Any]) -> dict[str, Any]:
    return {"group": group, "skipped": reason, "machine": machine}


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"
    return str(x)


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# roborl performance suite",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {m['cpu_model']}, {m['cores']} cores, sgemm 256^3 {m['sgemm_256_gflops_1thread']}"
        f" GFLOP/s (1 thread, this run), torch {m['torch']}, Python {m['python']}.  ",
        f"Load average (1/5/15 min) at start {m['loadavg_start']}, at end "
        f"{report['loadavg_end']}: "
        + (
            "**the machine was shared with other jobs during this run; absolute figures are "
            "lower than on a quiet machine, the same-run ratios less affected.**"
            if max(m["loadavg_start"][0], report["loadavg_end"][0]) > 0.5 * (m["cores"] or 1)
            else "quiet machine."
        ),
        f"Wall time {report['wall_s']:.0f} s{' (--quick)' if report['quick'] else ''}.",
        "",
        "| group | metric | contender | value | peer | peer value | ratio | note |",
        "| --- | --- | --- | ---: | --- | ---: | ---: | --- |",
    ]
    for r in report["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['group']} | | | | | | skipped | {r['skipped']} |")
            continue
        arrow = "" if r["higher_is_better"] else " (lower is better)"
        lines.append(
            f"| {r['group']} | {r['metric']}{arrow} | {r['contender']} | {_fmt(r['value'])} "
            f"| {r['peer']} | {_fmt(r['peer_value'])} | **{r['ratio']:.2f}** "
            f"| {r.get('note', '')} |"
        )
    return "\n".join(lines) + "\n"


# -- process helpers ------------------------------------------------------------------------------


def _vm_hwm_mb(pid: int) -> float:
    """The process's peak RSS so far (VmHWM, reset by exec), 0 when it cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def run_process(
    cmd: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None, timeout=900
) -> tuple[str, float, float]:
    """Run `cmd` to completion: (stdout, wall seconds, the process's own peak RSS in MB).

    The peak is the child's VmHWM, polled while it runs: `ru_maxrss` from wait4 would also
    count the pages of this (torch-loaded) process that the child held between fork and exec.
    """
    t0 = time.perf_counter()
    peak = 0.0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout
        while True:
            peak = max(peak, _vm_hwm_mb(proc.pid))
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}... exited {proc.returncode}:\n{stderr[-3000:]}")
    return stdout, wall, peak or usage.ru_maxrss / 1024.0


def last_json(stdout: str) -> dict[str, Any]:
    return json.loads(stdout.strip().splitlines()[-1])


def child_env(threads: int = 1, **extra: str) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def peer_checkout(name: str, peers: Path) -> tuple[Path | None, str]:
    """The peer's source tree (cloned on first use), or None and why it is missing."""
    dest = peers / name
    if dest.is_dir() and any(dest.iterdir()):
        return dest, "present"
    peers.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(
            ["git", "clone", "--depth", "1", "--quiet", PEER_REPOS[name], str(dest)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{name} not in {dest} and git clone failed ({exc})"
    if proc.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        why = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"{name} not in {dest} and `git clone {PEER_REPOS[name]}` failed: {why}"
    return dest, "cloned"


def _git_rev(path: Path) -> str | None:
    out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True)
    return out.stdout.decode().strip() or None if out.returncode == 0 else None


# -- workers (each runs in its own process: `suite.py --worker NAME ...`) ----------------------


def worker_bare(steps: int) -> dict[str, Any]:
    """The issue's bare loop: `env.step(env.action_space.sample())`, reset on episode end."""
    import gymnasium as gym

    env = gym.make(ENV_ID)
    env.reset(seed=0)
    env.action_space.seed(0)
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    return {"loop_steps_per_s": steps / (time.perf_counter() - t0)}


def worker_mjstep(steps: int) -> dict[str, Any]:
    """Raw `mujoco.mj_step` on HalfCheetah-v5's model: `frame_skip` physics steps per env step
    with a fixed random control, no Python env, no observation, no reward."""
    import gymnasium as gym
    import mujoco
    import numpy as np

    env = gym.make(ENV_ID).unwrapped
    model, data, skip = env.model, env.data, env.frame_skip
    data.ctrl[:] = np.random.default_rng(0).uniform(-1, 1, model.nu)
    t0 = time.perf_counter()
    for _ in range(steps):
        mujoco.mj_step(model, data, nstep=skip)
    return {"loop_steps_per_s": steps / (time.perf_counter() - t0), "frame_skip": skip}


def _random_dataset(n: int, seed: int = 0) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    timeouts = np.zeros(n, np.float32)
    timeouts[999::1000] = 1.0
    return {
        "observations": rng.normal(size=(n, 17)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (n, 6)).astype(np.float32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "next_observations": rng.normal(size=(n, 17)).astype(np.float32),
        "terminals": np.zeros(n, np.float32),
        "timeouts": timeouts,
    }


def _timed(update: Callable[[], Any], n: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        update()
    t0 = time.perf_counter()
    for _ in range(n):
        out = update()
    if isinstance(out, dict):  # a lazy device value must be done before the clock stops
        for v in out.values():
            float(v)
            break
    return n / (time.perf_counter() - t0)


def worker_iql_roborl(updates: int) -> dict[str, Any]:
    import torch

    from roborl.core.algorithms import build_algorithm
    from roborl.core.datasets import OfflineDataset
    from roborl.core.plugins import get_host

    ds = OfflineDataset.from_arrays(_random_dataset(100_000))
    algo = build_algorithm(
        get_host(), {"name": "iql", "max_steps": 100_000}, ds.observation_space,
        ds.action_space, "cpu",
    )  # fmt: skip
    algo.prepare(ds)
    gen = torch.Generator().manual_seed(0)
    return {"updates_per_s": _timed(lambda: algo.update(ds.sample(256, gen)), updates)}


def worker_iql_corl(updates: int, corl: str) -> dict[str, Any]:
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    from offline import _import_peer  # CORL's iql.py with its D4RL-era imports stubbed

    mod = _import_peer(str(Path(corl) / "algorithms/offline/iql.py"))
    data = _random_dataset(100_000)
    data["terminals"] = data["terminals"] + data["timeouts"] * 0  # CORL reads terminals only
    buf = mod.ReplayBuffer(17, 6, len(data["rewards"]), "cpu")
    buf.load_d4rl_dataset({k: v for k, v in data.items() if k != "timeouts"})
    torch.manual_seed(0)
    np.random.seed(0)
    q, v, actor = mod.TwinQ(17, 6), mod.ValueFunction(17), mod.GaussianPolicy(17, 6, 1.0)
    trainer = mod.ImplicitQLearning(
        max_action=1.0, actor=actor,
        actor_optimizer=torch.optim.Adam(actor.parameters(), lr=3e-4), q_network=q,
        q_optimizer=torch.optim.Adam(q.parameters(), lr=3e-4), v_network=v,
        v_optimizer=torch.optim.Adam(v.parameters(), lr=3e-4), iql_tau=0.7, beta=3.0,
        max_steps=100_000, discount=0.99, tau=0.005, device="cpu",
    )  # fmt: skip
    return {"updates_per_s": _timed(lambda: trainer.train(buf.sample(256)), updates)}


def worker_dsac_t_roborl(updates: int) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import torch

    from roborl.core.algorithms import build_algorithm
    from roborl.core.buffer import ReplayBuffer
    from roborl.core.plugins import get_host

    env = gym.make(ENV_ID)
    algo = build_algorithm(
        get_host(), {"name": "dsac_t", "batch_size": 256}, env.observation_space,
        env.action_space, "cpu",
    )  # fmt: skip
    data = _random_dataset(10_000)
    buf = ReplayBuffer(10_000, (17,), (6,))
    buf.add(
        data["observations"], data["actions"], data["rewards"], data["next_observations"],
        data["terminals"],
    )  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    np.random.seed(0)
    cfg = algo.config
    return {
        "updates_per_s": _timed(
            lambda: algo.update(buf.sample_nstep(256, 1, cfg.gamma, gen)), updates
        ),
        "hidden_sizes": list(cfg.hidden_sizes),
        "activation": cfg.activation,
    }


def _dsac_v2_import(repo: str) -> Any:
    """The official DSAC_V2 class, with its GOPS-era imports that a gradient step never uses
    (old `gym`, TensorBoard's web app, the env wrappers) stubbed."""
    import types

    import gymnasium

    for path in (repo, str(Path(repo) / "utils")):
        if path not in sys.path:
            sys.path.insert(0, path)
    sys.modules.setdefault("gym", gymnasium)
    for name in ("wrapping_env", "utils.wrapping_env"):
        stub = types.ModuleType(name)
        stub.wrapping_env = lambda env, **kw: env  # type: ignore[attr-defined]
        sys.modules.setdefault(name, stub)
    tb = types.ModuleType("utils.tensorboard_setup")
    tb.tb_tags = collections.defaultdict(str)  # type: ignore[attr-defined]
    tb.add_scalars = lambda *a, **k: None  # type: ignore[attr-defined]
    sys.modules.setdefault("utils.tensorboard_setup", tb)
    import dsac_v2  # type: ignore[import-not-found]

    return dsac_v2


def worker_dsac_v2(updates: int, repo: str, hidden: list[int], activation: str) -> dict[str, Any]:
    import numpy as np
    import torch

    mod = _dsac_v2_import(repo)
    kwargs = {
        "cnn_shared": False, "action_type": "continu", "obsv_dim": 17, "action_dim": 6,
        "action_high_limit": np.ones(6, np.float32),
        "action_low_limit": -np.ones(6, np.float32),
        "value_func_type": "MLP", "value_func_name": "ActionValueDistri",
        "value_hidden_sizes": list(hidden), "value_hidden_activation": activation,
        "value_output_activation": "linear", "value_min_log_std": -8, "value_max_log_std": 8,
        "policy_func_type": "MLP", "policy_func_name": "StochaPolicy",
        "policy_act_distribution": "TanhGaussDistribution",
        "policy_hidden_sizes": list(hidden), "policy_hidden_activation": activation,
        "policy_output_activation": "linear", "policy_min_log_std": -20,
        "policy_max_log_std": 0.5, "value_learning_rate": 1e-4, "policy_learning_rate": 1e-4,
        "alpha_learning_rate": 3e-4, "gamma": 0.99, "tau": 0.005, "auto_alpha": True,
        "alpha": 0.2, "delay_update": 2, "TD_bound": 1, "bound": True,
    }  # fmt: skip
    torch.manual_seed(0)
    algo = mod.DSAC_V2(**kwargs)
    d = _random_dataset(10_000)
    rng = np.random.default_rng(0)
    tensors = {
        "obs": torch.as_tensor(d["observations"]),
        "act": torch.as_tensor(d["actions"]),
        "rew": torch.as_tensor(d["rewards"]),
        "obs2": torch.as_tensor(d["next_observations"]),
        "done": torch.as_tensor(d["terminals"]),
    }
    it = [0]

    def step() -> Any:
        idx = torch.as_tensor(rng.integers(0, 10_000, 256))
        batch = {k: v[idx] for k, v in tensors.items()}  # the official buffer's sample_batch
        it[0] += 1
        return algo.local_update(batch, it[0])

    return {"updates_per_s": _timed(step, updates), "hidden_sizes": hidden}


def worker_llm(batches: list[int], budget_s: float, calls: int = 3) -> dict[str, Any]:
    """vLLM (in-process, CPU) vs the transformers backend, reusing llm_policy's harness.

    Each backend is warmed up once at batch 1 (structured-output grammar, first-call
    allocations), then timed for at least `calls` calls per batch size (`--quick`: 1, since
    one batch-32 call of vLLM on 2 CPU cores took ~75 s here)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    sys.path.insert(0, str(HERE))
    import gymnasium as gym
    import llm_policy as lp
    import torch

    torch.set_num_threads(1)
    model = lp.prepare_model()
    base = {"model": str(model), "max_tokens": 24, "temperature": 0.0, "seed": 0}
    out: dict[str, Any] = {"startup_s": {}, "rows": []}
    env = gym.make(lp.TASKS["mujoco"])
    for name in ("vllm", "transformers"):
        t0 = time.perf_counter()
        if name == "vllm":
            import vllm

            cfg = lp.LLMConfig(backend="vllm", max_model_len=1024, **base)
            llm = vllm.LLM(model=str(model), enforce_eager=True, max_model_len=1024, seed=0)
            backend: Any = lp.VLLMBackend(cfg, llm=llm)
        else:
            cfg = lp.LLMConfig(backend="transformers", **base)
            backend = lp.TransformersBackend(cfg)
        out["startup_s"][name] = time.perf_counter() - t0
        policy = lp.LLMPolicy(env.observation_space, env.action_space, cfg, backend=backend)
        t0 = time.perf_counter()
        policy.act(lp.observations(env, 1, seed=12345))
        out.setdefault("warmup_s", {})[name] = time.perf_counter() - t0
        for b in batches:
            pool = lp.observations(env, b * (calls + 2), seed=b)
            chunks = [pool[i * b : (i + 1) * b] for i in range(calls + 2)]
            policy.n_invalid = policy.n_replies = 0
            row = {"backend": name, "env": lp.TASKS["mujoco"]}
            row.update(lp.measure(policy, chunks, budget_s, min_calls=calls, warm_up=False))
            out["rows"].append(row)
        del backend, policy
    return out


WORKERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "bare": lambda a: worker_bare(a.steps),
    "mjstep": lambda a: worker_mjstep(a.steps),
    "iql_roborl": lambda a: worker_iql_roborl(a.updates),
    "iql_corl": lambda a: worker_iql_corl(a.updates, a.peer),
    "dsac_t_roborl": lambda a: worker_dsac_t_roborl(a.updates),
    "dsac_v2": lambda a: worker_dsac_v2(a.updates, a.peer, a.hidden, a.activation),
    "llm": lambda a: worker_llm(a.batches, a.budget_s, a.calls),
}


def worker_cmd(name: str, **kw: Any) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name]
    for key, value in kw.items():
        flag = "--" + key.replace("_", "-")
        cmd += [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
    return cmd


# -- groups ----------------------------------------------------------------------------------------


class Suite:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick = args.quick
        self.machine = machine_record()
        self.rows: list[dict[str, Any]] = []
        self.raw: dict[str, Any] = {}

    def row(self, *a: Any, **kw: Any) -> None:
        r = make_row(*a, machine=self.machine, **kw)
        self.rows.append(r)
        print(f"  {r['group']:10s} {r['metric']:28s} {r['contender']:20s} ratio {r['ratio']:.3f}")

    def skip(self, group: str, reason: str) -> None:
        self.rows.append(skipped_row(group, reason, self.machine))
        print(f"  {group:10s} skipped: {reason}")

    # offpolicy: offpolicy_speed.py's per-contender workers, alternated
    def offpolicy(self) -> None:
        script = HERE / "offpolicy_speed.py"
        updates, steps, warmup = (150, 300, 200) if self.quick else (500, 1500, 500)
        repeats = 1 if self.quick else 3
        for threads in (1, 2):
            runs: dict[str, list[dict[str, Any]]] = {"sac": [], "dsac_t": [], "sb3": []}
            for _ in range(repeats):
                for name in runs:
                    cmd = [
                        sys.executable, str(script), "--worker", name, "--device", "cpu",
                        "--threads", str(threads), "--updates", str(updates),
                        "--steps", str(steps), "--warmup", str(warmup),
                    ]  # fmt: skip
                    out, _, _ = run_process(cmd, env=child_env(threads))
                    runs[name].append(last_json(out))
            self.raw[f"offpolicy_{threads}t"] = runs

            def med(name: str, key: str, runs: dict = runs) -> float:
                return statistics.median(r[key] for r in runs[name])

            for name, label in (("sac", "roborl SAC"), ("dsac_t", "roborl DSAC-T")):
                note = f"{threads} thread(s), batch 256, 256x256 SB3 nets"
                for key, metric in (
                    ("updates_per_s", "updates/s"),
                    ("env_steps_per_s", "env steps/s (UTD 1)"),
                ):
                    self.row(
                        "offpolicy", f"{metric} {threads}t", label, med(name, key), "SB3 SAC",
                        med("sb3", key), note=note,
                    )  # fmt: skip
                self.row(
                    "memory", f"peak RSS MB {threads}t", label, med(name, "peak_rss_mb"),
                    "SB3 SAC", med("sb3", "peak_rss_mb"), higher_is_better=False,
                    note="off-policy training process",
                )  # fmt: skip

    def update_efficiency(self) -> None:
        """F2's same-round SAC update benchmark (benchmarks/update_efficiency.py `run`)."""
        if not (HERE / "update_efficiency.py").exists():
            self.skip("update_efficiency", "benchmarks/update_efficiency.py not present")
            return
        sys.path.insert(0, str(HERE))
        import update_efficiency as ue  # type: ignore[import-not-found]

        rows = ue.run(quick=self.quick)
        self.raw["update_efficiency"] = rows
        sb3 = {r["threads"]: r["updates_per_s"] for r in rows if r["contender"] == "sb3"}
        for r in rows:
            if r["contender"] == "sb3":
                continue
            self.row(
                "update_efficiency", f"updates/s {r['threads']}t", r["contender"],
                r["updates_per_s"], "SB3 SAC", sb3[r["threads"]], ratio=r["ratio_to_sb3"],
                note=f"{r['pct_of_sgemm_bound']:.0f}% of the sgemm bound; ratio = median of "
                f"same-round ratios; {r['what']}",
            )  # fmt: skip

    def dsac_v2(self) -> None:
        repo, why = peer_checkout("DSAC-v2", self.args.peers)
        if repo is None:
            self.skip("dsac_v2", why)
            return
        n = 100 if self.quick else 500
        ours, _, rss_ours = run_process(worker_cmd("dsac_t_roborl", updates=n), env=child_env())
        o = last_json(ours)
        try:
            theirs, _, rss_theirs = run_process(
                worker_cmd(
                    "dsac_v2", updates=n, peer=repo, hidden=o["hidden_sizes"],
                    activation=o["activation"],
                ),
                env=child_env(),
            )  # fmt: skip
        except RuntimeError as exc:
            self.skip("dsac_v2", f"official DSAC-v2 did not run here: {str(exc)[-300:]}")
            return
        t = last_json(theirs)
        net = f"{'x'.join(map(str, o['hidden_sizes']))} {o['activation']}"
        self.row(
            "dsac_v2", "updates/s 1t", "roborl DSAC-T", o["updates_per_s"], "official DSAC-v2",
            t["updates_per_s"], note=f"{net}, batch 256, rev {(_git_rev(repo) or '?')[:10]}",
        )  # fmt: skip
        self.row(
            "memory", "peak RSS MB", "roborl DSAC-T", rss_ours, "official DSAC-v2", rss_theirs,
            higher_is_better=False, note="update-only process",
        )  # fmt: skip

    def iql(self) -> None:
        repo, why = peer_checkout("CORL", self.args.peers)
        if repo is None:
            self.skip("iql", why)
            return
        n = 200 if self.quick else 1000
        ours, _, rss_ours = run_process(worker_cmd("iql_roborl", updates=n), env=child_env())
        theirs, _, rss_theirs = run_process(
            worker_cmd("iql_corl", updates=n, peer=repo), env=child_env()
        )
        note = f"batch 256, 2x256 ReLU, rev {(_git_rev(repo) or '?')[:10]}"
        self.row(
            "iql", "updates/s 1t", "roborl IQL", last_json(ours)["updates_per_s"], "CORL IQL",
            last_json(theirs)["updates_per_s"], note=note,
        )  # fmt: skip
        self.row(
            "memory", "peak RSS MB", "roborl IQL", rss_ours, "CORL IQL", rss_theirs,
            higher_is_better=False, note="offline update process, 100k transitions",
        )  # fmt: skip

    def runner(self) -> None:
        """Whole-process env steps/s, as the issue measured them."""
        steps = self.args.runner_steps or (30_000 if self.quick else 100_000)
        train = [
            sys.executable, "-m", "roborl.core.cli", "train", "algo=sac", "env=halfcheetah",
            f"total_steps={steps}", f"learning_starts={steps}",
        ]  # fmt: skip
        cells: dict[str, tuple[list[str], dict[str, str]]] = {
            "bare": (worker_cmd("bare", steps=steps), child_env()),
            "mjstep": (worker_cmd("mjstep", steps=steps), child_env()),
            "roborl": ([*train, "eval_every=0", "progress=false"], child_env()),
            "roborl_default": (train, child_env()),
        }
        before = None
        if self.args.before_rev:
            before = Path(tempfile.mkdtemp(prefix="roborl_before_"))
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", self.args.before_rev, "roborl"],
                capture_output=True,
                check=True,
            )
            subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
            env = {**child_env(), "PYTHONPATH": str(before)}
            cells["roborl_before"] = (train, env)
        got: dict[str, dict[str, float]] = {}
        try:
            reps = 1 if self.quick else 3
            for _ in range(reps):  # alternated, so background load hits each alike
                for name, (cmd, env) in cells.items():
                    with tempfile.TemporaryDirectory() as cwd:
                        _, wall, rss = run_process(cmd, cwd=Path(cwd), env=env)
                    got.setdefault(name, {"wall": [], "rss": []})  # type: ignore[dict-item]
                    got[name]["wall"].append(wall)  # type: ignore[attr-defined]
                    got[name]["rss"].append(rss)  # type: ignore[attr-defined]
                    print(f"    runner {name}: {wall:.1f} s, {rss:.0f} MB", flush=True)
        finally:
            if before is not None:
                shutil.rmtree(before, ignore_errors=True)
        self.raw["runner"] = got
        sps = {k: steps / statistics.median(v["wall"]) for k, v in got.items()}
        rss = {k: statistics.median(v["rss"]) for k, v in got.items()}
        note = f"{steps} steps, whole process incl. startup, random actions, no updates"
        self.row(
            "runner", "env steps/s", "roborl train eval_every=0", sps["roborl"], "bare gym loop",
            sps["bare"], note=note,
        )  # fmt: skip
        self.row(
            "runner", "env steps/s", "roborl train (default eval)", sps["roborl_default"],
            "bare gym loop", sps["bare"], note=note + "; the issue's command",
        )  # fmt: skip
        if "roborl_before" in sps:
            self.row(
                "runner", "env steps/s", f"roborl train @ {self.args.before_rev[:10]}",
                sps["roborl_before"], "bare gym loop", sps["bare"],
                note=note + "; the issue's command before this work",
            )  # fmt: skip
        self.row(
            "runner", "env steps/s", "bare gym loop", sps["bare"], "raw mj_step", sps["mjstep"],
            note="HalfCheetah-v5, frame_skip 5 mj_steps per env step",
        )  # fmt: skip
        for name in ("roborl", "roborl_default"):
            self.row(
                "memory", "peak RSS MB", f"runner {name}", rss[name], "bare gym loop",
                rss["bare"], higher_is_better=False, note=note,
            )  # fmt: skip

    def control(self) -> None:
        sys.path.insert(0, str(HERE))
        try:
            import control_loop as cl
        except Exception as exc:  # rclpy/cyclonedds missing on this machine
            self.skip("control", f"benchmarks/control_loop.py cannot run here: {exc!r}")
            return
        seconds = 4.0 if self.quick else 10.0
        rate = 100
        res = {}
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            ckpt = tmp / "sac.pt"
            cl.sac_checkpoint(ckpt)
            domain = 180 + os.getpid() % 20
            for i, cell in enumerate(("rclpy", "dds")):
                try:
                    res[cell] = cl.run_rate(cell, rate, seconds, ckpt, tmp, domain + i)
                except Exception as exc:
                    self.skip("control", f"control_loop cell {cell} failed: {str(exc)[-300:]}")
                    return
        self.raw["control"] = res
        for q in ("p50", "p99"):
            self.row(
                "control", f"obs->cmd {q} ms @{rate} Hz", "rclpy (ROS 2)",
                res["rclpy"][f"latency_ms_{q}"], "raw Cyclone DDS", res["dds"][f"latency_ms_{q}"],
                higher_is_better=False,
                note=f"deploy<->sim-robot, {seconds:.0f} s, achieved "
                f"{res['rclpy']['rate_hz_achieved']:.0f}/{res['dds']['rate_hz_achieved']:.0f} Hz",
            )  # fmt: skip

    def llm(self) -> None:
        try:
            out, _, _ = run_process(
                worker_cmd(
                    "llm",
                    batches=[1, 32],
                    budget_s=5.0 if self.quick else 20.0,
                    calls=1 if self.quick else 3,
                ),
                env=child_env(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"),
                timeout=900,
            )
        except RuntimeError as exc:
            self.skip("llm", f"LLM benchmark did not run: {str(exc)[-300:]}")
            return
        res = last_json(out)
        self.raw["llm"] = res
        by = {(r["backend"], r["batch"]): r for r in res["rows"]}
        for b in (1, 32):
            v, t = by[("vllm", b)], by[("transformers", b)]
            self.row(
                "llm", f"actions/s batch {b}", "vLLM CPU", v["actions_per_s"],
                "transformers backend", t["actions_per_s"],
                note=f"SmolLM2-135M, InvertedPendulum, p50 {v['latency_p50_ms']:.0f} ms vs "
                f"{t['latency_p50_ms']:.0f} ms, {v['calls']}/{t['calls']} calls",
            )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small budgets, < 10 min on 2 cores")
    ap.add_argument("--only", nargs="+", choices=GROUPS, default=list(GROUPS))
    ap.add_argument("--peers", type=Path, default=PEERS, help="where peer code is cloned")
    ap.add_argument("--before-rev", default=None, help="also time `roborl train` at this commit")
    ap.add_argument(
        "--runner-steps", type=int, default=None, help="runner rows (default 100k; quick 30k)"
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "suite.json")
    ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--updates", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--peer", default="", help=argparse.SUPPRESS)
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256], help=argparse.SUPPRESS)
    ap.add_argument("--activation", default="gelu", help=argparse.SUPPRESS)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32], help=argparse.SUPPRESS)
    ap.add_argument("--budget-s", type=float, default=5.0, help=argparse.SUPPRESS)
    ap.add_argument("--calls", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        if args.worker not in ("bare", "mjstep"):  # the bare loops never load torch
            import torch

            torch.set_num_threads(1)
        print(json.dumps(WORKERS[args.worker](args)))
        return 0

    t0 = time.perf_counter()
    suite = Suite(args)
    print(f"machine: {suite.machine}", flush=True)
    command = "python benchmarks/suite.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )

    def write() -> dict[str, Any]:  # after every group: a stopped run keeps what finished
        report = {
            "command": command,
            "quick": args.quick,
            "machine": suite.machine,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "wall_s": time.perf_counter() - t0,
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rows": suite.rows,
            "raw": suite.raw,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(markdown(report))
        return report

    for group in args.only:
        print(f"[{group}]", flush=True)
        try:
            getattr(suite, group)()
        except Exception as exc:  # one broken group must not lose the others' rows
            suite.skip(group, f"failed: {str(exc)[-400:]}")
        report = write()
    print(f"wrote {args.out} and {args.out.with_suffix('.md')} in {report['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

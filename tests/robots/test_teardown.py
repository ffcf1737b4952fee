"""DDS teardown under traffic: `RobotEnv.close()` / `DDSTransport.close()` must never hang.

With Cyclone listeners, closing a reader while samples arrive deadlocked or crashed the
process (a teardown waiting for a listener that waits for the GIL, a collected reference
cycle leaving a C reader that calls a freed ctypes thunk). The child process below opens and
closes a robot env many times while another process floods its state topic at about 2 kHz
and a thread in the same process writes to the same topic, then leaves one transport open
for the exit hook. A hang is caught by the parent's generous wait, not by timing anything.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROUNDS = 12

FLOOD = textwrap.dedent(
    """
    import time
    from roborl.robots.transport import msgs
    from roborl.robots.transport.dds import DDSTransport
    t = DDSTransport("flood")
    pub = t.publisher("/joint_states", msgs.JointState)
    m = msgs.JointState(name=["slider", "hinge"], position=[0.0, 0.1], velocity=[0.0, 0.0])
    print("flooding", flush=True)
    while True:
        pub(m)
        time.sleep(0.0005)
    """
)

CHILD = textwrap.dedent(
    f"""
    import gc, threading, time
    import numpy as np
    from roborl.robots.transport import msgs
    from roborl.robots.env.robot_env import RobotEnv
    from roborl.robots.transport.dds import DDSTransport
    cfg = dict(joints=["slider", "hinge"], transport="dds", rate_hz=200.0,
               connect_timeout_s=60.0, command=dict(joints=["slider"], interface_name="effort"),
               safety=dict(low=[-1.0], high=[1.0], max_state_age_s=5.0),
               reset=dict(mode="wait", wait_s=0.0))
    local = DDSTransport("local_writer")  # same-process writer into the env's reader
    pub = local.publisher("/joint_states", msgs.JointState)
    m = msgs.JointState(name=["hinge", "slider"], position=[0.1, 0.0], velocity=[0.0, 0.0])
    stop = [False]
    def spam():
        while not stop[0]:
            pub(m)
            time.sleep(0.001)
    threading.Thread(target=spam, daemon=True).start()
    for i in range({ROUNDS}):
        env = RobotEnv(cfg)
        env.reset()
        for _ in range(5):
            env.step(np.array([0.1]))
        received = env.driver.received
        env.close()
        env.close()  # idempotent
        del env
        gc.collect()  # collect any leftover cycle now, under traffic
        print("closed", i, received, flush=True)
    stop[0] = True
    leftover = DDSTransport("left_open")  # closed by the atexit hook, under traffic
    leftover.subscribe("/joint_states", msgs.JointState, lambda msg: None)
    time.sleep(0.2)
    print("exiting", flush=True)
    """
)


def spawn_python(code: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )


def test_close_under_traffic_never_hangs(ros_env) -> None:
    flood = spawn_python(FLOOD, ros_env)
    try:
        assert flood.stdout.readline().strip() == "flooding"
        child = spawn_python(CHILD, ros_env)
        try:
            out, err = child.communicate(timeout=150)  # generous: about 15 s when healthy
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            raise AssertionError(
                f"DDS teardown hung: the child did not finish.\\nstdout:{out}\\nstderr:{err}"
            ) from None
        assert child.returncode == 0, (child.returncode, out, err[-3000:])
        lines = out.splitlines()
        closed = [ln for ln in lines if ln.startswith("closed")]
        assert len(closed) == ROUNDS, out
        assert all(int(ln.split()[2]) > 0 for ln in closed), out  # traffic did flow
        assert lines[-1] == "exiting"
        assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    finally:
        flood.kill()
        flood.wait()

"""Reading sensor_msgs/JointState into the observation vector, matched by joint *name* (the
order on the wire is the publisher's, not ours); strict, so a malformed message never
becomes an observation."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from roborl.core.errors import RobotError
from roborl.robots.transport import msgs


def parse_joint_state(
    msg: msgs.JointState, joints: Sequence[str], fields: Sequence[str]
) -> np.ndarray:
    """Observation vector [field0 of joints..., field1 of joints...]; RobotError if malformed."""
    names = list(msg.name)
    if len(set(names)) != len(names):
        raise RobotError(f"JointState has duplicate joint names {names}.")
    index = {n: i for i, n in enumerate(names)}
    missing = [j for j in joints if j not in index]
    if missing:
        raise RobotError(
            f"JointState lacks joints {missing}; it names {names}, the robot config expects "
            f"{list(joints)}."
        )
    out = []
    for f in fields:
        values = list(getattr(msg, f))
        if len(values) != len(names):
            raise RobotError(
                f"JointState.{f} has {len(values)} values for {len(names)} names; "
                f"ROS 2 requires one per name."
            )
        picked = [values[index[j]] for j in joints]
        if not all(math.isfinite(v) for v in picked):
            raise RobotError(f"JointState.{f} has non-finite values {picked} for {list(joints)}.")
        out.extend(picked)
    return np.asarray(out, dtype=np.float64)

"""Building, checkpointing and restoring an algorithm must not import torch._dynamo (~2 s of
start-up, issue 23), and once torch._dynamo is loaded, torch's own "never trace" marking of
optimiser methods must be back in force."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_optimisers_work_without_importing_dynamo_then_hand_over_to_it() -> None:
    script = textwrap.dedent(
        """
        import sys
        import gymnasium as gym, numpy as np, torch
        from roborl.core.lazy_dynamo import defer_dynamo_import
        from roborl.plugins.sac.sac import SAC

        assert defer_dynamo_import() > 0
        box = gym.spaces.Box(-1, 1, (3,), np.float32)
        algo = SAC(box, gym.spaces.Box(-1, 1, (2,), np.float32), SAC.Config(), "cpu")
        state = algo.state_dict()
        algo.load_state_dict(state)
        algo.optimizer.zero_grad()
        assert "torch._dynamo" not in sys.modules, "an optimiser method imported torch._dynamo"

        import torch._dynamo
        fn = torch.optim.Optimizer.state_dict.__wrapped__
        proxy = fn.__dynamo_disable
        algo.optimizer.state_dict()
        assert fn.__dynamo_disable is not proxy, "dynamo loaded, but torch's disable not used"
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]

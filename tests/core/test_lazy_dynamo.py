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


def test_an_optimiser_step_needs_no_dynamo_and_matches_torchs_own_step() -> None:
    """`step` imports torch._dynamo on every call (`_use_grad_for_differentiable`), ~1.4 s of every
    training process: the deferred step leaves it unimported, computes exactly what torch's
    does (the same parameters after Adam, AdamW and SGD steps), restores the grad mode, and
    after torch._dynamo is loaded torch's own wrapper runs again."""
    script = textwrap.dedent(
        """
        import copy, sys
        import torch
        from roborl.core.lazy_dynamo import defer_dynamo_import

        assert defer_dynamo_import() > 0
        def run(opt_cls, kw):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
            opt = opt_cls(model.parameters(), lr=0.1, **kw)
            for i in range(3):
                opt.zero_grad()
                model(torch.randn(16, 4)).pow(2).mean().backward()
                opt.step()
            assert torch.is_grad_enabled()
            return [p.detach().clone() for p in model.parameters()]

        cases = [(torch.optim.Adam, {}), (torch.optim.Adam, {"fused": True}),
                 (torch.optim.AdamW, {"foreach": True}), (torch.optim.SGD, {"momentum": 0.9})]
        deferred = [run(c, kw) for c, kw in cases]
        assert "torch._dynamo" not in sys.modules, "an optimiser step imported torch._dynamo"
        import torch._dynamo
        own = [run(c, kw) for c, kw in cases]
        for a, b in zip(deferred, own):
            assert all(torch.equal(x, y) for x, y in zip(a, b)), "the deferred step differs"
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]

"""Optional `torch.compile` / CUDA-graph acceleration with a safe eager fallback.

Algorithms pass their loss function (a pure function of tensors and the module parameters it
closes over) to `CompiledCall`. Compilation is lazy in torch (errors surface on the first call:
a missing C compiler on CPU, an unsupported op, a Triton problem on GPU), so the first call runs
under a guard: on any exception the call warns once, in one line, and the algorithm continues
eagerly with the same function. `cudagraphs` maps to inductor's "reduce-overhead" mode and is
only meaningful on CUDA; elsewhere it is dropped with the same one-line warning.

`CapturedUpdate` goes further on CUDA: it records a whole update (losses, backward passes,
optimiser steps, Polyak averaging) as one CUDA graph (`algo.capture=true`), with the same kind
of one-line fallback to eager when capture is impossible.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch


class CompiledCall:
    """Call `fn` compiled when asked and possible, eagerly otherwise.

    `after` (for example `loss.backward()`) runs inside the first-call guard too, because
    AOTAutograd may compile the backward graph lazily; `reset` undoes partial effects of a
    failed attempt (for example stale gradients) before the eager retry.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        enabled: bool = False,
        mode: str | None = None,
        cudagraphs: bool = False,
        device: torch.device | str = "cpu",
        name: str = "update",
    ) -> None:
        self.fn = fn
        self.name = name
        self.compiled: Callable[..., Any] | None = None
        self.checked = False
        self.fallback_reason: str | None = None
        device = torch.device(device)
        if cudagraphs and device.type != "cuda":
            self._warn(f"cudagraphs needs a CUDA device, not {device.type}; not using them")
            cudagraphs = False
        if not (enabled or cudagraphs):
            self.checked = True
            return
        if cudagraphs:
            mode = "reduce-overhead"
        try:
            self.compiled = torch.compile(fn, mode=mode)
        except Exception as exc:  # bad mode, missing backend: torch raises at compile() time
            self._fall_back(exc)

    @property
    def is_compiled(self) -> bool:
        return self.compiled is not None

    def _warn(self, msg: str) -> None:
        warnings.warn(f"roborl: {self.name}: {msg}", RuntimeWarning, stacklevel=3)

    def _fall_back(self, exc: BaseException) -> None:
        self.fallback_reason = _one_line(exc)
        self._warn(f"torch.compile failed ({self.fallback_reason}); running eagerly")
        self.compiled = None
        self.checked = True

    def __call__(
        self,
        *args: Any,
        after: Callable[[Any], None] | None = None,
        reset: Callable[[], None] | None = None,
    ) -> Any:
        if self.compiled is not None:
            if self.checked:
                out = self.compiled(*args)
                if after is not None:
                    after(out)
                return out
            try:
                out = self.compiled(*args)
                if after is not None:
                    after(out)
                self.checked = True
                return out
            except Exception as exc:
                self._fall_back(exc)
                if reset is not None:
                    reset()
        out = self.fn(*args)
        if after is not None:
            after(out)
        return out


def fused_adam_kwargs(device: torch.device | str) -> dict[str, bool]:
    """Adam's fastest implementation available for `device`: the fused kernel (CPU and CUDA
    in torch >= 2.4: about 4x faster than foreach on a 2-core CPU for SAC-sized networks),
    else foreach."""
    device = torch.device(device)
    try:
        p = torch.zeros(1, device=device, requires_grad=True)
        torch.optim.Adam([p], fused=True)
        return {"fused": True}
    except (RuntimeError, ValueError, TypeError):
        return {"foreach": True}


def fused_adam_step(optimizer: torch.optim.Optimizer) -> None:
    """`optimizer.step()` for a fused Adam, without `Optimizer.step`'s Python bookkeeping.

    Why: for SAC-sized networks on a CPU the fused kernel takes about a third of Adam's step
    time; the rest is per-step Python (hooks, `_init_group`, per-parameter conversions). This
    calls the same kernel (`torch._fused_adam_`) with the same arguments and state tensors as
    `torch.optim.Adam(fused=True)` does, so the result is bitwise identical and the optimiser's
    state_dict stays the checkpointed one. Anything unusual (not fused, AMSGrad, decoupled
    weight decay, complex or uninitialised state, hooks) takes `optimizer.step()`; parameters
    without a gradient are skipped, as Adam skips them.
    """
    hooks = optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks
    if not isinstance(optimizer, torch.optim.Adam) or hooks:
        optimizer.step()
        return
    calls = []
    for group in optimizer.param_groups:
        unusual = group["amsgrad"] or group["decoupled_weight_decay"] or group["capturable"]
        if not group["fused"] or unusual or isinstance(group["lr"], torch.Tensor):
            optimizer.step()
            return
        params, grads, avgs, sqs, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:  # Adam skips it too (e.g. DSAC-T's actor on critic-only steps)
                continue
            state = optimizer.state.get(p)
            if not state or p.is_complex() or p.grad.is_sparse:
                optimizer.step()
                return
            params.append(p)
            grads.append(p.grad)
            avgs.append(state["exp_avg"])
            sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if params:
            calls.append((group, params, grads, avgs, sqs, steps))
    with torch.no_grad():
        for group, params, grads, avgs, sqs, steps in calls:
            beta1, beta2 = group["betas"]
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(
                params, grads, avgs, sqs, [], steps,
                amsgrad=False, lr=group["lr"], beta1=float(beta1), beta2=float(beta2),
                weight_decay=group["weight_decay"], eps=group["eps"],
                maximize=group["maximize"], grad_scale=None, found_inf=None,
            )  # fmt: skip


def adam_kwargs(device: torch.device | str, capture: bool = False) -> dict[str, bool]:
    """Adam's flags for `device`: `fused_adam_kwargs`, plus `capturable` (the step counters
    and every bias-correction term stay on the device, so the step can be recorded in a CUDA
    graph) when `capture` is asked on CUDA. Elsewhere `capture` changes nothing: capturable
    Adam exists for CUDA graphs only."""
    kwargs = fused_adam_kwargs(device)
    if capture and torch.device(device).type == "cuda":
        kwargs["capturable"] = True
    return kwargs


def _one_line(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {first}"


Inputs = tuple[Any, ...]


def _tensors(inputs: Any) -> list[torch.Tensor]:
    """The tensors of a nest of tuples, lists and string-keyed dicts, in a fixed order."""
    if isinstance(inputs, torch.Tensor):
        return [inputs]
    if isinstance(inputs, dict):
        return [t for k in sorted(inputs) for t in _tensors(inputs[k])]
    if isinstance(inputs, (tuple, list)):
        return [t for x in inputs for t in _tensors(x)]
    return []


def _signature(inputs: Any) -> Any:
    """What a captured graph depends on besides the tensors' values: the nest's structure,
    every tensor's shape, dtype and device, and the other leaves (None, numbers) as they are."""
    if isinstance(inputs, torch.Tensor):
        return ("T", tuple(inputs.shape), inputs.dtype, inputs.device)
    if isinstance(inputs, dict):
        return ("D", tuple((k, _signature(inputs[k])) for k in sorted(inputs)))
    if isinstance(inputs, (tuple, list)):
        return ("S", tuple(_signature(x) for x in inputs))
    return ("V", inputs)


def _clone(inputs: Any) -> Any:
    if isinstance(inputs, torch.Tensor):
        return inputs.clone()
    if isinstance(inputs, dict):
        return {k: _clone(v) for k, v in inputs.items()}
    if isinstance(inputs, (tuple, list)):
        return type(inputs)(_clone(x) for x in inputs)
    return inputs


class _Graph:
    """One captured update: its static input buffers and its packed metrics."""

    def __init__(self) -> None:
        self.calls = 0  # eager warm-up calls made so far
        self.graph: Any = None
        self.inputs: list[torch.Tensor] = []
        self.names: list[str] = []
        self.packed: torch.Tensor | None = None


class CapturedUpdate:
    """A whole update (`step(key, *inputs) -> metrics`) recorded once as a CUDA graph and
    replayed for every later call with the same `key` and input shapes.

    Why: a pixel SAC update is about 1,500 small kernels and a state SAC update a few hundred;
    on a GPU their launch cost, not their arithmetic, sets the speed. A CUDA graph launches
    them all with one call. `step` does everything an update does to tensors (forward,
    backward, every optimiser step, Polyak averaging) and nothing to Python state (counters
    move in the caller), because a replay repeats the kernels only. Its random numbers come
    from the default CUDA generator, whose graph-safe offsets give fresh numbers on every
    replay. Optimisers stepped inside need `capturable=True` (`adam_kwargs(device, True)`).

    How: the first `warmup` calls per key run eagerly on a side stream (the optimiser state and
    every cached buffer exist before capture, as CUDA graphs require); the next call copies its
    inputs into static buffers, calls `before_capture` (e.g. `zero_grad(set_to_none=True)`, so
    the backward pass allocates `.grad` in the graph's private pool), records `step` into a
    graph, and replays it. Later calls copy their inputs into the static buffers and replay.
    Metrics are packed into one tensor inside the graph and cloned once per call (one kernel),
    so nothing waits for the device: they are read back when the caller logs them.

    Falls back to calling `step` eagerly, with one-line `RuntimeWarning`s like `CompiledCall`'s
    and the reason in `fallback_reason`, when capture is impossible: no CUDA device, a config
    the caller names in `blocked` (e.g. `compile` asked too), or any error while capturing (an
    op that syncs with the host, a non-capturable kernel). Eager and captured calls run the
    same `step`, so on CPU `capture=true` gives the same numbers as `capture=false`.
    """

    def __init__(
        self,
        step: Callable[..., dict[str, torch.Tensor]],
        *,
        enabled: bool = False,
        device: torch.device | str = "cpu",
        name: str = "update",
        blocked: str | None = None,
        warmup: int = 3,
        max_graphs: int = 8,
        before_capture: Callable[[], None] | None = None,
    ) -> None:
        self.step = step
        self.name = name
        self.warmup = int(warmup)
        self.max_graphs = int(max_graphs)
        self.before_capture = before_capture
        self.fallback_reason: str | None = None
        self._graphs: dict[Any, _Graph] = {}
        self._stream: Any = None
        device = torch.device(device)
        self.enabled = bool(enabled)
        if not self.enabled:
            return
        if device.type != "cuda":
            self._fall_back(f"CUDA graphs need a CUDA device, not {device.type}")
        elif blocked:
            self._fall_back(blocked)

    @property
    def active(self) -> bool:
        """True while calls may be captured (enabled, on CUDA, no fallback yet)."""
        return self.enabled and self.fallback_reason is None

    @property
    def captured(self) -> int:
        """How many graphs have been recorded."""
        return sum(g.graph is not None for g in self._graphs.values())

    def _fall_back(self, reason: str) -> None:
        self.fallback_reason = reason
        self._graphs.clear()
        warnings.warn(
            f"roborl: {self.name}: capture=true but {reason}; running the update eagerly",
            RuntimeWarning,
            stacklevel=3,
        )

    def reset(self) -> None:
        """Forget every graph (after an optimiser or its state was replaced, e.g. a loaded
        checkpoint): the next calls warm up and capture again."""
        self._graphs.clear()

    def __call__(self, key: Any, *inputs: Any) -> dict[str, torch.Tensor]:
        if not self.active:
            return self.step(key, *inputs)
        sig = (key, _signature(inputs))
        entry = self._graphs.get(sig)
        if entry is None:
            if len(self._graphs) >= self.max_graphs:
                return self.step(key, *inputs)  # shapes keep changing: not worth a graph each
            entry = self._graphs[sig] = _Graph()
        if entry.graph is None:
            if entry.calls < self.warmup:
                entry.calls += 1
                return self._on_side_stream(key, inputs)
            try:
                self._capture(entry, key, inputs)
            except Exception as exc:  # a host sync, an op CUDA graphs cannot record, ...
                self._fall_back(f"capturing failed ({_one_line(exc)})")
                if self.before_capture is not None:
                    self.before_capture()
                return self.step(key, *inputs)
        for dst, src in zip(entry.inputs, _tensors(inputs)):
            dst.copy_(src, non_blocking=True)
        entry.graph.replay()
        assert entry.packed is not None
        values = entry.packed.clone()  # the next replay overwrites `packed`
        return {k: values[i] for i, k in enumerate(entry.names)}

    def _on_side_stream(self, key: Any, inputs: Inputs) -> dict[str, torch.Tensor]:
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        current = torch.cuda.current_stream()
        self._stream.wait_stream(current)
        with torch.cuda.stream(self._stream):
            out = self.step(key, *inputs)
        current.wait_stream(self._stream)
        return out

    def _capture(self, entry: _Graph, key: Any, inputs: Inputs) -> None:
        static = _clone(inputs)
        torch.cuda.synchronize()
        if self.before_capture is not None:
            self.before_capture()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.step(key, *static)
            names = list(out)
            dtype = out[names[0]].dtype if names else torch.float32
            packed = torch.stack([out[k].detach().reshape(()).to(dtype) for k in names])
        entry.graph, entry.inputs, entry.names = graph, _tensors(static), names
        entry.packed = packed

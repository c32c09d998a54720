"""Timing primitives: how an output is synchronized, how one sample is taken, how many calls a
sample holds, and when warm-up is over.

The timed region of a sample is exactly ``perf_counter(); loops x fn() [+ sync]; perf_counter()``.
The synchronization is planned once, before timing, from the first output: outputs that need none
(numpy arrays, Python values, CPU torch tensors) get no sync call at all, so nothing (no import,
no flattening) runs inside the timed region for them; lazy or asynchronous outputs (MLX, JAX,
CUDA tensors) get a pre-resolved sync per call.
"""

from __future__ import annotations

import inspect
import math
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from ..errors import InputError, UserError

__all__ = [
    "Iteration",
    "plan_sync",
    "takes_iteration",
    "sample",
    "harness_overhead",
    "calibrate_loops",
    "LAZY_FRAMEWORKS",
    "CLOCKS",
    "cpu_share",
]

# Frameworks whose results are computed lazily or asynchronously: timing them without a sync
# measures graph building or kernel launches, not compute.
LAZY_FRAMEWORKS = ("mlx", "jax", "torch-cuda")

_perf = time.perf_counter

# The clocks a sample can be read from. "wall" is elapsed time (what a user waits for). "cpu" is
# the process's CPU time: time spent descheduled (preempted by other work on a busy machine) does
# not count, nor does waiting (I/O, sleeps, child processes, a GPU); every thread's CPU time is
# added up.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


class Iteration:
    """Handed to a benchmarked function that takes one argument: mark stages with
    ``with it.stage("compute"):``. Plain callables (no argument) need none of this."""

    __slots__ = ("_sync", "stages")

    def __init__(self, sync: Callable[[Any], None] | None):
        self._sync = sync
        self.stages: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str, *, sync_result: Any = None):
        start = _perf()
        try:
            yield
        finally:
            if sync_result is not None and self._sync is not None:
                self._sync(sync_result)
            self.stages[name] = self.stages.get(name, 0.0) + _perf() - start

    def sync(self, value: Any) -> Any:
        """Synchronize a lazy or asynchronous result inside a stage; returns it."""
        if self._sync is not None:
            self._sync(value)
        return value


def takes_iteration(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` has one required positional parameter (it wants an Iteration)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) > 1:
        raise InputError(
            f"benchmarked callable {getattr(fn, '__qualname__', fn)!r} takes "
            f"{len(required)} required arguments",
            hint="pass a callable with no argument (or one, an Iteration, to time stages); "
            "bind inputs with functools.partial",
        )
    return len(required) == 1


def _leaves(value: Any) -> list[Any]:
    from ..outputs import flatten_outputs

    try:
        return list(flatten_outputs(value).values())
    except UserError:
        return [value]


def _kind(leaf: Any) -> str | None:
    """'mlx', 'jax', 'torch-cuda' for leaves that need a sync; None for everything else."""
    from ..backends import get_backend

    backend = get_backend(leaf)
    if backend is None:
        return None
    name = backend.name
    if name == "torch":
        return (
            "torch-cuda" if getattr(getattr(leaf, "device", None), "type", "") == "cuda" else None
        )
    if name in ("mlx", "jax"):
        return name
    return None


def output_kinds(value: Any) -> set[str]:
    if value is None:
        return set()
    return {k for k in (_kind(leaf) for leaf in _leaves(value)) if k is not None}


def plan_sync(
    first_output: Any, sync: Callable[[Any], None] | bool | None
) -> tuple[Callable[[Any], None] | None, str]:
    """(sync function or None, description) for outputs like ``first_output``.

    ``sync=None`` plans from the output; ``sync=False`` times without synchronizing, which is
    refused for lazy frameworks; a callable is used as given, once per call."""
    if callable(sync):
        return sync, getattr(sync, "__qualname__", "custom")
    kinds = output_kinds(first_output)
    if sync is False:
        if kinds:
            raise InputError(
                f"unsynchronized timing of {', '.join(sorted(kinds))} outputs measures graph "
                "building or kernel launches, not compute",
                hint="leave sync at its default (or pass a sync callable)",
            )
        return None, "none (outputs need none)"
    if not kinds:
        return None, "none (outputs need none)"
    fns: list[Callable[[Any], None]] = []
    names = []
    if "mlx" in kinds:
        import mlx.core as mx

        fns.append(mx.eval)
        names.append("mx.eval")
    if "jax" in kinds:
        import jax

        fns.append(jax.block_until_ready)
        names.append("jax.block_until_ready")
    if "torch-cuda" in kinds:
        import torch

        cuda_sync = torch.cuda.synchronize
        fns.append(lambda _value: cuda_sync())
        names.append("torch.cuda.synchronize")
    if len(fns) == 1:
        return fns[0], names[0]

    def sync_all(value: Any) -> None:
        for fn in fns:
            fn(value)

    return sync_all, " + ".join(names)


def sample(
    fn: Callable[[], Any],
    sync: Callable[[Any], None] | None,
    loops: int,
    count: int,
    clock: Callable[[], float] | None = None,
) -> list[float]:
    """``count`` samples of ``loops`` calls each; seconds per call. Nothing else is timed."""
    out = [0.0] * count
    calls = range(loops)
    perf = clock or _perf
    if sync is None:
        for i in range(count):
            start = perf()
            for _ in calls:
                fn()
            out[i] = perf() - start
    else:
        for i in range(count):
            start = perf()
            for _ in calls:
                sync(fn())
            out[i] = perf() - start
    if loops != 1:
        out = [t / loops for t in out]
    return out


def sample_cuda(
    fn: Callable[[], Any],
    loops: int,
    count: int,
    flush: Callable[[], None] | None = None,
) -> tuple[list[float], list[float]]:
    """CUDA timing: ``count`` samples of ``loops`` calls, each bracketed by CUDA events and by
    the wall clock after a device synchronize. Returns (wall, device) seconds per call.

    ``flush`` (for example :func:`l2_flusher`) runs before each sample, outside both timings."""
    import torch

    cuda = torch.cuda
    starts = [cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [cuda.Event(enable_timing=True) for _ in range(count)]
    wall = [0.0] * count
    perf = _perf
    calls = range(loops)
    for i in range(count):
        if flush is not None:
            flush()
        cuda.synchronize()
        start = perf()
        starts[i].record()
        for _ in calls:
            fn()
        ends[i].record()
        cuda.synchronize()
        wall[i] = (perf() - start) / loops
    device = [s.elapsed_time(e) / 1000.0 / loops for s, e in zip(starts, ends)]
    return wall, device


def l2_flusher(device: Any = None) -> Callable[[], None]:
    """A function that evicts the GPU's L2 cache by writing a buffer twice its size."""
    import torch

    props = torch.cuda.get_device_properties(device or 0)
    size = max(int(getattr(props, "L2_cache_size", 0)) * 2, 64 << 20)
    buffer = torch.empty(size, dtype=torch.uint8, device=device or "cuda")

    def flush() -> None:
        buffer.zero_()

    return flush


def sample_stages(
    fn: Callable[[Iteration], Any], sync: Callable[[Any], None] | None, count: int
) -> tuple[list[float], list[dict[str, float]]]:
    """``count`` single calls of a stage-timed function: end-to-end and the stages of each call."""
    totals, stages = [0.0] * count, []
    perf = _perf
    for i in range(count):
        it = Iteration(sync)
        start = perf()
        value = fn(it)
        if sync is not None:
            sync(value)
        totals[i] = perf() - start
        stages.append(it.stages)
    return totals, stages


def _noop() -> None:
    return None


def harness_overhead(samples: int = 200, clock: Callable[[], float] | None = None) -> float:
    """Median seconds the sample loop itself costs per sample (timing a no-op, one call)."""
    return statistics.median(sample(_noop, None, 1, samples, clock))


def calibrate_loops(
    fn: Callable[[], Any],
    sync: Callable[[Any], None] | None,
    overhead: float,
    *,
    factor: float = 100.0,
    floor_s: float = 0.0,
    clock: Callable[[], float] | None = None,
) -> tuple[int, float]:
    """(loops, seconds per call): enough calls per sample that a sample lasts at least
    ``factor`` times the harness overhead (and ``floor_s``), as timeit and pyperf calibrate."""
    per_call = statistics.median(sample(fn, sync, 1, 5, clock))
    target = max(factor * overhead, floor_s)
    loops = 1 if per_call >= target else math.ceil(target / max(per_call, 1e-9))
    return min(loops, 10**7), per_call


def cpu_share(fn: Callable[[], Any], loops: int, count: int = 5) -> float:
    """CPU time over wall time of ``count`` samples: about 1 for single-threaded CPU-bound work
    on an idle core, below 1 when preempted or waiting, above 1 when several threads work."""
    wall = cpu = 0.0
    calls = range(loops)
    for _ in range(count):
        w0, c0 = _perf(), time.process_time()
        for _ in calls:
            fn()
        cpu += time.process_time() - c0
        wall += _perf() - w0
    return cpu / wall if wall > 0 else 1.0


def settled(window_medians: list[float], tolerance: float) -> bool:
    """Warm-up is over when the last two rolling medians each moved less than ``tolerance``."""
    if len(window_medians) < 3:
        return False
    a, b, c = window_medians[-3:]
    return abs(b - a) <= tolerance * a and abs(c - b) <= tolerance * b

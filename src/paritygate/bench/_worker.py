"""The benchmark's side of a worker process: load a callable once, then take samples on request.

Run through :mod:`paritygate.workers` (JSON in, JSON out). The timing loop is the same code as in
process (:mod:`paritygate.bench._timing`); only the samples cross the process boundary.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from ..workers import state
from . import _timing

__all__ = ["load", "set_loops", "per_call", "calibrate", "take", "output", "cpu_share", "overhead"]


def load(key: str, target: str, sync: bool | None, clock: str = "wall") -> dict[str, Any]:
    from ._run import _Side, resolve

    side = _Side(key, resolve(target), clock)
    cold, _, how = side.cold(sync)
    state[key] = side
    return {"cold_s": cold, "sync": how, "staged": side.staged}


def set_loops(key: str, loops: int) -> None:
    state[key].loops = loops


def per_call(key: str) -> float:
    return state[key].per_call()


def calibrate(key: str, overhead: float) -> list[float]:
    side = state[key]
    loops, seconds = _timing.calibrate_loops(side.fn, side.sync, overhead, clock=side.clock)
    return [loops, seconds]


def cpu_share(key: str) -> float:
    return state[key].cpu_share()


def overhead(clock: str) -> float:
    return _timing.harness_overhead(clock=None if clock == "wall" else _timing.CLOCKS[clock])


def take(key: str, count: int) -> dict[str, Any]:
    times, stages = state[key].take(count)
    return {"times": times, "stages": stages}


def output(key: str) -> str:
    """The output of one untimed call, flattened to numpy arrays in an npz, base64-encoded."""
    import numpy as np

    from ..outputs import flatten_outputs

    out = state[key].checked_output()
    arrays = {}
    for name, leaf in flatten_outputs(out).items():
        backend = None
        try:
            from ..backends import get_backend

            backend = get_backend(leaf)
        except Exception:
            backend = None
        arrays[name or "output"] = np.asarray(backend.to_numpy(leaf) if backend else leaf)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return base64.b64encode(buffer.getvalue()).decode()

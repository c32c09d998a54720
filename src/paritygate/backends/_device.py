"""Bookkeeping shared by the device backends (torch, MLX, JAX).

Each device kernel reduces an output pair, chunk by chunk, to one vector of statistics laid out as
:data:`STATS` plus the k candidates of largest excess. That vector and those candidates are the
only data that cross to the host; :func:`raw_stats` turns them into a
:class:`~paritygate.metrics.RawStats`, applying the non-finite rules of the metric definitions
(docs/architecture.md) the same way for every framework.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from .._dtypes import ML_DTYPES_NAMES
from ..errors import InputError
from ..metrics import (
    COUNT_STATS,
    MAX_STATS,
    STATISTICS,
    STATS,
    SUM_STATS,
    RawStats,
    dtype_kind,
    finish_plan,
    promote,
    raw_stats_from,
)
from ..results import Element, OutputComparison, Tolerance

__all__ = [
    "SUM_STATS",
    "MAX_STATS",
    "COUNT_STATS",
    "STATS",
    "Plan",
    "plan",
    "raw_stats",
    "kernel_tolerance",
    "empty_stats",
    "split_stats",
    "finish_plan",
    "compare_on_host",
    "ULP_INT_BITS",
    "ML_DTYPES_NAMES",
]

# The statistics vector is laid out as metrics.STATISTICS (sums, maxima, counts); ML_DTYPES_NAMES
# (dtypes numpy knows only through ml_dtypes) is defined once in paritygate._dtypes.

# Bits of the integer a floating dtype is viewed as for ULP ordering.
ULP_INT_BITS = {
    "float8_e4m3fn": 8,
    "float8_e5m2": 8,
    "bfloat16": 16,
    "float16": 16,
    "float32": 32,
    "float64": 64,
}


class Plan:
    """What a kernel needs to know about one output pair before it touches the data."""

    def __init__(
        self,
        *,
        shape: tuple[int, ...],
        dtype_actual: str,
        dtype_expected: str,
        compared_as: str,
        promotion: str | None,
        ulp_dtype: str | None,
        path: str,
    ):
        self.shape = shape
        self.size = math.prod(shape)
        self.dtype_actual = dtype_actual
        self.dtype_expected = dtype_expected
        self.compared_as = compared_as
        self.promotion = promotion
        self.ulp_dtype = ulp_dtype
        self.kind = dtype_kind(compared_as)  # 'float', 'int' or 'bool'
        self.path = path


def plan(
    shape_actual: Sequence[int],
    shape_expected: Sequence[int],
    dtype_actual: str,
    dtype_expected: str,
    path: str,
) -> Plan:
    """Check shapes and dtypes, decide the promotion; raises InputError for what cannot compare."""
    where = path or "output"
    sa, se = tuple(int(s) for s in shape_actual), tuple(int(s) for s in shape_expected)
    if sa != se:
        raise InputError(f"shape mismatch: actual {sa} vs expected {se}", where=where)
    compared_as, promotion, ulp_dtype = promote(dtype_actual, dtype_expected, path=path)
    if dtype_kind(compared_as) == "complex":
        raise InputError(
            f"complex outputs ({dtype_actual}, {dtype_expected}) are compared on the host only",
            hint="compare the real and imaginary parts as separate outputs",
            where=where,
        )
    return Plan(
        shape=sa,
        dtype_actual=dtype_actual,
        dtype_expected=dtype_expected,
        compared_as=compared_as,
        promotion=promotion,
        ulp_dtype=ulp_dtype,
        path=path,
    )


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for dim in reversed(shape):
        flat, rest = divmod(flat, dim) if dim else (flat, 0)
        index.append(rest)
    return tuple(reversed(index))


def _python_value(value: float, dtype: str) -> float | int | bool:
    """A candidate's value as the Python type of its side's dtype (as the host kernel reports)."""
    if not math.isfinite(value):
        return value
    kind = dtype_kind(dtype)
    if kind == "bool":
        return bool(value)
    if kind == "int":
        return int(value)
    return float(value)


def empty_stats() -> Any:
    """The :data:`STATS` vector of an output with no elements: zero sums and counts, no excess."""
    import numpy as np

    return np.array([st.empty for st in STATISTICS])


def split_stats(host: Any, k: int) -> tuple[Any, Any, Any, Any]:
    """A transferred vector split into (the :data:`STATS` vector, worst-k flat indices, actual
    values, expected values): the layout every device kernel sends to the host."""
    n = len(STATS)
    rest = host[n:]
    return host[:n], rest[:k], rest[k : 2 * k], rest[2 * k : 3 * k]


def compare_on_host(
    actual: Any,
    expected: Any,
    tolerance: Tolerance,
    path: str,
    why: str,
    is_array: Callable[[Any], bool],
    to_numpy: Callable[[Any], Any],
) -> OutputComparison:
    """The host engine's comparison of a pair the device cannot compare exactly: the backend's
    arrays (``is_array``) are copied with ``to_numpy``, and ``why`` is added to ``promotion``."""
    from . import host

    a = to_numpy(actual) if is_array(actual) else actual
    e = to_numpy(expected) if is_array(expected) else expected
    result = host.compare_arrays(a, e, tolerance, path)
    result.promotion = f"{result.promotion}; {why}" if result.promotion else why
    return result


def kernel_tolerance(p: Plan, tolerance: Tolerance) -> Tolerance:
    """The tolerance a kernel applies: bool outputs are compared exactly, whatever atol/rtol."""
    if p.kind == "bool" and not tolerance.is_exact:
        return dataclasses.replace(tolerance, atol=0.0, rtol=0.0)
    return tolerance


def raw_stats(
    p: Plan,
    stats: Sequence[float],
    worst_flat: Sequence[float],
    worst_actual: Sequence[float],
    worst_expected: Sequence[float],
    tolerance: Tolerance,
) -> RawStats:
    """Assemble RawStats from the reduced statistics vector and the worst-k candidates.

    ``worst_*`` hold at most k candidates (flat index, actual, expected as the kernel computed
    them); their abs_diff and excess are recomputed here in float64, and the equal non-finite
    positions a kernel may return as filler are dropped.
    """
    s = dict(zip(STATS, (float(v) for v in stats)))
    has_ulp = p.ulp_dtype is not None and p.kind == "float"
    out = raw_stats_from(s, p.size, ulp=has_ulp, ulp_over=tolerance.max_ulp is not None)
    nf = out.nonfinite
    # The kernels count the finite mismatches; the non-finite ones come from the counts.
    nonfinite_mismatches = (
        nf.nan_one_side + nf.inf_mismatch + (0 if tolerance.equal_nan else nf.nan_both)
    )
    out.mismatches += nonfinite_mismatches
    if nonfinite_mismatches:
        out.max_excess = out.atol_needed = out.rtol_needed = math.inf
    out.worst = worst_elements(p, worst_flat, worst_actual, worst_expected, tolerance)
    return out


def worst_elements(
    p: Plan,
    flat_indices: Sequence[float],
    actual: Sequence[float],
    expected: Sequence[float],
    tolerance: Tolerance,
) -> list[Element]:
    """Elements that differ, ordered by excess (non-finite mismatches first, excess = inf), ties
    by index; equal elements never enter the list."""
    atol, rtol = tolerance.atol, tolerance.rtol
    rows = []
    for flat, a, e in zip(flat_indices, actual, expected):
        exact_int = isinstance(a, int) and isinstance(e, int)  # a kernel's exact integers
        diff_int = abs(a - e) if exact_int else None
        a, e = float(a), float(e)
        finite = math.isfinite(a) and math.isfinite(e)
        if finite:
            diff = float(diff_int) if exact_int else abs(a - e)
            if diff == 0:
                continue
            excess = diff - (atol + rtol * abs(e))
        elif math.isnan(a) and math.isnan(e):
            if tolerance.equal_nan:
                continue
            diff, excess = math.nan, math.inf
        elif a == e:  # the same infinity on both sides
            continue
        else:
            diff = abs(a - e)  # inf or nan
            excess = math.inf
        rows.append((excess, int(flat), a, e, diff))
    rows.sort(key=lambda r: (-r[0], r[1]))
    return [
        Element(
            index=unravel(flat, p.shape),
            actual=_python_value(a, p.dtype_actual),
            expected=_python_value(e, p.dtype_expected),
            abs_diff=diff,
            excess=excess,
        )
        for excess, flat, a, e, diff in rows[: tolerance.worst_k]
    ]

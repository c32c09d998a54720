"""Metric bookkeeping shared by every backend.

A backend's kernel (numpy/numba on the host, torch / MLX / JAX on their devices) produces one
:class:`RawStats` per output in a single pass; :func:`finish` turns it into an
:class:`~paritygate.results.OutputComparison` with the verdict and every violated bound, so the
verdict logic exists once. Dtype promotion rules are defined here on dtype *names* so that
backends share them without importing each other's frameworks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import InputError
from .results import Element, Failure, NonFinite, OutputComparison, Tolerance

__all__ = [
    "Statistic",
    "STATISTICS",
    "SUM_STATS",
    "MAX_STATS",
    "COUNT_STATS",
    "STATS",
    "NONFINITE_STATS",
    "raw_stats_from",
    "RawStats",
    "finish",
    "finish_plan",
    "promote",
    "FLOAT_BITS",
    "dtype_kind",
    "one_minus_cosine",
]

# Floating dtypes by precision (mantissa bits), for promotion and ULP measurement.
FLOAT_BITS = {
    # ml_dtypes' small floats (ULPs on their own grids: see docs/architecture.md): e8m0 has
    # neither a sign nor a zero (powers of two), the fnuz types have no negative zero.
    "float4_e2m1fn": 1,
    "float8_e8m0fnu": 0,
    "float8_e4m3fnuz": 3,
    "float8_e5m2fnuz": 2,
    "float8_e4m3fn": 3,
    "float8_e5m2": 2,
    "bfloat16": 7,
    "float16": 10,
    "float32": 23,
    "float64": 52,
}
_INT_NAMES = {f"{s}int{b}" for s in ("", "u") for b in (2, 4, 8, 16, 32, 64)}


def dtype_kind(name: str) -> str:
    """'bool', 'int', 'float', 'complex' or 'other' for a numpy-style dtype name."""
    if name in ("bool", "bool_"):
        return "bool"
    if name in _INT_NAMES:
        return "int"
    if name in FLOAT_BITS:
        return "float"
    if name.startswith("complex"):
        return "complex"
    return "other"


def promote(actual: str, expected: str, *, path: str = "") -> tuple[str, str | None, str | None]:
    """Common dtype for two dtype names: (compared_as, promotion note, ulp dtype).

    Floats promote to the more precise float (a float16 port against a float32 reference is
    compared in float32, and ULPs are counted in float16, the coarser grid). Integers against
    floats compare in float64. Bool against bool is exact. Complex against real, and any
    non-numeric dtype, are input errors.
    """
    ka, ke = dtype_kind(actual), dtype_kind(expected)
    where = path or "output"
    if "other" in (ka, ke):
        bad = actual if ka == "other" else expected
        raise InputError(f"dtype {bad} cannot be compared numerically", where=where)
    if (ka == "complex") != (ke == "complex"):
        raise InputError(f"complex ({actual}) against real ({expected}) outputs", where=where)
    if actual == expected:
        ulp = actual if ka == "float" else None
        return actual, None, ulp
    if ka == "complex":
        target = "complex128" if "complex128" in (actual, expected) else "complex64"
    elif ka == "float" and ke == "float":
        target = actual if FLOAT_BITS[actual] >= FLOAT_BITS[expected] else expected
    elif ka == "bool" and ke == "bool":
        target = "bool"
    elif "float" in (ka, ke):
        target = "float64"
    else:  # int/bool mixes: compare as integers without wrap-around
        target = "int64"
    ulp = None
    if ka == "float" and ke == "float":
        ulp = actual if FLOAT_BITS[actual] <= FLOAT_BITS[expected] else expected
    sides = [name for name, dt in (("actual", actual), ("expected", expected)) if dt != target]
    note = ", ".join(
        f"{dict(actual=actual, expected=expected)[s]} -> {target} ({s})" for s in sides
    )
    return target, note or None, ulp


@dataclass(frozen=True)
class Statistic:
    """One statistic of a kernel's single pass over an output pair (docs/architecture.md
    defines each). Every kernel fills its partials (per block, chunk or thread) and merges them by
    the statistic's ``reduce``: ``"sum"`` (float64, or compensated float32 on a device without
    float64), ``"max"``, ``"count"`` (exact, summed). ``integer`` statistics are exact integers
    (the counts and the largest ULP distance: the host keeps them as uint64); ``empty`` is the
    value over no element, the identity of the merge. ``reported`` ones are copied as they are
    into the :class:`~paritygate.results.OutputComparison`; the others feed what :func:`finish`
    derives (``mean_abs`` from ``sum_abs / n_finite``, the cosine from the five sums, the verdict
    from ``mismatches`` and ``max_excess``, the :class:`~paritygate.results.NonFinite` counts)."""

    name: str
    reduce: str
    integer: bool = False
    empty: float = 0.0
    reported: bool = False


#: The statistics every kernel computes, in the order of the vector a device kernel sends to the
#: host (sums, then maxima, then counts); the host kernel's block partials hold the same ones.
STATISTICS = (
    Statistic("sum_abs", "sum"),
    # dot and the squared norms, and sum (a - e)^2 and sum (a - e)(a + e) from the elementwise
    # difference: 1 - cosine with relative precision near cos = 1 (one_minus_cosine).
    Statistic("dot", "sum"),
    Statistic("norm_actual_sq", "sum"),
    Statistic("norm_expected_sq", "sum"),
    Statistic("diff_norm_sq", "sum"),
    Statistic("norm_sq_gap", "sum"),
    Statistic("max_abs", "max", reported=True),
    Statistic("max_rel", "max", reported=True),
    Statistic("max_rel_symmetric", "max", reported=True),
    # Largest |a - e| - (atol + rtol |e|) over finite positions; inf with a non-finite mismatch.
    Statistic("max_excess", "max", empty=-math.inf),
    Statistic("atol_needed", "max", reported=True),
    Statistic("rtol_needed", "max", reported=True),
    Statistic("ulp_max", "max", integer=True, reported=True),
    Statistic("n_finite", "count", integer=True),
    # Positions outside atol + rtol |e|; a device kernel counts the finite ones and raw_stats
    # adds the non-finite mismatches from the counts below.
    Statistic("mismatches", "count", integer=True, reported=True),
    Statistic("ulp_nonzero", "count", integer=True, reported=True),
    Statistic("ulp_over", "count", integer=True, reported=True),
    *(Statistic(f.name, "count", integer=True) for f in fields(NonFinite)),
)
SUM_STATS = tuple(s.name for s in STATISTICS if s.reduce == "sum")
MAX_STATS = tuple(s.name for s in STATISTICS if s.reduce == "max")
COUNT_STATS = tuple(s.name for s in STATISTICS if s.reduce == "count")
STATS = tuple(s.name for s in STATISTICS)
NONFINITE_STATS = tuple(f.name for f in fields(NonFinite))
assert STATS == SUM_STATS + MAX_STATS + COUNT_STATS  # the device vector's layout


@dataclass
class RawStats:
    """What one pass over an output pair yields (sums in float64 or compensated arithmetic)."""

    size: int
    n_finite: int  # positions where both sides are finite
    max_abs: float = 0.0
    sum_abs: float = 0.0
    max_rel: float = 0.0
    max_rel_symmetric: float = 0.0
    dot: float = 0.0
    norm_actual_sq: float = 0.0
    norm_expected_sq: float = 0.0
    diff_norm_sq: float = 0.0
    norm_sq_gap: float = 0.0
    ulp_max: int | None = None
    ulp_nonzero: int | None = None
    ulp_over: int | None = None
    mismatches: int = 0
    max_excess: float = -math.inf
    atol_needed: float = 0.0
    rtol_needed: float = 0.0
    nonfinite: NonFinite = field(default_factory=NonFinite)
    worst: list[Element] = field(default_factory=list)


def raw_stats_from(values: dict[str, float], size: int, *, ulp: bool, ulp_over: bool) -> RawStats:
    """RawStats from the merged value of every statistic (``STATISTICS`` names; an empty output
    gives each its ``empty`` value): integers as int, the ULP statistics only where ULPs are
    measured (``ulp``) and ``ulp_over`` only under a ULP bound (``ulp_over``)."""
    given: dict[str, Any] = {}
    for st in STATISTICS:
        value = values[st.name] if size else st.empty
        value = int(value) if st.integer else float(value)
        if st.name.startswith("ulp_") and not (ulp and (ulp_over or st.name != "ulp_over")):
            value = None
        given[st.name] = value
    nonfinite = NonFinite(**{name: given.pop(name) for name in NONFINITE_STATS})
    stats = RawStats(size=size, nonfinite=nonfinite, **given)
    return stats


def one_minus_cosine(
    dot: float, norm_actual_sq: float, norm_expected_sq: float, diff_norm_sq: float, gap: float
) -> float:
    """1 - cos(a, e) from the five sums of one pass, with relative precision near cos = 1.

    ``1 - cos = (|a - e|^2 - (|a| - |e|)^2) / (2 |a| |e|)``, and ``|a| - |e|`` is taken as
    ``(|a|^2 - |e|^2) / (|a| + |e|)`` with ``|a|^2 - |e|^2 = sum (a - e)(a + e)`` summed from the
    elementwise difference, so nothing cancels between two nearly equal sums. Every term carries a
    relative rounding error of a few units of the working precision u, so the absolute error is at
    most ``c u |a - e|^2 / (2 |a| |e|) = c u ((1 - cos) + (|a| - |e|)^2 / (2 |a| |e|))``: a
    relative error of ``c u`` in 1 - cos unless a difference of norms dominates the difference
    (each backend's docstring states its bound, tests/test_backend_cosine.py checks it against
    exact rational arithmetic). Where ``|a - e|^2 > 2 |a| |e|`` (cos far
    from 1, or norms far apart) ``1 - dot / (|a| |e|)``, whose absolute error is ``c u``, is the
    more accurate of the two and is used. Requires both norms non-zero.
    """
    norm_a, norm_e = math.sqrt(norm_actual_sq), math.sqrt(norm_expected_sq)
    if math.isfinite(diff_norm_sq) and math.isfinite(gap) and diff_norm_sq <= 2 * norm_a * norm_e:
        radial = gap / (norm_a + norm_e)  # |a| - |e|
        value = (diff_norm_sq - radial * radial) / norm_a / norm_e / 2
        return min(2.0, max(0.0, value))
    cosine = dot / (norm_a * norm_e)
    return 1.0 - max(-1.0, min(1.0, cosine))


def _cosine(stats: RawStats) -> tuple[float | None, float | None, str | None]:
    """(cosine, 1 - cosine, why undefined)."""
    if stats.size == 0:
        return None, None, "empty output"
    # The sums run over positions where both sides are finite: a NaN or an unmatched infinity on
    # one side would otherwise drop out of the cosine and leave it near 1 (or leave a side that
    # is NaN everywhere looking like a zero-norm one).
    nf = stats.nonfinite
    if nf.nan_one_side or nf.inf_mismatch:
        sides = []
        for side, count in (
            ("actual", nf.actual_nan - nf.nan_both),
            ("expected", nf.expected_nan - nf.nan_both),
        ):
            if count > 0:
                sides.append(
                    f"{side} has NaN at {count} of {stats.size} position(s) where the other side "
                    "has none"
                )
        if nf.inf_mismatch:
            sides.append(f"{nf.inf_mismatch} infinity(ies) not matched by the other side")
        return None, None, "; ".join(sides)
    na, ne = stats.norm_actual_sq, stats.norm_expected_sq
    if na == 0 and ne == 0:
        return None, None, "both sides have zero norm"
    if na == 0:
        return None, None, "actual has zero norm"
    if ne == 0:
        return None, None, "expected has zero norm"
    omc = one_minus_cosine(stats.dot, na, ne, stats.diff_norm_sq, stats.norm_sq_gap)
    return 1.0 - omc, omc, None


def finish(
    stats: RawStats,
    *,
    path: str,
    tolerance: Tolerance,
    shape: tuple[int, ...],
    dtype_actual: str,
    dtype_expected: str,
    compared_as: str,
    promotion: str | None,
    ulp_dtype: str | None,
    backend: str,
) -> OutputComparison:
    """The verdict for one output: every violated bound becomes a Failure."""
    tol = tolerance
    cosine, omc, cosine_undefined = _cosine(stats)
    mean_abs = stats.sum_abs / stats.n_finite if stats.n_finite else 0.0
    failures: list[Failure] = []
    nf = stats.nonfinite
    if stats.mismatches:
        where = ""
        if stats.worst:
            where = "index " + ",".join(str(i) for i in stats.worst[0].index)
        failures.append(
            Failure(
                metric="elements",
                bound=f"atol={tol.atol:g} rtol={tol.rtol:g}",
                observed=f"{stats.mismatches} of {stats.size} outside",
                excess=stats.max_excess,
                where=where,
                detail=f"atol {stats.atol_needed:.6g} at rtol={tol.rtol:g} would have passed"
                if math.isfinite(stats.atol_needed)
                else "non-finite mismatch: no tolerance passes",
            )
        )
    if nf.nan_one_side:
        failures.append(Failure("nan", 0, nf.nan_one_side, detail="NaN on one side only"))
    if nf.nan_both and not tol.equal_nan:
        failures.append(
            Failure("nan", 0, nf.nan_both, detail="NaN on both sides (equal_nan=False)")
        )
    if nf.inf_mismatch:
        failures.append(Failure("inf", 0, nf.inf_mismatch, detail="infinity not matched"))
    if tol.min_cosine is not None:
        if cosine is None:
            # Empty outputs are equal by definition; a zero-norm side makes the cosine undefined.
            if stats.size:
                failures.append(
                    Failure("cosine", tol.min_cosine, None, detail=f"undefined: {cosine_undefined}")
                )
        elif omc > 1.0 - tol.min_cosine:  # judged in 1 - x: exact for min_cosine >= 0.5
            failures.append(
                Failure("cosine", tol.min_cosine, cosine, excess=omc - (1.0 - tol.min_cosine))
            )
    if tol.max_ulp is not None and stats.ulp_max is not None and stats.ulp_max > tol.max_ulp:
        failures.append(
            Failure(
                "ulp",
                tol.max_ulp,
                stats.ulp_max,
                excess=float(stats.ulp_max - tol.max_ulp),
                detail=f"{stats.ulp_over} elements beyond {tol.max_ulp} ULP ({ulp_dtype})",
            )
        )
    if tol.max_mean_abs is not None and mean_abs > tol.max_mean_abs:
        failures.append(
            Failure("mean_abs", tol.max_mean_abs, mean_abs, excess=mean_abs - tol.max_mean_abs)
        )
    return OutputComparison(
        path=path,
        passed=not failures,
        shape=tuple(int(s) for s in shape),
        dtype_actual=dtype_actual,
        dtype_expected=dtype_expected,
        compared_as=compared_as,
        promotion=promotion,
        size=stats.size,
        tolerance=tol,
        **{st.name: getattr(stats, st.name) for st in STATISTICS if st.reported},
        mean_abs=mean_abs,
        cosine=cosine,
        one_minus_cosine=omc,
        cosine_undefined=cosine_undefined,
        ulp_dtype=ulp_dtype,
        worst=list(stats.worst[: tol.worst_k]),
        nonfinite=nf,
        failures=failures,
        backend=backend,
    )


def finish_plan(
    stats: RawStats, p: Any, tolerance: Tolerance, path: str, backend: str
) -> OutputComparison:
    """The output's result from its statistics and the shape/dtype facts of its plan ``p`` (a
    device backend's :class:`~paritygate.backends._device.Plan` or the host kernel's pair,
    which carry the same facts)."""
    return finish(
        stats,
        path=path,
        tolerance=tolerance,
        shape=p.shape,
        dtype_actual=p.dtype_actual,
        dtype_expected=p.dtype_expected,
        compared_as=p.compared_as,
        promotion=p.promotion,
        ulp_dtype=p.ulp_dtype,
        backend=backend,
    )

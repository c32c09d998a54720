"""The host kernel: comparison metrics of two numpy arrays in one pass with bounded memory.

The arrays are walked in blocks of :data:`BLOCK` elements (512 KiB per float64 temporary, so the
working set stays in cache and the extra memory does not grow with the array size). Each block
yields its partial sums in float64 and its maxima; the worst-k elements are found without holding
per-element data: every block keeps only its largest excess, and only the k blocks with the
largest ones are visited a second time
(by the numba kernel, split between threads, when it computed the partials).

The blocks are split between threads (``PARITYGATE_THREADS``, else every core this process may
use); each block fills its own row of partials, so the results do not depend on the thread count.
Each thread of the numpy kernel holds one block's scratch buffers (:data:`WORKSPACE_BYTES`, about
6 MiB), so its extra memory is at most :data:`BASE_EXTRA_BYTES` plus that per thread (106 MiB on
16 threads): it grows with the thread count, never with the array size.
When numba is importable and the arrays are large enough to repay the compilation, a fused kernel
(:mod:`paritygate.backends._numba_kernel`) computes the same per-block partials in one pass.
``PARITYGATE_KERNEL=numpy|numba|auto`` (or the ``kernel`` argument) forces either.

Definitions (docs/architecture.md): non-finite positions are accounted separately and excluded
from the numeric metrics; ULPs are counted in the coarser floating dtype of the two; integers are
compared without wrap-around and bool outputs exactly.

1 - cosine (``one_minus_cosine``, :func:`paritygate.metrics.one_minus_cosine`) is within
``1e-14 * |a - e|^2 / (2 |a| |e|)`` of its exact value in both kernels: relative precision near
cos = 1 (tests/test_backend_cosine.py, exact rational reference; the numpy and numba results
agree to 1e-12 relative).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._dtypes import numpy_dtype
from ..errors import InputError
from ..metrics import RawStats, dtype_kind, finish_plan, promote, raw_stats_from
from ..results import Element, OutputComparison, Tolerance
from ._blocks import _F, _I, BLOCK, _Partials

__all__ = [
    "name",
    "BLOCK",
    "is_array",
    "synchronize",
    "describe",
    "to_numpy",
    "dtype_name",
    "compare_arrays",
    "host_stats",
    "kernel_choice",
    "WORKSPACE_BYTES",
    "BASE_EXTRA_BYTES",
]

name = "numpy"


#: Below this many elements the numpy path is used even when numba is installed: compiling the
#: fused kernel costs more than it saves on small outputs.
NUMBA_MIN_SIZE = 1 << 20

_KERNEL_ENV = "PARITYGATE_KERNEL"

#: A block's exact shortcuts: maxima located by argmax (which also says when a count has
#: nothing to count), the largest symmetric relative error sought only where the plain one
#: reaches it, ULP distances read from the bit patterns when no pair differs in sign. Each gives
#: the value of the full computation bit for bit; tests turn them off to check that.
SHORTCUTS = True
_INT_VIEW = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def is_array(obj: Any) -> bool:
    return isinstance(obj, np.ndarray)


def synchronize(obj: Any) -> None:
    return None


def dtype_name(dtype: Any) -> str:
    """The numpy-style name of a dtype (``float32``, ``bfloat16``, ``bool``, ``<U5`` ...)."""
    dt = np.dtype(dtype)
    if dt.kind == "O":
        return "object"
    if dt.kind in "US":
        return dt.str.lstrip("<>=|")
    return dt.name


def describe(obj: Any) -> tuple[tuple[int, ...], str, str]:
    arr = np.asarray(obj)
    return tuple(int(s) for s in arr.shape), dtype_name(arr.dtype), "cpu"


def to_numpy(obj: Any) -> np.ndarray:
    return np.asarray(obj)


# --------------------------------------------------------------------------------------------
# Preparing a pair: shapes, promotion, views the blocks are read from


@dataclass
class _Pair:
    a: np.ndarray  # actual, in its own dtype (complex outputs viewed as real/imag pairs)
    e: np.ndarray
    shape: tuple[int, ...]
    dtype_actual: str
    dtype_expected: str
    compared_as: str
    promotion: str | None
    ulp_dtype: str | None
    mode: str  # "float", "int", "uint", "bool"
    exact: bool  # bool outputs ignore atol/rtol: they are compared exactly


def _as_array(obj: Any, side: str, path: str) -> np.ndarray:
    try:
        arr = np.asarray(obj)
    except Exception as exc:  # ragged lists, objects without an array form
        raise InputError(
            f"{side} cannot be read as an array ({type(obj).__name__}: {exc})", where=path or None
        ) from None
    if arr.dtype.kind == "O":
        raise InputError(
            f"{side} is an object array of shape {arr.shape}; only numeric, bool and string "
            "outputs "
            "can be compared",
            where=path or None,
        )
    return arr


def _prepare(actual: Any, expected: Any, path: str) -> _Pair:
    a = _as_array(actual, "actual", path)
    e = _as_array(expected, "expected", path)
    da, de = dtype_name(a.dtype), dtype_name(e.dtype)
    where = path or None
    if a.shape != e.shape:
        raise InputError(
            f"shape mismatch: actual {a.shape} {da} vs expected {e.shape} {de}", where=where
        )
    ka, ke = dtype_kind(da), dtype_kind(de)
    if "other" in (ka, ke):
        raise InputError(
            f"cannot compare actual {da} with expected {de} numerically (shape {a.shape})",
            where=where,
        )
    compared_as, note, ulp = promote(da, de, path=path)
    shape = tuple(int(s) for s in a.shape)
    if compared_as.startswith("complex"):
        # Complex outputs are compared as (real, imaginary) pairs: a trailing axis of length 2.
        component = "float64" if compared_as == "complex128" else "float32"
        a = np.ascontiguousarray(a.astype(compared_as, copy=False))[..., None].view(component)
        e = np.ascontiguousarray(e.astype(compared_as, copy=False))[..., None].view(component)
        shape = shape + (2,)
        ulp = "float32" if "complex64" in (da, de) else "float64"
        pair_note = (
            f"{compared_as} compared as ({component} real, imaginary) pairs: "
            "last index 0=real 1=imag"
        )
        note = f"{note}; {pair_note}" if note else pair_note
        compared_as = component
        mode = "float"
    elif compared_as == "bool":
        mode = "bool"
    elif dtype_kind(compared_as) == "int":
        unsigned = {da, de} <= {f"uint{b}" for b in (2, 4, 8, 16, 32, 64)}
        if "uint64" in (da, de) and not unsigned:
            # uint64 against a signed integer has no exact common integer type.
            mode = "float"
            compared_as = "float64"
            extra = f"{da} vs {de} compared in float64 (no common integer type)"
            note = f"{note}; {extra}" if note else extra
        else:
            mode = "uint" if unsigned else "int"
    else:
        mode = "float"
    return _Pair(
        a=a,
        e=e,
        shape=shape,
        dtype_actual=da,
        dtype_expected=de,
        compared_as=compared_as,
        promotion=note,
        ulp_dtype=ulp,
        mode=mode,
        exact=mode == "bool",
    )


def _native(x: np.ndarray) -> np.ndarray:
    return x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("="))


def _flat_range(x: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Elements [start, stop) of x in C order, copying at most that block."""
    if x.flags.c_contiguous:
        return _native(x.reshape(-1)[start:stop])
    index = np.unravel_index(np.arange(start, stop), x.shape)
    return _native(x[index])


def _blocks(pair: _Pair) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    n = pair.a.size
    for start in range(0, n, BLOCK):
        stop = min(start + BLOCK, n)
        yield start, _flat_range(pair.a, start, stop), _flat_range(pair.e, start, stop)


# --------------------------------------------------------------------------------------------
# One block


#: Bytes of one thread's scratch buffers in the numpy kernel: 7 float64, 5 int64, 2 bool per element
#: of a block.
WORKSPACE_BYTES = BLOCK * (7 * 8 + 5 * 8 + 2)
#: Extra memory of a comparison beyond the threads' workspaces (per-block partials, the worst-k
#: candidates, one block's casts): the stated bound is this plus WORKSPACE_BYTES per thread.
BASE_EXTRA_BYTES = 8 << 20


class _Workspace:
    """Scratch buffers of one block, allocated once per comparison and thread (WORKSPACE_BYTES).

    Reusing them keeps every temporary in cache and avoids a fresh allocation (and its page
    faults) per operation.
    """

    def __init__(self, size: int = BLOCK):
        self.a64 = np.empty(size, np.float64)
        self.e64 = np.empty(size, np.float64)
        self.d = np.empty(size, np.float64)
        self.sd = np.empty(size, np.float64)
        self.ae = np.empty(size, np.float64)
        self.t1 = np.empty(size, np.float64)
        self.t2 = np.empty(size, np.float64)
        self.m1 = np.empty(size, np.bool_)
        self.m2 = np.empty(size, np.bool_)
        self.i1 = np.empty(size, np.int64)
        self.i2 = np.empty(size, np.int64)
        self.i3 = np.empty(size, np.int64)
        self.i4 = np.empty(size, np.int64)
        self.i5 = np.empty(size, np.int64)


def _as_float64(
    ac: np.ndarray, ec: np.ndarray, mode: str, ws: _Workspace
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both sides in float64 and |a - e| in float64 (views of the workspace), integers without
    wrap-around."""
    n = ac.size
    a64, e64, d = ws.a64[:n], ws.e64[:n], ws.d[:n]
    a64[...] = ac
    e64[...] = ec
    if mode in ("int", "uint"):
        ai, ei, du = ws.i1[:n], ws.i2[:n], ws.i3[:n]
        if mode == "uint":
            ai, ei, du = ai.view(np.uint64), ei.view(np.uint64), du.view(np.uint64)
        ai[...] = ac
        ei[...] = ec
        less = np.less(ai, ei, out=ws.m1[:n])
        au, eu, uu = ai.view(np.uint64), ei.view(np.uint64), du.view(np.uint64)
        # Modular uint64 subtraction is exact because |a - e| < 2**64; the larger side first.
        np.subtract(au, eu, out=uu)
        np.subtract(eu, au, out=uu, where=less)
        d[...] = uu
    else:
        sd = ws.sd[:n]
        with np.errstate(invalid="ignore", over="ignore"):
            np.subtract(a64, e64, out=sd)
        np.abs(sd, out=d)
    return a64, e64, d


def _ordered(
    x: np.ndarray, ulp_dtype: np.dtype, buf_m: np.ndarray, buf_o: np.ndarray
) -> np.ndarray:
    """Floats mapped to integers in the order of their values (one step = one ULP).

    Negative floats (sign bit set) are reflected below zero, branch-free in the float's own
    integer width: ``(i ^ (m & 0x7f..f)) - m`` with ``m = i >> (bits - 1)`` equals
    ``INT_MIN - i`` for negative ``i``; -0.0 and +0.0 both map to 0 and nothing overflows.
    """
    n = x.size
    if x.dtype != ulp_dtype:
        with np.errstate(over="ignore", invalid="ignore"):
            x = x.astype(ulp_dtype)
    table = _grid_rank(ulp_dtype)
    if table is not None:
        out = buf_o.view(np.int64)[:n]
        np.take(table, x.view(np.uint8), out=out)
        return out
    size = ulp_dtype.itemsize
    itype = _INT_VIEW[size]
    bits = x.view(itype)
    m = buf_m.view(itype)[:n]
    out = buf_o.view(itype)[:n]
    np.right_shift(bits, 8 * size - 1, out=m)
    np.bitwise_and(m, itype((1 << (8 * size - 1)) - 1), out=out)
    np.bitwise_xor(bits, out, out=out)
    np.subtract(out, m, out=out)
    return out


# One-byte floats whose bit patterns do not order like a sign-magnitude integer (no sign bit at
# bit 7: float4_e2m1fn; no sign at all: float8_e8m0fnu) or have no negative zero (fnuz): their
# ULP distance is the distance of ranks on the dtype's own grid of finite values, -0 and +0 one
# point. Every byte pattern's rank is read from a 256-entry table built from the dtype itself.
_GRID_DTYPES = ("float4_e2m1fn", "float8_e8m0fnu", "float8_e4m3fnuz", "float8_e5m2fnuz")
_GRID_TABLES: dict[str, np.ndarray] = {}


def _grid_rank(dtype: np.dtype) -> np.ndarray | None:
    if dtype.name not in _GRID_DTYPES:
        return None
    table = _GRID_TABLES.get(dtype.name)
    if table is None:
        with np.errstate(invalid="ignore", over="ignore"):
            values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)
        finite = np.unique(values[np.isfinite(values)])  # -0.0 and 0.0 are one value
        table = np.zeros(256, np.int64)
        ok = np.isfinite(values)
        table[ok] = np.searchsorted(finite, values[ok])
        _GRID_TABLES[dtype.name] = table
    return table


def _ulp_distance(
    ac: np.ndarray, ec: np.ndarray, ulp_dtype: np.dtype, ws: _Workspace
) -> np.ndarray:
    """|ordered(a) - ordered(e)| as int64 (float64 grid: uint64)."""
    n = ac.size
    oa = _ordered(ac, ulp_dtype, ws.i4, ws.i1)
    oe = _ordered(ec, ulp_dtype, ws.i4, ws.i2)
    out = ws.i3[:n]
    if ulp_dtype.itemsize < 8:
        np.subtract(oa, oe, out=out, dtype=np.int64)
        return np.abs(out, out=out)
    uu = out.view(np.uint64)
    ua, ue = oa.view(np.uint64), oe.view(np.uint64)
    less = np.less(oa, oe, out=ws.m2[:n])
    np.subtract(ua, ue, out=uu)
    np.subtract(ue, ua, out=uu, where=less)
    return uu


@dataclass
class _Settings:
    atol: float
    rtol: float
    rel_eps: float
    equal_nan: bool
    max_ulp: int | None
    ulp_dtype: np.dtype | None
    mode: str
    # The ULP dtype's bit patterns order like sign-magnitude integers (no rank table needed).
    ulp_bits: bool = False


def _block_stats(
    ac: np.ndarray, ec: np.ndarray, s: _Settings, frow: np.ndarray, irow: np.ndarray, ws: _Workspace
) -> None:
    # Overflow (squares of values beyond 1e154) and inf - inf are accounted, not warned about.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        _block_stats_quiet(ac, ec, s, frow, irow, ws)


def _block_stats_quiet(
    ac: np.ndarray, ec: np.ndarray, s: _Settings, frow: np.ndarray, irow: np.ndarray, ws: _Workspace
) -> None:
    a64, e64, d = _as_float64(ac, ec, s.mode, ws)
    n = d.size
    finite: np.ndarray | None = None
    nf_mismatch: np.ndarray | None = None
    sum_abs = d.sum()
    if s.mode == "float" and not math.isfinite(sum_abs):
        # A non-finite input always makes the sum non-finite (so can an overflow of finite ones).
        an, en = np.isnan(a64), np.isnan(e64)
        ai, ei = np.isinf(a64), np.isinf(e64)
        nan_both = an & en
        nan_one = an ^ en
        any_nan = an | en
        inf_pos = (ai | ei) & ~any_nan
        inf_bad = inf_pos & (a64 != e64)
        finite = ~(any_nan | ai | ei)
        nf_mismatch = nan_one | inf_bad
        if not s.equal_nan:
            nf_mismatch |= nan_both
        irow[_I["actual_nan"]] = np.count_nonzero(an)
        irow[_I["expected_nan"]] = np.count_nonzero(en)
        irow[_I["nan_both"]] = np.count_nonzero(nan_both)
        irow[_I["nan_one_side"]] = np.count_nonzero(nan_one)
        irow[_I["actual_inf"]] = np.count_nonzero(ai)
        irow[_I["expected_inf"]] = np.count_nonzero(ei)
        irow[_I["inf_mismatch"]] = np.count_nonzero(inf_bad)
        # Non-finite positions leave the numeric metrics: zero both sides there.
        nonfinite = ~finite
        a64[nonfinite] = 0.0
        e64[nonfinite] = 0.0
        d[nonfinite] = 0.0
        if s.mode == "float":
            ws.sd[:n][nonfinite] = 0.0  # the difference of the zeroed sides
        sum_abs = d.sum()
    n_finite = n if finite is None else int(np.count_nonzero(finite))
    irow[_I["n_finite"]] = n_finite

    ae, t1, t2 = ws.ae[:n], ws.t1[:n], ws.t2[:n]
    np.abs(e64, out=ae)
    max_abs = d.max()
    frow[_F["max_abs"]] = max_abs
    frow[_F["sum_abs"]] = sum_abs
    # Products summed pairwise by numpy rather than by BLAS: no BLAS thread pool to wake per
    # block (costly on a busy machine), and pairwise summation is the more accurate one.
    frow[_F["dot"]] = np.multiply(a64, e64, out=t1).sum()
    frow[_F["norm_actual_sq"]] = np.multiply(a64, a64, out=t1).sum()
    frow[_F["norm_expected_sq"]] = np.multiply(e64, e64, out=t1).sum()

    count: int | None = None
    if finite is None:
        # Elements with a == e contribute nothing but their (negative) excess to the metrics
        # below; when few elements differ, compute those metrics on the differing ones only.
        differ = np.greater(d, 0, out=ws.m2[:n])
        count = int(np.count_nonzero(differ))
        if count * 8 < n:
            _sparse_block_stats(ac, ec, a64, e64, d, ae, differ, count, s, frow, irow)
            return
    _difference_sums(a64, e64, d, ws.sd[:n] if s.mode == "float" else None, t1, t2, frow)
    shortcuts = SHORTCUTS

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if max_abs > 0:
            # fmax skips 0/0 (rel_eps = 0 with both sides zero): equal elements have no
            # relative error.
            np.add(ae, s.rel_eps, out=t1)
            rel = np.divide(d, t1, out=t1)
            _relative_maxima(a64, ae, d, rel, s, frow, ws, shortcuts)

        # excess = d - (atol + rtol |e|), the same operations in every kernel; rtol |e| is
        # computed once for atol_needed = max(d - rtol |e|) (with rtol = 0: max |a - e|).
        scaled = np.multiply(ae, s.rtol, out=t2)
        if s.rtol == 0:
            frow[_F["atol_needed"]] = max_abs
        else:
            np.subtract(d, scaled, out=t1)
            if finite is not None:
                t1[~finite] = -np.inf
            frow[_F["atol_needed"]] = max(t1.max(), 0.0)
        excess = np.add(scaled, s.atol, out=t2)
        np.subtract(d, excess, out=excess)
        if finite is not None:
            excess[~finite] = -np.inf
        top = -1
        if shortcuts:
            # The largest excess by argmax (NaN first, like max); no element exceeds its bound
            # when the largest excess does not, so the count needs no pass then.
            top = int(np.argmax(excess))
            block_max = excess[top]
            if block_max > 0 or block_max != block_max:
                mismatches = int(np.count_nonzero(np.greater(excess, 0, out=ws.m1[:n])))
            else:
                mismatches = 0
        else:
            mismatches = int(np.count_nonzero(np.greater(excess, 0, out=ws.m1[:n])))
            block_max = excess.max()
        # rtol_needed = max((d - atol) / |e|) over d > atol (x/0 = inf there); others give <= 0.
        if max_abs > s.atol:
            over = np.greater(d, s.atol, out=ws.m2[:n])
            count_over = np.count_nonzero(over)
            if count_over * 8 < n:
                picked = np.flatnonzero(over)
                values = (d[picked] - s.atol) / ae[picked]
            else:
                values = np.subtract(d, s.atol, out=t1)
                np.divide(values, ae, out=values)
            frow[_F["rtol_needed"]] = max(np.fmax.reduce(values), 0.0)

    key = block_max
    if nf_mismatch is not None and nf_mismatch.any():
        mismatches += int(np.count_nonzero(nf_mismatch))
        block_max = np.inf
        key = np.inf
        frow[_F["rtol_needed"]] = np.inf
        frow[_F["atol_needed"]] = np.inf
    elif not block_max > 0:
        # The worst elements are those that differ at all; equal elements never enter them.
        # When the element of largest excess differs, that excess is theirs; otherwise the
        # equal elements are masked (in place, as a plain maximum: a masked np.max took a fifth
        # of a passing block's time).
        key = -np.inf
        if max_abs > 0:
            if top >= 0 and d[top] > 0:
                key = block_max
            else:
                equal = np.equal(d, 0, out=ws.m2[:n])
                if equal.any():
                    excess[equal] = -np.inf
                key = excess.max()
    frow[_F["max_excess"]] = key
    frow[_F["key"]] = key
    irow[_I["mismatches"]] = mismatches

    if s.ulp_dtype is not None:
        quick = None
        if shortcuts and finite is None:
            quick = _ulp_same_sign(ac, ec, s, count, ws)
        if quick is not None:
            irow[_I["ulp_max"]], irow[_I["ulp_nonzero"]], ulp_over = quick
            if ulp_over is not None:
                irow[_I["ulp_over"]] = ulp_over
            return
        ud = _ulp_distance(ac, ec, s.ulp_dtype, ws)
        if finite is not None:
            ud[~finite] = 0
        irow[_I["ulp_max"]] = ud.max()
        irow[_I["ulp_nonzero"]] = np.count_nonzero(ud)
        if s.max_ulp is not None:
            irow[_I["ulp_over"]] = np.count_nonzero(ud > s.max_ulp)


def _relative_maxima(
    a64: np.ndarray,
    ae: np.ndarray,
    d: np.ndarray,
    rel: np.ndarray,
    s: _Settings,
    frow: np.ndarray,
    ws: _Workspace,
    shortcuts: bool,
) -> None:
    """max d / (|e| + eps) and max d / (max(|a|, |e|) + eps) of a block (``rel`` holds the
    first quotient of every element and is overwritten).

    The symmetric quotient of an element never exceeds its plain one (same numerator, a
    denominator at least as large, rounding being monotonic). So once one element's symmetric
    quotient is known, only the elements whose plain quotient reaches it can hold the largest
    symmetric one: the rest of the block needs one comparison, not five passes.
    """
    n = d.size
    if shortcuts:
        top = int(np.argmax(rel))
        largest = rel[top]
        if largest == largest:  # no 0/0 in the block: argmax found the maximum fmax would
            frow[_F["max_rel"]] = max(largest, 0.0)
            # The symmetric quotient of the element of largest plain quotient, by the same
            # operations as below: a value the largest symmetric quotient reaches.
            bound = d[top] / (max(abs(a64[top]), ae[top]) + s.rel_eps)
            picked = np.flatnonzero(np.greater_equal(rel, bound, out=ws.m1[:n]))
            if bound == bound and picked.size * 8 < n:
                denominator = np.abs(a64[picked])
                np.maximum(denominator, ae[picked], out=denominator)
                denominator += s.rel_eps
                symmetric = np.divide(d[picked], denominator, out=denominator)
                frow[_F["max_rel_symmetric"]] = max(np.fmax.reduce(symmetric), 0.0)
                return
        else:
            frow[_F["max_rel"]] = max(np.fmax.reduce(rel), 0.0)
    else:
        frow[_F["max_rel"]] = max(np.fmax.reduce(rel), 0.0)
    t1 = rel
    np.abs(a64, out=t1)
    np.maximum(t1, ae, out=t1)
    t1 += s.rel_eps
    np.divide(d, t1, out=t1)
    frow[_F["max_rel_symmetric"]] = max(np.fmax.reduce(t1), 0.0)


def _ulp_same_sign(
    ac: np.ndarray, ec: np.ndarray, s: _Settings, differing: int | None, ws: _Workspace
) -> tuple[int, int, int | None] | None:
    """(ulp_max, ulp_nonzero, ulp_over) of a finite block where no pair differs in its sign bit,
    else None.

    With equal sign bits the order-preserving map of :func:`_ordered` is the bit pattern itself
    (or its negation, for both negative), so the ULP distance is the difference of the bit
    patterns, which fits the float's own integer width. When the ULP dtype is both sides' own,
    the elements a ULP apart are exactly those that differ (``differing``, already counted).
    """
    ulp_dtype = s.ulp_dtype
    if ulp_dtype is None or not s.ulp_bits:
        return None
    n = ac.size
    itype = _INT_VIEW[ulp_dtype.itemsize]
    xa = ac if ac.dtype == ulp_dtype else ac.astype(ulp_dtype)
    xe = ec if ec.dtype == ulp_dtype else ec.astype(ulp_dtype)
    ia, ie = xa.view(itype), xe.view(itype)
    gap = ws.i3.view(itype)[:n]
    np.bitwise_xor(ia, ie, out=gap)
    if gap.min() < 0:
        return None
    np.subtract(ia, ie, out=gap)
    np.abs(gap, out=gap)
    ulp_max = int(gap.max())
    if ulp_max == 0:
        nonzero = 0
    elif differing is not None and ac.dtype == ulp_dtype and ec.dtype == ulp_dtype:
        nonzero = differing
    else:
        nonzero = int(np.count_nonzero(gap))
    over = None
    if s.max_ulp is not None:
        over = 0 if ulp_max <= s.max_ulp else int(np.count_nonzero(gap > s.max_ulp))
    return ulp_max, nonzero, over


def _difference_sums(
    a64: np.ndarray,
    e64: np.ndarray,
    d: np.ndarray,
    sd: np.ndarray | None,
    t1: np.ndarray,
    t2: np.ndarray,
    frow: np.ndarray,
) -> None:
    """sum (a - e)^2 and sum (a - e)(a + e) of a block (non-finite positions zeroed); ``sd`` is
    a - e when it was kept (floats: |a - e| is its absolute value, so its square is d's)."""
    if sd is None:
        frow[_F["diff_norm_sq"]] = np.multiply(d, d, out=t1).sum()
        sd = np.subtract(a64, e64, out=t2)
    else:
        frow[_F["diff_norm_sq"]] = np.multiply(sd, sd, out=t1).sum()
    np.add(a64, e64, out=t1)
    frow[_F["norm_sq_gap"]] = np.multiply(sd, t1, out=t1).sum()


def _sparse_block_stats(
    ac: np.ndarray,
    ec: np.ndarray,
    a64: np.ndarray,
    e64: np.ndarray,
    d: np.ndarray,
    ae: np.ndarray,
    differ: np.ndarray,
    count: int,
    s: _Settings,
    frow: np.ndarray,
    irow: np.ndarray,
) -> None:
    """The rest of a finite block whose elements mostly agree: metrics of the differing ones.

    An equal element (d = 0) has relative error 0, needs no atol or rtol, and is 0 ULP apart
    (equal values round to the same coarser value); the largest excess is taken over the
    elements that differ. Every value below is bit-identical to the dense computation.
    """
    frow[_F["max_abs"]] = d.max()
    if count == 0:
        return
    picked = np.flatnonzero(differ)
    ds, aes, as_ = d[picked], ae[picked], a64[picked]
    es = e64[picked]
    frow[_F["diff_norm_sq"]] = np.dot(ds, ds)
    frow[_F["norm_sq_gap"]] = np.dot(as_ - es, as_ + es)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        frow[_F["max_rel"]] = max(np.fmax.reduce(ds / (aes + s.rel_eps)), 0.0)
        frow[_F["max_rel_symmetric"]] = max(
            np.fmax.reduce(ds / (np.maximum(np.abs(as_), aes) + s.rel_eps)), 0.0
        )
        excess = ds - (aes * s.rtol + s.atol)
        key = excess.max()
        frow[_F["key"]] = key
        frow[_F["max_excess"]] = key
        irow[_I["mismatches"]] = np.count_nonzero(excess > 0)
        if s.rtol == 0:
            frow[_F["atol_needed"]] = frow[_F["max_abs"]]
        else:
            frow[_F["atol_needed"]] = max((ds - aes * s.rtol).max(), 0.0)
        frow[_F["rtol_needed"]] = max(np.fmax.reduce((ds - s.atol) / aes), 0.0)
    if s.ulp_dtype is not None:
        ud = _ulp_distance(ac[picked], ec[picked], s.ulp_dtype, _Workspace(count))
        irow[_I["ulp_max"]] = ud.max()
        irow[_I["ulp_nonzero"]] = np.count_nonzero(ud)
        if s.max_ulp is not None:
            irow[_I["ulp_over"]] = np.count_nonzero(ud > s.max_ulp)


def _block_elements(
    start: int, ac: np.ndarray, ec: np.ndarray, s: _Settings, k: int
) -> list[tuple[float, int, Any, Any, float]]:
    """(excess, flat index, actual, expected, abs_diff) of the k worst differing elements."""
    a64, e64, d = _as_float64(ac, ec, s.mode, _Workspace(ac.size))
    with np.errstate(invalid="ignore", over="ignore"):
        excess = d - (np.abs(e64) * s.rtol + s.atol)
    candidate = d > 0
    if s.mode == "float":
        an, en = np.isnan(a64), np.isnan(e64)
        ai, ei = np.isinf(a64), np.isinf(e64)
        nonfinite = an | en | ai | ei
        nf_mismatch = (an ^ en) | ((ai | ei) & ~(an | en) & (a64 != e64))
        if not s.equal_nan:
            nf_mismatch |= an & en
        excess[nonfinite] = -np.inf
        excess[nf_mismatch] = np.inf
        candidate = (candidate & ~nonfinite) | nf_mismatch
    positions = np.flatnonzero(candidate)
    if positions.size > k:
        values = excess[positions]
        # Keep what ties with or beats the k-th largest excess (a linear-time partition), then
        # order those few: largest excess first, then the lowest index.
        kth = np.partition(values, values.size - k)[values.size - k]
        keep = values >= kth
        positions, values = positions[keep], values[keep]
        order = np.lexsort((positions, -values))[:k]
        positions = positions[order]
    out = []
    for p in positions:
        out.append((float(excess[p]), start + int(p), ac[p], ec[p], float(d[p])))
    return out


def _scalar(x: Any) -> float | int | bool:
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer, int)):
        return int(x)
    return float(x)


# --------------------------------------------------------------------------------------------
# Kernel choice and the full pass


def kernel_choice(kernel: str | None, size: int, pair_supported: bool) -> str:
    """'numpy' or 'numba' for an output of ``size`` elements (``kernel`` or $PARITYGATE_KERNEL)."""
    choice = (kernel or os.environ.get(_KERNEL_ENV) or "auto").lower()
    if choice not in ("auto", "numpy", "numba"):
        raise InputError(
            f"kernel must be 'auto', 'numpy' or 'numba', got {choice!r}",
            where=_KERNEL_ENV if not kernel else None,
        )
    if choice == "numpy":
        return "numpy"
    from . import _numba_kernel

    if choice == "numba":
        if not _numba_kernel.available():
            raise InputError(
                "the numba kernel was requested but numba is not installed",
                hint="pip install 'paritygate[fast]'",
            )
        return "numba" if pair_supported else "numpy"
    if size >= NUMBA_MIN_SIZE and pair_supported and _numba_kernel.available():
        return "numba"
    return "numpy"


def _settings(pair: _Pair, tolerance: Tolerance) -> _Settings:
    ulp = numpy_dtype(pair.ulp_dtype) if pair.ulp_dtype else None
    return _Settings(
        atol=0.0 if pair.exact else float(tolerance.atol),
        rtol=0.0 if pair.exact else float(tolerance.rtol),
        rel_eps=float(tolerance.rel_eps),
        equal_nan=bool(tolerance.equal_nan),
        max_ulp=tolerance.max_ulp,
        ulp_dtype=ulp,
        mode=pair.mode,
        ulp_bits=ulp is not None and _grid_rank(ulp) is None,
    )


def _partials_numpy(pair: _Pair, s: _Settings) -> _Partials:
    """Per-block partials by numpy, the blocks split between threads (numpy's ufuncs release
    the GIL on large operands); every block fills its own row, so the result does not depend on
    the number of threads ($PARITYGATE_THREADS, else the cores this process may use)."""
    n_blocks = -(-pair.a.size // BLOCK)
    partials = _Partials(n_blocks)
    from ._numba_kernel import split_blocks

    def run(first: int, last: int) -> None:
        ws = _Workspace(min(BLOCK, max(pair.a.size, 1)))
        n = pair.a.size
        for b in range(first, last):
            start, stop = b * BLOCK, min((b + 1) * BLOCK, n)
            ac, ec = _flat_range(pair.a, start, stop), _flat_range(pair.e, start, stop)
            _block_stats(ac, ec, s, partials.f[b], partials.i[b], ws)

    split_blocks(n_blocks, run)
    return partials


def _reduce(
    pair: _Pair, s: _Settings, partials: _Partials, k: int, kernel: str = "numpy"
) -> RawStats:
    size = int(pair.a.size)
    merged = partials.merged() if size else {}
    stats = raw_stats_from(
        merged, size, ulp=s.ulp_dtype is not None, ulp_over=s.max_ulp is not None
    )
    sums = (stats.dot, stats.norm_actual_sq, stats.norm_expected_sq)
    finite = all(math.isfinite(x) for x in (*sums, stats.diff_norm_sq, stats.norm_sq_gap))
    if stats.n_finite and (not finite or 0.0 in sums[1:]):
        # Squares beyond float64 (values above ~1e154), or a norm that underflowed to zero
        # (values below ~1e-162; a side that is truly all zeros stays zero): the cosine is
        # scale-invariant, so its sums are recomputed with each side scaled by a power of two.
        (
            stats.dot,
            stats.norm_actual_sq,
            stats.norm_expected_sq,
            stats.diff_norm_sq,
            stats.norm_sq_gap,
        ) = _scaled_products(pair)
    stats.worst = _worst(pair, s, partials.f[:, _F["key"]], k, kernel)
    return stats


def _finite_blocks(pair: _Pair) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """float64 blocks of both sides with the positions that are non-finite on either side zeroed."""
    for _start, ac, ec in _blocks(pair):
        a64 = ac.astype(np.float64)
        e64 = ec.astype(np.float64)
        bad = ~(np.isfinite(a64) & np.isfinite(e64))
        a64[bad] = 0.0
        e64[bad] = 0.0
        yield a64, e64


def _scaled_products(pair: _Pair) -> tuple[float, float, float, float, float]:
    """(sum a e, sum a^2, sum e^2, sum (a - e)^2, sum (a - e)(a + e)) of a / 2**p and e / 2**q,
    the largest magnitudes brought near 1 (one shift for both sides when their peaks are within
    a factor of 2**64, so that the difference stays the scaled difference)."""
    peak_a = peak_e = 0.0
    for a64, e64 in _finite_blocks(pair):
        peak_a = max(peak_a, float(np.abs(a64).max()))
        peak_e = max(peak_e, float(np.abs(e64).max()))
    # Exponents, not factors: 2**-frexp(p) itself overflows when p is subnormal (a side of
    # 1e-313 against one of 1e154), while ldexp scales each element exactly.
    shift_a = -math.frexp(peak_a)[1] if peak_a else 0
    shift_e = -math.frexp(peak_e)[1] if peak_e else 0
    if peak_a and peak_e and abs(shift_a - shift_e) <= 64:
        shift_a = shift_e = max(shift_a, shift_e)
    dot = na = ne = dd = gap = 0.0
    for a64, e64 in _finite_blocks(pair):
        a64 = np.ldexp(a64, shift_a)
        e64 = np.ldexp(e64, shift_e)
        diff = a64 - e64
        dot += float(np.dot(a64, e64))
        na += float(np.dot(a64, a64))
        ne += float(np.dot(e64, e64))
        dd += float(np.dot(diff, diff))
        gap += float(np.dot(diff, a64 + e64))
    return dot, na, ne, dd, gap


def _worst(
    pair: _Pair, s: _Settings, keys: np.ndarray, k: int, kernel: str = "numpy"
) -> list[Element]:
    """Revisit only the k blocks with the largest excess: the k worst elements lie among them
    (by the numba kernel, the blocks split between threads, when it computed the partials)."""
    if k <= 0 or keys.size == 0:
        return []
    live = np.flatnonzero(keys > -np.inf)
    if live.size == 0:
        return []
    order = np.lexsort((live, -keys[live]))[:k]
    found: list[tuple[float, int, Any, Any, float]] = []
    n = pair.a.size
    blocks = sorted(int(x) for x in live[order])
    if kernel == "numba":
        from . import _numba_kernel

        found = _numba_kernel.worst(pair, s, blocks, k)
    for b in blocks if kernel != "numba" else ():
        start, stop = b * BLOCK, min((b + 1) * BLOCK, n)
        ac, ec = _flat_range(pair.a, start, stop), _flat_range(pair.e, start, stop)
        found.extend(_block_elements(start, ac, ec, s, k))
    found.sort(key=lambda t: (-t[0], t[1]))
    shape = pair.shape
    return [
        Element(
            index=tuple(int(x) for x in np.unravel_index(flat, shape)) if shape else (),
            actual=_scalar(a),
            expected=_scalar(e),
            abs_diff=diff,
            excess=exc,
        )
        for exc, flat, a, e, diff in found[:k]
    ]


def host_stats(
    actual: Any, expected: Any, tolerance: Tolerance, path: str = "", *, kernel: str | None = None
) -> tuple[RawStats, _Pair, str]:
    """RawStats of two host arrays, the prepared pair and the kernel that computed them."""
    pair = _prepare(actual, expected, path)
    s = _settings(pair, tolerance)
    from . import _numba_kernel

    used = kernel_choice(kernel, int(pair.a.size), _numba_kernel.supports(pair))
    if used == "numba":
        partials = _numba_kernel.partials(pair, s, _Partials)
    else:
        partials = _partials_numpy(pair, s)
    return _reduce(pair, s, partials, tolerance.worst_k, used), pair, used


def compare_arrays(
    actual: Any, expected: Any, tolerance: Tolerance, path: str, *, kernel: str | None = None
) -> OutputComparison:
    """Compare two host arrays (numpy arrays, scalars, numeric lists) as one output."""
    stats, pair, used = host_stats(actual, expected, tolerance, path, kernel=kernel)
    return finish_plan(stats, pair, tolerance, path, used)

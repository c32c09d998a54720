"""MLX arrays (CPU and GPU): metrics computed by MLX on the default device.

The output pair is reduced chunk by chunk. One compiled step (``mx.compile``, so that MLX fuses the
elementwise work) turns a chunk into a small vector of partial sums and maxima, a vector of exact
integer counts and maxima, and the chunk's k candidates of largest excess. Each chunk is scheduled
with ``mx.async_eval``; then the host blocks (``mx.eval``) on the chunk ``IN_FLIGHT - 1`` places
back, so that at most ``IN_FLIGHT`` chunks hold their temporaries at any time whatever the speed
of the device (the host otherwise queues chunks far faster than a GPU runs them, and every queued
chunk holds its temporaries). The rows are combined and the k best candidates selected on the
device; only ``len(STATS)`` numbers and 3k candidate values are then read back. A numpy array on
the other side is copied into MLX one chunk at a time.

On a CUDA GPU, two MLX arrays of the same dtype (bfloat16, float16 or float32) are instead read
once by a one-pass kernel (:mod:`paritygate.backends._mlx_kernel`, ``mx.fast.cuda_kernel``) with
the same float32 arithmetic; ``PARITYGATE_MLX_KERNEL=chunked`` keeps the chunked path. Metal runs
the chunked path (see that module for why).

Accumulation. On the CPU, MLX has float64: values are compared and sums accumulated in float64,
and ``cosine(x, x)`` is 1 within 1e-12. Metal and MLX's CUDA backend have no float64: there the
comparison runs in float32 ("float32 accumulation"). The environment variable
``PARITYGATE_MLX_ACCUMULATE=float32`` (or the module attribute ``ACCUMULATE = "float32"``) selects
float32 accumulation on the CPU too, so that the GPU arithmetic is tested without a GPU; ``auto``
(the default) uses float64 exactly where the default device has it.

What float32 accumulation keeps exact (equal to the host engine, bit for bit):

* ``max_abs`` of floats: each difference is split error-free (TwoSum) into its float32 rounding
  ``hi`` and the exact remainder ``lo``; the maximum is taken on ``(hi, lo)`` (rounding is
  monotonic, so the largest ``hi`` holds the largest exact difference) and ``hi + lo`` is added
  in float64 on the host: the host's float64 value.
* ULP distances: integer views of the floats, ordered and subtracted in int64 / uint64.
* Integers and bools: differences in int64 (uint64 when both sides are unsigned or bool), so a
  difference of one is never lost and nothing wraps (differences of integers up to 2**62 apart);
  ``max_abs`` of integers is that exact difference.
* Counts (mismatches, NaN/Inf accounting, ULP counts, finite positions), the worst elements'
  indices and values (the values are gathered in their own dtype; the host recomputes their
  excess in float64). The candidates are ranked by their float32 excess, so 2k of them are kept
  and ranked again on the host: exact unless more than k elements lie within one float32
  rounding of the k-th worst. Integer mismatches with ``rtol == 0`` are decided in integers
  (``|a - e| > floor(atol)``). A float element is decided with its float32 difference, so an
  element within one float32 rounding of ``atol + rtol * |e|`` can be decided differently from
  the float64 host.

Float sums and ratios in float32 accumulation: each chunk sums as a tree (blocks of
``PAIRWISE_BLOCK`` elements, then blocks of the block sums, and so on), and the chunks' sums are
combined with Neumaier's compensated summation, total and compensation added in float64 on the
host. For sums of non-negative terms (``sum |a-e|``, ``sum a^2``) the relative error is at most
about ``(3 * PAIRWISE_BLOCK + 4) * 2**-24`` (5e-5) in the worst case and far smaller in practice:
measured on 16 Mi float32 elements of magnitude 1e3 against unit-noise copies, every sum lies
within 7e-8 (relative) of its float64 value and the cosine within 8e-8; on 32 Mi bfloat16
elements with 1% noise, mean_abs within 4e-8 and the cosine within 3e-7 on the CPU (4e-9 and 6e-9
on an H200)
(``test_float32_accumulation_bound`` asserts 2e-7 for the sums; the agreement tests allow 1e-6
relative on ``mean_abs``, ``max_rel``, ``max_rel_symmetric``, ``atol_needed``, ``rtol_needed``
and 1e-6 absolute on the cosine). ``max_rel``, ``atol_needed`` and ``rtol_needed`` carry a few
float32 roundings (relative ~2e-7). 1 - cosine comes from the elementwise difference
(:func:`paritygate.metrics.one_minus_cosine`): within ``2e-6 * |a - e|^2 / (2 |a| |e|)`` of its
exact value with float32 accumulation (GPU, or forced on the CPU) and ``1e-12 * ...`` with float64
(relative precision near cos = 1; tests/test_backend_cosine.py). Float32 squares overflow beyond
magnitudes of about 1.8e19:
the cosine of such outputs is then not meaningful (its sums are infinite).

Float64 data needs float64 arithmetic: with float32 accumulation, a pair where either side is
float64, or integers against floats (compared as float64), is compared on the host (as numpy
arrays, a copy) and ``promotion`` says so, as the JAX backend does without x64. Complex outputs
are always compared on the host as (real, imaginary) pairs (noted in ``promotion``).
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

from ..errors import InputError
from ..results import OutputComparison, Tolerance
from ._device import (
    COUNT_STATS,
    ML_DTYPES_NAMES,
    STATS,
    SUM_STATS,
    ULP_INT_BITS,
    compare_on_host,
    empty_stats,
    finish_plan,
    kernel_tolerance,
    plan,
    raw_stats,
    split_stats,
)
from ._mlx_kernel import FLOAT_MAXES

__all__ = [
    "name",
    "is_array",
    "synchronize",
    "describe",
    "compare_arrays",
    "to_numpy",
    "ACCUMULATE",
    "accumulates_in_float64",
]

name = "mlx"

# "auto": float64 where the default device has it (the CPU), float32 elsewhere; "float32": float32
# accumulation everywhere (the GPU arithmetic, testable on the CPU). None: read the environment
# variable PARITYGATE_MLX_ACCUMULATE (default "auto").
ACCUMULATE: str | None = None
CHUNK = 1 << 17  # elements per chunk with float64 accumulation: float64 temporaries of 1 MiB
# With float32 accumulation (a GPU): float32 temporaries of 8 MiB; with IN_FLIGHT chunks of them
# alive, the extra memory stays well under 1 GiB, and chunks stay large enough that kernel
# launches do not dominate.
CHUNK_FLOAT32 = 1 << 21
IN_FLIGHT = 2  # chunks scheduled at once: the host waits for the older before queueing more
PAIRWISE_BLOCK = 256
TOPK_BLOCK = 1024  # worst-k: block maxima first, then the k best blocks' elements

_ENV = "PARITYGATE_MLX_ACCUMULATE"
KERNEL_ENV = "PARITYGATE_MLX_KERNEL"  # auto (the one-pass kernel on CUDA) | chunked


def _mx() -> Any:
    import mlx.core as mx

    return mx


def is_array(obj: Any) -> bool:
    return isinstance(obj, _mx().array)


def dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def describe(obj: Any) -> tuple[tuple[int, ...], str, str]:
    return tuple(int(s) for s in obj.shape), dtype_name(obj.dtype), str(_mx().default_device())


def synchronize(obj: Any) -> None:
    _mx().eval(obj)


def synchronize_many(objs: list[Any]) -> None:
    _mx().eval(*objs)


def seed(value: int) -> None:
    _mx().random.seed(value)


def to_numpy(obj: Any) -> Any:
    """Copy an array to numpy (bfloat16 through ml_dtypes)."""
    mx = _mx()
    import numpy as np

    if obj.dtype == mx.bfloat16:
        import ml_dtypes

        return np.array(obj.view(mx.uint16)).view(ml_dtypes.bfloat16)
    return np.array(obj)


def _mx_dtype(name_: str) -> Any:
    mx = _mx()
    return mx.bool_ if name_ == "bool" else getattr(mx, name_)


class _Side:
    def __init__(self, obj: Any):
        mx = _mx()
        if isinstance(obj, mx.array):
            self.shape, self.dtype = tuple(obj.shape), dtype_name(obj.dtype)
            # Flattened on first use (a view for row-contiguous arrays; MLX copies a transposed /
            # strided one): a float64 array on a GPU, which is compared on the host, never is,
            # since no GPU operation accepts float64.
            self.mlx_array = obj
            self.flat = self.np_flat = None
        else:
            import numpy as np

            arr = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
            self.shape, self.dtype = tuple(arr.shape), arr.dtype.name
            if self.dtype == "bool_":
                self.dtype = "bool"
            self.mlx_array = self.flat = None
            self.np_flat = arr.reshape(-1) if arr.flags.c_contiguous else None
            self.np_array = arr

    def chunk(self, start: int, stop: int) -> Any:
        mx = _mx()
        if self.mlx_array is not None:
            if self.flat is None:
                self.flat = self.mlx_array.reshape(-1)
            return self.flat[start:stop]
        part = (
            self.np_flat[start:stop] if self.np_flat is not None else self.np_array.flat[start:stop]
        )
        if self.dtype == "bfloat16":
            return mx.array(part.view("uint16")).view(mx.bfloat16)
        # explicit dtype: mx.array would turn float64 into float32
        return mx.array(part, dtype=_mx_dtype(self.dtype))


def accumulates_in_float64(device: Any = None) -> bool:
    """Whether comparisons on ``device`` (default: MLX's default device) accumulate in float64."""
    mx = _mx()
    mode = ACCUMULATE if ACCUMULATE is not None else os.environ.get(_ENV, "auto")
    if mode not in ("auto", "float32"):
        raise InputError(f"{_ENV} must be 'auto' or 'float32', got {mode!r}")
    device = mx.default_device() if device is None else device
    return mode == "auto" and device == mx.cpu


def _ordered(raw: Any, ulp_name: str) -> Any:
    """Floats rounded to the ULP dtype, as int64 ordered like the floats (+0 and -0 coincide)."""
    mx = _mx()
    nbits = ULP_INT_BITS[ulp_name]
    int_t = {8: mx.int8, 16: mx.int16, 32: mx.int32, 64: mx.int64}[nbits]
    bits = raw.astype(getattr(mx, ulp_name)).view(int_t).astype(mx.int64)
    magnitude = mx.bitwise_and(bits, (1 << (nbits - 1)) - 1)
    return mx.where(bits < 0, -magnitude, magnitude)


def _ulp_distance(a_raw: Any, e_raw: Any, ulp_name: str) -> Any:
    """|ordered(a) - ordered(e)| as uint64, exact (modular uint64 arithmetic on the larger minus
    the smaller: right also on the float64 grid, whose distances can exceed int64)."""
    mx = _mx()
    oa, oe = _ordered(a_raw, ulp_name), _ordered(e_raw, ulp_name)
    ua, ue = oa.view(mx.uint64), oe.view(mx.uint64)
    return mx.where(oa < oe, ue - ua, ua - ue)


def _sum(x: Any, acc: Any) -> Any:
    """Sum in acc; with float32, a tree of sums: blocks of PAIRWISE_BLOCK elements, then blocks
    of their sums, and so on (each level's remainder summed on its own)."""
    mx = _mx()
    if acc == mx.float64:
        return x.sum()
    rest = []
    while x.size > PAIRWISE_BLOCK:
        body = x.size - x.size % PAIRWISE_BLOCK
        if body < x.size:
            rest.append(x[body:].sum())
        x = x[:body].reshape(-1, PAIRWISE_BLOCK).sum(axis=1)
    total = x.sum()
    for r in rest:
        total = total + r
    return total


def _top_k(rank: Any, k: int) -> Any:
    """Indices of the k largest ranks (in no order). Large chunks pick the k blocks of largest
    maximum first: the k largest elements lie in them (a block outside holds none, since k
    blocks' maxima rank above its maximum), so only k * TOPK_BLOCK elements are partitioned."""
    mx = _mx()
    n = rank.size
    if k >= n:
        return mx.arange(n)
    if n % TOPK_BLOCK or n < 4 * k * TOPK_BLOCK:
        return mx.argpartition(-rank, kth=k - 1)[:k]
    blocks = rank.reshape(-1, TOPK_BLOCK)
    best_blocks = mx.argpartition(-blocks.max(axis=1), kth=k - 1)[:k]
    inside = blocks[best_blocks].reshape(-1)
    j = mx.argpartition(-inside, kth=k - 1)[:k]
    return best_blocks[j // TOPK_BLOCK] * TOPK_BLOCK + j % TOPK_BLOCK


def _candidate_values(x: Any) -> Any:
    """Candidate values in a dtype numpy reads exactly (small floats widen to float32)."""
    mx = _mx()
    if x.dtype in (mx.bfloat16, mx.float16) or dtype_name(x.dtype) in ML_DTYPES_NAMES:
        return x.astype(mx.float32)
    if x.dtype == mx.bool_:
        return x.astype(mx.uint8)
    return x


# Layout of a chunk's float row: the engine's sums and float maxima, max_abs exactly as hi + lo;
# its integer row holds the counts (COUNT_STATS), then ulp_max and max_abs as an integer.
_FROW = (*SUM_STATS, *FLOAT_MAXES, "max_abs_hi", "max_abs_lo")


@functools.lru_cache(maxsize=64)
def _step(
    kind: str,
    unsigned: bool,
    ulp_dtype: str | None,
    two_sum: bool,
    acc_name: str,
    atol: float,
    rtol: float,
    rel_eps: float,
    equal_nan: bool,
    max_ulp: int | None,
    k: int,
):
    """The compiled per-chunk step for one comparison setting (cached: compiled once per shape)."""
    mx = _mx()
    acc = getattr(mx, acc_name)
    inf = math.inf

    def step(a_raw: Any, e_raw: Any) -> tuple:
        n = a_raw.size
        a = a_raw.astype(acc)
        e = e_raw.astype(acc)
        zero = mx.array(0, dtype=acc)

        def count(mask: Any) -> Any:
            return mask.astype(mx.int32).sum().astype(mx.uint64)

        zero_u = mx.array(0, dtype=mx.uint64)
        if kind == "float":
            nan_a, nan_e = mx.isnan(a), mx.isnan(e)
            inf_a, inf_e = mx.isinf(a), mx.isinf(e)
            nan_any = mx.logical_or(nan_a, nan_e)
            nonfinite = mx.logical_or(nan_any, mx.logical_or(inf_a, inf_e))
            nan_both = mx.logical_and(nan_a, nan_e)
            nan_one = mx.not_equal(nan_a, nan_e)
            inf_mismatch = mx.logical_and(
                mx.logical_and(mx.logical_or(inf_a, inf_e), mx.logical_not(nan_any)), a != e
            )
            nf_mismatch = mx.logical_or(nan_one, inf_mismatch)
            if not equal_nan:
                nf_mismatch = mx.logical_or(nf_mismatch, nan_both)
            a = mx.where(nonfinite, zero, a)
            e = mx.where(nonfinite, zero, e)
            s = a - e
            signed = s
            diff = mx.abs(s)
            if two_sum:  # Knuth's TwoSum: s + lo == a - e exactly
                bb = s - a
                lo = (a - (s - bb)) + (-e - bb)
                lo = mx.where(s < 0, -lo, lo)  # the remainder of |a - e| = |s| + lo
                hi_max = diff.max()
                lo_max = mx.where(diff == hi_max, lo, -inf).max()
            else:
                hi_max, lo_max = diff.max(), zero
            max_abs_int = zero_u
        else:
            # Integers and bools: the exact difference in 64-bit integers.
            if unsigned:
                ua, ue = a_raw.astype(mx.uint64), e_raw.astype(mx.uint64)
                diff_int = mx.where(ua >= ue, ua - ue, ue - ua)
            else:
                diff_int = mx.abs(a_raw.astype(mx.int64) - e_raw.astype(mx.int64)).astype(mx.uint64)
            diff = diff_int.astype(acc)
            signed = a - e
            max_abs_int = diff_int.max()
            hi_max, lo_max = zero, zero
        abs_a, abs_e = mx.abs(a), mx.abs(e)
        excess = diff - (atol + rtol * abs_e)
        rel = diff / (abs_e + rel_eps)
        rel_sym = diff / (mx.maximum(abs_a, abs_e) + rel_eps)
        rtol_need = mx.where(
            abs_e > 0,
            (diff - atol) / mx.where(abs_e > 0, abs_e, 1),
            mx.where(diff > atol, inf, 0.0),
        )
        if kind != "float" and rtol == 0:
            mismatch = diff_int > min(math.floor(atol), 2**63)
        else:
            mismatch = excess > 0
        rank = mx.where(diff == 0, -inf, excess)
        if kind == "float":
            max_excess = mx.where(nonfinite, -inf, excess).max()
            rank = mx.where(nf_mismatch, inf, rank)
            counts_nf = [
                count(nan_a),
                count(nan_e),
                count(nan_both),
                count(nan_one),
                count(inf_a),
                count(inf_e),
                count(inf_mismatch),
            ]
            n_finite = count(mx.logical_not(nonfinite))
        else:
            max_excess = excess.max()
            counts_nf = [zero_u] * 7
            n_finite = mx.array(n, dtype=mx.uint64)
        if ulp_dtype is not None and kind == "float":
            ulp = mx.where(nonfinite, 0, _ulp_distance(a_raw, e_raw, ulp_dtype)).astype(mx.uint64)
            ulp_max, ulp_nonzero = ulp.max(), count(ulp > 0)
            ulp_over = count(ulp > max_ulp) if max_ulp is not None else zero_u
        else:
            ulp_max, ulp_nonzero, ulp_over = zero_u, zero_u, zero_u
        frow = mx.stack(
            [
                _sum(diff, acc),
                _sum(a * e, acc),
                _sum(a * a, acc),
                _sum(e * e, acc),
                # (a - e)^2 and (a - e)(a + e) from the difference: 1 - cosine (metrics.py)
                _sum(diff * diff, acc),
                _sum(signed * (a + e), acc),
                rel.max(),
                rel_sym.max(),
                max_excess,
                mx.maximum(diff - rtol * abs_e, 0).max(),
                mx.maximum(rtol_need, 0).max(),
                hi_max.astype(acc),
                lo_max.astype(acc),
            ]
        )
        irow = mx.stack(
            [
                n_finite,
                count(mismatch),
                ulp_nonzero,
                ulp_over,
                *counts_nf,
                ulp_max,
                max_abs_int.astype(mx.uint64),
            ]
        )
        if not k:
            return frow, irow
        idx = _top_k(rank, min(k, n))
        return (
            frow,
            irow,
            rank[idx],
            idx.astype(mx.int64),
            _candidate_values(a_raw[idx]),
            _candidate_values(e_raw[idx]),
        )

    return mx.compile(step)


def compare_arrays(actual: Any, expected: Any, tolerance: Tolerance, path: str) -> OutputComparison:
    """Compare an MLX array with an MLX array or a numpy array on MLX's default device."""
    side_a, side_e = _Side(actual), _Side(expected)
    if side_a.dtype.startswith("complex") and side_e.dtype.startswith("complex"):
        why = "complex outputs compared on the host"
        return compare_on_host(actual, expected, tolerance, path, why, is_array, to_numpy)
    p = plan(side_a.shape, side_e.shape, side_a.dtype, side_e.dtype, path)
    acc_float64 = accumulates_in_float64()
    if not acc_float64 and "float64" in (side_a.dtype, side_e.dtype, p.compared_as):
        why = "compared on the host: float64 arithmetic needed, and MLX accumulates in float32 here"
        return compare_on_host(actual, expected, tolerance, path, why, is_array, to_numpy)
    ktol = kernel_tolerance(p, tolerance)
    from . import _mlx_kernel

    if not acc_float64 and _use_kernel() and _mlx_kernel.supports(side_a, side_e, p.size):
        host, kk = _reduce_kernel(side_a, side_e, p, ktol)
    else:
        chunk = CHUNK if acc_float64 else CHUNK_FLOAT32
        host, kk = _reduce(side_a, side_e, p, ktol, acc_float64=acc_float64, chunk=chunk)
    stats = raw_stats(p, *split_stats(host, kk), ktol)
    return finish_plan(stats, p, tolerance, path, name)


def _neumaier(total: Any, comp: Any, x: Any) -> tuple[Any, Any]:
    """One step of Neumaier's compensated summation (elementwise over the sums vector)."""
    mx = _mx()
    t = total + x
    comp = comp + mx.where(mx.abs(total) >= mx.abs(x), (total - t) + x, (x - t) + total)
    return t, comp


def _reduce(
    side_a: _Side,
    side_e: _Side,
    p: Any,
    tol: Tolerance,
    *,
    acc_float64: bool,
    chunk: int | None = None,
    in_flight: int | None = None,
) -> tuple[list, int]:
    """The statistics vector (laid out as STATS, as Python numbers) followed by the worst-k
    candidates' flat indices, actual and expected values; and the number of candidates."""
    mx = _mx()
    import numpy as np

    if p.size == 0:
        return empty_stats().tolist(), 0
    acc = mx.float64 if acc_float64 else mx.float32
    chunk = chunk or (CHUNK if acc_float64 else CHUNK_FLOAT32)
    in_flight = max(1, in_flight or IN_FLIGHT)
    # Float32 ranks can tie elements whose float64 excesses differ: keep 2k candidates, and the
    # host (raw_stats) ranks them by their float64 excess and keeps the k worst.
    k = tol.worst_k if acc_float64 else 2 * tol.worst_k
    unsigned = all(d.startswith("uint") or d == "bool" for d in (side_a.dtype, side_e.dtype))
    two_sum = not acc_float64 and p.kind == "float"
    step = _step(
        p.kind,
        unsigned,
        p.ulp_dtype,
        two_sum,
        "float64" if acc_float64 else "float32",
        float(tol.atol),
        float(tol.rtol),
        float(tol.rel_eps),
        bool(tol.equal_nan),
        tol.max_ulp,
        int(k),
    )
    from_numpy = side_a.mlx_array is None or side_e.mlx_array is None
    n_sums = len(SUM_STATS)
    total = mx.zeros((n_sums,), dtype=acc)
    comp = mx.zeros((n_sums,), dtype=acc)
    outs = []
    for start in range(0, p.size, chunk):
        stop = min(start + chunk, p.size)
        a_part, e_part = side_a.chunk(start, stop), side_e.chunk(start, stop)
        out = list(step(a_part, e_part))
        del a_part, e_part  # the graph holds the chunk until it has run, then lets it go
        if k:
            out[3] = out[3] + start
        if acc_float64:
            total = total + out[0][:n_sums]
        else:
            total, comp = _neumaier(total, comp, out[0][:n_sums])
        mx.async_eval(out, total, comp)
        outs.append(out)
        # Flow control: wait for the chunk in_flight - 1 places back, so that at most in_flight
        # chunks (with their temporaries, and a numpy side's copies) are alive at once.
        back = len(outs) - in_flight
        if from_numpy:
            back = len(outs) - 1
        if back >= 0:
            mx.eval(outs[back])
    frows = mx.stack([o[0] for o in outs])
    irows = mx.stack([o[1] for o in outs])
    fi = {s: i for i, s in enumerate(_FROW)}
    hi = frows[:, fi["max_abs_hi"]]
    hi_max = hi.max()
    lo_max = mx.where(hi == hi_max, frows[:, fi["max_abs_lo"]], -math.inf).max()
    fmax = frows[:, n_sums : n_sums + len(FLOAT_MAXES)].max(axis=0)
    counts = irows[:, : len(COUNT_STATS)].sum(axis=0)
    imax = irows[:, len(COUNT_STATS) :].max(axis=0)
    # total and its compensation cross separately: their float32 sum would round once more.
    outputs = [mx.stack([total, comp]), fmax, mx.stack([hi_max, lo_max]), counts, imax]
    kk = 0
    if k:
        rank = mx.concatenate([o[2] for o in outs])
        kk = min(k, p.size)
        best = _top_k(rank, kk) if kk < rank.size else mx.arange(rank.size)
        outputs += [mx.concatenate([o[j] for o in outs])[best] for j in (3, 4, 5)]
    mx.eval(*outputs)
    got = [np.array(x) for x in outputs]
    sums, fmax_h, hilo, counts_h, imax_h = got[:5]
    s = {}
    for key, t, c in zip(_FROW[:n_sums], sums[0], sums[1]):
        s[key] = float(t) + float(c)
    for key, v in zip(FLOAT_MAXES, fmax_h):
        s[key] = float(v)
    for key, v in zip(COUNT_STATS, counts_h):
        s[key] = int(v)
    s["ulp_max"] = int(imax_h[0])
    if p.kind == "float":
        # hi + lo is the exact largest difference (lo = 0 with float64); one float64 rounding.
        s["max_abs"] = float(hilo[0]) + float(hilo[1])
    else:
        s["max_abs"] = float(int(imax_h[1]))
    vec = [s[key] for key in STATS]
    if k:
        vec += [int(i) for i in got[5]] + [v.item() for v in got[6]] + [v.item() for v in got[7]]
    return vec, kk


def _use_kernel() -> bool:
    """The one-pass kernel where it applies, unless PARITYGATE_MLX_KERNEL=chunked."""
    choice = os.environ.get(KERNEL_ENV, "auto").lower()
    if choice not in ("auto", "chunked"):
        raise InputError(f"{KERNEL_ENV} must be auto or chunked, got {choice!r}")
    return choice == "auto"


def _reduce_kernel(side_a: _Side, side_e: _Side, p: Any, tol: Tolerance) -> tuple[list, int]:
    """The one-pass kernel (:mod:`paritygate.backends._mlx_kernel`) on the GPU, then the
    columns reduced on the device: the same vector as :func:`_reduce`."""
    from . import _mlx_kernel

    a_flat = side_a.mlx_array.reshape(-1)
    e_flat = side_e.mlx_array.reshape(-1)
    f, u, groups, span = _mlx_kernel.run(a_flat, e_flat, side_a.dtype, tol)
    return reduce_columns(f, u, groups, span, a_flat, e_flat, p, tol)


def reduce_columns(
    f: Any, u: Any, groups: int, span: int, a_flat: Any, e_flat: Any, p: Any, tol: Tolerance
) -> tuple[list, int]:
    """The kernel's per-thread columns (float32 ``f``, uint32 ``u``, laid out as
    ``_mlx_kernel.FCOLS`` / ``UCOLS``) reduced to the :data:`STATS` vector and the worst-k
    candidates, as :func:`_reduce` returns them. The worst-k are ranked again (float32, as the
    kernel ranks them) inside the 2k groups (of ``span`` contiguous elements) of largest excess,
    with MLX's own operations: no compiled graph, whose kernels MLX would first have to build."""
    mx = _mx()
    import numpy as np

    from . import _mlx_kernel

    fc = {c: i for i, c in enumerate(_mlx_kernel.FCOLS)}
    uc = {c: i for i, c in enumerate(_mlx_kernel.UCOLS)}
    f32 = mx.float32
    sums = mx.stack(
        [_sum(f[i], f32) for i in range(2 * len(SUM_STATS))]
    )  # each sum and its compensation
    fmax = f[fc[FLOAT_MAXES[0]] : fc[FLOAT_MAXES[-1]] + 1].max(axis=1)
    hi = f[fc["max_abs_hi"]]
    hi_max = hi.max()
    lo_max = mx.where(hi == hi_max, f[fc["max_abs_lo"]], -math.inf).max()
    counts = u[: len(COUNT_STATS)].astype(mx.uint64).sum(axis=1)
    ulp_max = u[uc["ulp_max"]].max()
    outputs = [sums, fmax, mx.stack([hi_max, lo_max]), counts, ulp_max]
    # Float32 ranks can tie elements whose float64 excesses differ: 2k candidates, ranked again
    # on the host (raw_stats), as the chunked path does.
    k = 2 * tol.worst_k
    kk = 0
    if k:
        size = a_flat.size
        group_rank = f[fc["rank"]].reshape(groups, 32).max(axis=1)
        kg = min(k, groups)
        best = _top_k(group_rank, kg)
        idx = (best[:, None].astype(mx.int64) * span + mx.arange(span)).reshape(-1)
        valid = idx < size
        idx = mx.minimum(idx, size - 1)
        zero = mx.zeros((), dtype=a_flat.dtype)
        # Past the end: equal zeros, which the host drops from the candidates.
        a_g = mx.where(valid, a_flat[idx], zero)
        e_g = mx.where(valid, e_flat[idx], zero)
        rank = _candidate_rank(a_g, e_g, tol)
        kk = min(k, rank.size)
        top = _top_k(rank, kk)
        outputs += [idx[top], _candidate_values(a_g[top]), _candidate_values(e_g[top])]
    mx.eval(*outputs)
    got = [np.array(x) for x in outputs]
    sums_h, fmax_h, hilo, counts_h, umax_h = got[:5]
    s = {}
    for j, key in enumerate(SUM_STATS):
        s[key] = float(sums_h[2 * j]) + float(sums_h[2 * j + 1])
    for key, v in zip(FLOAT_MAXES, fmax_h):
        s[key] = float(v)
    for key, v in zip(COUNT_STATS, counts_h):
        s[key] = int(v)
    s["ulp_max"] = int(umax_h)
    s["max_abs"] = float(hilo[0]) + float(hilo[1])
    vec = [s[key] for key in STATS]
    if k:
        vec += [int(i) for i in got[5]] + [v.item() for v in got[6]] + [v.item() for v in got[7]]
    return vec, kk


def _candidate_rank(a_raw: Any, e_raw: Any, tol: Tolerance) -> Any:
    """The float32 worst-k rank of floats (excess; inf for a non-finite mismatch; -inf where
    equal), as the chunked step and the one-pass kernel rank them."""
    mx = _mx()
    a = a_raw.astype(mx.float32)
    e = e_raw.astype(mx.float32)
    nan_a, nan_e = mx.isnan(a), mx.isnan(e)
    inf_a, inf_e = mx.isinf(a), mx.isinf(e)
    nan_any = mx.logical_or(nan_a, nan_e)
    nonfinite = mx.logical_or(nan_any, mx.logical_or(inf_a, inf_e))
    inf_mismatch = mx.logical_and(
        mx.logical_and(mx.logical_or(inf_a, inf_e), mx.logical_not(nan_any)), a != e
    )
    bad = mx.logical_or(mx.not_equal(nan_a, nan_e), inf_mismatch)
    if not tol.equal_nan:
        bad = mx.logical_or(bad, mx.logical_and(nan_a, nan_e))
    zero = mx.array(0, dtype=mx.float32)
    a = mx.where(nonfinite, zero, a)
    e = mx.where(nonfinite, zero, e)
    diff = mx.abs(a - e)
    excess = diff - (tol.atol + tol.rtol * mx.abs(e))
    rank = mx.where(diff == 0, -math.inf, excess)
    return mx.where(bad, math.inf, rank)

"""MLX arrays (CPU and GPU): metrics computed by MLX on the default device, one ``mx.eval``.

The output pair is reduced chunk by chunk (``CHUNK`` elements): every chunk yields one small row
of partial sums, maxima, counts and its k candidates of largest excess, scheduled with
``mx.async_eval`` (which does not wait) so that the device frees each chunk's temporaries before
the next; the rows are combined and the k best candidates selected in the same graph, and a single
blocking ``mx.eval`` waits for the result. On a GPU the host also waits for the chunk
``WINDOW_GPU`` places back before scheduling another (flow control that reads nothing back), since
scheduled chunks hold their temporaries and the host outruns the device. Only ``len(STATS)`` numbers and 3k candidate values are
then read back. A numpy array on the other side is copied into MLX one chunk at a time, each chunk
evaluated before the next copy.

Accuracy. On the CPU, MLX has float64: values are compared and sums accumulated in float64, and
``cosine(x, x)`` is 1 within 1e-12. Metal and MLX's CUDA backend have no float64: there values are
compared in float32, each chunk's sums are pairwise (blocks of ``PAIRWISE_BLOCK`` elements, then
the block sums), and the chunk sums are combined with Neumaier's compensated summation. For sums
of non-negative terms (``sum |a-e|``, ``sum a^2``) the relative error is bounded by about
``(2 * PAIRWISE_BLOCK + 2) * 2**-24`` in the worst case and far smaller in practice: measured on
16 Mi and 64 Mi float32 elements of magnitude 1e3 against unit-noise copies, every sum lies within
5e-8 (relative) of its float64 value and the cosine within 4e-10
(tests/test_backend_mlx.py::test_float32_accumulation_bound asserts 1e-7 and 1e-8). ``max_abs`` is
one float32 rounding of ``|a - e|`` (relative 6e-8). Float64 inputs on a GPU default device are
compared on the CPU stream, which has float64.

Complex outputs are copied to the host and compared there as (real, imaginary) pairs (noted in
``promotion``).

Integers are compared in float64 on the CPU (exact up to 2**53, with an exact inequality test for
64-bit integers) and in float32 on a GPU with the same exact inequality test, so a difference of
one is never lost; bool outputs are compared as 0/1 exactly.
"""

from __future__ import annotations

import math
from typing import Any

from ..metrics import finish
from ..results import OutputComparison, Tolerance
from ._device import MAX_STATS, STATS, SUM_STATS, ULP_INT_BITS, kernel_tolerance, plan, raw_stats

__all__ = ["name", "is_array", "synchronize", "describe", "compare_arrays", "to_numpy"]

name = "mlx"

CHUNK = 1 << 17  # elements per chunk on the CPU: float64 temporaries of 1 MiB
CHUNK_GPU = 1 << 22  # on a GPU: float32 temporaries of 16 MiB, fewer kernel launches
# On a GPU the host schedules chunks far faster than the device runs them, and every scheduled
# chunk holds its temporaries: without a window, two 2 GiB arrays took 9.9 GB of extra memory on
# an H200. The host therefore waits for the chunk WINDOW_GPU places back before scheduling the
# next one (flow control only: nothing is read back), bounding the extra memory to a few chunks.
WINDOW_GPU = 4
PAIRWISE_BLOCK = 1024

_ML_DTYPES_NAMES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


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
            # A view for row-contiguous arrays; MLX copies a transposed / strided array here.
            self.flat = obj.reshape(-1)
            self.np_flat = None
        else:
            import numpy as np

            arr = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
            self.shape, self.dtype = tuple(arr.shape), arr.dtype.name
            if self.dtype == "bool_":
                self.dtype = "bool"
            self.flat = None
            self.np_flat = arr.reshape(-1) if arr.flags.c_contiguous else None
            self.np_array = arr

    def chunk(self, start: int, stop: int) -> Any:
        mx = _mx()
        if self.flat is not None:
            return self.flat[start:stop]
        part = self.np_flat[start:stop] if self.np_flat is not None else self.np_array.flat[start:stop]
        if self.dtype == "bfloat16":
            return mx.array(part.view("uint16")).view(mx.bfloat16)
        # explicit dtype: mx.array would turn float64 into float32
        return mx.array(part, dtype=_mx_dtype(self.dtype))


def _ordered(raw: Any, ulp_name: str, acc: Any) -> Any:
    """Floats rounded to the ULP dtype, as integers ordered like the floats (+0 and -0 coincide).

    Returned in acc: exact in float64; in float32 exact for distances below 2**24 ULP.
    """
    mx = _mx()
    nbits = ULP_INT_BITS[ulp_name]
    int_t = {16: mx.int16, 32: mx.int32, 64: mx.int64}[nbits]
    bits = raw.astype(getattr(mx, ulp_name)).view(int_t).astype(mx.int64)
    magnitude = mx.bitwise_and(bits, (1 << (nbits - 1)) - 1)
    return mx.where(bits < 0, -magnitude, magnitude).astype(acc)


def _sum(x: Any, acc: Any) -> Any:
    """Sum in acc; pairwise over blocks when acc is float32 (no float64 on the device)."""
    mx = _mx()
    n = x.size
    if acc == mx.float32 and n > PAIRWISE_BLOCK and n % PAIRWISE_BLOCK == 0:
        return x.reshape(-1, PAIRWISE_BLOCK).sum(axis=1).sum()
    return x.sum()


def _chunk_stats(a_raw: Any, e_raw: Any, p: Any, tol: Tolerance, acc: Any, k: int) -> tuple:
    mx = _mx()
    inf = math.inf
    a = a_raw.astype(acc)
    e = e_raw.astype(acc)
    n = a.size
    zero = mx.array(0, dtype=acc)
    if p.kind == "float":
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
        if not tol.equal_nan:
            nf_mismatch = mx.logical_or(nf_mismatch, nan_both)
        a = mx.where(nonfinite, zero, a)
        e = mx.where(nonfinite, zero, e)
    diff = mx.abs(a - e)
    if p.kind == "int":
        # Large integers lose their last digits in float: the exact inequality keeps a
        # difference of one.
        ne = a_raw.astype(mx.int64) != e_raw.astype(mx.int64)
        diff = mx.where(ne, mx.maximum(diff, 1), zero)
    abs_a, abs_e = mx.abs(a), mx.abs(e)
    excess = diff - (tol.atol + tol.rtol * abs_e)
    rel = diff / (abs_e + tol.rel_eps)
    rel_sym = diff / (mx.maximum(abs_a, abs_e) + tol.rel_eps)
    rtol_need = mx.where(
        abs_e > 0,
        (diff - tol.atol) / mx.where(abs_e > 0, abs_e, 1),
        mx.where(diff > tol.atol, inf, 0.0),
    )
    sums = [_sum(diff, acc), _sum(a * e, acc), _sum(a * a, acc), _sum(e * e, acc)]

    def count(mask: Any) -> Any:
        return mask.astype(mx.int32).sum()

    zero_i = mx.array(0, dtype=mx.int32)
    # Worst-k ranking: equal elements (non-finite positions were zeroed) never enter the list;
    # non-finite mismatches come first.
    rank = mx.where(diff == 0, -inf, excess)
    if p.kind == "float":
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
        counts_nf = [zero_i] * 7
        n_finite = mx.array(n, dtype=mx.int32)
    if p.ulp_dtype is not None and p.kind == "float":
        ulp = mx.abs(_ordered(a_raw, p.ulp_dtype, acc) - _ordered(e_raw, p.ulp_dtype, acc))
        ulp = mx.where(nonfinite, 0, ulp)
        ulp_max = ulp.max()
        ulp_nonzero = count(ulp > 0)
        ulp_over = count(ulp > tol.max_ulp) if tol.max_ulp is not None else zero_i
    else:
        ulp_max, ulp_nonzero, ulp_over = zero, zero_i, zero_i
    maxes = [
        diff.max(),
        rel.max(),
        rel_sym.max(),
        max_excess,
        mx.maximum(diff - tol.rtol * abs_e, 0).max(),
        mx.maximum(rtol_need, 0).max(),
        ulp_max,
    ]
    counts = [n_finite, count(excess > 0), ulp_nonzero, ulp_over, *counts_nf]
    # One vector per chunk (counts <= CHUNK and local indices are exact even in float32), so the
    # chunk's whole graph is consumed at once and its temporaries are freed before the next.
    parts = [mx.stack([x.astype(acc) for x in sums + maxes + counts])]
    if k:
        kk = min(k, n)
        idx = mx.argpartition(-rank, kth=kk - 1)[:kk] if kk < n else mx.arange(n)
        parts += [rank[idx], idx.astype(acc), a_raw[idx].astype(acc), e_raw[idx].astype(acc)]
    return mx.concatenate(parts)


def _neumaier(total: Any, comp: Any, x: Any) -> tuple[Any, Any]:
    """One step of Neumaier's compensated summation (elementwise over the sums vector)."""
    mx = _mx()
    t = total + x
    comp = comp + mx.where(mx.abs(total) >= mx.abs(x), (total - t) + x, (x - t) + total)
    return t, comp


def compare_arrays(actual: Any, expected: Any, tolerance: Tolerance, path: str) -> OutputComparison:
    """Compare an MLX array with an MLX array or a numpy array on MLX's default device."""
    mx = _mx()
    side_a, side_e = _Side(actual), _Side(expected)
    if side_a.dtype.startswith("complex") and side_e.dtype.startswith("complex"):
        from . import numpy as host

        a = to_numpy(actual) if is_array(actual) else actual
        e = to_numpy(expected) if is_array(expected) else expected
        result = host.compare_arrays(a, e, tolerance, path)
        note = "complex outputs compared on the host"
        result.promotion = f"{result.promotion}; {note}" if result.promotion else note
        return result
    p = plan(side_a.shape, side_e.shape, side_a.dtype, side_e.dtype, path)
    device = mx.default_device()
    if "float64" in (side_a.dtype, side_e.dtype):
        device = mx.cpu  # float64 exists on the CPU only
    ktol = kernel_tolerance(p, tolerance)
    with mx.stream(device):
        on_cpu = device == mx.cpu
        chunk = CHUNK if on_cpu else CHUNK_GPU
        window = None if on_cpu else WINDOW_GPU
        host, kk = _reduce(side_a, side_e, p, ktol, acc_float64=on_cpu, chunk=chunk, window=window)
    n = len(STATS)
    rest = host[n:]
    stats = raw_stats(p, host[:n], rest[:kk], rest[kk : 2 * kk], rest[2 * kk :], ktol)
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
        backend=name,
    )


def _reduce(
    side_a: _Side,
    side_e: _Side,
    p: Any,
    tol: Tolerance,
    *,
    acc_float64: bool,
    chunk: int | None = None,
    window: int | None = None,
) -> tuple:
    mx = _mx()
    import numpy as np

    if p.size == 0:
        vec = np.zeros(len(STATS))
        vec[STATS.index("max_excess")] = -math.inf
        return vec, 0
    acc = mx.float64 if acc_float64 else mx.float32
    k = tol.worst_k
    ns, nm, nstats = len(SUM_STATS), len(MAX_STATS), len(STATS)
    # Each chunk's row is scheduled with mx.async_eval, which does not wait: the device works
    # through the chunks in order and frees each chunk's temporaries, while the host waits only
    # once, at the final mx.eval. A numpy side enters MLX by copy (mx.array), so there each
    # chunk is evaluated before the next copy is made, keeping one chunk's copy alive at a time.
    from_numpy = side_a.flat is None or side_e.flat is None
    chunk = chunk or CHUNK
    total = mx.zeros((ns,), dtype=acc)
    comp = mx.zeros((ns,), dtype=acc)
    rows, offsets = [], []
    for start in range(0, p.size, chunk):
        stop = min(start + chunk, p.size)
        row = _chunk_stats(side_a.chunk(start, stop), side_e.chunk(start, stop), p, tol, acc, k)
        if from_numpy:
            mx.eval(row)
        else:
            mx.async_eval(row)
            if window and len(rows) >= window:
                mx.eval(rows[-window])  # flow control (see WINDOW_GPU): waits, copies nothing
        if acc_float64:
            total = total + row[:ns]
        else:
            total, comp = _neumaier(total, comp, row[:ns])
        rows.append(row)
        offsets.append(start)
    kk_chunk = min(k, chunk) if k else 0
    width = nstats + 4 * kk_chunk
    if rows[-1].size != width:  # a short last chunk has fewer candidates: pad with -inf ranks
        short = (rows[-1].size - nstats) // 4
        pad = mx.full((kk_chunk - short,), -math.inf, dtype=acc)
        last, cands = rows[-1][:nstats], rows[-1][nstats:].reshape(4, short)
        filler = mx.zeros((3, kk_chunk - short), dtype=acc)
        rows[-1] = mx.concatenate(
            [last, mx.concatenate([cands, mx.concatenate([pad[None], filler])], axis=1).reshape(-1)]
        )
    m = mx.stack(rows)
    sums = total + comp
    maxes = m[:, ns : ns + nm].max(axis=0)
    counts = m[:, ns + nm : nstats].astype(mx.int64).sum(axis=0)
    outputs = [sums, maxes, counts]
    kk = 0
    if kk_chunk:
        cand = m[:, nstats:].reshape(len(rows), 4, kk_chunk)
        rank = cand[:, 0, :].reshape(-1)
        kk = min(k, p.size)
        best = mx.argpartition(-rank, kth=kk - 1)[:kk] if kk < rank.size else mx.arange(rank.size)
        flat_index = cand[:, 1, :].astype(mx.int64) + mx.array(offsets, dtype=mx.int64)[:, None]
        outputs += [flat_index.reshape(-1)[best]]
        outputs += [cand[:, j, :].reshape(-1)[best] for j in (2, 3)]
    mx.eval(*outputs)  # the single evaluation (synchronization) of the comparison
    host = np.concatenate([np.array(x, dtype=np.float64).reshape(-1) for x in outputs])
    return host, kk

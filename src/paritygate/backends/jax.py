"""JAX arrays: metrics computed by XLA on the array's device, one ``block_until_ready``.

The output pair is reduced chunk by chunk (``CHUNK`` elements) by one jit-compiled step that
carries the running statistics: sums (Neumaier-compensated), maxima, counts and the k candidates
of largest excess, merged with ``lax.top_k`` after every chunk. JAX dispatches asynchronously, so
the host queues every chunk and waits once, for the final carry (``len(STATS)`` numbers and 3k
candidate values). Chunks of a JAX array are cut inside the step (``lax.dynamic_slice`` on the
whole array, so queued steps hold no chunk copies); a numpy array on the other side is transferred
one chunk at a time, each step awaited before the next transfer.

Accuracy. With ``jax_enable_x64`` values are compared and sums accumulated in float64 and
``cosine(x, x)`` is 1 within 1e-12. Without x64 (JAX's default) XLA has no float64: values are
compared in float32, each chunk's sums are pairwise (XLA's reduction tree over blocks of
``PAIRWISE_BLOCK``) and the chunk sums are combined with Neumaier's compensated summation; measured
on 16 Mi float32 elements of magnitude 1e3 against unit-noise copies, every sum lies within 5e-8
(relative) of its float64 value. 1 - cosine is computed from the elementwise difference
(:func:`paritygate.metrics.one_minus_cosine`): within ``2e-6 * |a - e|^2 / (2 |a| |e|)`` of its
exact value without x64 (float32 arithmetic, CPU and GPU) and ``1e-12 * ...`` with x64 (relative
precision near cos = 1; tests/test_backend_cosine.py against exact rational arithmetic, and
test_float32_accumulation_bound against x64: the former dot-product cosine was 4.67e-8 off there
on an H200). Counts are
exact below 2**32 elements (uint32) without x64; ULP distances are exact integers.

Complex outputs are copied to the host and compared there as (real, imaginary) pairs (noted in
``promotion``). A numpy side whose dtype JAX cannot hold without x64 (float64, int64, uint64) cannot
be moved to
the device without rounding or wrapping: such a pair is compared on the host instead, and the
comparison's ``promotion`` says so.

Integers are compared with an exact inequality test next to the float difference, so a difference
of one is never lost and nothing wraps; bool outputs are compared as 0/1 exactly.
"""

from __future__ import annotations

import functools
from typing import Any

from ..results import OutputComparison, Tolerance
from ._device import (
    MAX_STATS,
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

__all__ = ["name", "is_array", "synchronize", "describe", "compare_arrays", "to_numpy"]

name = "jax"

CHUNK = 1 << 18  # elements per step on the CPU: XLA's float64 temporaries of 2 MiB each
CHUNK_ACCELERATOR = 1 << 22  # on a GPU / TPU: fewer, larger steps
PAIRWISE_BLOCK = 1024

_NEEDS_X64 = ("float64", "int64", "uint64")


def _jax() -> Any:
    import jax

    return jax


def is_array(obj: Any) -> bool:
    return isinstance(obj, _jax().Array)


def dtype_name(dtype: Any) -> str:
    import numpy as np

    text = np.dtype(dtype).name
    return "bool" if text == "bool_" else text


def describe(obj: Any) -> tuple[tuple[int, ...], str, str]:
    devices = sorted(str(d) for d in obj.devices())
    return tuple(int(s) for s in obj.shape), dtype_name(obj.dtype), ",".join(devices)


def synchronize(obj: Any) -> None:
    obj.block_until_ready()


def to_numpy(obj: Any) -> Any:
    import numpy as np

    return np.asarray(_jax().device_get(obj))


def _x64() -> bool:
    return bool(_jax().config.jax_enable_x64)


def _ordered(raw: Any, ulp_name: str, x64: bool) -> Any:
    """Floats rounded to the ULP dtype as integers ordered like the floats (+0 and -0 coincide)."""
    import jax.numpy as jnp
    from jax import lax

    nbits = ULP_INT_BITS[ulp_name]
    int_t = {16: jnp.int16, 32: jnp.int32, 64: jnp.int64}[nbits]
    bits = lax.bitcast_convert_type(raw.astype(getattr(jnp, ulp_name)), int_t)
    wide = jnp.int64 if x64 else jnp.int32
    bits = bits.astype(wide)
    magnitude = bits & ((1 << (nbits - 1)) - 1)
    return jnp.where(bits < 0, -magnitude, magnitude)


def _ulp_distance(oa: Any, oe: Any, x64: bool) -> Any:
    """|oa - oe| exactly, as an unsigned integer (modular subtraction, larger side first)."""
    import jax.numpy as jnp

    u = jnp.uint64 if x64 else jnp.uint32
    ua, ue = oa.astype(u), oe.astype(u)
    return jnp.where(oa >= oe, ua - ue, ue - ua)


@functools.lru_cache(maxsize=64)
def _step(
    kind: str,
    compared_as: str,
    ulp_dtype: str | None,
    tol: Tolerance,
    size: int,
    x64: bool,
    a_whole: bool,
    e_whole: bool,
):
    """The jitted step for chunks of ``size`` elements: (carry, a, e, start) -> carry.

    A side passed whole (a JAX array) is sliced inside the step, so no chunk is materialized
    while steps wait in the dispatch queue; a numpy side arrives as its chunk.
    """
    jax = _jax()
    import jax.numpy as jnp
    from jax import lax

    acc = jnp.float64 if x64 else jnp.float32
    count_t = jnp.int64 if x64 else jnp.uint32
    index_t = jnp.int64 if x64 else jnp.uint32
    inf = jnp.inf
    k = tol.worst_k

    def psum(x: Any) -> Any:
        if not x64 and size > PAIRWISE_BLOCK and size % PAIRWISE_BLOCK == 0:
            return x.reshape(-1, PAIRWISE_BLOCK).sum(axis=1).sum()
        return x.sum()

    def count(mask: Any) -> Any:
        return mask.sum(dtype=count_t)

    def step(carry: tuple, a_in: Any, e_in: Any, start: Any) -> tuple:
        total, comp, maxes_c, counts_c, umax_c, c_rank, c_idx, c_a, c_e = carry
        a_raw = lax.dynamic_slice(a_in.reshape(-1), (start,), (size,)) if a_whole else a_in
        e_raw = lax.dynamic_slice(e_in.reshape(-1), (start,), (size,)) if e_whole else e_in
        a = a_raw.astype(acc)
        e = e_raw.astype(acc)
        zero_c = jnp.zeros((), count_t)
        if kind == "float":
            nan_a, nan_e = jnp.isnan(a), jnp.isnan(e)
            inf_a, inf_e = jnp.isinf(a), jnp.isinf(e)
            nan_any = nan_a | nan_e
            nonfinite = nan_any | inf_a | inf_e
            nan_both = nan_a & nan_e
            nan_one = nan_a ^ nan_e
            inf_mismatch = (inf_a | inf_e) & ~nan_any & (a != e)
            nf_mismatch = nan_one | inf_mismatch
            if not tol.equal_nan:
                nf_mismatch = nf_mismatch | nan_both
            a = jnp.where(nonfinite, 0, a)
            e = jnp.where(nonfinite, 0, e)
        signed = a - e
        diff = jnp.abs(signed)
        if kind == "int":
            wide = jnp.int64 if x64 else jnp.int32
            ne = a_raw.astype(wide) != e_raw.astype(wide)
            diff = jnp.where(ne, jnp.maximum(diff, 1), 0)
        abs_e = jnp.abs(e)
        slack = diff - tol.rtol * abs_e if tol.rtol else diff
        excess = slack - tol.atol
        rel = (diff / (abs_e + tol.rel_eps)).max()
        rel_sym = (diff / (jnp.maximum(jnp.abs(a), abs_e) + tol.rel_eps)).max()
        num = jnp.maximum(diff - tol.atol, 0)
        rtol_need = jnp.where(
            abs_e > 0, num / jnp.where(abs_e > 0, abs_e, 1), jnp.where(num > 0, inf, 0)
        )
        # sum (a - e)^2 and sum (a - e)(a + e) from the difference: 1 - cosine (metrics.py)
        sums = jnp.stack(
            [
                psum(diff),
                psum(a * e),
                psum(a * a),
                psum(e * e),
                psum(diff * diff),
                psum(signed * (a + e)),
            ]
        )
        rank = jnp.where(diff == 0, -inf, excess)
        if kind == "float":
            max_excess = jnp.where(nonfinite, -inf, excess).max()
            rank = jnp.where(nf_mismatch, inf, rank)
            n_finite = count(~nonfinite)
            nf_counts = [
                count(m) for m in (nan_a, nan_e, nan_both, nan_one, inf_a, inf_e, inf_mismatch)
            ]
        else:
            max_excess = excess.max()
            n_finite = jnp.asarray(size, count_t)
            nf_counts = [zero_c] * 7
        if ulp_dtype is not None and kind == "float":
            ulp = _ulp_distance(
                _ordered(a_raw, ulp_dtype, x64), _ordered(e_raw, ulp_dtype, x64), x64
            )
            ulp = jnp.where(nonfinite, 0, ulp)
            ulp_max = ulp.max().astype(count_t)
            ulp_nonzero = count(ulp > 0)
            if tol.max_ulp is not None:
                bound = min(tol.max_ulp, int(jnp.iinfo(ulp.dtype).max))
                ulp_over = count(ulp > jnp.asarray(bound, ulp.dtype))
            else:
                ulp_over = zero_c
        else:
            ulp_max, ulp_nonzero, ulp_over = zero_c, zero_c, zero_c
        maxes = jnp.stack(
            [diff.max(), rel, rel_sym, max_excess, jnp.maximum(slack.max(), 0), rtol_need.max(), 0]
        ).astype(acc)
        counts = jnp.stack([n_finite, count(excess > 0), ulp_nonzero, ulp_over, *nf_counts])
        # Neumaier: the running sum and its compensation, elementwise over the four sums.
        t = total + sums
        comp = comp + jnp.where(
            jnp.abs(total) >= jnp.abs(sums), (total - t) + sums, (sums - t) + total
        )
        # ulp_max rides in its own integer slot: float32 would round distances past 2**24.
        carry_out = [
            t,
            comp,
            jnp.maximum(maxes_c, maxes),
            counts_c + counts,
            jnp.maximum(umax_c, ulp_max),
        ]
        if k:
            top_rank, top_idx = _chunk_top_k(rank, min(k, size))
            all_rank = jnp.concatenate([c_rank, top_rank])
            all_idx = jnp.concatenate([c_idx, top_idx.astype(index_t) + start.astype(index_t)])
            all_a = jnp.concatenate([c_a, a_raw[top_idx].astype(acc)])
            all_e = jnp.concatenate([c_e, e_raw[top_idx].astype(acc)])
            best_rank, best = lax.top_k(all_rank, k)
            carry_out += [best_rank, all_idx[best], all_a[best], all_e[best]]
        else:
            carry_out += [c_rank, c_idx, c_a, c_e]
        return tuple(carry_out)

    return jax.jit(step)


def _chunk_top_k(rank: Any, k: int) -> tuple[Any, Any]:
    """The k largest entries of a chunk and their positions.

    XLA's top_k sorts on the CPU; the maxima of blocks of ``PAIRWISE_BLOCK`` elements are cheap,
    and the k largest entries lie within the k blocks of largest maxima, so only those are ranked.
    """
    import jax.numpy as jnp
    from jax import lax

    size = rank.shape[0]
    if size % PAIRWISE_BLOCK or size // PAIRWISE_BLOCK <= k:
        return lax.top_k(rank, k)
    blocks = rank.reshape(-1, PAIRWISE_BLOCK)
    _, best_blocks = lax.top_k(blocks.max(axis=1), k)
    inside = blocks[best_blocks].reshape(-1)
    top_rank, pos = lax.top_k(inside, k)
    offsets = best_blocks[pos // PAIRWISE_BLOCK] * PAIRWISE_BLOCK
    return top_rank, (offsets + pos % PAIRWISE_BLOCK).astype(jnp.int32)


def _initial_carry(k: int, x64: bool) -> tuple:
    import jax.numpy as jnp

    acc = jnp.float64 if x64 else jnp.float32
    count_t = jnp.int64 if x64 else jnp.uint32
    maxes = jnp.zeros((len(MAX_STATS),), acc).at[MAX_STATS.index("max_excess")].set(-jnp.inf)
    return (
        jnp.zeros((len(SUM_STATS),), acc),
        jnp.zeros((len(SUM_STATS),), acc),
        maxes,
        jnp.zeros((len(STATS) - len(SUM_STATS) - len(MAX_STATS),), count_t),
        jnp.zeros((), count_t),
        jnp.full((k,), -jnp.inf, acc),
        jnp.zeros((k,), count_t),
        jnp.zeros((k,), acc),
        jnp.zeros((k,), acc),
    )


def _index(start: int) -> Any:
    """A flat offset as a typed scalar (one compilation for every chunk; no int32 overflow)."""
    import numpy as np

    return np.int64(start) if _x64() else np.uint32(start)


class _Side:
    def __init__(self, obj: Any):
        import numpy as np

        if is_array(obj):
            self.array, self.np_flat = obj, None
            self.shape, self.dtype = tuple(obj.shape), dtype_name(obj.dtype)
        else:
            arr = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
            self.array = None
            self.np_array = arr
            self.np_flat = arr.reshape(-1) if arr.flags.c_contiguous else None
            self.shape, self.dtype = tuple(arr.shape), dtype_name(arr.dtype)

    def chunk(self, start: int, stop: int) -> Any:
        """The whole JAX array (the step slices it), or a numpy chunk moved to the device."""
        if self.array is not None:
            return self.array
        part = (
            self.np_flat[start:stop] if self.np_flat is not None else self.np_array.flat[start:stop]
        )
        return _jax().device_put(part, self.device)


def compare_arrays(actual: Any, expected: Any, tolerance: Tolerance, path: str) -> OutputComparison:
    """Compare a JAX array with a JAX array or a numpy array on the JAX array's device."""
    import numpy as np

    x64 = _x64()
    side_a, side_e = _Side(actual), _Side(expected)
    if side_a.dtype.startswith("complex") and side_e.dtype.startswith("complex"):
        why = "complex outputs compared on the host"
        return compare_on_host(actual, expected, tolerance, path, why, is_array, to_numpy)
    p = plan(side_a.shape, side_e.shape, side_a.dtype, side_e.dtype, path)
    if not x64 and {side_a.dtype, side_e.dtype} & set(_NEEDS_X64):
        why = "compared on the host: JAX runs without x64 and cannot hold the numpy side exactly"
        return compare_on_host(actual, expected, tolerance, path, why, is_array, to_numpy)
    device = next(iter((actual if is_array(actual) else expected).devices()))
    side_a.device = side_e.device = device
    ktol = kernel_tolerance(p, tolerance)
    k = ktol.worst_k
    if p.size == 0:
        host = empty_stats()
        kk = 0
    else:
        carry = _initial_carry(k, x64)
        jax = _jax()
        chunk = CHUNK if device.platform == "cpu" else CHUNK_ACCELERATOR
        with jax.default_device(device):
            for start in range(0, p.size, chunk):
                stop = min(start + chunk, p.size)
                step = _step(
                    p.kind,
                    p.compared_as,
                    p.ulp_dtype,
                    ktol,
                    stop - start,
                    x64,
                    side_a.array is not None,
                    side_e.array is not None,
                )
                carry = step(
                    carry, side_a.chunk(start, stop), side_e.chunk(start, stop), _index(start)
                )
                if side_a.array is None or side_e.array is None:
                    # A numpy side: its chunk was copied for this step; wait before the next copy
                    # so that one chunk's copy lives at a time (two JAX arrays never wait here).
                    jax.block_until_ready(carry)
        total, comp, maxes, counts, umax, c_rank, c_idx, c_a, c_e = carry
        # The single wait of the comparison: everything queued above, one transfer of the result.
        got = jax.device_get((total + comp, maxes, counts, umax, c_rank, c_idx, c_a, c_e))
        sums, maxes, counts, umax, c_rank, c_idx, c_a, c_e = (
            np.array(x, dtype=np.float64) for x in got
        )
        maxes[MAX_STATS.index("ulp_max")] = umax
        live = c_rank > -np.inf
        kk = int(live.sum())
        host = np.concatenate([sums, maxes, counts, c_idx[live], c_a[live], c_e[live]])
    stats = raw_stats(p, *split_stats(host, kk), ktol)
    return finish_plan(stats, p, tolerance, path, name)

"""JAX arrays: metrics computed by XLA on the array's device, one ``block_until_ready``.

On an accelerator two JAX arrays are reduced by one jitted whole-array function when XLA's own
account of its temporaries fits ``MAX_TEMP_BYTES`` (1 GiB): every per-element quantity
(differences, tolerances, ULP distances, non-finite flags) feeds ONE variadic ``lax.reduce`` over
rows of ``BLOCK`` elements, meant to be fused with the elementwise work into one pass over both
arrays. XLA fuses it on the CPU (248 MiB of temporaries for 2 x 4 GiB) but did not on an H200
(32 GB): there the arrays are cut into as few chunks as the bound allows (32 calls at 2 x 4 GiB,
17x one read on an H200; benchmarks/README.md). The per-block partials (a few bytes per
``BLOCK`` elements) are reduced in levels of ``BLOCK`` (sums) or plainly (maxima, counts), and the
k candidates of largest excess are ranked only inside the k blocks of largest block maximum
(found the same way, in levels).

On a GPU, two JAX arrays of bfloat16 / float16 / float32 are compared by a Pallas kernel
(:mod:`paritygate.backends._pallas`, the default there): one pass over both arrays writes one row
of the same per-block partials per block of ``_pallas.BLOCK`` elements (float32 arithmetic;
flagged blocks computed again in float64 by :func:`_block_partials`), reduced by the same
reduction as the XLA path; 3.9x one read of both arrays on an H100 where the XLA path took 16x
(benchmarks/README.md). ``PARITYGATE_JAX_KERNEL=chunked`` forces the XLA path (a diagnosis:
both must agree), ``pallas-interpret`` runs the kernel in Pallas's interpreter on any device
(slow: tests). Other pairs (integers, bool, float64, a numpy side, fewer elements than one block)
and every CPU pair take the XLA path.

On the CPU the same function runs on chunks of ``CHUNK`` elements (cut inside the function with
``lax.dynamic_slice``, so queued chunks hold no copies), which keeps the re-reads of XLA's CPU
fusions in cache; a numpy side is moved to the device one chunk at a time (``CHUNK_ACCELERATOR``
elements on an accelerator), each call awaited before the next transfer. The host queues every call
and waits once; the chunks' results (``len(STATS)`` numbers and 3k candidates each) are combined on
the host in float64.

Accuracy. Both paths are traced with x64 on, whatever the process's ``jax_enable_x64``: values
are compared and sums accumulated in float64, and ``cosine(x, x)`` is 1 within 1e-12 on the XLA
path. (Without x64 XLA has no float64 and would decide mismatches in float32: 537 bfloat16
mismatches where the host engine counts 534.) The Pallas kernel's float32 sums keep the float32
bound of 1 - cosine, ``2e-6 * |a - e|^2 / (2 |a| |e|)`` (tests/test_backend_cosine.py against
exact rational arithmetic). Counts and ULP distances are exact integers.

Complex outputs are copied to the host and compared there as (real, imaginary) pairs (noted in
``promotion``). A numpy side whose dtype JAX cannot hold without x64 (float64, int64, uint64) cannot
be moved to the device without rounding or wrapping: such a pair is compared on the host instead,
and the comparison's ``promotion`` says so.

Integers are compared with an exact inequality test next to the float difference, so a difference
of one is never lost and nothing wraps; bool outputs are compared as 0/1 exactly.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from ..errors import InputError
from ..results import OutputComparison, Tolerance
from ._device import (
    COUNT_STATS,
    MAX_STATS,
    STATS,
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

BLOCK = 1024  # elements per block: the first level of every reduction
TOP_K_DIRECT = 1 << 16  # block maxima ranked by one lax.top_k up to this many; in levels beyond
CHUNK = 1 << 18  # elements per call on the CPU (XLA's CPU fusions re-read it: it stays in cache)
CHUNK_ACCELERATOR = 1 << 22  # elements per transfer of a numpy side to an accelerator
# Extra device memory allowed to the whole-array reduction (XLA's own account of its temporaries);
# past it (should XLA not fuse the pass) the arrays are reduced in chunks of CHUNK_ACCELERATOR.
MAX_TEMP_BYTES = 1 << 30

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


class _Spec(NamedTuple):
    """What the reduction of one output pair is compiled for (hashable: one compilation each)."""

    kind: str
    ulp_dtype: str | None
    tol: Tolerance
    x64: bool


def _elementwise(a_raw: Any, e_raw: Any, s: _Spec) -> dict:
    """Every per-element quantity of the statistics, in the accumulation dtype.

    Returns arrays shaped like the inputs: ``sums`` (list in SUM_STATS order), ``maxes`` (the six
    float maxima of MAX_STATS before ulp_max), ``counts`` (boolean masks in COUNT_STATS order,
    None where a count is zero by construction), ``ulp`` (unsigned distances or None) and
    ``rank`` (the worst-k ordering: excess, inf for a non-finite mismatch, -inf when equal).
    """
    import jax.numpy as jnp

    tol = s.tol
    acc = jnp.float64 if s.x64 else jnp.float32
    inf = jnp.inf
    a = a_raw.astype(acc)
    e = e_raw.astype(acc)
    nf: list = [None] * 7
    nonfinite = nf_mismatch = None
    if s.kind == "float":
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
        nf = [nan_a, nan_e, nan_both, nan_one, inf_a, inf_e, inf_mismatch]
    signed = a - e
    diff = jnp.abs(signed)
    if s.kind == "int":
        wide = jnp.int64 if s.x64 else jnp.int32
        ne = a_raw.astype(wide) != e_raw.astype(wide)
        diff = jnp.where(ne, jnp.maximum(diff, 1), 0)
    abs_e = jnp.abs(e)
    # The host engine's operations, in its order (backends/host.py): the bound is |e| rtol + atol
    # and the excess d - bound. Another order, (d - rtol |e|) - atol, rounds differently, and at
    # exact ties (|a - e| = atol + rtol |e|, common with bfloat16 and float16 inputs) decides
    # them the other way: on an H100 11 of 2**24 bfloat16 elements.
    scaled = abs_e * tol.rtol
    slack = diff - scaled if tol.rtol else diff
    excess = diff - (scaled + tol.atol)
    num = jnp.maximum(diff - tol.atol, 0)
    rtol_need = jnp.where(
        abs_e > 0, num / jnp.where(abs_e > 0, abs_e, 1), jnp.where(num > 0, inf, 0)
    )
    rank = jnp.where(diff == 0, -inf, excess)
    if nonfinite is not None:
        rank = jnp.where(nf_mismatch, inf, rank)
        finite_excess = jnp.where(nonfinite, -inf, excess)
    else:
        finite_excess = excess
    ulp = ulp_over = None
    if s.ulp_dtype is not None and s.kind == "float":
        ulp = _ulp_distance(
            _ordered(a_raw, s.ulp_dtype, s.x64), _ordered(e_raw, s.ulp_dtype, s.x64), s.x64
        )
        ulp = jnp.where(nonfinite, 0, ulp)
        if tol.max_ulp is not None:
            bound = min(tol.max_ulp, int(jnp.iinfo(ulp.dtype).max))
            ulp_over = ulp > jnp.asarray(bound, ulp.dtype)
    return {
        # sum (a - e)^2 and sum (a - e)(a + e) from the difference: 1 - cosine (metrics.py)
        "sums": [diff, a * e, a * a, e * e, diff * diff, signed * (a + e)],
        "maxes": [
            diff,
            diff / (abs_e + tol.rel_eps),
            diff / (jnp.maximum(jnp.abs(a), abs_e) + tol.rel_eps),
            finite_excess,
            slack,
            rtol_need,
        ],
        "counts": [
            None if nonfinite is None else ~nonfinite,
            excess > 0,
            None if ulp is None else ulp > 0,
            ulp_over,
            *nf,
        ],
        "ulp": ulp,
        "rank": rank,
    }


def _block_partials(a_rows: Any, e_rows: Any, s: _Spec, valid: Any) -> tuple:
    """Per-row (block) partials of a (rows, BLOCK) view, from ONE variadic ``lax.reduce``: every
    sum, maximum and count of a row in a single reduction, so that XLA can fuse the elementwise
    work into one kernel that reads both arrays once (it does on the CPU; on an H200 neither this
    nor separate sibling reductions were fused, and the caller chunks within the memory bound).

    ``valid`` (None when every position is data) marks the zero padding of a last short block:
    zeros are neutral in every statistic but the finite maximum of the excess (masked here) and
    the count of finite positions (corrected by the caller).
    """
    import jax.numpy as jnp
    from jax import lax

    rows, width = a_rows.shape
    acc = jnp.float64 if s.x64 else jnp.float32
    q = _elementwise(a_rows, e_rows, s)
    if valid is not None:
        q["maxes"][3] = jnp.where(valid, q["maxes"][3], -jnp.inf)
    sums = [x.astype(acc) for x in q["sums"]]
    maxes = [x.astype(acc) for x in q["maxes"]] + [q["rank"].astype(acc)]
    counts = [m.astype(jnp.int32) for m in q["counts"] if m is not None]
    ulp = q["ulp"]
    ulps = [] if ulp is None else [ulp]
    operands = (*sums, *maxes, *counts, *ulps)
    n_s, n_m, n_c = len(sums), len(maxes), len(counts)
    inits = (
        *([jnp.zeros((), acc)] * n_s),
        *([jnp.array(-jnp.inf, acc)] * n_m),
        *([jnp.zeros((), jnp.int32)] * n_c),
        *([jnp.zeros((), ulp.dtype)] if ulps else []),
    )

    def combine(x: tuple, y: tuple) -> tuple:
        out = [x[i] + y[i] for i in range(n_s)]
        out += [lax.max(x[i], y[i]) for i in range(n_s, n_s + n_m)]
        out += [x[i] + y[i] for i in range(n_s + n_m, n_s + n_m + n_c)]
        out += [lax.max(x[i], y[i]) for i in range(n_s + n_m + n_c, len(x))]
        return tuple(out)

    reduced = lax.reduce(operands, inits, combine, (1,))
    row_sums = jnp.stack(reduced[:n_s])
    # The float maxima start from -inf here; those that cannot be negative clamp at zero as the
    # separate reductions did (their elements are >= 0, and every row has elements).
    row_maxes = jnp.stack(reduced[n_s : n_s + n_m - 1])
    block_rank = reduced[n_s + n_m - 1]
    it = iter(reduced[n_s + n_m : n_s + n_m + n_c])
    counts_out = []
    for m in q["counts"]:
        counts_out.append(jnp.zeros((rows,), jnp.int32) if m is None else next(it))
    if q["counts"][0] is None:
        counts_out[0] = jnp.full((rows,), width, jnp.int32)  # n_finite: every element of the row
    if ulps:
        umax = reduced[-1]
    else:
        umax = jnp.zeros((rows,), jnp.uint64 if s.x64 else jnp.uint32)
    return row_sums, row_maxes, jnp.stack(counts_out), umax, block_rank


def _tree_sum(x: Any) -> Any:
    """Sums along the last axis in levels of at most BLOCK terms (pairwise-like accuracy in
    float32: relative error ~ levels * BLOCK * eps in the worst case, far less in practice)."""
    import jax.numpy as jnp

    while x.shape[-1] > BLOCK:
        pad = (-x.shape[-1]) % BLOCK
        if pad:
            x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)])
        x = x.reshape(*x.shape[:-1], -1, BLOCK).sum(axis=-1)
    return x.sum(axis=-1)


def _top_ids(values: Any, k: int) -> Any:
    """Positions of the k largest ``values`` (ties: lower position first), in ascending order.

    Long vectors are cut into groups of BLOCK whose maxima are ranked first: the k largest values
    lie in the k groups of largest maxima (ties by lower group), so only those are ranked.
    """
    import jax.numpy as jnp
    from jax import lax

    n = values.shape[0]
    if n <= TOP_K_DIRECT:
        return jnp.sort(lax.top_k(values, k)[1])
    pad = (-n) % BLOCK
    padded = jnp.pad(values, (0, pad), constant_values=-jnp.inf) if pad else values
    groups = _top_ids(padded.reshape(-1, BLOCK).max(axis=1), min(k, padded.shape[0] // BLOCK))
    ids = (groups[:, None] * BLOCK + jnp.arange(BLOCK, dtype=groups.dtype)).reshape(-1)
    _, pos = lax.top_k(padded[ids], k)
    return jnp.sort(ids[pos])


def _reduce_rows(rows: tuple, a_raw: Any, e_raw: Any, size: int, width: int, s: _Spec, pad: int):
    """The reduction of per-block partials (rows of ``width`` elements, as
    :func:`_block_partials` lays them out) to (sums, maxes, counts, ulp_max, worst-k rank, flat
    index, actual, expected): sums in levels of BLOCK, maxima, counts (less the ``pad`` zeros a
    padded last block counted as finite), and the worst-k elements ranked again only inside the k
    blocks of largest rank (found in levels)."""
    import jax.numpy as jnp
    from jax import lax

    sums, maxes, counts, umax, block_rank = rows
    acc = jnp.float64 if s.x64 else jnp.float32
    count_t = jnp.int64 if s.x64 else jnp.uint32
    index_t = jnp.int64 if s.x64 else jnp.uint32
    k = min(s.tol.worst_k, size)
    counts = counts.sum(axis=1, dtype=count_t)
    out = [
        _tree_sum(sums),
        maxes.max(axis=1),
        counts.at[0].add(-jnp.asarray(pad, count_t)) if pad else counts,
        umax.max().astype(count_t),
    ]
    if k:
        blocks = _top_ids(block_rank, min(k, block_rank.shape[0])).astype(index_t)
        ids = (blocks[:, None] * width + jnp.arange(width, dtype=index_t)).reshape(-1)
        valid = ids < jnp.asarray(size, index_t)  # typed: past 2**31 a Python int overflows
        ids = jnp.minimum(ids, jnp.asarray(size - 1, index_t))
        ga, ge = a_raw[ids], e_raw[ids]
        rank = jnp.where(valid, _elementwise(ga, ge, s)["rank"], -jnp.inf)
        top_rank, pos = lax.top_k(rank, k)
        out += [top_rank, ids[pos], ga[pos].astype(acc), ge[pos].astype(acc)]
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _kernel(s: _Spec, size: int, a_whole: bool, e_whole: bool) -> Any:
    """The jitted reduction of ``size`` elements: (a, e, start) -> (sums, maxes, counts, ulp_max,
    worst-k rank, local flat index, actual, expected).

    A side passed whole (a JAX array) is sliced inside (``lax.dynamic_slice``, fused by XLA), so
    queued chunks hold no copies; a numpy side arrives as its chunk. One pass over both arrays
    yields per-block partials (blocks of BLOCK elements); sums are then added in levels of BLOCK,
    and the worst-k elements are ranked only inside the k blocks of largest excess.
    """
    jax = _jax()
    import jax.numpy as jnp
    from jax import lax

    pad = (-size) % BLOCK

    def run(a_in: Any, e_in: Any, start: Any) -> tuple:
        a_raw, e_raw = a_in.reshape(-1), e_in.reshape(-1)
        if a_whole and a_raw.shape[0] != size:
            a_raw = lax.dynamic_slice(a_raw, (start,), (size,))
        if e_whole and e_raw.shape[0] != size:
            e_raw = lax.dynamic_slice(e_raw, (start,), (size,))
        valid = None
        a_p, e_p = a_raw, e_raw
        if pad:  # a short last block, padded with zeros (a copy: callers keep this one small)
            a_p, e_p = jnp.pad(a_raw, (0, pad)), jnp.pad(e_raw, (0, pad))
            valid = (jnp.arange(size + pad) < size).reshape(-1, BLOCK)
        rows = _block_partials(a_p.reshape(-1, BLOCK), e_p.reshape(-1, BLOCK), s, valid)
        return _reduce_rows(rows, a_raw, e_raw, size, BLOCK, s, pad)

    return jax.jit(run)


@functools.lru_cache(maxsize=64)
def _pallas_kernel(s: _Spec, size: int, interpret: bool) -> Any:
    """The jitted comparison of two whole JAX arrays through the Pallas kernel (traced with x64
    on: ``s.x64`` is True): (a, e) -> the tuple of :func:`_kernel`.

    The kernel writes one row of partials per whole block of ``_pallas.BLOCK`` elements; a short
    last block is one more row from :func:`_block_partials` (zero-padded, a copy of at most one
    block); flagged blocks are computed again by :func:`_block_partials`, ``EXACT_ROWS`` at a
    time, and their rows replaced; then :func:`_reduce_rows`, as on the XLA path.
    """
    jax = _jax()
    import jax.numpy as jnp
    from jax import lax

    from . import _pallas

    width = _pallas.BLOCK
    programs = size // width
    main = programs * width
    pad = (-size) % width
    cap = min(_pallas.EXACT_ROWS, programs)

    def run(a_in: Any, e_in: Any) -> tuple:
        a_raw, e_raw = a_in.reshape(-1), e_in.reshape(-1)
        sums, maxes, rank, mis, unz, uover, umax, flagged = _pallas.block_rows(
            a_raw, e_raw, s.tol, s.ulp_dtype, interpret
        )
        zero = jnp.zeros((programs,), jnp.int32)
        counts = jnp.stack([zero + width, mis, unz, uover] + [zero] * (len(COUNT_STATS) - 4))
        umax = umax.astype(jnp.int64)
        if pad:  # the short last block: one more row, zero-padded and masked
            tail = [jnp.pad(x[main:], (0, pad)).reshape(1, width) for x in (a_raw, e_raw)]
            valid = (jnp.arange(width) < size - main).reshape(1, width)
            ts, tm, tc, tu, tr = _block_partials(*tail, s, valid)
            sums = jnp.concatenate([sums, ts], axis=1)
            maxes = jnp.concatenate([maxes, tm], axis=1)
            counts = jnp.concatenate([counts, tc.astype(jnp.int32)], axis=1)
            umax = jnp.concatenate([umax, tu.astype(jnp.int64)])
            rank = jnp.concatenate([rank, tr])
        n_rows = rank.shape[0]
        # The exact pass: flagged blocks first in `order`, EXACT_ROWS of them per step.
        steps = -(-programs // cap)
        (order,) = jnp.nonzero(flagged, size=steps * cap, fill_value=n_rows)
        n_flagged = flagged.sum()
        lanes = jnp.arange(width, dtype=jnp.int64)

        def more(c: tuple) -> Any:
            return c[0] * cap < n_flagged

        def exact(c: tuple) -> tuple:
            i, sums, maxes, counts, umax, rank = c
            ids = lax.dynamic_slice(order, (i * cap,), (cap,))
            at = (
                jnp.minimum(ids, programs - 1).astype(jnp.int64)[:, None] * width + lanes
            ).reshape(-1)
            ga = a_raw[at].reshape(cap, width)
            ge = e_raw[at].reshape(cap, width)
            rs, rm, rc, ru, rr = _block_partials(ga, ge, s, None)
            return (
                i + 1,
                sums.at[:, ids].set(rs, mode="drop"),
                maxes.at[:, ids].set(rm, mode="drop"),
                counts.at[:, ids].set(rc.astype(jnp.int32), mode="drop"),
                umax.at[ids].set(ru.astype(jnp.int64), mode="drop"),
                rank.at[ids].set(rr, mode="drop"),
            )

        start = (jnp.zeros((), jnp.int32), sums, maxes, counts, umax, rank)
        _, sums, maxes, counts, umax, rank = lax.while_loop(more, exact, start)
        return _reduce_rows((sums, maxes, counts, umax, rank), a_raw, e_raw, size, width, s, pad)

    return jax.jit(run)


KERNEL_ENV = "PARITYGATE_JAX_KERNEL"  # auto | chunked | pallas | pallas-interpret
# ``auto``: the Pallas kernel on a GPU, the XLA path elsewhere. The compiled kernel decides every
# element as the host engine does (2**24 + 77 elements with NaN, infinities and signed zeros, in
# bfloat16, float16 and float32, both orders: H100, 2026-12-05; the test
# test_pallas_kernel_on_the_gpu_agrees_with_the_host holds it to that on every GPU run).


def _pallas_mode(device: Any, p: Any, both: bool) -> str | None:
    """'compiled' or 'interpret' where the Pallas kernel compares this pair, else None."""
    import os

    choice = os.environ.get(KERNEL_ENV, "auto").lower()
    if choice not in ("auto", "chunked", "pallas", "pallas-interpret"):
        raise InputError(
            f"{KERNEL_ENV} must be auto, chunked, pallas or pallas-interpret, got {choice!r}"
        )
    gpu = device.platform == "gpu"
    if choice == "chunked" or (choice == "auto" and not gpu):
        return None
    if choice == "pallas" and not gpu:
        raise InputError(
            f"{KERNEL_ENV}=pallas needs a GPU device (the array is on {device.platform}); "
            "pallas-interpret runs the kernel in Pallas's interpreter anywhere",
            where=p.path or None,
        )
    from . import _pallas

    if not (both and _pallas.supports(p)):
        return None  # integers, bool, a numpy side, fewer elements than one block: XLA's path
    return "interpret" if choice == "pallas-interpret" else "compiled"


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


def _accelerator(device: Any) -> bool:
    return device.platform != "cpu"


@functools.lru_cache(maxsize=64)
def _temp_bytes(s: _Spec, size: int, a: tuple[tuple[int, ...], str], e: tuple) -> int:
    """XLA's temporaries (bytes beyond inputs and outputs) of the whole-array reduction of two
    JAX arrays of these (shape, dtype), compiled for the default device; 0 if not reported."""
    jax = _jax()
    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in (a, e)]
    compiled = _kernel(s, size, True, True).lower(*args, _index(0)).compile()
    analysis = compiled.memory_analysis()
    return 0 if analysis is None else int(analysis.temp_size_in_bytes)


def _ranges(size: int, accelerator: bool, both: bool, s: _Spec, a: Any, e: Any) -> list:
    """The (start, stop) ranges reduced by one call each."""
    if not accelerator or not both:
        step = CHUNK_ACCELERATOR if accelerator else CHUNK
        return [(i, min(i + step, size)) for i in range(0, size, step)]
    # The whole arrays in one call; a short last block in a call of its own (it is padded).
    main = size // BLOCK * BLOCK
    temp = _temp_bytes(s, main, (a.shape, a.dtype), (e.shape, e.dtype)) if main else 0
    if temp > MAX_TEMP_BYTES:
        # XLA would materialize full-size temporaries here: chunks as large as the bound allows
        # (a power of two, from the temporaries per element), few calls.
        step = CHUNK_ACCELERATOR
        while step * 2 * temp <= MAX_TEMP_BYTES * main and step * 2 < main:
            step *= 2
        return [(i, min(i + step, size)) for i in range(0, size, step)]
    return [(0, main), (main, size)] if 0 < main < size else [(0, size)]


def compare_arrays(actual: Any, expected: Any, tolerance: Tolerance, path: str) -> OutputComparison:
    """Compare a JAX array with a JAX array or a numpy array on the JAX array's device."""
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
    if p.size == 0:
        stats = raw_stats(p, *split_stats(empty_stats(), 0), ktol)
        return finish_plan(stats, p, tolerance, path, name)
    jax = _jax()
    both = side_a.array is not None and side_e.array is not None
    mode = _pallas_mode(device, p, both)
    if mode is not None:
        # Traced and reduced with x64 on: the exact pass and the reduction in float64.
        with jax.enable_x64(True), jax.default_device(device):
            run = _pallas_kernel(
                _Spec(p.kind, p.ulp_dtype, ktol, True), p.size, mode == "interpret"
            )
            got = jax.device_get([run(actual, expected)])  # the single wait and transfer
        return _finish(got, [0], p, ktol, tolerance, path)
    # Traced with x64 on whatever the process's setting: without it XLA would decide mismatches
    # in float32 (537 where the host counts 534 in bfloat16, 2**15 + 77 elements).
    spec = _Spec(p.kind, p.ulp_dtype, ktol, True)
    results, starts = [], []
    with jax.enable_x64(True), jax.default_device(device):
        ranges = _ranges(p.size, _accelerator(device), both, spec, side_a, side_e)
        for start, stop in ranges:
            run = _kernel(spec, stop - start, side_a.array is not None, side_e.array is not None)
            results.append(run(side_a.chunk(start, stop), side_e.chunk(start, stop), _index(start)))
            starts.append(start)
            if not both:
                # A numpy side: its chunk was copied for this call; wait before the next copy
                # so that one chunk's copy lives at a time (two JAX arrays never wait here).
                jax.block_until_ready(results[-1])
    # The single wait of the comparison: every chunk queued above, one transfer of the results.
    got = jax.device_get(results)
    return _finish(got, starts, p, ktol, tolerance, path)


def _finish(got: list, starts: list, p: Any, ktol: Tolerance, tolerance: Tolerance, path: str):
    """The calls' results (on the host) combined in float64 into the comparison."""
    import numpy as np

    sums = np.sum([np.asarray(r[0], np.float64) for r in got], axis=0)
    maxes = np.max([np.asarray(r[1], np.float64) for r in got], axis=0)
    atol = MAX_STATS.index("atol_needed")
    maxes[atol] = max(maxes[atol], 0.0)  # the largest slack, never below zero
    counts = np.sum([np.asarray(r[2], np.float64) for r in got], axis=0)
    umax = max(float(r[3]) for r in got)
    maxes = np.append(maxes, umax)  # ulp_max, the last of MAX_STATS, in its own integer slot
    if ktol.worst_k:
        rank = np.concatenate([np.asarray(r[4], np.float64) for r in got])
        flat = np.concatenate([np.asarray(r[5], np.float64) + s for r, s in zip(got, starts)])
        va = np.concatenate([np.asarray(r[6], np.float64) for r in got])
        ve = np.concatenate([np.asarray(r[7], np.float64) for r in got])
        order = np.lexsort((flat, -rank))[: ktol.worst_k]
        order = order[rank[order] > -np.inf]
        worst = [flat[order], va[order], ve[order]]
    else:
        worst = [np.zeros(0)] * 3
    assert len(sums) + len(maxes) + len(counts) == len(STATS)
    stats = raw_stats(p, np.concatenate([sums, maxes, counts]), *worst, ktol)
    return finish_plan(stats, p, tolerance, path, name)

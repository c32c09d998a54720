"""A Pallas kernel for JAX arrays on a GPU: one pass over both arrays, a row of partials per block.

Each program reads ``BLOCK`` elements of both arrays in tiles of ``TILE`` (float32 arithmetic, one
float32 partial per lane and statistic: ``BLOCK / TILE`` terms each, added in float64 when the
block closes, as the fast Triton kernel of the torch backend does) and writes the row of its block
in the layout of :func:`paritygate.backends.jax._block_partials`: six sums, the six float maxima,
the block's rank (largest excess among elements that differ), the counts and the ULP maximum. The
rows are then reduced by the JAX backend's own reduction (sums in levels, maxima, counts, and the
worst-k elements ranked again only inside the k blocks of largest rank).

1 - cosine keeps the float32 bound of tests/backends/test_backend_cosine.py (``2e-6 * |a - e|^2 /
(2 |a| |e|)``); the ratios carry a few float32 roundings (the fast division within 2 ULP).

Exact decisions. ``max_abs`` is exact: the float32 difference and its rounding error (TwoSum) are
kept as a pair whose float64 sum is the host's difference. Counts and ULP distances are exact
integers. A block is *flagged* where float32 cannot give the host's numbers: a NaN or an infinity
(a non-finite difference), a float32 overflow of a sum or a ratio, squares lost to underflow (a
sum of squares below ``TINY`` with nonzero values), or an element whose mismatch decision lies
within ``NEAR`` (relative) of the bound (float32 rounding, a few 1e-8, cannot flip one farther
away). Flagged blocks are computed again, ``EXACT_ROWS`` blocks per step, by the backend's float64
definition of the partials (the same function the XLA path reduces), and their rows replaced.

Everything after the kernel is traced with x64 on, whatever the process's setting, so that the
exact pass and the reduction are float64 on the device. Without a GPU, the same kernel runs in
Pallas's interpreter (``PARITYGATE_JAX_KERNEL=pallas-interpret``; tests/backends/
test_backend_jax.py).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["FLOAT_INPUTS", "supports", "block_rows"]

BLOCK = 1 << 14  # elements per program (one row of partials)
TILE = 1 << 9  # elements per step of a program: each lane adds BLOCK / TILE float32 terms
NUM_WARPS = 4
# A mismatch decision within this relative distance of the bound is left to the exact pass.
NEAR = 1e-6
# A block with nonzero values (or differences) whose float32 sum of squares falls below this may
# have lost squares to underflow: the exact pass recomputes it.
TINY = 2.0**-100
EXACT_ROWS = 64  # flagged blocks recomputed per step of the exact pass
# The three ratios by the fast float32 division of the GPU (div.full.f32, within 2 ULP, as the
# Triton kernel's tl.fdiv): the pass is bound by instructions, and IEEE division costs several
# times as many. The interpreter divides exactly.
FAST_DIVISION = True
FLOAT_INPUTS = ("bfloat16", "float16", "float32")
_FLT_MAX = 3.4028234663852886e38


def supports(p: Any) -> bool:
    """Float inputs the kernel reads (both sides JAX arrays, checked by the caller)."""
    return (
        p.kind == "float"
        and p.dtype_actual in FLOAT_INPUTS
        and p.dtype_expected in FLOAT_INPUTS
        and p.ulp_dtype in FLOAT_INPUTS
        and BLOCK <= p.size <= 1 << 31  # int32 offsets inside the kernel
    )


def _float32_below(x: float) -> float:
    """The largest float32 not above ``x``: for a float32 difference d, d > x exactly when d >
    that float32."""
    import numpy as np

    f = np.float32(x)
    if float(f) > x:
        f = np.nextafter(f, np.float32(-np.inf))
    return float(f)


def _kernel_body(tol: Any, ulp_dtype: str, block: int, tile: int, fast_div: bool) -> Any:
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    f32, f64 = jnp.float32, jnp.float64
    ulp_bits = 16 if ulp_dtype in ("bfloat16", "float16") else 32
    ulp_int = jnp.int16 if ulp_bits == 16 else jnp.int32
    ulp_wide = jnp.int32 if ulp_bits == 16 else jnp.int64
    ulp_mask = (1 << (ulp_bits - 1)) - 1
    ulp_t = getattr(jnp, ulp_dtype)
    atol32 = _float32_below(tol.atol)
    rtol32 = float(np.float32(tol.rtol))
    rel_eps32 = float(np.float32(tol.rel_eps))
    rtol_zero = tol.rtol == 0
    limit = 2**31 - 1 if ulp_bits == 16 else 2**62  # distances below 2**17 or 2**33
    max_ulp = None if tol.max_ulp is None else min(int(tol.max_ulp), limit)
    inf = float("inf")
    steps = block // tile

    def div(x: Any, y: Any) -> Any:
        if not fast_div:
            return x / y
        import jax
        from jax.experimental.pallas import triton as pltriton

        (q,) = pltriton.elementwise_inline_asm(
            "div.full.f32 $0, $1, $2;",
            args=[x, y],
            constraints="=f,f,f",
            pack=1,
            result_shape_dtypes=[jax.ShapeDtypeStruct(x.shape, x.dtype)],
        )
        return q

    def ordered(raw: Any) -> Any:
        bits = lax.bitcast_convert_type(raw.astype(ulp_t), ulp_int).astype(ulp_wide)
        magnitude = bits & ulp_mask
        return jnp.where(bits < 0, -magnitude, magnitude)

    def kernel(a_ref, e_ref, *outs):
        def step(t, c):
            start = pl_multiple_of(t * tile, tile)
            a_raw = a_ref[pl_ds(start, tile)]
            e_raw = e_ref[pl_ds(start, tile)]
            a = a_raw.astype(f32)
            e = e_raw.astype(f32)
            d = a - e
            # TwoSum: a - e = d + err exactly (no overflow: a non-finite d flags the block)
            bb = d - a
            err = (a - (d - bb)) + (-e - bb)
            diff = jnp.abs(d)
            lo = jnp.where(d < 0, -err, err)  # |a - e| = diff + lo exactly
            abs_a = jnp.abs(a)
            abs_e = jnp.abs(e)
            if rtol_zero:
                slack = diff
                scale = diff
            else:
                slack = diff - rtol32 * abs_e
                scale = diff + rtol32 * abs_e
            num = jnp.maximum(diff - atol32, 0.0)
            rtol_need = jnp.where(abs_e > 0, div(num, abs_e), jnp.where(num > 0, inf, 0.0))
            near = (diff > 0) & (jnp.abs(slack - atol32) <= NEAR * (scale + atol32))
            u = jnp.abs(ordered(a_raw) - ordered(e_raw))
            new_max = diff > c["mhi"]
            tie = diff == c["mhi"]
            out = {
                "sabs": c["sabs"] + diff,
                "dot": c["dot"] + a * e,
                "na": c["na"] + a * a,
                "ne": c["ne"] + e * e,
                # (a - e)^2 and (a - e)(a + e) from the difference: 1 - cosine (metrics.py)
                "dd": c["dd"] + d * d,
                "gap": c["gap"] + d * (a + e),
                "mlo": jnp.where(new_max, lo, jnp.where(tie, jnp.maximum(c["mlo"], lo), c["mlo"])),
                "mhi": jnp.maximum(c["mhi"], diff),
                "rel": jnp.maximum(c["rel"], div(diff, abs_e + rel_eps32)),
                "rels": jnp.maximum(c["rels"], div(diff, jnp.maximum(abs_a, abs_e) + rel_eps32)),
                "slack": jnp.maximum(c["slack"], slack),
                "rtol": jnp.maximum(c["rtol"], rtol_need),
                "rank": jnp.maximum(c["rank"], jnp.where(diff == 0, -inf, slack)),
                "fin": c["fin"] + (diff <= _FLT_MAX).astype(jnp.int32),
                "mis": c["mis"] + (slack > atol32).astype(jnp.int32),
                "near": c["near"] + near.astype(jnp.int32),
                "umax": jnp.maximum(c["umax"], u),
                "unz": c["unz"] + (u > 0).astype(jnp.int32),
            }
            if max_ulp is not None:
                out["uover"] = c["uover"] + (u > max_ulp).astype(jnp.int32)
            return out

        zeros = jnp.zeros((tile,), f32)
        izeros = jnp.zeros((tile,), jnp.int32)
        init = {
            **{k: zeros for k in ("sabs", "dot", "na", "ne", "dd", "gap", "mlo", "mhi")},
            **{k: zeros for k in ("rel", "rels", "rtol")},
            "slack": jnp.full((tile,), -inf, f32),
            "rank": jnp.full((tile,), -inf, f32),
            **{k: izeros for k in ("fin", "mis", "near", "unz")},
            "umax": jnp.zeros((tile,), ulp_wide),
        }
        if max_ulp is not None:
            init["uover"] = izeros
        c = step(0, init) if steps == 1 else lax.fori_loop(0, steps, step, init)
        sums = [c[k].astype(f64).sum() for k in ("sabs", "dot", "na", "ne", "dd", "gap")]
        mhi = c["mhi"].max()
        mlo = jnp.where(c["mhi"] == mhi, c["mlo"], -inf).max()
        max_abs = mhi.astype(f64) + mlo.astype(f64)
        rel, rels, rtol = c["rel"].max(), c["rels"].max(), c["rtol"].max()
        slack = c["slack"].max().astype(f64)
        big = 1.7976931348623157e308
        finite = (
            (c["fin"].sum() == block)
            & (jnp.abs(sums[0]) <= big)
            & (jnp.abs(sums[1]) <= big)
            & (sums[2] <= big)
            & (sums[3] <= big)
            & (sums[4] <= big)
            & (jnp.abs(sums[5]) <= big)
            & (rel <= _FLT_MAX)
            & (rels <= _FLT_MAX)
            & (rtol <= _FLT_MAX)
        )
        has_values = c["na"].max() + c["ne"].max() > 0  # a nonzero value on either side
        tiny = (has_values & ((sums[2] < TINY) | (sums[3] < TINY))) | ((mhi > 0) & (sums[4] < TINY))
        flagged = (~finite) | tiny | (c["near"].sum() > 0)
        row = [
            *sums,
            max_abs,
            rel.astype(f64),
            rels.astype(f64),
            slack - tol.atol,  # max_excess over finite positions: every position here
            slack,
            rtol.astype(f64),
            c["rank"].max().astype(f64) - tol.atol,  # largest excess among those that differ
            c["mis"].sum(),
            c["unz"].sum(),
            c["uover"].sum() if max_ulp is not None else jnp.zeros((), jnp.int32),
            c["umax"].max().astype(jnp.int64),
            flagged.astype(jnp.int32),
        ]
        for ref, value in zip(outs, row):
            ref[...] = value.astype(ref.dtype)

    return kernel


def pl_ds(start: Any, size: int) -> Any:
    from jax.experimental import pallas as pl

    return pl.ds(start, size)


def pl_multiple_of(x: Any, m: int) -> Any:
    from jax.experimental import pallas as pl

    return pl.multiple_of(x, m)


# Output rows of the kernel: 13 float64 columns, then int32 counts, the int64 ULP maximum, the flag.
N_FLOAT = 13
N_OUT = 18


@functools.lru_cache(maxsize=64)
def _call(
    tol: Any, ulp_dtype: str, programs: int, interpret: bool, block: int, tile: int, fast: bool
) -> Any:
    """The pallas_call over the first ``programs`` blocks of two flat arrays."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    body = _kernel_body(tol, ulp_dtype, block, tile, fast and not interpret)
    dtypes = [jnp.float64] * N_FLOAT + [jnp.int32] * 3 + [jnp.int64, jnp.int32]
    out_shape = [jax.ShapeDtypeStruct((programs,), dt) for dt in dtypes]
    row_spec = pl.BlockSpec((None,), lambda i: (i,))
    in_spec = pl.BlockSpec((block,), lambda i: (i,))
    params = None
    if not interpret:
        from jax.experimental.pallas import triton as pltriton

        params = pltriton.CompilerParams(num_warps=NUM_WARPS, num_stages=1)
    return pl.pallas_call(
        body,
        out_shape=out_shape,
        grid=(programs,),
        in_specs=[in_spec, in_spec],
        out_specs=[row_spec] * len(dtypes),
        interpret=interpret,
        compiler_params=params,
        name="paritygate_stats",
    )


def block_rows(a_flat: Any, e_flat: Any, tol: Any, ulp_dtype: str, interpret: bool) -> tuple:
    """Rows of the kernel over the whole blocks of two flat arrays (traced with x64 on):
    (sums [6, programs], maxima [6, programs], rank [programs], mismatches, ulp_nonzero,
    ulp_over [programs] int32, ulp_max [programs] int64, flagged [programs] bool)."""
    import jax.numpy as jnp

    programs = a_flat.shape[0] // BLOCK
    rows = _call(tol, ulp_dtype, programs, interpret, BLOCK, TILE, FAST_DIVISION)(a_flat, e_flat)
    sums = jnp.stack(rows[0:6])
    maxes = jnp.stack(rows[6:12])
    return sums, maxes, rows[12], rows[13], rows[14], rows[15], rows[16], rows[17] > 0

"""Triton kernels for float tensors on CUDA: every metric in one pass over both tensors.

Two kernels compute per-block partials (one row per block: six sums, eight maxima and twelve
counts), reduced by torch on the device (float64); ``PARITYGATE_TORCH_KERNEL=triton`` asks for
them (:mod:`paritygate.backends.torch`; the default where Triton runs).

The fast kernel reads whole blocks of ``SPLIT_BLOCK`` elements in float32 arithmetic and nothing
else: no masks, no float64 but one conversion per lane when the block closes, no branch to an
exact path. Each thread adds ``VEC`` contiguous elements pairwise (16 bytes of the wider input),
and each lane adds at most 32 such terms in float32 (a block is at most 32 tiles). A block is
*flagged* where float32 cannot give the host's numbers: a NaN or an infinity (any non-finite input
makes the block's sum of ``|a - e|`` non-finite), a float32 overflow of a sum or of a ratio (an
infinite ``rtol_needed``, ``|e| = 0`` past ``atol``, included), a nonzero value with a float32 sum
of squares below ``TINY_SQUARES`` (squares lost to underflow), an element whose mismatch decision
lies within ``NEAR`` (relative) of the bound, and the last, partial block. A flagged block appends
its index to a list on the device (an atomic counter); the exact kernel, launched after it over
that list only, recomputes those blocks in float64 with the host engine's operations (the bound as
``rtol * |e| + atol``, compiled without fused multiply-adds) and overwrites their rows. Nothing
waits for the host in between.

The mismatch decision without float64: with float32 constants ``r_hi >= rtol (1 + NEAR) /
(1 - NEAR)`` and ``a_hi >= atol (1 + NEAR) / (1 - NEAR)`` (``r_lo`` and ``a_lo`` at or below the
inverse factor), one fused multiply-add each decides ``|a - e| > r_hi |e| + a_hi`` (a certain
mismatch) and ``|a - e| > r_lo |e| + a_lo`` (a possible one) with a single rounding; a block where
the two counts differ is flagged. The float32 difference is within ``2**-24`` (relative) of the
float64 one, so a certain mismatch is one on the host and an impossible one is not (a subtraction
is exact in the subnormal range: no underflow enters). Exact shortcuts: with ``rtol = 0`` the
largest slack is ``max |a - e|``, and so is a block's rank (its largest excess among elements
that differ) where positive; ULP distances use 32-bit integers (an unsigned distance for
float32).

1 - cosine keeps the float32 bound of tests/backends/test_backend_cosine.py (``2e-6 *
|a - e|^2 / (2 |a| |e|)``); maxima and ratios carry a few float32 roundings (relative ~2e-7; the
ratios use the fast float32 division, within 2 ULP). Counts, ULP distances, NaN/Inf accounting
and the worst elements agree with the host engine exactly. The worst-k elements are found by
revisiting, in float64, only the k blocks with the largest excess. Extra device memory: the
partial rows (about 212 bytes per block) plus the k revisited blocks.

Only contiguous CUDA tensors of bfloat16 / float16 / float32 take this path; everything else takes
the chunked torch path of :mod:`paritygate.backends.torch` (float64, for 1 - cosine within
``1e-12`` relative: ``PARITYGATE_TORCH_KERNEL=chunked``). Without a GPU the same kernel source runs
in Triton's interpreter (``TRITON_INTERPRET=1``; tests/backends/test_backend_torch.py).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["available", "supports", "partials", "block_size", "reduce"]

# The fast kernel's launch shape: SPLIT_WARPS warps; each thread holds SPLIT_ROWS rows of VEC
# contiguous elements (16 bytes of the wider input); at most SPLIT_BLOCK elements per program.
# (Compiled for sm_90: 64 registers, no spills.)
SPLIT_BLOCK = 1 << 15
SPLIT_WARPS = 4
SPLIT_ROWS = 1
# The exact kernel: EXACT_PROGRAMS programs walk the list of flagged blocks in tiles of EXACT_TILE.
EXACT_TILE = 1 << 8
EXACT_WARPS = 4
EXACT_PROGRAMS = 1024
# A mismatch decision within this relative distance of the bound is left to the exact (float64)
# pass of its block: float32 rounding (a few 1e-8) cannot flip a decision farther away.
NEAR = 1e-6
# A block with a nonzero value whose float32 sum of squares (of either side) falls below this may
# have lost squares to underflow: the exact pass recomputes it.
TINY_SQUARES = 2.0**-100
N_SUMS, N_MAXES, N_COUNTS = 6, 8, 12
FLOAT_INPUTS = ("bfloat16", "float16", "float32")


def available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def supports(actual: Any, expected: Any, p: Any) -> bool:
    torch = __import__("torch")
    return (
        isinstance(actual, torch.Tensor)
        and isinstance(expected, torch.Tensor)
        and actual.device.type == "cuda"
        and actual.device == expected.device
        and actual.is_contiguous()
        and expected.is_contiguous()
        and p.dtype_actual in FLOAT_INPUTS
        and p.dtype_expected in FLOAT_INPUTS
        and p.size > 0
        and available()
    )


@functools.lru_cache(maxsize=1)
def _split_kernels() -> tuple[Any, Any]:
    """(fast kernel, exact kernel)."""
    # triton.language as a module global: Triton's interpreter (TRITON_INTERPRET=1) patches the
    # kernels' globals, which a local import would hide from them.
    global tl, libdevice
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import libdevice

    # max_ulp stays an argument whatever its value (no specialization on 1)
    @triton.jit(do_not_specialize=["max_ulp"])
    def fast_kernel(
        a_ptr,
        e_ptr,
        n,
        params_ptr,
        max_ulp,
        fsum_ptr,
        fmax_ptr,
        cnt_ptr,
        ids_ptr,
        nflag_ptr,
        BLOCK: tl.constexpr,
        ROWS: tl.constexpr,
        VEC: tl.constexpr,
        ULP_DT: tl.constexpr,
        ULP_INT: tl.constexpr,
        ULP_BITS: tl.constexpr,
        ULP_MASK: tl.constexpr,
        HAS_MAX_ULP: tl.constexpr,
        RTOL_ZERO: tl.constexpr,
        REL_EPS_ZERO: tl.constexpr,
        TINY: tl.constexpr,
        FAST_DIV: tl.constexpr,
    ):
        pid = tl.program_id(0)
        start = pid.to(tl.int64) * BLOCK
        if start + BLOCK > n:
            # The last, partial block: the exact kernel takes it (this one reads whole blocks).
            slot = tl.atomic_add(nflag_ptr, 1)
            tl.store(ids_ptr + slot, pid)
        else:
            rtol = tl.load(params_ptr + 0)  # rtol = rtol + rtol_lo within float32 rounding
            rtol_lo = tl.load(params_ptr + 8)
            rel_eps = tl.load(params_ptr + 1)
            atol = tl.load(params_ptr + 2)  # atol = atol + atol_lo within float32 rounding
            atol_lo = tl.load(params_ptr + 7)
            neg_r_hi = tl.load(params_ptr + 3)
            a_hi = tl.load(params_ptr + 4)
            neg_r_lo = tl.load(params_ptr + 5)
            a_lo = tl.load(params_ptr + 6)
            inf = float("inf")
            # ROWS rows of VEC contiguous elements: a thread adds its row's VEC elements pairwise
            # and keeps one float32 partial per row and statistic (ROWS / threads registers).
            tile = tl.arange(0, ROWS)[:, None] * VEC + tl.arange(0, VEC)[None, :]
            a_blk = a_ptr + start
            e_blk = e_ptr + start
            s_abs = tl.zeros([ROWS], tl.float32)
            s_dot = tl.zeros([ROWS], tl.float32)
            s_na = tl.zeros([ROWS], tl.float32)
            s_ne = tl.zeros([ROWS], tl.float32)
            s_dd = tl.zeros([ROWS], tl.float32)
            s_gap = tl.zeros([ROWS], tl.float32)
            m_abs = tl.zeros([ROWS], tl.float32)
            m_mag = tl.zeros([ROWS], tl.float32)
            m_rel = tl.zeros([ROWS], tl.float32)
            m_rels = tl.zeros([ROWS], tl.float32)
            m_rtol = tl.zeros([ROWS], tl.float32)
            m_slack = tl.full([ROWS], -inf, tl.float32)
            m_rank = tl.full([ROWS], -inf, tl.float32)
            c_hi = tl.zeros([ROWS], tl.int32)
            c_lo = tl.zeros([ROWS], tl.int32)
            c_unz = tl.zeros([ROWS], tl.int32)
            c_uov = tl.zeros([ROWS], tl.int32)
            u_max = tl.zeros([ROWS], tl.uint32)
            for t in range(0, BLOCK, ROWS * VEC):
                a_raw = tl.load(a_blk + t + tile)
                e_raw = tl.load(e_blk + t + tile)
                a = a_raw.to(tl.float32)
                e = e_raw.to(tl.float32)
                d = a - e
                diff = tl.abs(d)
                abs_e = tl.abs(e)
                mag = tl.maximum(tl.abs(a), abs_e)
                s_abs += tl.sum(diff, axis=1)
                s_dot += tl.sum(a * e, axis=1)
                s_na += tl.sum(a * a, axis=1)
                s_ne += tl.sum(e * e, axis=1)
                # (a - e)^2 and (a - e)(a + e) from the difference: 1 - cosine (metrics.py)
                s_dd += tl.sum(d * d, axis=1)
                s_gap += tl.sum(d * (a + e), axis=1)
                m_abs = tl.maximum(m_abs, tl.max(diff, axis=1))
                m_mag = tl.maximum(m_mag, tl.max(mag, axis=1))
                # Ratios scaled by 2**24 (numerators stay normal, so the approximate division,
                # within 2 ULP, loses nothing to flushed subnormals; unscaled when the block
                # closes). A subnormal denominator gives inf (the block is flagged).
                dsc = diff * 16777216.0
                if REL_EPS_ZERO:
                    den_rel = abs_e
                    den_rels = mag
                else:
                    den_rel = abs_e + rel_eps
                    den_rels = mag + rel_eps
                # x - atol in two float32 terms: the excess past atol keeps its relative precision
                num = (diff - atol) - atol_lo
                nsc = num * 16777216.0
                if FAST_DIV:
                    rel = libdevice.fast_dividef(dsc, den_rel)
                    rels = libdevice.fast_dividef(dsc, den_rels)
                    need = libdevice.fast_dividef(nsc, abs_e)
                else:
                    rel = dsc / den_rel
                    rels = dsc / den_rels
                    need = nsc / abs_e
                if REL_EPS_ZERO:  # 0 / 0: equal elements have no relative error
                    rel = tl.where(diff > 0, rel, 0.0)
                    rels = tl.where(diff > 0, rels, 0.0)
                need = tl.where(num > 0, need, 0.0)  # x / 0 = inf past atol
                m_rel = tl.maximum(m_rel, tl.max(rel, axis=1))
                m_rels = tl.maximum(m_rels, tl.max(rels, axis=1))
                m_rtol = tl.maximum(m_rtol, tl.max(need, axis=1))
                # certain (hi) and possible (lo) mismatches: one fused multiply-add each
                if RTOL_ZERO:
                    hi = diff > a_hi
                    lo = diff > a_lo
                else:
                    slack = tl.fma(-rtol_lo, abs_e, tl.fma(-rtol, abs_e, diff))
                    m_slack = tl.maximum(m_slack, tl.max(slack, axis=1))
                    m_rank = tl.maximum(m_rank, tl.max(tl.where(diff > 0, slack, -inf), axis=1))
                    hi = tl.fma(neg_r_hi, abs_e, diff) > a_hi
                    lo = tl.fma(neg_r_lo, abs_e, diff) > a_lo
                c_hi += tl.sum(hi.to(tl.int32), axis=1)
                c_lo += tl.sum(lo.to(tl.int32), axis=1)
                # ULP distance in the coarser dtype: ordered integers (+0 and -0 coincide)
                ba = a_raw.to(ULP_DT).to(ULP_INT, bitcast=True).to(tl.int32)
                be = e_raw.to(ULP_DT).to(ULP_INT, bitcast=True).to(tl.int32)
                sa = ba >> (ULP_BITS - 1)
                se = be >> (ULP_BITS - 1)
                oa = (ba ^ (sa & ULP_MASK)) - sa
                oe = (be ^ (se & ULP_MASK)) - se
                # |oa - oe| < 2**32: the wrapped int32 difference read as unsigned
                u = tl.where(oa >= oe, oa - oe, oe - oa).to(tl.uint32, bitcast=True)
                u_max = tl.maximum(u_max, tl.max(u, axis=1))
                c_unz += tl.sum((u > 0).to(tl.int32), axis=1)
                if HAS_MAX_ULP:
                    c_uov += tl.sum((u > max_ulp.to(tl.uint32)).to(tl.int32), axis=1)
            big = 1.7976931348623157e308
            t_abs = tl.sum(s_abs.to(tl.float64), axis=0)
            t_dot = tl.sum(s_dot.to(tl.float64), axis=0)
            t_na = tl.sum(s_na.to(tl.float64), axis=0)
            t_ne = tl.sum(s_ne.to(tl.float64), axis=0)
            t_dd = tl.sum(s_dd.to(tl.float64), axis=0)
            t_gap = tl.sum(s_gap.to(tl.float64), axis=0)
            x_abs = tl.max(m_abs, axis=0)
            x_rel = tl.max(m_rel, axis=0)
            x_rels = tl.max(m_rels, axis=0)
            x_rtol = tl.max(m_rtol, axis=0)
            x_mag = tl.max(m_mag, axis=0)
            # A block maximum of a scaled ratio below 2**-76 (a ratio below 2**-100) may have
            # lost its value to float32 underflow; a value beyond 2**126, its approximate division.
            lost = (x_mag > 8.507059173023462e37) | (
                (x_abs > 0) & ((x_rel < 1.3234889800848443e-23) | (x_rels < 1.3234889800848443e-23))
            )
            lost = lost | ((x_abs > atol) & (x_rtol < 1.3234889800848443e-23))
            n_hi = tl.sum(c_hi, axis=0)
            # Non-finite inputs make the sum of |a - e| non-finite; float32 overflows make a sum
            # or a ratio infinite (an infinite rtol_needed, |e| = 0 past atol, is recomputed too).
            finite = (
                (t_abs <= big)
                & (tl.abs(t_dot) <= big)
                & (t_na <= big)
                & (t_ne <= big)
                & (t_dd <= big)
                & (tl.abs(t_gap) <= big)
                & (x_rel <= 3.4028234663852886e38)
                & (x_rels <= 3.4028234663852886e38)
                & (x_rtol <= 3.4028234663852886e38)
            )
            tiny = (x_mag > 0) & ((t_na < TINY) | (t_ne < TINY))
            flagged = (~finite) | tiny | lost | (tl.sum(c_lo, axis=0) != n_hi)
            fs = fsum_ptr + pid.to(tl.int64) * 6
            tl.store(fs + 0, t_abs)
            tl.store(fs + 1, t_dot)
            tl.store(fs + 2, t_na)
            tl.store(fs + 3, t_ne)
            tl.store(fs + 4, t_dd)
            tl.store(fs + 5, t_gap)
            if RTOL_ZERO:
                # the largest slack is max |a - e|; the rank, over elements that differ, too
                slack_max = x_abs.to(tl.float64)
                rank = tl.where(x_abs > 0, slack_max, -inf)
            else:
                slack_max = tl.max(m_slack, axis=0).to(tl.float64)
                rank = tl.max(m_rank, axis=0).to(tl.float64)
            fm = fmax_ptr + pid.to(tl.int64) * 8
            unscale = 5.960464477539063e-08  # 2**-24
            tl.store(fm + 0, x_abs.to(tl.float64))
            tl.store(fm + 1, x_rel.to(tl.float64) * unscale)
            tl.store(fm + 2, x_rels.to(tl.float64) * unscale)
            tl.store(fm + 3, slack_max)
            tl.store(fm + 4, slack_max)
            tl.store(fm + 5, x_rtol.to(tl.float64) * unscale)
            tl.store(fm + 6, rank)
            tl.store(fm + 7, tl.max(u_max, axis=0).to(tl.float64))
            cn = cnt_ptr + pid.to(tl.int64) * 12
            zero = tl.sum(tl.zeros([ROWS], tl.int64), axis=0)
            tl.store(cn + 0, zero + BLOCK)
            tl.store(cn + 1, n_hi.to(tl.int64))
            tl.store(cn + 2, tl.sum(c_unz, axis=0).to(tl.int64))
            tl.store(cn + 3, tl.sum(c_uov, axis=0).to(tl.int64))
            for c in tl.static_range(4, 12):
                tl.store(cn + c, zero)
            if flagged:
                slot = tl.atomic_add(nflag_ptr, 1)
                tl.store(ids_ptr + slot, pid)

    @triton.jit(do_not_specialize=["max_ulp"])
    def exact_kernel(
        a_ptr,
        e_ptr,
        n,
        params_ptr,
        max_ulp,
        ids_ptr,
        nflag_ptr,
        fsum_ptr,
        fmax_ptr,
        cnt_ptr,
        BLOCK: tl.constexpr,
        TILE: tl.constexpr,
        PROGRAMS: tl.constexpr,
        ULP_DT: tl.constexpr,
        ULP_INT: tl.constexpr,
        ULP_WIDE: tl.constexpr,
        ULP_MASK: tl.constexpr,
        EQUAL_NAN: tl.constexpr,
        HAS_MAX_ULP: tl.constexpr,
    ):
        # Float64 arithmetic with the host engine's operations (launched without fused
        # multiply-adds): the bound is rtol * |e| + atol and a mismatch is |a - e| - bound > 0.
        atol = tl.load(params_ptr + 0)
        rtol = tl.load(params_ptr + 1)
        rel_eps = tl.load(params_ptr + 2)
        lanes = tl.arange(0, TILE)
        inf = float("inf")
        count = tl.load(nflag_ptr)
        j = tl.program_id(0)
        while j < count:
            pid = tl.load(ids_ptr + j)
            start = pid.to(tl.int64) * BLOCK
            block_len = tl.minimum(n - start, BLOCK)
            v_sabs = tl.zeros([TILE], tl.float64)
            v_dot = tl.zeros([TILE], tl.float64)
            v_na = tl.zeros([TILE], tl.float64)
            v_ne = tl.zeros([TILE], tl.float64)
            v_dd = tl.zeros([TILE], tl.float64)
            v_gap = tl.zeros([TILE], tl.float64)
            v_maxabs = tl.zeros([TILE], tl.float64)
            v_rel = tl.zeros([TILE], tl.float64)
            v_rels = tl.zeros([TILE], tl.float64)
            v_slack = tl.full([TILE], -inf, tl.float64)
            v_rtol = tl.zeros([TILE], tl.float64)
            v_rank = tl.full([TILE], -inf, tl.float64)
            v_fin = tl.zeros([TILE], tl.int32)
            v_mis = tl.zeros([TILE], tl.int32)
            v_umax = tl.zeros([TILE], ULP_WIDE)
            v_unz = tl.zeros([TILE], tl.int32)
            v_uover = tl.zeros([TILE], tl.int32)
            for t in range(0, BLOCK, TILE):
                offs = start + t + lanes
                mask = offs < n
                a_raw = tl.load(a_ptr + offs, mask=mask, other=0.0)
                e_raw = tl.load(e_ptr + offs, mask=mask, other=0.0)
                a = a_raw.to(tl.float64)
                e = e_raw.to(tl.float64)
                fin = (tl.abs(a) <= 1.7976931348623157e308) & (tl.abs(e) <= 1.7976931348623157e308)
                # non-finite positions (and masked lanes) hold a = e = 0
                a0 = tl.where(fin, a, 0.0)
                e0 = tl.where(fin, e, 0.0)
                d = a0 - e0
                diff = tl.abs(d)
                abs_e = tl.abs(e0)
                mag = tl.maximum(tl.abs(a0), abs_e)
                v_maxabs = tl.maximum(v_maxabs, diff)
                v_rel = tl.maximum(v_rel, tl.where(diff > 0, diff / (abs_e + rel_eps), 0.0))
                v_rels = tl.maximum(v_rels, tl.where(diff > 0, diff / (mag + rel_eps), 0.0))
                slack = diff - abs_e * rtol
                v_slack = tl.maximum(v_slack, tl.where(fin & mask, slack, -inf))
                num = diff - atol
                v_rtol = tl.maximum(v_rtol, tl.where(num > 0, num / abs_e, 0.0))
                v_rank = tl.maximum(v_rank, tl.where(diff > 0, slack, -inf))
                v_fin += (fin & mask).to(tl.int32)
                v_mis += (diff - (abs_e * rtol + atol) > 0).to(tl.int32)
                v_sabs += diff
                v_dot += a0 * e0
                v_na += a0 * a0
                v_ne += e0 * e0
                # (a - e)^2 and (a - e)(a + e) from the difference: 1 - cosine (metrics.py)
                v_dd += d * d
                v_gap += d * (a0 + e0)
                # ULP distance in the coarser dtype: ordered integers (+0 and -0 coincide)
                ba = a_raw.to(ULP_DT).to(ULP_INT, bitcast=True).to(ULP_WIDE)
                be = e_raw.to(ULP_DT).to(ULP_INT, bitcast=True).to(ULP_WIDE)
                oa = tl.where(ba < 0, -(ba & ULP_MASK), ba)
                oe = tl.where(be < 0, -(be & ULP_MASK), be)
                u = tl.where(fin, tl.abs(oa - oe), 0)
                v_umax = tl.maximum(v_umax, u)
                v_unz += (u > 0).to(tl.int32)
                if HAS_MAX_ULP:
                    v_uover += (u > max_ulp).to(tl.int32)
            zero_count = tl.sum(tl.zeros([TILE], tl.int32), axis=0)  # a scalar int32 loop carry
            c_nan_a = zero_count
            c_nan_e = zero_count
            c_nan_both = zero_count
            c_nan_one = zero_count
            c_inf_a = zero_count
            c_inf_e = zero_count
            c_inf_mis = zero_count
            c_nf_mis = zero_count
            n_finite = tl.sum(v_fin, axis=0)
            if n_finite < block_len:
                # A block holding a NaN or an infinity: a second pass counts them.
                for t in range(0, BLOCK, TILE):
                    offs = start + t + lanes
                    mask = offs < n
                    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float64)
                    e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float64)
                    nan_a = a != a
                    nan_e = e != e
                    inf_a = tl.abs(a) == inf
                    inf_e = tl.abs(e) == inf
                    nan_any = nan_a | nan_e
                    inf_bad = (inf_a | inf_e) & ~nan_any & (a != e)
                    nf_bad = (nan_a ^ nan_e) | inf_bad
                    if not EQUAL_NAN:
                        nf_bad = nf_bad | (nan_a & nan_e)
                    c_nan_a += tl.sum(nan_a.to(tl.int32), axis=0)
                    c_nan_e += tl.sum(nan_e.to(tl.int32), axis=0)
                    c_nan_both += tl.sum((nan_a & nan_e).to(tl.int32), axis=0)
                    c_nan_one += tl.sum((nan_a ^ nan_e).to(tl.int32), axis=0)
                    c_inf_a += tl.sum(inf_a.to(tl.int32), axis=0)
                    c_inf_e += tl.sum(inf_e.to(tl.int32), axis=0)
                    c_inf_mis += tl.sum(inf_bad.to(tl.int32), axis=0)
                    c_nf_mis += tl.sum(nf_bad.to(tl.int32), axis=0)
            fs = fsum_ptr + pid.to(tl.int64) * 6
            tl.store(fs + 0, tl.sum(v_sabs, axis=0))
            tl.store(fs + 1, tl.sum(v_dot, axis=0))
            tl.store(fs + 2, tl.sum(v_na, axis=0))
            tl.store(fs + 3, tl.sum(v_ne, axis=0))
            tl.store(fs + 4, tl.sum(v_dd, axis=0))
            tl.store(fs + 5, tl.sum(v_gap, axis=0))
            fm = fmax_ptr + pid.to(tl.int64) * 8
            tl.store(fm + 0, tl.max(v_maxabs, axis=0))
            tl.store(fm + 1, tl.max(v_rel, axis=0))
            tl.store(fm + 2, tl.max(v_rels, axis=0))
            slack_max = tl.max(v_slack, axis=0)
            tl.store(fm + 3, slack_max)
            tl.store(fm + 4, slack_max)  # atol_needed = max(slack, 0), clamped after the reduction
            tl.store(fm + 5, tl.max(v_rtol, axis=0))
            rank = tl.max(v_rank, axis=0)
            tl.store(fm + 6, tl.where(c_nf_mis > 0, inf, rank))
            tl.store(fm + 7, tl.max(v_umax, axis=0).to(tl.float64))
            cn = cnt_ptr + pid.to(tl.int64) * 12
            tl.store(cn + 0, n_finite.to(tl.int64))
            tl.store(cn + 1, tl.sum(v_mis, axis=0).to(tl.int64))
            tl.store(cn + 2, tl.sum(v_unz, axis=0).to(tl.int64))
            tl.store(cn + 3, tl.sum(v_uover, axis=0).to(tl.int64))
            tl.store(cn + 4, c_nan_a.to(tl.int64))
            tl.store(cn + 5, c_nan_e.to(tl.int64))
            tl.store(cn + 6, c_nan_both.to(tl.int64))
            tl.store(cn + 7, c_nan_one.to(tl.int64))
            tl.store(cn + 8, c_inf_a.to(tl.int64))
            tl.store(cn + 9, c_inf_e.to(tl.int64))
            tl.store(cn + 10, c_inf_mis.to(tl.int64))
            tl.store(cn + 11, c_nf_mis.to(tl.int64))
            j += PROGRAMS

    return fast_kernel, exact_kernel


def _float32_below(x: float) -> float:
    """The largest float32 not above ``x``: for a float32 difference d, d > x exactly when
    d > that float32 (no float32 lies strictly between it and the next one up)."""
    import numpy as np

    f = np.float32(x)
    if float(f) > x:
        f = np.nextafter(f, np.float32(-np.inf))
    return float(f)


def _float32_above(x: float) -> float:
    """The smallest float32 not below ``x`` (inf beyond the float32 range)."""
    import numpy as np

    with np.errstate(over="ignore"):
        f = np.float32(x)
    if float(f) < x:
        f = np.nextafter(f, np.float32(np.inf))
    return float(f)


def _ulp_args(p: Any) -> tuple[Any, int]:
    import triton.language as tl

    ulp_name = p.ulp_dtype or p.compared_as
    dt = {"bfloat16": tl.bfloat16, "float16": tl.float16, "float32": tl.float32}[ulp_name]
    return dt, {"bfloat16": 16, "float16": 16, "float32": 32}[ulp_name]


def _fast_division() -> bool:
    """The approximate float32 division of CUDA (``div.approx.ftz``) on a GPU; Triton's interpreter
    runs the same kernel with numpy's division."""
    import os

    return os.environ.get("TRITON_INTERPRET", "0") not in ("1", "true", "True")


def partials(actual: Any, expected: Any, p: Any, tol: Any) -> tuple[Any, Any, Any]:
    """Per-block partials: (sums [blocks, 6] f64, maxima [blocks, 8] f64, counts [blocks, 12] i64),
    by the fast kernel over every block and the exact one over the flagged blocks.

    Maxima columns: max_abs, max_rel, max_rel_symmetric, max slack over finite positions,
    max slack, rtol_needed, block rank (largest excess, inf with a non-finite mismatch), ulp_max.
    Count columns: n_finite, finite mismatches, ulp_nonzero, ulp_over, the seven non-finite
    counts in NonFinite order, non-finite mismatches.
    """
    import numpy as np
    import torch
    import triton.language as tl

    fast, _ = _split_kernels()
    n = p.size
    block, rows, vec = _split_shape(p)
    programs = -(-n // block)
    device = actual.device
    fsum = torch.empty((programs, N_SUMS), dtype=torch.float64, device=device)
    fmax = torch.empty((programs, N_MAXES), dtype=torch.float64, device=device)
    cnt = torch.empty((programs, N_COUNTS), dtype=torch.int64, device=device)
    ids = torch.empty(programs, dtype=torch.int32, device=device)
    nflag = torch.zeros(1, dtype=torch.int32, device=device)
    ulp_dt, ulp_bits = _ulp_args(p)
    near_up, near_down = (1 + NEAR) / (1 - NEAR), (1 - NEAR) / (1 + NEAR)
    atol32, rtol32 = _float32_below(tol.atol), float(np.float32(tol.rtol))
    params = [
        rtol32,
        float(np.float32(tol.rel_eps)),
        atol32,
        -_float32_above(tol.rtol * near_up),
        _float32_above(tol.atol * near_up),
        -_float32_below(tol.rtol * near_down),
        _float32_below(tol.atol * near_down),
        tol.atol - atol32,  # the float32 remainders of atol and rtol
        tol.rtol - rtol32,
    ]
    max_ulp = int(min(tol.max_ulp if tol.max_ulp is not None else 0, 2**31 - 1))
    a, e = actual.reshape(-1), expected.reshape(-1)
    fast[(programs,)](
        a,
        e,
        n,
        torch.tensor(params, dtype=torch.float32, device=device),
        max_ulp,
        fsum,
        fmax,
        cnt,
        ids,
        nflag,
        BLOCK=block,
        ROWS=rows,
        VEC=vec,
        ULP_DT=ulp_dt,
        ULP_INT=tl.int16 if ulp_bits == 16 else tl.int32,
        ULP_BITS=ulp_bits,
        ULP_MASK=(1 << (ulp_bits - 1)) - 1,
        HAS_MAX_ULP=tol.max_ulp is not None,
        RTOL_ZERO=tol.rtol == 0,
        REL_EPS_ZERO=float(np.float32(tol.rel_eps)) == 0,
        TINY=TINY_SQUARES,
        FAST_DIV=_fast_division(),
        num_warps=SPLIT_WARPS,
    )
    _exact_pass(a, e, p, tol, ids, nflag, fsum, fmax, cnt, max_ulp)
    return fsum, fmax, cnt


def _split_shape(p: Any) -> tuple[int, int, int]:
    """(elements per block, rows per tile, elements per row) of the fast kernel.

    A row is 16 bytes of the wider input; a block is at most 32 tiles, so each lane's float32
    sums add at most 32 terms (each the pairwise sum of one row).
    """
    sixteen = p.dtype_actual in ("bfloat16", "float16") and p.dtype_expected in (
        "bfloat16",
        "float16",
    )
    vec = 8 if sixteen else 4
    rows = 32 * SPLIT_WARPS * SPLIT_ROWS
    return min(SPLIT_BLOCK, 32 * rows * vec), rows, vec


def _exact_pass(
    a: Any, e: Any, p: Any, tol: Any, ids: Any, nflag: Any, fsum: Any, fmax: Any, cnt: Any, max_ulp
) -> None:
    """The exact kernel over the flagged blocks (``ids[:nflag]``, on the device): their rows are
    recomputed in float64 and overwritten."""
    import torch
    import triton.language as tl

    _, exact = _split_kernels()
    ulp_dt, ulp_bits = _ulp_args(p)
    exact[(min(ids.numel(), EXACT_PROGRAMS),)](
        a,
        e,
        p.size,
        torch.tensor([tol.atol, tol.rtol, tol.rel_eps], dtype=torch.float64, device=a.device),
        max_ulp,
        ids,
        nflag,
        fsum,
        fmax,
        cnt,
        BLOCK=_split_shape(p)[0],
        TILE=EXACT_TILE,
        PROGRAMS=min(ids.numel(), EXACT_PROGRAMS),
        ULP_DT=ulp_dt,
        ULP_INT=tl.int16 if ulp_bits == 16 else tl.int32,
        ULP_WIDE=tl.int32 if ulp_bits == 16 else tl.int64,
        ULP_MASK=(1 << (ulp_bits - 1)) - 1,
        EQUAL_NAN=bool(tol.equal_nan),
        HAS_MAX_ULP=tol.max_ulp is not None,
        num_warps=EXACT_WARPS,
        enable_fp_fusion=False,
    )


def block_size(p: Any) -> int:
    """Elements per row of partials."""
    return _split_shape(p)[0]


def reduce(actual: Any, expected: Any, p: Any, tol: Any, acc: Any, revisit: Any) -> list:
    """Device tensors in STATS order plus the worst-k candidates (flat index, actual, expected).

    ``revisit(a, e, k)`` ranks the gathered elements of the k best blocks (the chunked torch
    path's own kernel) and returns (rank, local index, actual, expected) of its k best.
    """
    import torch

    fsum, fmax, cnt = partials(actual, expected, p, tol)
    block = block_size(p)
    sums = fsum.sum(0)
    m = fmax.amax(0)
    c = cnt.sum(0).to(acc)
    has_ulp = p.ulp_dtype is not None
    zero = torch.zeros((), dtype=acc, device=actual.device)
    maxes = torch.stack(
        [
            m[0],
            m[1],
            m[2],
            m[3] - tol.atol,
            m[4].clamp_min(0.0),
            m[5],
            m[7] if has_ulp else zero,
        ]
    )
    counts = torch.cat(
        [c[0:2], c[2:4] if has_ulp else torch.zeros(2, dtype=acc, device=actual.device), c[4:11]]
    )
    parts = [sums, maxes, counts]
    k = tol.worst_k
    kk = 0
    if k:
        kb = min(k, fmax.shape[0])
        _, blocks = torch.topk(fmax[:, 6], kb)
        idx = (blocks[:, None] * block + torch.arange(block, device=actual.device)).reshape(-1)
        valid = idx < p.size
        idx = idx.clamp_max(p.size - 1)
        a_g = torch.where(valid, actual.reshape(-1)[idx], 0)
        e_g = torch.where(valid, expected.reshape(-1)[idx], 0)
        rank, local, va, ve = revisit(a_g, e_g, k)
        kk = min(k, rank.numel())
        parts += [idx[local].to(acc), va, ve]
    return parts, kk

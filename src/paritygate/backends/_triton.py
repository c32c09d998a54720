"""A fused Triton kernel for float tensors on CUDA: every metric in one pass over both tensors.

Each program reads ``BLOCK`` elements of both tensors (in tiles of ``TILE``) and writes one row of
partials: six sums, eight maxima and twelve counts. The pass is float32 throughout (float64
arithmetic is what held the former kernel at 6x one read on an H200): each lane adds
``BLOCK / TILE`` float32 terms per sum, and the lanes are added in float64 at the end of the block
(one conversion per lane, not per element), so a sum carries at most ``BLOCK / TILE`` float32
roundings per term (32 at the default launch shape) and 1 - cosine keeps the float32 bound of
tests/backends/test_backend_cosine.py (``2e-6 * |a - e|^2 / (2 |a| |e|)``). Maxima and ratios
carry a few float32 roundings (relative ~2e-7; the ratios use the fast float32 division, within
2 ULP).

Exact decisions. Counts, ULP distances, NaN/Inf accounting and the worst elements agree with the
host engine exactly: a block that holds a NaN, an infinity, a float32 overflow of ``a - e``, or an
element whose float32 slack ``|a - e| - rtol |e|`` lies within ``NEAR`` (relative) of the bound
(where float32 rounding could flip the decision) is computed again by an exact pass (the former
float64 kernel: a uniform branch that clean blocks skip). Differences of 16-bit inputs are exact in
float32; ``atol`` is compared as the largest float32 not above it, which decides a float32
difference exactly. The rows are reduced by torch on the device (float64) and the worst-k
elements are found by revisiting, in float64, only the k blocks with the largest excess. Extra
device memory: the partial rows (208 bytes per ``BLOCK`` elements) plus the k revisited blocks.

Only contiguous CUDA tensors of bfloat16 / float16 / float32 take this path; everything else takes
the chunked torch path of :mod:`paritygate.backends.torch` (float64, for 1 - cosine within
``1e-12`` relative: ``PARITYGATE_TORCH_KERNEL=chunked``). Without a GPU the same kernel source runs
in Triton's interpreter (``TRITON_INTERPRET=1``; tests/backends/test_backend_torch.py).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["available", "supports", "partials", "reduce"]

# Launch shape, the fastest of six timed on an H200 (benchmarks/bench_compare_gpu.py --tune).
BLOCK = 1 << 14  # elements per program (one row of partials)
TILE = 1 << 9  # elements per step of a program: each lane adds BLOCK / TILE float32 terms
NUM_WARPS = 4
# A mismatch decision whose float32 slack lies within this relative distance of the bound is
# left to the exact (float64) pass of its block: float32 rounding (a few 1e-8) cannot flip it.
NEAR = 1e-6
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
def _kernel() -> Any:
    # triton.language as a module global: Triton's interpreter (TRITON_INTERPRET=1) patches the
    # kernel's globals, which a local import would hide from it.
    global tl
    import triton
    import triton.language as tl

    @triton.jit
    def stats_kernel(
        a_ptr,
        e_ptr,
        n,
        params_ptr,
        max_ulp,
        fsum_ptr,
        fmax_ptr,
        cnt_ptr,
        BLOCK: tl.constexpr,
        TILE: tl.constexpr,
        COMPUTE: tl.constexpr,
        MAXF: tl.constexpr,
        ULP_DT: tl.constexpr,
        ULP_INT: tl.constexpr,
        ULP_WIDE: tl.constexpr,
        ULP_MASK: tl.constexpr,
        EQUAL_NAN: tl.constexpr,
        HAS_MAX_ULP: tl.constexpr,
        RTOL_ZERO: tl.constexpr,
        NEAR: tl.constexpr,
    ):
        pid = tl.program_id(0)
        start = pid.to(tl.int64) * BLOCK
        # Bounds in float64 (a float argument would arrive as float32): decisions match the host.
        atol = tl.load(params_ptr + 0)
        rtol = tl.load(params_ptr + 1)
        rel_eps = tl.load(params_ptr + 2).to(COMPUTE)
        atol32 = tl.load(params_ptr + 3).to(tl.float32)  # the largest float32 <= atol
        rtol32 = rtol.to(tl.float32)
        rel_eps32 = tl.load(params_ptr + 2).to(tl.float32)
        lanes = tl.arange(0, TILE)
        inf = float("inf")
        # The fast pass: float32 arithmetic, per-lane float32 partials (BLOCK / TILE terms each),
        # reduced across lanes in float64. Decisions close to the bound are flagged.
        f_sabs = tl.zeros([TILE], tl.float32)
        f_dot = tl.zeros([TILE], tl.float32)
        f_na = tl.zeros([TILE], tl.float32)
        f_ne = tl.zeros([TILE], tl.float32)
        f_dd = tl.zeros([TILE], tl.float32)
        f_gap = tl.zeros([TILE], tl.float32)
        f_maxabs = tl.zeros([TILE], tl.float32)
        f_rel = tl.zeros([TILE], tl.float32)
        f_rels = tl.zeros([TILE], tl.float32)
        f_slack = tl.full([TILE], -inf, tl.float32)
        f_rtol = tl.zeros([TILE], tl.float32)
        f_rank = tl.full([TILE], -inf, tl.float32)
        f_fin = tl.zeros([TILE], tl.int32)
        f_mis = tl.zeros([TILE], tl.int32)
        f_near = tl.zeros([TILE], tl.int32)
        f_umax = tl.zeros([TILE], ULP_WIDE)
        f_unz = tl.zeros([TILE], tl.int32)
        f_uover = tl.zeros([TILE], tl.int32)
        for t in range(0, BLOCK, TILE):
            offs = start + t + lanes
            mask = offs < n
            a_raw = tl.load(a_ptr + offs, mask=mask, other=0.0)
            e_raw = tl.load(e_ptr + offs, mask=mask, other=0.0)
            a = a_raw.to(tl.float32)
            e = e_raw.to(tl.float32)
            d = a - e
            diff = tl.abs(d)
            # a finite difference means both sides finite (and no float32 overflow): anything
            # else sends the block to the exact pass below
            f_fin += ((diff <= 3.4028234663852886e38) & mask).to(tl.int32)
            abs_a = tl.abs(a)
            abs_e = tl.abs(e)
            if RTOL_ZERO:
                slack = diff
                scale = diff
            else:
                slack = diff - rtol32 * abs_e
                scale = diff + rtol32 * abs_e
            f_maxabs = tl.maximum(f_maxabs, diff)
            # ratios by the fast float32 division (within 2 ULP; IEEE division costs several
            # times as many instructions, and the pass is bound by instructions, not memory)
            f_rel = tl.maximum(f_rel, tl.fdiv(diff, abs_e + rel_eps32))
            f_rels = tl.maximum(f_rels, tl.fdiv(diff, tl.maximum(abs_a, abs_e) + rel_eps32))
            f_slack = tl.maximum(f_slack, tl.where(mask, slack, -inf))
            num = tl.maximum(diff - atol32, 0.0)
            f_rtol = tl.maximum(
                f_rtol,
                tl.where(abs_e > 0, tl.fdiv(num, abs_e), tl.where(num > 0, inf, 0.0)),
            )
            f_rank = tl.maximum(f_rank, tl.where(diff == 0, -inf, slack))
            f_mis += (slack > atol32).to(tl.int32)
            # a decision within float32 rounding of the bound: the exact pass decides the block
            near = (diff > 0) & (tl.abs(slack - atol32) <= NEAR * (scale + atol32))
            f_near += near.to(tl.int32)
            f_sabs += diff
            f_dot += a * e
            f_na += a * a
            f_ne += e * e
            # (a - e)^2 and (a - e)(a + e) from the difference: 1 - cosine (metrics.py)
            f_dd += d * d
            f_gap += d * (a + e)
            ba = a_raw.to(ULP_DT).to(ULP_INT, bitcast=True).to(ULP_WIDE)
            be = e_raw.to(ULP_DT).to(ULP_INT, bitcast=True).to(ULP_WIDE)
            oa = tl.where(ba < 0, -(ba & ULP_MASK), ba)
            oe = tl.where(be < 0, -(be & ULP_MASK), be)
            u = tl.abs(oa - oe)
            f_umax = tl.maximum(f_umax, u)
            f_unz += (u > 0).to(tl.int32)
            if HAS_MAX_ULP:
                f_uover += (u > max_ulp).to(tl.int32)
        block_len = tl.minimum(n - start, BLOCK)
        clean = (tl.sum(f_fin, axis=0) == block_len) & (tl.sum(f_near, axis=0) == 0)
        if clean:
            fs = fsum_ptr + pid.to(tl.int64) * 6
            tl.store(fs + 0, tl.sum(f_sabs.to(tl.float64), axis=0))
            tl.store(fs + 1, tl.sum(f_dot.to(tl.float64), axis=0))
            tl.store(fs + 2, tl.sum(f_na.to(tl.float64), axis=0))
            tl.store(fs + 3, tl.sum(f_ne.to(tl.float64), axis=0))
            tl.store(fs + 4, tl.sum(f_dd.to(tl.float64), axis=0))
            tl.store(fs + 5, tl.sum(f_gap.to(tl.float64), axis=0))
            fm = fmax_ptr + pid.to(tl.int64) * 8
            slack_max = tl.max(f_slack, axis=0).to(tl.float64)
            tl.store(fm + 0, tl.max(f_maxabs, axis=0).to(tl.float64))
            tl.store(fm + 1, tl.max(f_rel, axis=0).to(tl.float64))
            tl.store(fm + 2, tl.max(f_rels, axis=0).to(tl.float64))
            tl.store(fm + 3, slack_max)
            tl.store(fm + 4, slack_max)
            tl.store(fm + 5, tl.max(f_rtol, axis=0).to(tl.float64))
            tl.store(fm + 6, tl.max(f_rank, axis=0).to(tl.float64))
            tl.store(fm + 7, tl.max(f_umax, axis=0).to(tl.float64))
            cn = cnt_ptr + pid.to(tl.int64) * 12
            zero = tl.sum(tl.zeros([TILE], tl.int64), axis=0)
            tl.store(cn + 0, block_len.to(tl.int64))
            tl.store(cn + 1, tl.sum(f_mis, axis=0).to(tl.int64))
            tl.store(cn + 2, tl.sum(f_unz, axis=0).to(tl.int64))
            tl.store(cn + 3, tl.sum(f_uover, axis=0).to(tl.int64))
            for c in tl.static_range(4, 12):
                tl.store(cn + c, zero)
        else:
            # The exact pass (rare, uniform per block): a non-finite value, a float32 overflow or
            # a decision near the bound. Float64 arithmetic, as on the host.
            v_sabs = tl.zeros([TILE], tl.float64)
            v_dot = tl.zeros([TILE], tl.float64)
            v_na = tl.zeros([TILE], tl.float64)
            v_ne = tl.zeros([TILE], tl.float64)
            v_dd = tl.zeros([TILE], tl.float64)
            v_gap = tl.zeros([TILE], tl.float64)
            v_maxabs = tl.zeros([TILE], COMPUTE)
            v_rel = tl.zeros([TILE], COMPUTE)
            v_rels = tl.zeros([TILE], COMPUTE)
            v_slackf = tl.full([TILE], -inf, tl.float64)
            v_rtol = tl.zeros([TILE], COMPUTE)
            v_rank = tl.full([TILE], -inf, tl.float64)
            v_fin = tl.zeros([TILE], tl.int32)
            v_mis = tl.zeros([TILE], tl.int32)
            v_umax = tl.zeros([TILE], ULP_WIDE)
            v_unz = tl.zeros([TILE], tl.int32)
            v_uover = tl.zeros([TILE], tl.int32)
            atol_c = atol.to(COMPUTE)
            for t in range(0, BLOCK, TILE):
                offs = start + t + lanes
                mask = offs < n
                a_raw = tl.load(a_ptr + offs, mask=mask, other=0.0)
                e_raw = tl.load(e_ptr + offs, mask=mask, other=0.0)
                a = a_raw.to(COMPUTE)
                e = e_raw.to(COMPUTE)
                fin = (tl.abs(a) <= MAXF) & (tl.abs(e) <= MAXF)
                a0 = tl.where(fin, a, 0.0)
                e0 = tl.where(fin, e, 0.0)
                diff = tl.abs(a0 - e0)
                abs_a = tl.abs(a0)
                abs_e = tl.abs(e0)
                diff64 = diff.to(tl.float64)
                if RTOL_ZERO:
                    slack = diff64
                else:
                    slack = diff64 - rtol * abs_e.to(tl.float64)
                v_maxabs = tl.maximum(v_maxabs, diff)
                v_rel = tl.maximum(v_rel, diff / (abs_e + rel_eps))
                v_rels = tl.maximum(v_rels, diff / (tl.maximum(abs_a, abs_e) + rel_eps))
                # masked lanes and non-finite positions hold a = e = 0: excluded from the finite max
                v_slackf = tl.maximum(v_slackf, tl.where(fin & mask, slack, -inf))
                num = tl.maximum(diff - atol_c, 0.0)
                safe_e = tl.where(abs_e > 0, abs_e, 1.0)
                v_rtol = tl.maximum(
                    v_rtol, tl.where(abs_e > 0, num / safe_e, tl.where(num > 0, inf, 0.0))
                )
                v_rank = tl.maximum(v_rank, tl.where(diff64 == 0, -inf, slack))
                v_fin += (fin & mask).to(tl.int32)
                v_mis += (slack > atol).to(tl.int32)
                a64 = a0.to(tl.float64)
                e64 = e0.to(tl.float64)
                v_sabs += diff64
                v_dot += a64 * e64
                v_na += a64 * a64
                v_ne += e64 * e64
                # (a - e)^2 and (a - e)(a + e) from the difference: 1 - cosine (metrics.py)
                d64 = (a0 - e0).to(tl.float64)
                v_dd += d64 * d64
                v_gap += d64 * (a64 + e64)
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
            if n_finite < tl.minimum(n - start, BLOCK):
                # A block holding a NaN or an infinity: a second pass counts them (rare, uniform).
                for t in range(0, BLOCK, TILE):
                    offs = start + t + lanes
                    mask = offs < n
                    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(COMPUTE)
                    e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(COMPUTE)
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
            tl.store(fm + 0, tl.max(v_maxabs, axis=0).to(tl.float64))
            tl.store(fm + 1, tl.max(v_rel, axis=0).to(tl.float64))
            tl.store(fm + 2, tl.max(v_rels, axis=0).to(tl.float64))
            slack_max = tl.max(v_slackf, axis=0)
            tl.store(fm + 3, slack_max)
            tl.store(fm + 4, slack_max)  # atol_needed = max(slack, 0), clamped after the reduction
            tl.store(fm + 5, tl.max(v_rtol, axis=0).to(tl.float64))
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

    return stats_kernel


def _float32_below(x: float) -> float:
    """The largest float32 not above ``x``: for a float32 difference d, d > x exactly when
    d > that float32 (no float32 lies strictly between it and the next one up)."""
    import numpy as np

    f = np.float32(x)
    if float(f) > x:
        f = np.nextafter(f, np.float32(-np.inf))
    return float(f)


def partials(actual: Any, expected: Any, p: Any, tol: Any) -> tuple[Any, Any, Any]:
    """Launch the kernel: (sums [programs, 6] f64, maxima [programs, 8] f64, counts [programs, 12]
    i64).

    Maxima columns: max_abs, max_rel, max_rel_symmetric, max slack over finite positions,
    max slack, rtol_needed, block rank (largest excess, inf with a non-finite mismatch), ulp_max.
    Count columns: n_finite, finite mismatches, ulp_nonzero, ulp_over, the seven non-finite
    counts in NonFinite order, non-finite mismatches.
    """
    import torch
    import triton.language as tl

    kernel = _kernel()
    programs = -(-p.size // BLOCK)
    device = actual.device
    fsum = torch.empty((programs, N_SUMS), dtype=torch.float64, device=device)
    fmax = torch.empty((programs, N_MAXES), dtype=torch.float64, device=device)
    cnt = torch.empty((programs, N_COUNTS), dtype=torch.int64, device=device)
    sixteen = p.compared_as in ("bfloat16", "float16")
    ulp_name = p.ulp_dtype or p.compared_as
    ulp_bits = {"bfloat16": 16, "float16": 16, "float32": 32}[ulp_name]
    kernel[(programs,)](
        actual.reshape(-1),
        expected.reshape(-1),
        p.size,
        torch.tensor(
            [tol.atol, tol.rtol, tol.rel_eps, _float32_below(tol.atol)],
            dtype=torch.float64,
            device=device,
        ),
        int(min(tol.max_ulp if tol.max_ulp is not None else 0, 2**31 - 1)),
        fsum,
        fmax,
        cnt,
        BLOCK=BLOCK,
        TILE=TILE,
        COMPUTE=tl.float32 if sixteen else tl.float64,
        MAXF=3.4028234663852886e38 if sixteen else 1.7976931348623157e308,
        ULP_DT={"bfloat16": tl.bfloat16, "float16": tl.float16, "float32": tl.float32}[ulp_name],
        ULP_INT=tl.int16 if ulp_bits == 16 else tl.int32,
        ULP_WIDE=tl.int32 if ulp_bits == 16 else tl.int64,
        ULP_MASK=(1 << (ulp_bits - 1)) - 1,
        EQUAL_NAN=bool(tol.equal_nan),
        HAS_MAX_ULP=tol.max_ulp is not None,
        RTOL_ZERO=tol.rtol == 0,
        NEAR=NEAR,
        num_warps=NUM_WARPS,
    )
    return fsum, fmax, cnt


def reduce(actual: Any, expected: Any, p: Any, tol: Any, acc: Any, revisit: Any) -> list:
    """Device tensors in STATS order plus the worst-k candidates (flat index, actual, expected).

    ``revisit(a, e, k)`` ranks the gathered elements of the k best blocks (the chunked torch
    path's own kernel) and returns (rank, local index, actual, expected) of its k best.
    """
    import torch

    fsum, fmax, cnt = partials(actual, expected, p, tol)
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
        idx = (blocks[:, None] * BLOCK + torch.arange(BLOCK, device=actual.device)).reshape(-1)
        valid = idx < p.size
        idx = idx.clamp_max(p.size - 1)
        a_g = torch.where(valid, actual.reshape(-1)[idx], 0)
        e_g = torch.where(valid, expected.reshape(-1)[idx], 0)
        rank, local, va, ve = revisit(a_g, e_g, k)
        kk = min(k, rank.numel())
        parts += [idx[local].to(acc), va, ve]
    return parts, kk

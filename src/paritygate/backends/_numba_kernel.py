"""Fused comparison kernel through numba (the optional extra ``fast``).

One pass over both arrays computes every per-block partial of the host kernel
(:mod:`paritygate.backends.host`): the blocks are the same, each block's partials land in its own
row, and the reduction over blocks and the worst-k revisit are shared with the numpy path. Blocks
are split between threads (the compiled kernel releases the GIL), so the partial results do not
depend on the number of threads: counts, maxima and the worst elements agree exactly with the
numpy path; sums agree to float64 rounding (they are summed in another order).

Within a block, each sub-block of :data:`SUB_BLOCK` elements is first summed by a vectorized
loop (the only code compiled with reassociation allowed) that also counts differing elements.
An equal sub-block is done. A float sub-block where elements differ is then screened by a second
branch-free loop: it counts the mismatches exactly and the elements that pass any of the exact
pass's own tests for raising a running maximum; when none does (the common case once a block's
maxima have settled: about 5% of the sub-blocks of noisy data have one), the exact pass is
skipped, so a comparison where every element differs costs about what a sparse one does.
Otherwise, a sub-block where at least a quarter of the elements differ is computed by a
branch-free elementwise loop (vectorized, the same IEEE operations as the scalar pass) and
reduced with exact maxima and counts; otherwise the exact element-by-element pass visits only
the elements that differ, or every element of a sub-block that holds a NaN or an infinity.

numba is imported only when this kernel is first used on an output large enough to repay the
compilation (or when it is forced); compiled code is cached on disk.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Any

import numpy as np

__all__ = ["available", "supports", "partials", "worst"]

_SUPPORTED_FLOATS = ("float32", "float64")
_kernel: Any = None


def available() -> bool:
    """True when numba can be imported (checked without importing it)."""
    return importlib.util.find_spec("numba") is not None


def supports(pair: Any) -> bool:
    """Whether the fused kernel handles this prepared pair (else the numpy path does).

    Covered: C-contiguous native-byte-order arrays of float32 or float64 on both sides with the
    same dtype (complex outputs arrive here as float pairs), integers of any width, and bools.
    float16 / bfloat16 / float8 and mixed-precision floats take the numpy path.
    """
    a, e = pair.a, pair.e
    if not (a.flags.c_contiguous and e.flags.c_contiguous):
        return False
    if not (a.dtype.isnative and e.dtype.isnative):
        return False
    if pair.mode == "float":
        return a.dtype == e.dtype and a.dtype.name in _SUPPORTED_FLOATS
    if pair.mode in ("int", "uint"):
        return a.dtype.kind in "iu" and e.dtype.kind in "iu"
    if pair.mode == "bool":
        return a.dtype == np.bool_ and e.dtype == np.bool_
    return False


# The kernel's helpers, compiled by _build and bound here as module globals (see there).
_nb_sums = _nb_dense_map = _nb_dense_ulp = _nb_fmax = _nb_umax = _nb_count_positive = None
_nb_screen = _nb_ulp_stats = _nb_above = _nb_sub_worst = None


def _build() -> Any:
    import numba
    from numba import njit

    from ._blocks import _F, _I

    F_MAX_ABS, F_SUM_ABS, F_MAX_REL, F_MAX_REL_SYM = (
        _F["max_abs"],
        _F["sum_abs"],
        _F["max_rel"],
        _F["max_rel_symmetric"],
    )
    F_DOT, F_NA, F_NE = _F["dot"], _F["norm_actual_sq"], _F["norm_expected_sq"]
    F_DD, F_GAP = _F["diff_norm_sq"], _F["norm_sq_gap"]
    F_MAX_EXCESS, F_ATOL, F_RTOL, F_KEY = (
        _F["max_excess"],
        _F["atol_needed"],
        _F["rtol_needed"],
        _F["key"],
    )
    I_FINITE, I_MIS = _I["n_finite"], _I["mismatches"]
    I_ULP_MAX, I_ULP_NZ, I_ULP_OVER = _I["ulp_max"], _I["ulp_nonzero"], _I["ulp_over"]
    I_ANAN, I_ENAN, I_NANB, I_NAN1 = (
        _I["actual_nan"],
        _I["expected_nan"],
        _I["nan_both"],
        _I["nan_one_side"],
    )
    I_AINF, I_EINF, I_INFM = _I["actual_inf"], _I["expected_inf"], _I["inf_mismatch"]

    # Sums of one sub-block: reassociation lets LLVM vectorize them (they are sums, so only
    # their rounding changes); nothing else is computed under these flags.
    @njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
    def sums(a, e):
        dot = 0.0
        na = 0.0
        ne = 0.0
        dd = 0.0
        gap = 0.0
        sum_abs = 0.0
        differ = 0
        for i in range(a.size):
            x = np.float64(a[i])
            y = np.float64(e[i])
            dot += x * y
            na += x * x
            ne += y * y
            d = x - y
            dd += d * d
            gap += d * (x + y)  # |a|^2 - |e|^2 from the difference: 1 - cosine (metrics.py)
            sum_abs += abs(d)
            differ += a[i] != e[i]
        return dot, na, ne, dd, gap, sum_abs, differ

    # Sub-blocks where many elements differ: the per-element values are computed by a loop
    # without branches or carried state (so LLVM vectorizes it; the arithmetic is the same IEEE
    # operations as the scalar pass, so every value is bit-identical), then reduced. A max is
    # exact in any order, so the reductions may be reordered; nothing in the buffers is NaN.
    # (Worth it because almost every element of such a sub-block takes the exact path anyway.)
    @njit(cache=True, nogil=True, error_model="numpy")
    def dense_map(
        sa, se, atol, rtol, rel_eps, d_buf, ex_buf, key_buf, na_buf, rr_buf, rs_buf, rn_buf
    ):
        for i in range(sa.size):
            x = np.float64(sa[i])
            y = np.float64(se[i])
            d = abs(x - y)
            ae = abs(y)
            differs = d > 0.0
            excess = d - (ae * rtol + atol)
            d_buf[i] = d
            ex_buf[i] = excess
            key_buf[i] = excess if differs else -np.inf
            na_buf[i] = d - ae * rtol
            q = ae + rel_eps
            rr_buf[i] = d / q if differs else 0.0
            q = max(abs(x), ae) + rel_eps
            rs_buf[i] = d / q if differs else 0.0
            t = d - atol
            rn_buf[i] = t / ae if t > 0.0 else 0.0

    @njit(cache=True, nogil=True, error_model="numpy")
    def dense_ulp(sua, sue, magnitude, max_ulp, u_buf):
        nonzero = 0
        over = 0
        for i in range(sua.size):
            # Ordered integers: INT_MIN - i for negative i is (i ^ (m & 0x7f..f)) - m, m = i >> 63.
            oa = np.int64(sua[i])
            oe = np.int64(sue[i])
            m = oa >> 63
            oa = (oa ^ (m & magnitude)) - m
            m = oe >> 63
            oe = (oe ^ (m & magnitude)) - m
            u = np.uint64(max(oa, oe)) - np.uint64(min(oa, oe))
            u_buf[i] = u
            nonzero += u != 0
            over += u > max_ulp
        return nonzero, over

    # The common case of a sub-block where elements differ: one branch-free pass (vectorized)
    # that counts the mismatches and the elements that could change a running maximum, by the
    # very tests the exact pass uses before it updates one (the same IEEE operations). When none
    # can, the exact pass would change nothing but the count, so it is skipped: the cost then
    # follows the data's size, not how many of its elements differ.
    @njit(cache=True, nogil=True, error_model="numpy")
    def screen(sa, se, atol, rtol, rel_eps, max_abs, key, needed_a, max_rel, max_sym, needed_r):
        mismatches = 0
        hits = 0
        for i in range(sa.size):
            x = np.float64(sa[i])
            y = np.float64(se[i])
            d = abs(x - y)
            ae = abs(y)
            differs = d > 0.0
            excess = d - (ae * rtol + atol)
            t = d - atol
            # Bitwise, not short-circuit: no branch in the loop.
            mismatches += differs & (excess > 0.0)
            hits += differs & (
                (d > max_abs)
                | (excess > key)
                | (d - ae * rtol > needed_a)
                | (d >= max_rel * (ae + rel_eps))
                | (d >= max_sym * (max(abs(x), ae) + rel_eps))
                | ((t > 0.0) & (t >= needed_r * ae))
            )
        return mismatches, hits

    @njit(cache=True, nogil=True)
    def ulp_stats(sua, sue, magnitude, max_ulp):
        # (largest, nonzero, over max_ulp) ULP distances of a sub-block, integer reductions only.
        largest = np.uint64(0)
        nonzero = 0
        over = 0
        for i in range(sua.size):
            oa = np.int64(sua[i])
            oe = np.int64(sue[i])
            m = oa >> 63
            oa = (oa ^ (m & magnitude)) - m
            m = oe >> 63
            oe = (oe ^ (m & magnitude)) - m
            u = np.uint64(max(oa, oe)) - np.uint64(min(oa, oe))
            largest = max(largest, u)
            nonzero += u != 0
            over += u > max_ulp
        return largest, nonzero, over

    @njit(cache=True, nogil=True)
    def fmax(buf, n, start):
        # Four independent running maxima: the compare-and-select chain of one would bound the
        # loop by its latency. The maximum is exact in any order.
        r0 = r1 = r2 = r3 = start
        stop4 = n - n % 4
        for i in range(0, stop4, 4):
            r0 = r0 if r0 >= buf[i] else buf[i]
            r1 = r1 if r1 >= buf[i + 1] else buf[i + 1]
            r2 = r2 if r2 >= buf[i + 2] else buf[i + 2]
            r3 = r3 if r3 >= buf[i + 3] else buf[i + 3]
        for i in range(stop4, n):
            r0 = r0 if r0 >= buf[i] else buf[i]
        r0 = r0 if r0 >= r1 else r1
        r2 = r2 if r2 >= r3 else r3
        return r0 if r0 >= r2 else r2

    @njit(cache=True, nogil=True)
    def umax(buf, n):
        r = np.uint64(0)
        for i in range(n):
            r = max(r, buf[i])
        return r

    @njit(cache=True, nogil=True)
    def count_positive(buf, n):
        c = 0
        for i in range(n):
            c += buf[i] > 0.0
        return c

    # The kernel calls these as module globals, not closure cells: numba keys its disk cache on
    # the pickled closure, and a dispatcher pickles differently in every process, so a closure
    # would miss the cache and recompile the kernel (seconds) in every new process.
    globals().update(
        _nb_sums=sums,
        _nb_dense_map=dense_map,
        _nb_dense_ulp=dense_ulp,
        _nb_fmax=fmax,
        _nb_umax=umax,
        _nb_count_positive=count_positive,
        _nb_screen=screen,
        _nb_ulp_stats=ulp_stats,
    )

    @njit(cache=True, nogil=True, error_model="numpy")
    def kernel(
        a,
        e,
        ua,
        ue,
        block,
        sub,
        first,
        last,
        mode,
        atol,
        rtol,
        rel_eps,
        equal_nan,
        use_ulp,
        magnitude,
        max_ulp,
        fout,
        iout,
    ):
        # Blocks [first, last). mode: 0 float, 1 signed integers, 2 unsigned integers, 3 bool
        n = a.size
        low = -magnitude - 1  # INT_MIN of the ULP integer width
        d_buf = np.empty(sub, np.float64)
        ex_buf = np.empty(sub, np.float64)
        key_buf = np.empty(sub, np.float64)
        na_buf = np.empty(sub, np.float64)
        rr_buf = np.empty(sub, np.float64)
        rs_buf = np.empty(sub, np.float64)
        rn_buf = np.empty(sub, np.float64)
        u_buf = np.empty(sub, np.uint64)
        for b in range(first, last):
            start = b * block
            stop = min(start + block, n)
            max_abs = 0.0
            sum_abs = 0.0
            max_rel = 0.0
            max_sym = 0.0
            dot = 0.0
            na = 0.0
            ne = 0.0
            dd = 0.0
            gap = 0.0
            key = -np.inf
            needed_a = 0.0
            needed_r = 0.0
            n_nonfinite = 0
            mismatches = 0
            ulp_max = np.uint64(0)
            ulp_nz = 0
            ulp_over = 0
            anan = enan = nanb = nan1 = ainf = einf = infm = 0
            nf_bad = 0
            for sub_start in range(start, stop, sub):
                sub_stop = min(sub_start + sub, stop)
                # Slices indexed from 0: numba then knows the index is non-negative and skips
                # the negative-index wraparound that would block vectorization.
                sa = a[sub_start:sub_stop]
                se = e[sub_start:sub_stop]
                s_dot, s_na, s_ne, s_dd, s_gap, s_abs, s_differ = _nb_sums(sa, se)
                # Any NaN or infinity makes a norm non-finite: that sub-block takes the exact
                # element-by-element accounting.
                checked = mode == 0 and not (math.isfinite(s_na) and math.isfinite(s_ne))
                if not checked:
                    dot += s_dot
                    na += s_na
                    ne += s_ne
                    dd += s_dd
                    gap += s_gap
                    if mode == 0:
                        sum_abs += s_abs
                    if s_differ == 0:
                        continue  # equal sub-block: nothing but the sums above
                if use_ulp:
                    sua = ua[sub_start:sub_stop]
                    sue = ue[sub_start:sub_stop]
                else:
                    sua = ua
                    sue = ue
                m = sa.size
                if mode == 0 and not checked:
                    s_mis, s_hits = _nb_screen(
                        sa,
                        se,
                        atol,
                        rtol,
                        rel_eps,
                        max_abs,
                        key,
                        needed_a,
                        max_rel,
                        max_sym,
                        needed_r,
                    )
                    if s_hits == 0:
                        mismatches += s_mis
                        if use_ulp:
                            u_max, u_nz, u_ov = _nb_ulp_stats(sua, sue, magnitude, max_ulp)
                            ulp_max = max(ulp_max, u_max)
                            ulp_nz += u_nz
                            ulp_over += u_ov
                        continue
                if mode == 0 and not checked and s_differ * 4 >= m:
                    _nb_dense_map(
                        sa,
                        se,
                        atol,
                        rtol,
                        rel_eps,
                        d_buf,
                        ex_buf,
                        key_buf,
                        na_buf,
                        rr_buf,
                        rs_buf,
                        rn_buf,
                    )
                    max_abs = _nb_fmax(d_buf, m, max_abs)
                    key = _nb_fmax(key_buf, m, key)
                    needed_a = _nb_fmax(na_buf, m, needed_a)
                    max_rel = _nb_fmax(rr_buf, m, max_rel)
                    max_sym = _nb_fmax(rs_buf, m, max_sym)
                    needed_r = _nb_fmax(rn_buf, m, needed_r)
                    mismatches += _nb_count_positive(ex_buf, m)
                    if use_ulp:
                        nz, ov = _nb_dense_ulp(sua, sue, magnitude, max_ulp, u_buf)
                        ulp_max = max(ulp_max, _nb_umax(u_buf, m))
                        ulp_nz += nz
                        ulp_over += ov
                    continue
                for i in range(sa.size):
                    if not checked and sa[i] == se[i]:
                        # Equal elements: no error of any kind, 0 ULP (equal values round to
                        # the same coarser value); the sums above already hold them.
                        continue
                    x = np.float64(sa[i])
                    y = np.float64(se[i])
                    if checked:
                        if not (math.isfinite(x) and math.isfinite(y)):
                            n_nonfinite += 1
                            xn = math.isnan(x)
                            yn = math.isnan(y)
                            if xn:
                                anan += 1
                            if yn:
                                enan += 1
                            if xn and yn:
                                nanb += 1
                                if not equal_nan:
                                    nf_bad += 1
                            elif xn or yn:
                                nan1 += 1
                                nf_bad += 1
                            if math.isinf(x):
                                ainf += 1
                            if math.isinf(y):
                                einf += 1
                            if not (xn or yn) and x != y:
                                infm += 1
                                nf_bad += 1
                            continue
                        dot += x * y
                        na += x * x
                        ne += y * y
                        dd += (x - y) * (x - y)
                        gap += (x - y) * (x + y)
                    if mode == 1:
                        xi = np.int64(sa[i])
                        yi = np.int64(se[i])
                        if xi >= yi:
                            d = np.float64(np.uint64(xi) - np.uint64(yi))
                        else:
                            d = np.float64(np.uint64(yi) - np.uint64(xi))
                    elif mode == 2:
                        xu = np.uint64(sa[i])
                        yu = np.uint64(se[i])
                        if xu >= yu:
                            d = np.float64(xu - yu)
                        else:
                            d = np.float64(yu - xu)
                    else:
                        d = abs(x - y)
                    if d == 0.0:
                        continue  # +0.0 against -0.0, or equal elements of a checked sub-block
                    ae = abs(y)
                    if d > max_abs:
                        max_abs = d
                    if checked or mode != 0:
                        # Integers: the exact difference (the float64 one in sums() can lose
                        # low bits of wide integers).
                        sum_abs += d
                    # Divisions only where the quotient can beat the running maximum m: since
                    # m is a float, d / q > m implies d >= fl(m * q), so no candidate is
                    # skipped and the result is the max of the rounded quotients, exactly as
                    # the numpy path computes it.
                    q = ae + rel_eps
                    if d >= max_rel * q:
                        r = d / q
                        if r > max_rel:
                            max_rel = r
                    q = max(abs(x), ae) + rel_eps
                    if d >= max_sym * q:
                        r = d / q
                        if r > max_sym:
                            max_sym = r
                    excess = d - (ae * rtol + atol)
                    if excess > 0:
                        mismatches += 1
                    if excess > key:
                        key = excess
                    t = d - ae * rtol
                    if t > needed_a:
                        needed_a = t
                    t = d - atol
                    if t > 0.0 and t >= needed_r * ae:
                        t = t / ae
                        if t > needed_r:
                            needed_r = t
                    if use_ulp:
                        oa = np.int64(sua[i])
                        oe = np.int64(sue[i])
                        if oa < 0:
                            oa = low - oa
                        if oe < 0:
                            oe = low - oe
                        if oa >= oe:
                            u = np.uint64(oa) - np.uint64(oe)
                        else:
                            u = np.uint64(oe) - np.uint64(oa)
                        if u > ulp_max:
                            ulp_max = u
                        if u != np.uint64(0):
                            ulp_nz += 1
                        if u > max_ulp:
                            ulp_over += 1
            max_excess = key
            if rtol == 0.0:
                needed_a = max_abs
            if nf_bad > 0:
                mismatches += nf_bad
                max_excess = np.inf
                key = np.inf
                needed_a = np.inf
                needed_r = np.inf
            fout[b, F_MAX_ABS] = max_abs
            fout[b, F_SUM_ABS] = sum_abs
            fout[b, F_MAX_REL] = max_rel
            fout[b, F_MAX_REL_SYM] = max_sym
            fout[b, F_DOT] = dot
            fout[b, F_NA] = na
            fout[b, F_NE] = ne
            fout[b, F_DD] = dd
            fout[b, F_GAP] = gap
            fout[b, F_MAX_EXCESS] = max_excess
            fout[b, F_ATOL] = needed_a
            fout[b, F_RTOL] = needed_r
            fout[b, F_KEY] = key
            iout[b, I_FINITE] = (stop - start) - n_nonfinite
            iout[b, I_MIS] = mismatches
            iout[b, I_ULP_MAX] = ulp_max
            iout[b, I_ULP_NZ] = ulp_nz
            iout[b, I_ULP_OVER] = ulp_over
            iout[b, I_ANAN] = anan
            iout[b, I_ENAN] = enan
            iout[b, I_NANB] = nanb
            iout[b, I_NAN1] = nan1
            iout[b, I_AINF] = ainf
            iout[b, I_EINF] = einf
            iout[b, I_INFM] = infm

    del numba
    return kernel


_worst_kernel: Any = None


def _build_worst() -> Any:
    from numba import njit

    @njit(cache=True, nogil=True, error_model="numpy")
    def above(sa, se, atol, rtol, threshold):
        # How many float elements could beat ``threshold``: a branch-free count (vectorized)
        # that errs only upward (an element with any NaN or infinity in its excess counts).
        count = 0
        for i in range(sa.size):
            x = np.float64(sa[i])
            y = np.float64(se[i])
            d = abs(x - y)
            excess = d - (abs(y) * rtol + atol)
            count += (d != 0.0) & (
                (excess > threshold) | (excess != excess) | (abs(excess) == np.inf)
            )
        return count

    globals().update(_nb_above=above)

    @njit(cache=True, nogil=True, error_model="numpy")
    def sub_worst(a, e, start, stop, mode, atol, rtol, equal_nan, k, out_x, out_i, out_d, found):
        for i in range(start, stop):
            if mode == 1:
                xi = np.int64(a[i])
                yi = np.int64(e[i])
                y = np.float64(yi)
                if xi >= yi:
                    d = np.float64(np.uint64(xi) - np.uint64(yi))
                else:
                    d = np.float64(np.uint64(yi) - np.uint64(xi))
            elif mode == 2:
                xu = np.uint64(a[i])
                yu = np.uint64(e[i])
                y = np.float64(yu)
                if xu >= yu:
                    d = np.float64(xu - yu)
                else:
                    d = np.float64(yu - xu)
            else:
                x = np.float64(a[i])
                y = np.float64(e[i])
                d = abs(x - y)
            if mode == 0 and not (math.isfinite(x) and math.isfinite(y)):
                xn = math.isnan(x)
                yn = math.isnan(y)
                if xn != yn or (xn and yn and not equal_nan) or (not xn and not yn and x != y):
                    excess = np.inf
                else:
                    continue
            elif d > 0.0:
                excess = d - (abs(y) * rtol + atol)
            else:
                continue
            if found == k and not excess > out_x[k - 1]:
                continue
            j = found if found < k else k - 1
            while j > 0 and out_x[j - 1] < excess:
                out_x[j] = out_x[j - 1]
                out_i[j] = out_i[j - 1]
                out_d[j] = out_d[j - 1]
                j -= 1
            out_x[j] = excess
            out_i[j] = i
            out_d[j] = d
            if found < k:
                found += 1
        return found

    globals().update(_nb_sub_worst=sub_worst)

    @njit(cache=True, nogil=True, error_model="numpy")
    def block_worst(a, e, start, stop, mode, atol, rtol, equal_nan, k, out_x, out_i, out_d):
        # The k elements of [start, stop) with the largest excess (ties: the lowest index first),
        # by the host's rules (host._block_elements): elements that differ, and non-finite
        # mismatches with an infinite excess. Returns how many were found (at most k). Once k
        # are held, a float sub-block none of whose elements can displace one is skipped.
        found = 0
        for sub_start in range(start, stop, SUB_BLOCK):
            sub_stop = min(sub_start + SUB_BLOCK, stop)
            if mode == 0 and found == k:
                if (
                    _nb_above(
                        a[sub_start:sub_stop], e[sub_start:sub_stop], atol, rtol, out_x[k - 1]
                    )
                    == 0
                ):
                    continue
            found = _nb_sub_worst(
                a,
                e,
                sub_start,
                sub_stop,
                mode,
                atol,
                rtol,
                equal_nan,
                k,
                out_x,
                out_i,
                out_d,
                found,
            )
        return found

    return block_worst


def worst(pair: Any, settings: Any, blocks: list[int], k: int) -> list:
    """(excess, flat index, actual, expected, abs_diff) of the k worst elements of each of
    ``blocks``, the blocks split between threads as the partials are: the elements and their
    order are those of the host's numpy revisit (host._block_elements)."""
    global _worst_kernel
    if _worst_kernel is None:
        _worst_kernel = _build_worst()
    from ._blocks import BLOCK

    a = pair.a.reshape(-1)
    e = pair.e.reshape(-1)
    mode = {"float": 0, "int": 1, "uint": 2, "bool": 3}[pair.mode]
    n_out = len(blocks)
    out_x = np.empty((n_out, k), np.float64)
    out_i = np.empty((n_out, k), np.int64)
    out_d = np.empty((n_out, k), np.float64)
    found = np.zeros(n_out, np.int64)

    def work(first: int, last: int) -> None:
        for j in range(first, last):
            start = blocks[j] * BLOCK
            found[j] = _worst_kernel(
                a,
                e,
                start,
                min(start + BLOCK, a.size),
                mode,
                settings.atol,
                settings.rtol,
                settings.equal_nan,
                k,
                out_x[j],
                out_i[j],
                out_d[j],
            )

    split_blocks(n_out, work)
    return [
        (float(out_x[j, m]), int(out_i[j, m]), a[out_i[j, m]], e[out_i[j, m]], float(out_d[j, m]))
        for j in range(n_out)
        for m in range(int(found[j]))
    ]


_INT_VIEW = {4: np.int32, 8: np.int64}
#: Elements per sub-block: sums vectorized, then one exact pass. Small enough that the eight
#: scratch buffers of a dense sub-block (2 KiB each) stay in L1, and that a sparse difference
#: leaves most sub-blocks equal (skipped after the sums).
SUB_BLOCK = 256
_NO_ULP = np.zeros(0, dtype=np.int64)


def partials(pair: Any, settings: Any, partials_type: Any) -> Any:
    """Per-block partials of a supported pair, computed by the fused kernel."""
    global _kernel
    if _kernel is None:
        _kernel = _build()
    from ._blocks import BLOCK

    a = pair.a.reshape(-1)
    e = pair.e.reshape(-1)
    n_blocks = -(-a.size // BLOCK)
    out = partials_type(n_blocks)
    mode = {"float": 0, "int": 1, "uint": 2, "bool": 3}[pair.mode]
    use_ulp = settings.ulp_dtype is not None
    if use_ulp:
        view = _INT_VIEW[a.dtype.itemsize]
        ua, ue = a.view(view), e.view(view)
        magnitude = (1 << (8 * a.dtype.itemsize - 1)) - 1  # every bit but the sign
    else:
        ua = ue = _NO_ULP
        magnitude = 0
    if not n_blocks:
        return out
    args = (
        BLOCK,
        SUB_BLOCK,
    )
    tail = (
        mode,
        settings.atol,
        settings.rtol,
        settings.rel_eps,
        settings.equal_nan,
        use_ulp,
        np.int64(magnitude),
        # No bound: no distance exceeds the largest uint64.
        np.uint64(2**64 - 1 if settings.max_ulp is None else settings.max_ulp),
        out.f,
        out.i,
    )
    # The kernel releases the GIL: each share fills its own rows of the per-block partials, so
    # the result does not depend on the number of threads.
    split_blocks(n_blocks, lambda first, last: _kernel(a, e, ua, ue, *args, first, last, *tail))
    return out


def split_blocks(n_blocks: int, work) -> None:
    """Call ``work(first, last)`` on contiguous shares of ``range(n_blocks)``, one share per
    thread ($PARITYGATE_THREADS, else the cores this process may use).

    The calling thread takes the first share itself rather than idling in a wait: one thread
    fewer to start and schedule, which is what a short comparison on a busy machine pays for.
    Every share gets a thread of its own (a pool would hand a second share to a worker that
    finished its first), and the first error raised in any share is raised here."""
    threads = min(_threads(), n_blocks)
    if threads <= 1:
        if n_blocks:
            work(0, n_blocks)
        return
    import threading

    bounds = [n_blocks * t // threads for t in range(threads + 1)]
    errors: list[BaseException] = []

    def share(first: int, last: int) -> None:
        try:
            work(first, last)
        except BaseException as exc:  # raised again in the calling thread
            errors.append(exc)

    workers = [
        threading.Thread(target=share, args=(bounds[t], bounds[t + 1]), daemon=True)
        for t in range(1, threads)
    ]
    for worker in workers:
        worker.start()
    try:
        work(bounds[0], bounds[1])
    finally:
        for worker in workers:
            worker.join()
    if errors:
        raise errors[0]


def _threads() -> int:
    """Threads for the kernel: $PARITYGATE_THREADS, else the cores this process may use."""
    value = os.environ.get("PARITYGATE_THREADS")
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)

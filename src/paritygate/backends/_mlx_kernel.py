"""One-pass comparison kernel for MLX arrays on a CUDA GPU (``mx.fast.cuda_kernel``).

The chunked MLX path spends 50-100x one read of the data on scheduling (hundreds of launches and
their temporaries); this kernel reads both arrays once. Threads work in groups of 32 (a warp):
group ``g`` owns the contiguous range ``[g * L, (g + 1) * L)`` and its lanes read it interleaved
(coalesced). Each thread writes one column of partials: six sums (float32, added 16 terms at a
time and then with Kahan's compensation; the sum and its compensation are written separately),
the maxima, ``max_abs`` as an exact pair (TwoSum: float32 difference and its rounding remainder)
and exact uint32 counts (mismatches, NaN/Inf accounting, ULPs). MLX then reduces the columns on
the device (float32 trees; sums and compensations cross to the host separately and meet in
float64), and the worst-k elements are ranked again, by the chunked path's own step, only inside
the 2k groups of largest excess (a group outside holds none of the 2k largest, as in
:func:`paritygate.backends.mlx._top_k`).

The arithmetic is the chunked path's float32 arithmetic, operation for operation (products and
sums rounded separately, as MLX's own kernels do: ``__fmul_rn`` / ``__fadd_rn`` keep the compiler
from contracting them), so the same exactness statements hold (mlx.py's docstring): counts, ULPs,
``max_abs`` and the worst elements exact; sums within float32 rounding.

The body is written once in a C subset; a prelude maps its few primitives (bit casts, the thread
index) to CUDA, and to C++ for the test harness that runs the same body on the CPU
(tests/backends/test_backend_mlx.py compiles it with the system C++ compiler, since MLX's kernel
APIs do not run on its CPU device). Metal is not enabled: MLX builds Metal kernels with fast math,
under which ``isnan`` and Kahan's compensation may be optimized away, and no Apple hardware was at
hand to check it; on Metal the chunked path runs.

Covered: two MLX arrays of the same dtype, bfloat16, float16 or float32, of fewer than 2**31
elements. Everything else takes the chunked path.
"""

from __future__ import annotations

import functools
from typing import Any

from ..metrics import COUNT_STATS, MAX_STATS, SUM_STATS

__all__ = ["FCOLS", "UCOLS", "FLOAT_MAXES", "BODY", "layout", "supports", "run"]

# The maxima reduced as floats: max_abs travels exactly (hi + lo, or an integer), ulp_max as an
# integer.
FLOAT_MAXES = tuple(n for n in MAX_STATS if n not in ("max_abs", "ulp_max"))

# Per-thread columns, float32 and uint32, from the engine's statistics: each sum with its
# compensation, the float maxima (max_abs as hi + lo), the worst-k rank; the counts, then the
# ULP maximum. Each column is the body's variable of _VARIABLE (stored at the body's end).
_SUM_VARS = {name: f"s{j}" for j, name in enumerate(SUM_STATS)}
_VARIABLE = {
    **_SUM_VARS,
    **{f"{name}_c": "-c" + var[1:] for name, var in _SUM_VARS.items()},
    "max_rel": "m_rel",
    "max_rel_symmetric": "m_rels",
    "max_excess": "m_exc",
    "atol_needed": "m_atn",
    "rtol_needed": "m_rtn",
    "max_abs_hi": "m_hi",
    "max_abs_lo": "m_lo",
    "rank": "m_rank",
    "n_finite": "n_fin",
    "mismatches": "n_mis",
    "ulp_nonzero": "u_nz",
    "ulp_over": "u_over",
    "actual_nan": "k_nan_a",
    "expected_nan": "k_nan_e",
    "nan_both": "k_nan_both",
    "nan_one_side": "k_nan_one",
    "actual_inf": "k_inf_a",
    "expected_inf": "k_inf_e",
    "inf_mismatch": "k_inf_bad",
    "ulp_max": "u_max",
}
FCOLS = (
    *(c for name in SUM_STATS for c in (name, f"{name}_c")),
    *FLOAT_MAXES,
    "max_abs_hi",
    "max_abs_lo",
    "rank",
)
UCOLS = (*COUNT_STATS, "ulp_max")
DTYPES = {"bfloat16": 2, "float16": 1, "float32": 3}  # the DT template constant
MAX_GROUPS = 1 << 15  # groups of 32 threads: at most 2**20 threads, 128 MiB of columns
MIN_GROUP_SPAN = 2048  # elements per group at least (fewer groups for small arrays)
THREADGROUP = 256

# The kernel body. Names from the prelude: tid (this thread), a, e (the inputs as raw bits:
# uint16 or uint32 elements), params (float32: atol, rtol, rel_eps), info (uint32: n, L, T,
# max_ulp), F and U (outputs), and the constants DT, HAS_MAX_ULP, EQUAL_NAN.
BODY = r"""
const uint n = info[0];
const uint span = info[1];
const uint T = info[2];
const uint max_ulp = info[3];
const float atol = params[0];
const float rtol = params[1];
const float rel_eps = params[2];
const uint lane = tid & 31u;
const uint group = tid >> 5;
const uint start = group * span;
uint stop = start + span;
if (stop > n || stop < start) stop = n;
float s0 = 0.0f, c0 = 0.0f, s1 = 0.0f, c1 = 0.0f, s2 = 0.0f, c2 = 0.0f;
float s3 = 0.0f, c3 = 0.0f, s4 = 0.0f, c4 = 0.0f, s5 = 0.0f, c5 = 0.0f;
float m_rel = 0.0f, m_rels = 0.0f, m_exc = -PG_INF, m_atn = 0.0f, m_rtn = 0.0f;
float m_hi = 0.0f, m_lo = -PG_INF, m_rank = -PG_INF;
uint n_fin = 0u, n_mis = 0u, u_nz = 0u, u_over = 0u, u_max = 0u;
uint k_nan_a = 0u, k_nan_e = 0u, k_nan_both = 0u, k_nan_one = 0u;
uint k_inf_a = 0u, k_inf_e = 0u, k_inf_bad = 0u;
for (uint base = start + lane; base < stop; base += 512u) {
  float p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f, p4 = 0.0f, p5 = 0.0f;
  for (uint j = 0u; j < 16u; ++j) {
    const uint i = base + 32u * j;
    if (i >= stop) break;
    const uint ba = PG_LOAD(a, i);
    const uint be = PG_LOAD(e, i);
    float x = pg_decode(ba, DT);
    float y = pg_decode(be, DT);
    const bool nan_a = x != x;
    const bool nan_e = y != y;
    const bool inf_a = !nan_a && (x - x) != (x - x);
    const bool inf_e = !nan_e && (y - y) != (y - y);
    const bool nonfinite = nan_a || nan_e || inf_a || inf_e;
    if (nonfinite) {
      const bool inf_bad = (inf_a || inf_e) && !(nan_a || nan_e) && (x != y);
      k_nan_a += nan_a ? 1u : 0u;
      k_nan_e += nan_e ? 1u : 0u;
      k_nan_both += (nan_a && nan_e) ? 1u : 0u;
      k_nan_one += (nan_a != nan_e) ? 1u : 0u;
      k_inf_a += inf_a ? 1u : 0u;
      k_inf_e += inf_e ? 1u : 0u;
      k_inf_bad += inf_bad ? 1u : 0u;
      if ((nan_a != nan_e) || inf_bad || (!EQUAL_NAN && nan_a && nan_e)) m_rank = PG_INF;
      x = 0.0f;
      y = 0.0f;
    } else {
      n_fin += 1u;
    }
    const float s = x - y;
    const float diff = s < 0.0f ? -s : s;
    const float bb = s - x;
    float lo = (x - (s - bb)) + (-y - bb);
    if (s < 0.0f) lo = -lo;
    if (diff > m_hi) {
      m_hi = diff;
      m_lo = lo;
    } else if (diff == m_hi && lo > m_lo) {
      m_lo = lo;
    }
    const float abs_a = x < 0.0f ? -x : x;
    const float abs_e = y < 0.0f ? -y : y;
    const float excess = diff - PG_ADD(atol, PG_MUL(rtol, abs_e));
    if (!nonfinite && excess > m_exc) m_exc = excess;
    const float rel = diff / (abs_e + rel_eps);
    if (rel > m_rel) m_rel = rel;
    const float rels = diff / ((abs_a > abs_e ? abs_a : abs_e) + rel_eps);
    if (rels > m_rels) m_rels = rels;
    const float atn = diff - PG_MUL(rtol, abs_e);
    if (atn > m_atn) m_atn = atn;
    const float rtn = abs_e > 0.0f ? (diff - atol) / abs_e : (diff > atol ? PG_INF : 0.0f);
    if (rtn > m_rtn) m_rtn = rtn;
    if (excess > 0.0f) n_mis += 1u;
    if (diff != 0.0f && excess > m_rank) m_rank = excess;
    p0 += diff;
    p1 += PG_MUL(x, y);
    p2 += PG_MUL(x, x);
    p3 += PG_MUL(y, y);
    p4 += PG_MUL(diff, diff);
    p5 += PG_MUL(s, PG_ADD(x, y));
    if (DT != 0 && !nonfinite) {
      const long long oa = pg_ordered(ba, DT);
      const long long oe = pg_ordered(be, DT);
      const uint u = (uint)(oa >= oe ? oa - oe : oe - oa);
      if (u > u_max) u_max = u;
      u_nz += u > 0u ? 1u : 0u;
      if (HAS_MAX_ULP && u > max_ulp) u_over += 1u;
    }
  }
  float t, yk;
  yk = p0 - c0; t = s0 + yk; c0 = (t - s0) - yk; s0 = t;
  yk = p1 - c1; t = s1 + yk; c1 = (t - s1) - yk; s1 = t;
  yk = p2 - c2; t = s2 + yk; c2 = (t - s2) - yk; s2 = t;
  yk = p3 - c3; t = s3 + yk; c3 = (t - s3) - yk; s3 = t;
  yk = p4 - c4; t = s4 + yk; c4 = (t - s4) - yk; s4 = t;
  yk = p5 - c5; t = s5 + yk; c5 = (t - s5) - yk; s5 = t;
}
"""
BODY += "".join(
    f"{out}[{j}u * T + tid] = {_VARIABLE[c]};\n"
    for out, cols in (("F", FCOLS), ("U", UCOLS))
    for j, c in enumerate(cols)
)

# Helpers shared by every target: decoding raw bits to float32 and ordering them for ULPs.
# pg_as_float (a bit cast) comes from the target's prelude.
HELPERS = r"""
PG_INLINE float pg_decode(uint b, int dt) {
  if (dt == 2) return pg_as_float(b << 16);
  if (dt == 3) return pg_as_float(b);
  const uint sign = (b & 0x8000u) << 16;
  const uint ex = (b >> 10) & 0x1Fu;
  const uint m = b & 0x3FFu;
  if (ex == 0x1Fu) return pg_as_float(sign | 0x7F800000u | (m << 13));
  if (ex == 0u) {
    const float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return pg_as_float(sign | ((ex + 112u) << 23) | (m << 13));
}
PG_INLINE long long pg_ordered(uint b, int dt) {
  if (dt == 3) return (b & 0x80000000u) ? -(long long)(b & 0x7FFFFFFFu) : (long long)b;
  return (b & 0x8000u) ? -(long long)(b & 0x7FFFu) : (long long)b;
}
"""

CUDA_HEADER = r"""
#define PG_INLINE __device__ __forceinline__
#define PG_INF __int_as_float(0x7f800000)
#define PG_MUL(x, y) __fmul_rn((x), (y))
#define PG_ADD(x, y) __fadd_rn((x), (y))
#define PG_LOAD(p, i) \
  ((DT == 3) ? ((const uint*)(p))[(i)] : (uint)((const unsigned short*)(p))[(i)])
typedef unsigned int uint;
PG_INLINE float pg_as_float(uint b) { return __uint_as_float(b); }
"""

CPU_HEADER = r"""
#include <cstdint>
#include <cstring>
typedef unsigned int uint;
#define PG_INLINE static inline
#define PG_INF __builtin_inff()
#define PG_MUL(x, y) ((x) * (y))
#define PG_ADD(x, y) ((x) + (y))
#define PG_LOAD(p, i) \
  ((DT == 3) ? ((const uint32_t*)(p))[(i)] : (uint)((const uint16_t*)(p))[(i)])
PG_INLINE float pg_as_float(uint b) { float f; std::memcpy(&f, &b, 4); return f; }
"""


def layout(size: int) -> tuple[int, int, int]:
    """(groups, span, threads): groups of 32 threads, each owning ``span`` contiguous elements
    (a multiple of 32); the thread count is a multiple of THREADGROUP."""
    groups = min(MAX_GROUPS, max(1, -(-size // MIN_GROUP_SPAN)))
    groups = -(-groups // (THREADGROUP // 32)) * (THREADGROUP // 32)
    span = -(-size // groups)
    span = -(-span // 32) * 32
    return groups, span, groups * 32


def supports(side_a: Any, side_e: Any, size: int) -> bool:
    """Both sides MLX arrays of one dtype the kernel reads, on a CUDA device."""
    return (
        side_a.mlx_array is not None
        and side_e.mlx_array is not None
        and side_a.dtype == side_e.dtype
        and side_a.dtype in DTYPES
        and 0 < size < 2**31
        and _cuda()
    )


def _cuda() -> bool:
    import mlx.core as mx

    cuda = getattr(mx, "cuda", None)
    return bool(cuda is not None and cuda.is_available() and mx.default_device() == mx.gpu)


@functools.lru_cache(maxsize=1)
def _cuda_kernel() -> Any:
    import hashlib

    import mlx.core as mx

    # MLX caches compiled kernels on disk by name: the name follows the source.
    digest = hashlib.sha256((CUDA_HEADER + HELPERS + BODY).encode()).hexdigest()[:12]
    return mx.fast.cuda_kernel(
        name=f"paritygate_compare_{digest}",
        input_names=["a", "e", "params", "info"],
        output_names=["F", "U"],
        header=CUDA_HEADER + HELPERS,
        source="const uint tid = blockIdx.x * blockDim.x + threadIdx.x;\n" + BODY,
    )


def run(a_flat: Any, e_flat: Any, dtype: str, tol: Any) -> tuple[Any, Any, int, int]:
    """Launch the kernel: (F [len(FCOLS), T] float32, U [len(UCOLS), T] uint32, groups, span)."""
    import mlx.core as mx

    size = a_flat.size
    groups, span, threads = layout(size)
    params = mx.array([tol.atol, tol.rtol, tol.rel_eps], dtype=mx.float32)
    max_ulp = min(tol.max_ulp, 2**32 - 1) if tol.max_ulp is not None else 0
    info = mx.array([size, span, threads, max_ulp], dtype=mx.uint32)
    # The body reads raw bits: 16-bit inputs as uint16, float32 as uint32 (views, no copies).
    bits = mx.uint32 if dtype == "float32" else mx.uint16
    f, u = _cuda_kernel()(
        inputs=[a_flat.view(bits), e_flat.view(bits), params, info],
        template=[
            ("DT", DTYPES[dtype]),
            ("HAS_MAX_ULP", tol.max_ulp is not None),
            ("EQUAL_NAN", bool(tol.equal_nan)),
        ],
        grid=(threads, 1, 1),
        threadgroup=(THREADGROUP, 1, 1),
        output_shapes=[(len(FCOLS), threads), (len(UCOLS), threads)],
        output_dtypes=[mx.float32, mx.uint32],
    )
    return f, u, groups, span


def cpu_source() -> str:
    """The same body as a C++ function over every thread in turn, for the CPU test harness:
    ``void pg_run(const void* a, const void* e, const float* params, const uint* info,
    float* F, uint* U)`` compiled with ``-DDT=...`` ``-DHAS_MAX_ULP=...`` ``-DEQUAL_NAN=...``."""
    return (
        CPU_HEADER
        + HELPERS
        + 'extern "C" void pg_run(const void* a, const void* e, const float* params,'
        + " const uint* info, float* F, uint* U) {\n"
        + "  for (uint tid = 0; tid < info[2]; ++tid) {\n"
        + BODY
        + "\n  }\n}\n"
    )

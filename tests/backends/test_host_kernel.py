"""The host kernel: numpy and numba paths agree, memory stays bounded, worst-k is exact."""

from __future__ import annotations

import math
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

from paritygate import InputError, Tolerance, compare
from paritygate.backends import _numba_kernel, host
from paritygate.results import to_jsonable

BLOCK = host.BLOCK
KERNELS = ["numpy", "numba"]


def both(actual, expected, tolerance):
    """The comparison by each kernel (numba forced regardless of size)."""
    out_np = host.compare_arrays(actual, expected, tolerance, "x", kernel="numpy")
    out_nb = host.compare_arrays(actual, expected, tolerance, "x", kernel="numba")
    return out_np, out_nb


def assert_agree(out_np, out_nb):
    """Counts, maxima, worst elements and verdicts exactly; sums to float64 rounding."""
    assert out_np.backend == "numpy" and out_nb.backend == "numba"
    # JSON form: NaN becomes "nan", which compares equal to itself.
    a = to_jsonable(out_np)
    b = to_jsonable(out_nb)
    for name in ("mean_abs", "cosine", "one_minus_cosine", "backend", "failures"):
        a.pop(name), b.pop(name)
    assert a == b
    assert out_nb.mean_abs == pytest.approx(out_np.mean_abs, rel=1e-12, abs=0)
    if out_np.cosine is None:
        assert out_nb.cosine is None and out_nb.one_minus_cosine is None
    else:
        assert out_nb.cosine == pytest.approx(out_np.cosine, abs=1e-12)
        # 1 - cosine to float64 rounding, relatively: the sums differ only in their order
        assert out_nb.one_minus_cosine == pytest.approx(out_np.one_minus_cosine, rel=1e-12)
    assert [f.metric for f in out_np.failures] == [f.metric for f in out_nb.failures]


def planted(rng, n, dtype, *, nonfinite=True):
    e = (rng.normal(size=n) * 10).astype(dtype)
    a = (e.astype(np.float64) + rng.normal(scale=1e-4, size=n)).astype(dtype)
    # Outliers spread over blocks, several in some blocks, some exactly equal elements.
    for i in rng.choice(n, size=25, replace=False):
        a[i] = e[i] + rng.choice([-1, 1]) * rng.uniform(0.01, 5)
    a[: n // 3 : 7] = e[: n // 3 : 7]
    a[1], e[1] = 0.0, -0.0
    if nonfinite:
        a[5], e[5] = np.nan, np.nan
        a[BLOCK + 3] = np.nan
        e[2 * BLOCK + 9] = np.inf
        a[2 * BLOCK + 10], e[2 * BLOCK + 10] = -np.inf, -np.inf
        a[n - 1] = np.inf
    return a, e


TOLERANCES = [
    Tolerance(),
    Tolerance(atol=1e-3, rtol=1e-3, max_ulp=8, worst_k=10),
    Tolerance(atol=0.5, rtol=0, equal_nan=False, worst_k=3, min_cosine=0.99),
    Tolerance(atol=0, rtol=1e-2, rel_eps=0.0, max_ulp=0, worst_k=25),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tol", TOLERANCES, ids=range(len(TOLERANCES)))
def test_numpy_and_numba_agree_on_floats(dtype, tol):
    rng = np.random.default_rng(7)
    a, e = planted(rng, 3 * BLOCK + 1234, dtype)
    out_np, out_nb = both(a, e, tol)
    assert_agree(out_np, out_nb)
    assert out_np.mismatches > 0 and out_np.nonfinite.nan_one_side == 1


def one_metric_records(dtype):
    """Every element differs (the numba kernel's screened path), and late in each block, after
    the running maxima have settled, one element raises exactly one of them: the largest
    difference, the largest excess, the largest relative error, the largest symmetric one (not
    the largest relative), the largest rtol needed. Each is caught by one test of the screen
    only, so a screen missing any of them gets that metric wrong (the excess and the atol
    needed order elements alike, up to rounding: one element stands for both)."""
    n = 3 * BLOCK
    rng = np.random.default_rng(11)
    e = rng.normal(size=n).astype(dtype)
    a = (e.astype(np.float64) * (1 + rng.normal(scale=1e-6, size=n))).astype(dtype)
    a[a == e] = np.nextafter(e[a == e], np.inf)
    planted = [  # (sub-block, expected, actual): atol = rtol = 1e-3
        (100, 10.0, 10.4),  # largest excess (and atol needed)
        (110, 1000.0, 1000.5),  # largest difference only: its excess is negative
        (120, 1.1e-3, 0.9e-3),  # largest symmetric relative error: 0.182 (relative 0.182)
        (130, 1e-3, 1.2e-3),  # then the largest relative error: 0.2 (symmetric only 0.167)
        (140, 0.02, 0.0225),  # largest rtol needed: (0.0025 - 1e-3) / 0.02 = 0.075
    ]
    for block in range(3):
        for sub, want, got in planted:
            i = block * BLOCK + sub * _numba_kernel.SUB_BLOCK + 17 * block + 5
            e[i], a[i] = want, got
    return a, e


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_screen_misses_no_record(dtype):
    a, e = one_metric_records(dtype)
    tol = Tolerance(atol=1e-3, rtol=1e-3, rel_eps=1e-12, max_ulp=4, worst_k=4)
    out_np, out_nb = both(a, e, tol)
    assert_agree(out_np, out_nb)
    assert out_nb.max_abs == pytest.approx(0.5, rel=1e-3)
    assert out_nb.max_rel == pytest.approx(0.2, rel=1e-3)
    assert out_nb.max_rel_symmetric == pytest.approx(0.2 / 1.1, rel=1e-3)
    assert out_nb.rtol_needed == pytest.approx(0.075, rel=1e-3)
    assert out_nb.mismatches == 3 * 2  # the largest excess and the largest rtol needed


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.uint64])
def test_numpy_and_numba_agree_on_integers(dtype):
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    n = 2 * BLOCK + 99
    a = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
    e = a.copy()
    idx = rng.choice(n, size=500, replace=False)
    e[idx] = rng.integers(info.min, info.max, size=idx.size, dtype=dtype, endpoint=True)
    e[0], a[0] = info.min, info.max  # the widest gap: no wrap-around
    for tol in (Tolerance(), Tolerance(atol=3, rtol=0.5, worst_k=7)):
        out_np, out_nb = both(a, e, tol)
        assert_agree(out_np, out_nb)
        assert out_np.max_abs == float(int(info.max) - int(info.min))


def test_numpy_and_numba_agree_on_bool_and_complex():
    rng = np.random.default_rng(5)
    n = BLOCK + 77
    a = rng.random(n) > 0.5
    e = a.copy()
    e[rng.choice(n, 40, replace=False)] ^= True
    out_np, out_nb = both(a, e, Tolerance(atol=5.0))
    assert_agree(out_np, out_nb)
    assert out_np.mismatches == 40  # bool outputs ignore atol
    z = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(np.complex64)
    w = z.copy()
    w[17] += 0.5j
    out_np, out_nb = both(w, z, Tolerance(atol=1e-3))
    assert_agree(out_np, out_nb)
    assert out_np.worst[0].index == (17, 1)


def test_numba_is_used_for_large_outputs_and_numpy_for_small(monkeypatch):
    monkeypatch.delenv("PARITYGATE_KERNEL", raising=False)
    big = np.zeros(host.NUMBA_MIN_SIZE, np.float32)
    assert host.compare_arrays(big, big.copy(), Tolerance(), "x").backend == "numba"
    small = np.zeros(10, np.float32)
    assert host.compare_arrays(small, small.copy(), Tolerance(), "x").backend == "numpy"
    # float16 is not covered by the fused kernel: the numpy path takes it.
    half = np.zeros(host.NUMBA_MIN_SIZE, np.float16)
    assert host.compare_arrays(half, half.copy(), Tolerance(), "x").backend == "numpy"
    monkeypatch.setenv("PARITYGATE_KERNEL", "numpy")
    assert compare(big, big.copy())[""].backend == "numpy"
    monkeypatch.setenv("PARITYGATE_KERNEL", "numba")
    assert compare(small, small.copy())[""].backend == "numba"
    monkeypatch.setenv("PARITYGATE_KERNEL", "fastest")
    with pytest.raises(InputError, match="kernel must be"):
        compare(small, small.copy())


def test_forcing_numba_without_numba_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(_numba_kernel, "available", lambda: False)
    with pytest.raises(InputError, match="numba is not installed"):
        host.compare_arrays(np.zeros(3), np.zeros(3), Tolerance(), "x", kernel="numba")
    # auto falls back to numpy
    big = np.zeros(host.NUMBA_MIN_SIZE, np.float32)
    assert host.compare_arrays(big, big.copy(), Tolerance(), "x").backend == "numpy"


@pytest.mark.parametrize("kernel", KERNELS)
def test_thread_count_does_not_change_results(monkeypatch, kernel):
    import threading

    rng = np.random.default_rng(11)
    a, e = planted(rng, 5 * BLOCK + 3, np.float32)
    tol = Tolerance(atol=1e-3, max_ulp=4)
    monkeypatch.setenv("PARITYGATE_THREADS", "1")
    one = host.compare_arrays(a, e, tol, "x", kernel=kernel)
    monkeypatch.setenv("PARITYGATE_THREADS", "3")
    seen = set()
    real = host._block_stats

    def spy(*args):
        seen.add(threading.current_thread())  # the objects, kept alive: idents are reused
        return real(*args)

    if kernel == "numpy":
        monkeypatch.setattr(host, "_block_stats", spy)
    three = host.compare_arrays(a, e, tol, "x", kernel=kernel)
    assert to_jsonable(one) == to_jsonable(three)
    if kernel == "numpy":
        assert len(seen) == 3  # the blocks were split between three threads


_CLOSURE_KEY = """
import hashlib
from numba.core.serialize import dumps
from paritygate.backends import _numba_kernel
closure = _numba_kernel._build().py_func.__closure__ or ()
print(hashlib.sha256(dumps(tuple(c.cell_contents for c in closure))).hexdigest())
"""


def test_kernel_disk_cache_key_is_the_same_in_every_process():
    # numba keys its on-disk cache on the pickled closure of the jitted function; a closure that
    # pickles differently per process (a dispatcher does) recompiles the kernel in every process.
    import subprocess
    import sys

    keys = [
        subprocess.run(
            [sys.executable, "-c", _CLOSURE_KEY], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    ]
    assert keys[0].strip() and keys[0] == keys[1]


def brute_force_worst(a, e, tol):
    """Reference worst-k over every element at once (small arrays only)."""
    a64, e64 = a.astype(np.float64).ravel(), e.astype(np.float64).ravel()
    with np.errstate(invalid="ignore"):
        d = np.abs(a64 - e64)
        excess = d - (np.abs(e64) * tol.rtol + tol.atol)
    nonfinite = ~(np.isfinite(a64) & np.isfinite(e64))
    nan_a, nan_e = np.isnan(a64), np.isnan(e64)
    nf_bad = (nan_a ^ nan_e) | (nonfinite & ~(nan_a | nan_e) & (a64 != e64))
    if not tol.equal_nan:
        nf_bad |= nan_a & nan_e
    excess[nonfinite] = -np.inf
    excess[nf_bad] = np.inf
    candidates = np.flatnonzero(((d > 0) & ~nonfinite) | nf_bad)
    order = sorted(candidates, key=lambda i: (-excess[i], i))[: tol.worst_k]
    return [(tuple(int(x) for x in np.unravel_index(i, a.shape)), float(excess[i])) for i in order]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kernel", KERNELS)
def test_worst_k_matches_brute_force(seed, kernel):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(2, 9)), BLOCK // 4 + int(rng.integers(0, 999)))
    e = rng.normal(size=shape).astype(np.float32)
    a = e + rng.normal(scale=1e-5, size=shape).astype(np.float32)
    flat = a.reshape(-1)
    # Outliers clustered in a few blocks (more than k in one of them) and spread elsewhere.
    hot = int(rng.integers(0, e.size // BLOCK + 1)) * BLOCK
    for i in range(15):
        flat[min(hot + i * 13, flat.size - 1)] += rng.uniform(0.1, 2.0)
    for i in rng.choice(flat.size, 12, replace=False):
        flat[i] -= rng.uniform(0.1, 2.0)
    if seed % 2:
        flat[int(rng.integers(0, flat.size))] = np.nan
    tol = Tolerance(
        atol=1e-4, rtol=1e-3, worst_k=int(rng.integers(1, 20)), equal_nan=bool(seed % 3)
    )
    out = host.compare_arrays(a, e, tol, "x", kernel=kernel)
    got = [(el.index, el.excess) for el in out.worst]
    assert got == brute_force_worst(a, e, tol)
    for el in out.worst:
        assert el.actual == pytest.approx(float(a[el.index]), nan_ok=True)
        assert el.expected == float(e[el.index])


@pytest.mark.parametrize("kernel", KERNELS)
def test_worst_k_ties_keep_the_lowest_indices(kernel):
    """More elements tie for the largest excess in one block than k: the lowest indices win,
    in index order (then the next excess), on both kernels; the reverse order fails."""
    e = np.zeros(2 * BLOCK, np.float32)
    a = e.copy()
    a[BLOCK + 100 : BLOCK + 140 : 2] = 0.5  # 20 ties
    a[7] = 0.25
    out = host.compare_arrays(a, e, Tolerance(atol=0.1, worst_k=5), "x", kernel=kernel)
    assert [el.index for el in out.worst] == [(BLOCK + 100 + 2 * i,) for i in range(5)]
    out = host.compare_arrays(a, e, Tolerance(atol=0.1, worst_k=21), "x", kernel=kernel)
    assert out.worst[-1].index == (7,) and out.worst[-2].index == (BLOCK + 138,)


@pytest.mark.parametrize("kernel", KERNELS)
def test_worst_k_found_when_each_beats_the_last_by_a_hair(kernel):
    """Excesses rising by one float32 step per element through a block: the worst are its last
    elements, however little they beat those found before (a sub-block skipped on a loose
    threshold would miss them)."""
    e = np.zeros(BLOCK, np.float32)
    a = np.float32(0.5) + np.arange(BLOCK, dtype=np.float32) * np.float32(2**-24)
    out = host.compare_arrays(a, e, Tolerance(atol=0.1, worst_k=3), "x", kernel=kernel)
    assert [el.index for el in out.worst] == [(BLOCK - 1,), (BLOCK - 2,), (BLOCK - 3,)]


@pytest.mark.parametrize("kernel", KERNELS)
def test_uint8_zero_against_255_is_255(kernel):
    a = np.zeros(2 * BLOCK, np.uint8)
    e = np.zeros(2 * BLOCK, np.uint8)
    e[BLOCK + 1] = 255
    out = host.compare_arrays(a, e, Tolerance(atol=254), "x", kernel=kernel)
    assert out.max_abs == 255.0 and out.mismatches == 1
    assert out.worst[0].index == (BLOCK + 1,) and out.worst[0].excess == 1.0
    assert host.compare_arrays(a, e, Tolerance(atol=255), "x", kernel=kernel).passed


@pytest.mark.parametrize("kernel", KERNELS)
def test_nan_and_inf_rules(kernel):
    a = np.ones(BLOCK + 10, np.float32)
    e = np.ones(BLOCK + 10, np.float32)
    a[0] = e[0] = np.nan  # NaN on both sides
    a[1] = np.nan  # NaN on one side
    e[BLOCK + 2] = np.nan
    a[3] = e[3] = np.inf  # same infinity: equal
    a[4], e[4] = np.inf, -np.inf  # opposite infinities
    e[5] = np.inf  # infinity against a number
    out = host.compare_arrays(a, e, Tolerance(), "x", kernel=kernel)
    nf = out.nonfinite
    assert (nf.actual_nan, nf.expected_nan, nf.nan_both, nf.nan_one_side) == (2, 2, 1, 2)
    assert (nf.actual_inf, nf.expected_inf, nf.inf_mismatch) == (2, 3, 2)
    assert out.mismatches == 4 and out.rtol_needed == math.inf
    assert sorted(el.index[0] for el in out.worst) == [1, 4, 5, BLOCK + 2]
    assert out.max_abs == 0.0 and out.size - 6 == (BLOCK + 10) - 6
    strict = host.compare_arrays(a, e, Tolerance(equal_nan=False), "x", kernel=kernel)
    assert strict.mismatches == 5
    # Without the planted non-finite mismatches the same arrays pass.
    a2, e2 = a.copy(), e.copy()
    a2[[1, 4, 5]] = e2[[1, 4, 5]] = 1.0
    e2[BLOCK + 2] = 1.0
    assert host.compare_arrays(a2, e2, Tolerance(), "x", kernel=kernel).passed


@pytest.mark.parametrize("kernel", KERNELS)
def test_bool_masks(kernel):
    e = np.zeros((256, 512), bool)
    e[10:20, 30:40] = True
    a = e.copy()
    a[15, 35] = False
    a[200, 1] = True
    out = host.compare_arrays(a, e, Tolerance(atol=1.0), "mask", kernel=kernel)
    assert not out.passed and out.mismatches == 2
    assert sorted(el.index for el in out.worst) == [(15, 35), (200, 1)]
    assert host.compare_arrays(e, e.copy(), Tolerance(), "mask", kernel=kernel).passed


def test_every_failing_output_reported_by_both_kernels(monkeypatch):
    rng = np.random.default_rng(2)
    tree_e = {f"layer{i}": rng.normal(size=BLOCK + i).astype(np.float32) for i in range(4)}
    tree_a = {k: v.copy() for k, v in tree_e.items()}
    tree_a["layer1"][7] += 1
    tree_a["layer3"][BLOCK] -= 1
    for kernel in KERNELS:
        monkeypatch.setenv("PARITYGATE_KERNEL", kernel)
        result = compare(tree_a, tree_e, atol=1e-3)
        assert [o.path for o in result.failing()] == ["layer1", "layer3"]
        assert result["layer3"].worst[0].index == (BLOCK,)


def stated_bound(kernel: str, threads: int) -> int:
    """The extra memory docs/architecture.md states: the numpy kernel holds one block's workspace
    per thread; the numba kernel's per-thread buffers are numba's own allocations, which
    tracemalloc does not see, so only its Python-side memory is bounded here."""
    per_thread = host.WORKSPACE_BYTES if kernel == "numpy" else 0
    return host.BASE_EXTRA_BYTES + threads * per_thread


@pytest.mark.parametrize("threads", [None, "1", "16"], ids=["cores", "1-thread", "16-threads"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_extra_memory_stays_bounded(kernel, threads, monkeypatch):
    """Peak Python-side allocations of a 2 x 128 MiB comparison within the stated bound, on this
    machine's core count and on fixed thread counts (the bound scales with the threads, never
    with the array size)."""
    from paritygate.backends._numba_kernel import _threads

    if threads is not None:
        monkeypatch.setenv("PARITYGATE_THREADS", threads)
    bound = stated_bound(kernel, _threads())
    n = 32 * 2**20  # 128 MiB per float32 array
    rng = np.random.default_rng(0)
    e = rng.standard_normal(n, dtype=np.float32)
    a = e.copy()
    a[:: 1 << 12] += 1.0  # 8192 failing elements spread over every block
    a[-1] = np.nan
    host.compare_arrays(a[:BLOCK], e[:BLOCK], Tolerance(), "x", kernel=kernel)  # compile first
    tracemalloc.start()
    try:
        out = host.compare_arrays(a, e, Tolerance(atol=1e-3, max_ulp=2), "x", kernel=kernel)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.mismatches == n // (1 << 12) + 1
    assert peak <= bound, f"peak {peak / 2**20:.1f} MiB > {bound / 2**20:.1f} MiB"
    # Every element differing (the dense path) stays bounded as well.
    b = e + np.float32(1e-3)
    tracemalloc.start()
    try:
        out = host.compare_arrays(b[: 8 * 2**20], e[: 8 * 2**20], Tolerance(), "x", kernel=kernel)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.mismatches == 8 * 2**20
    assert peak <= bound, f"peak {peak / 2**20:.1f} MiB > {bound / 2**20:.1f} MiB"


def test_the_memory_bound_is_tight_enough_to_fail(monkeypatch):
    """The other direction: a kernel holding a second workspace per thread exceeds the bound."""
    monkeypatch.setenv("PARITYGATE_THREADS", "4")
    real = host._Workspace

    class Doubled(real):
        def __init__(self, size=BLOCK):
            super().__init__(size)
            self.extra = real(size)

    monkeypatch.setattr(host, "_Workspace", Doubled)
    n = 4 * 2**20
    e = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    a = e + np.float32(1e-3)
    tracemalloc.start()
    try:
        host.compare_arrays(a, e, Tolerance(), "x", kernel="numpy")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak > stated_bound("numpy", 4), peak


@pytest.mark.parametrize("kernel", KERNELS)
def test_cosine_of_64mi_float32_is_one_within_1e_12(kernel):
    n = 64 * 2**20
    rng = np.random.default_rng(1)
    x = rng.uniform(-1e3, 1e3, size=n).astype(np.float32)
    out = host.compare_arrays(x, x.copy(), Tolerance(min_cosine=1 - 1e-12), "x", kernel=kernel)
    assert abs(out.cosine - 1.0) <= 1e-12 and out.passed
    # A float32 accumulation of the norm would be off by far more than 1e-12.
    y = x.copy()
    y[:: 1 << 16] *= -1
    expected = 1 - 2 * float(np.sum(x[:: 1 << 16].astype(np.float64) ** 2)) / float(
        np.sum(x.astype(np.float64) ** 2)
    )
    out = host.compare_arrays(y, x, Tolerance(), "x", kernel=kernel)
    assert out.cosine == pytest.approx(expected, abs=1e-12)


def test_float16_and_bfloat16_on_the_host_path():
    e = np.linspace(-4, 4, 3 * BLOCK).astype(ml_dtypes.bfloat16)
    a = e.copy()
    bits = a.view(np.uint16)
    bits[100] += 2
    out = host.compare_arrays(a, e, Tolerance(max_ulp=1), "x")
    assert out.ulp_max == 2 and out.ulp_over == 1 and out.ulp_nonzero == 1
    assert out.worst[0].index == (100,)
    h = np.linspace(-4, 4, 3 * BLOCK).astype(np.float16)
    out = host.compare_arrays(h, h.astype(np.float32), Tolerance(max_ulp=0), "x")
    assert out.passed and out.ulp_dtype == "float16"


@pytest.mark.parametrize("kernel", KERNELS)
def test_cosine_of_huge_float64_values(kernel):
    # Squares of values beyond 1e154 overflow float64; the cosine must not.
    rng = np.random.default_rng(4)
    e = rng.normal(size=BLOCK + 5) * 1e200
    a = e.copy()
    a[3] = -a[3]
    reference = 1 - 2 * (e[3] / 1e200) ** 2 / np.sum((e / 1e200) ** 2)
    out = host.compare_arrays(a, e, Tolerance(), "x", kernel=kernel)
    assert out.cosine == pytest.approx(reference, abs=1e-12)
    assert host.compare_arrays(
        e, e.copy(), Tolerance(min_cosine=1 - 1e-12), "x", kernel=kernel
    ).passed


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_subnormal_against_huge_float64_gives_a_defined_cosine(kernel):
    """Squares beyond float64 trigger power-of-two scaling; a subnormal peak must not overflow
    it."""
    tiny, huge = np.array([2.2250738585e-313]), np.array([1.3407807929942596e154])
    for a, e in ((tiny, huge), (huge, tiny)):
        out = host.compare_arrays(a, e, Tolerance(), "x", kernel=kernel)
        assert not out.passed and out.cosine == pytest.approx(1.0)
        assert out.max_abs == pytest.approx(1.3407807929942596e154)


_CACHE_RUN = """
import numpy as np
from paritygate.backends import host
from paritygate.results import Tolerance
a = np.linspace(0, 1, 100_000, dtype=np.float32)
r = host.compare_arrays(a, a + np.float32(1e-3), Tolerance(atol=1e-6), "x", kernel="numba")
print("mismatches", r.mismatches)
"""


def test_kernel_cache_goes_to_the_user_cache_folder_when_site_packages_is_read_only(tmp_path):
    """Installed where nothing can be written beside the source (here a file stands where
    ``__pycache__`` would go, which stops root too), the compiled kernel is cached in the user's
    cache folder (numba's user-wide locator under XDG_CACHE_HOME), nothing is written in the
    package, and a second process loads the kernel from there instead of compiling it."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import paritygate

    site = tmp_path / "site"
    shutil.copytree(
        Path(paritygate.__file__).parent,
        site / "paritygate",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (site / "paritygate" / "backends" / "__pycache__").write_text("read-only install\n")
    before = sorted(p.relative_to(site) for p in site.rglob("*"))
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "PYTHON"))}
    env.update(
        PYTHONPATH=str(site),
        XDG_CACHE_HOME=str(cache),
        HOME=str(tmp_path),
        NUMBA_DEBUG_CACHE="1",
        PYTHONDONTWRITEBYTECODE="1",
    )

    def run() -> str:
        proc = subprocess.run(
            [sys.executable, "-c", _CACHE_RUN], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "mismatches 100000" in proc.stdout
        return proc.stdout

    first = run()
    saved = [line for line in first.splitlines() if "data saved to" in line]
    assert saved and all(str(cache / "numba") in line for line in saved), first[-2000:]
    assert any(p.suffix == ".nbc" for p in (cache / "numba").rglob("*"))
    assert sorted(p.relative_to(site) for p in site.rglob("*")) == before  # nothing written
    second = run()
    assert "data saved to" not in second, second[-2000:]
    loaded = [line for line in second.splitlines() if "data loaded from" in line]
    assert loaded and all(str(cache / "numba") in line for line in loaded), second[-2000:]


def test_split_blocks_covers_every_block_once_and_raises_a_share_error(monkeypatch):
    monkeypatch.setenv("PARITYGATE_THREADS", "4")
    done: list[int] = []
    _numba_kernel.split_blocks(10, lambda first, last: done.extend(range(first, last)))
    assert sorted(done) == list(range(10))

    def fail_late(first: int, last: int) -> None:
        if last == 10:  # the last share, run by a worker thread
            raise ValueError("share failed")

    with pytest.raises(ValueError, match="share failed"):
        _numba_kernel.split_blocks(10, fail_late)


# The numpy kernel's exact shortcuts (host.SHORTCUTS): same report as the full computation, and a
# single planted bad element inside a block of otherwise passing data still counted exactly.

SHORTCUT_DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]


def dense_passing(rng, n, dtype):
    """Data within a few ULPs (magnitudes 0.5 to 4, both signs): every other element one ULP
    away, so that most elements differ (the dense path, not the sparse one)."""
    e = (rng.choice([-1.0, 1.0], n) * rng.uniform(0.5, 4, n)).astype(dtype)
    a = e.copy()
    bits = a.view(f"u{np.dtype(dtype).itemsize}")
    bits[::2] += 1  # one ULP further from zero
    assert np.count_nonzero(a != e) * 8 > n
    return a, e


def eps(dtype):
    return float(ml_dtypes.finfo(dtype).eps)


def both_ways(monkeypatch, actual, expected, tolerance):
    """The numpy kernel's comparison with and without its shortcuts, and the number of blocks
    whose ULP statistics came from the bit patterns (the shortcut that has a fallback)."""
    monkeypatch.setattr(host, "SHORTCUTS", False)
    slow = host.compare_arrays(actual, expected, tolerance, "x", kernel="numpy")
    slow_stats = host.host_stats(actual, expected, tolerance, "x", kernel="numpy")[0]
    monkeypatch.setattr(host, "SHORTCUTS", True)
    fast_stats = host.host_stats(actual, expected, tolerance, "x", kernel="numpy")[0]
    # The raw statistics too (the largest excess of a passing output is in no report): repr
    # writes every float exactly, -0.0 and NaN included.
    assert repr(fast_stats) == repr(slow_stats)
    real = host._ulp_same_sign
    quick = []

    def spy(*args):
        out = real(*args)
        quick.append(out is not None)
        return out

    monkeypatch.setattr(host, "_ulp_same_sign", spy)
    fast = host.compare_arrays(actual, expected, tolerance, "x", kernel="numpy")
    # Every field, sums and the cosine included, bit for bit (JSON form: NaN equals itself).
    assert to_jsonable(fast) == to_jsonable(slow)
    assert (fast.mean_abs, fast.cosine, fast.one_minus_cosine) == (
        slow.mean_abs,
        slow.cosine,
        slow.one_minus_cosine,
    )
    return fast, sum(quick)


def shortcut_tolerance(dtype, which):
    """Bounds in the dtype's own epsilon that one ULP at magnitudes up to 4 passes."""
    unit = eps(dtype)
    return [
        Tolerance(atol=8 * unit, rtol=8 * unit, worst_k=5),
        Tolerance(atol=8 * unit, rtol=0, max_ulp=2, worst_k=3),
        Tolerance(atol=0, rtol=2 * unit, rel_eps=0.0, max_ulp=0),
    ][which]


@pytest.mark.parametrize("dtype", SHORTCUT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("which", range(3))
def test_shortcuts_give_the_full_report_on_passing_data(monkeypatch, dtype, which):
    rng = np.random.default_rng(21)
    tol = shortcut_tolerance(dtype, which)
    a, e = dense_passing(rng, 3 * BLOCK + 123, dtype)
    out, quick = both_ways(monkeypatch, a, e, tol)
    assert quick == 4  # every block's ULPs from the bit patterns
    assert out.mismatches == 0 and out.ulp_max == 1 and out.ulp_nonzero == (out.size + 1) // 2
    assert out.ulp_over == (
        None if tol.max_ulp is None else int(tol.max_ulp == 0) * out.ulp_nonzero
    )
    assert out.passed == (tol.max_ulp != 0)  # max_ulp = 0 fails on the ULPs alone
    assert out.worst and out.max_rel > 0 and out.max_rel_symmetric > 0


def plant(a, e, where, kind):
    """One bad (or special) element at ``where``; returns what the report must show."""
    if kind == "off":
        a[where] = e[where] + a.dtype.type(1.0)
        return {"mismatches": 1, "worst": where}
    if kind == "nan":
        a[where] = np.nan
        return {"mismatches": 1, "worst": where, "nan_one_side": 1}
    if kind == "inf":
        a[where] = np.inf
        return {"mismatches": 1, "worst": where, "inf_mismatch": 1}
    if kind == "same-inf":
        a[where] = e[where] = -np.inf
        return {"mismatches": 0, "actual_inf": 1}
    if kind == "sign":  # one pair of opposite signs: the ULP fallback, and a mismatch
        e[where] = 0.5
        a[where] = -0.5
        return {"mismatches": 1, "worst": where}
    if kind == "negative-zero":  # -0.0 against 0.0: equal, opposite sign bits
        a[where], e[where] = -0.0, 0.0
        return {"mismatches": 0}
    raise AssertionError(kind)


@pytest.mark.parametrize("dtype", SHORTCUT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["off", "nan", "inf", "same-inf", "sign", "negative-zero"])
def test_a_planted_element_inside_a_passing_block_counts_exactly(monkeypatch, dtype, kind):
    rng = np.random.default_rng(22)
    a, e = dense_passing(rng, 3 * BLOCK + 123, dtype)
    where = BLOCK + BLOCK // 2 + 7
    want = plant(a, e, where, kind)
    out, quick = both_ways(monkeypatch, a, e, shortcut_tolerance(dtype, 0))
    assert out.mismatches == want["mismatches"]
    assert out.passed == (want["mismatches"] == 0)
    if "worst" in want:
        assert out.worst[0].index == (where,)
        assert out.worst[0].excess > 0
    else:
        assert all(el.excess <= 0 for el in out.worst)
    nf = out.nonfinite
    assert nf.nan_one_side == want.get("nan_one_side", 0)
    assert nf.inf_mismatch == want.get("inf_mismatch", 0)
    assert nf.actual_inf == want.get("actual_inf", int(kind == "inf"))
    # The planted block falls back where a shortcut does not hold (a non-finite value, a sign
    # change); the other three keep it.
    assert quick == (3 if kind in ("nan", "inf", "same-inf", "sign", "negative-zero") else 4)


def test_subnormals_count_in_ulps_with_and_without_shortcuts(monkeypatch):
    for dtype in (np.float32, np.float64):
        tiny = np.finfo(dtype).smallest_subnormal
        rng = np.random.default_rng(23)
        e = (rng.integers(1, 1000, 2 * BLOCK + 5) * tiny).astype(dtype)
        a = e.copy()
        a[1::2] = np.nextafter(e[1::2], dtype(np.inf))  # one ULP up on every other element
        a[BLOCK + 4] = e[BLOCK + 4] + dtype(5 * tiny)  # an even index: one more differs
        out, quick = both_ways(monkeypatch, a, e, Tolerance(atol=0, rtol=0, max_ulp=1, worst_k=2))
        assert quick == 3  # three blocks, no sign change
        assert out.ulp_max == 5 and out.ulp_over == 1
        assert out.ulp_nonzero == (2 * BLOCK + 5) // 2 + 1
        assert out.mismatches == out.ulp_nonzero  # atol = rtol = 0: every differing element
        assert out.worst[0].index == (BLOCK + 4,)


def test_equal_elements_never_become_the_worst_with_shortcuts(monkeypatch):
    # The element of largest excess is an equal one (|e| = 0 gives the smallest bound): the
    # largest excess among the differing elements comes from the full masked maximum.
    rng = np.random.default_rng(24)
    a, e = dense_passing(rng, 2 * BLOCK, np.float32)
    a[::5] = e[::5] = 0.0
    tol = shortcut_tolerance(np.float32, 0)
    d = np.abs(a.astype(np.float64) - e)
    excess = d - (np.abs(e.astype(np.float64)) * tol.rtol + tol.atol)
    assert d[np.argmax(excess)] == 0  # the case the shortcut hands to the masked maximum
    out, _ = both_ways(monkeypatch, a, e, tol)
    assert out.passed and all(el.abs_diff > 0 for el in out.worst)
    assert out.worst[0].excess == excess[d > 0].max()
    assert host.host_stats(a, e, tol, "x", kernel="numpy")[0].max_excess == excess[d > 0].max()


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint64, np.bool_])
def test_integer_and_bool_blocks_with_one_planted_element(monkeypatch, dtype):
    rng = np.random.default_rng(25)
    n = 2 * BLOCK + 31
    if dtype is np.bool_:
        e = rng.random(n) > 0.5
        a = e.copy()
        a[BLOCK + 9] ^= True
        tol = Tolerance(atol=5.0)  # ignored for bool outputs
    else:
        info = np.iinfo(dtype)
        e = rng.integers(info.min // 2, info.max // 2, n, dtype=dtype)
        a = e + (rng.integers(0, 2, n) * (1 if dtype is not np.uint64 else 1)).astype(dtype)
        a[BLOCK + 9] = info.max
        e[BLOCK + 9] = info.min
        tol = Tolerance(atol=1, rtol=0)
    out, _ = both_ways(monkeypatch, a, e, tol)
    assert out.mismatches == 1 and not out.passed
    assert out.worst[0].index == (BLOCK + 9,)
    a[BLOCK + 9] = e[BLOCK + 9]
    out, _ = both_ways(monkeypatch, a, e, tol)
    assert out.passed and out.mismatches == 0


@pytest.mark.parametrize(
    "dtype, bits",
    [(ml_dtypes.float8_e4m3fn, True), (ml_dtypes.float8_e4m3fnuz, False)],
    ids=["float8_e4m3fn", "float8_e4m3fnuz"],
)
def test_float8_ulps_with_and_without_shortcuts(monkeypatch, dtype, bits):
    # e4m3fn orders like sign-magnitude integers (the bit-pattern shortcut); e4m3fnuz has no
    # negative zero, so its ULPs always come from the rank table.
    rng = np.random.default_rng(26)
    a, e = dense_passing(rng, 2 * BLOCK + 1, dtype)
    a[BLOCK + 3] = e[BLOCK + 3] * dtype(2)  # 8 ULPs (3 mantissa bits) at magnitudes 0.5 to 4
    out, quick = both_ways(monkeypatch, a, e, Tolerance(atol=4, rtol=0, max_ulp=1, worst_k=2))
    assert quick == (3 if bits else 0)
    assert out.ulp_max == 8 and out.ulp_over == 1 and out.ulp_nonzero == BLOCK + 2
    assert out.mismatches == 0 and not out.passed  # within atol, beyond max_ulp

"""The MLX backend: agreement with the host engine, failures, and no host copies.

Every agreement test runs twice: with float64 accumulation (MLX's CPU) and with float32
accumulation forced on the CPU (``ACCUMULATE = "float32"``: the arithmetic MLX uses on a GPU, which
has no float64). In float32 accumulation counts, maxima of differences, ULP distances, integers,
bools and the worst elements must equal the host's exactly; float sums and ratios may differ by
the documented float32 bound (``FLOAT32_REL`` relative, ``FLOAT32_COSINE`` absolute on the cosine).
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from backend_reference import cases, check, reference, run_isolated
from spec_helpers import TINY_SPEC, make_project

from paritygate import calibrate, check_equivalence, paired
from paritygate.backends import get_backend
from paritygate.backends import mlx as mlx_backend
from paritygate.errors import InputError
from paritygate.results import Tolerance

CASES = cases()
FLOAT32_REL = 1e-6
FLOAT32_COSINE = 1e-6
HOST_NOTE = "compared on the host: float64 arithmetic needed"


@pytest.fixture(params=["auto", "float32"])
def accumulate(request, monkeypatch):
    """Both accumulation modes: float64 (MLX's CPU) and float32 (what a GPU runs). Returns the
    mode in effect: "float32" also for "auto" on a default device without float64 (a GPU)."""
    monkeypatch.setattr(mlx_backend, "ACCUMULATE", request.param)
    return "auto" if mlx_backend.accumulates_in_float64() else "float32"


@pytest.fixture
def on_cpu():
    """MLX's CPU as the default device (float64 available), whatever the machine has."""
    previous = mx.default_device()
    mx.set_default_device(mx.cpu)
    yield
    mx.set_default_device(previous)


def to_mlx(x: np.ndarray) -> mx.array:
    if x.dtype.name == "bfloat16":
        return mx.array(x.view(np.uint16)).view(mx.bfloat16)
    return mx.array(x, dtype=mlx_backend._mx_dtype(x.dtype.name))


def needs_float64(a: np.ndarray, e: np.ndarray) -> bool:
    from paritygate.metrics import promote

    return "float64" in (a.dtype.name, e.dtype.name, promote(a.dtype.name, e.dtype.name)[0])


def check_mode(result, a, e, tol, mode, path="out"):
    """check() against the host engine, with float32 accumulation's exact and bounded fields."""
    ref = reference(a, e, tol, path)
    if mode == "float32" and needs_float64(a, e):
        # No float64 on the device: the pair is compared on the host, and the result says so.
        assert HOST_NOTE in result.promotion, result.promotion
        result.promotion = ref.promotion
        check(result, ref)
        return
    assert result.backend == "mlx"
    if mode == "auto":
        check(result, ref)
        return
    check(result, ref, rel=FLOAT32_REL, cosine_abs=FLOAT32_COSINE)
    # Exact in float32 accumulation too: the largest difference and the worst elements.
    assert result.max_abs == ref.max_abs, (result.max_abs, ref.max_abs)
    assert [(w.index, w.actual, w.expected, w.excess) for w in result.worst] == [
        (w.index, w.actual, w.expected, w.excess) for w in ref.worst
    ] or len({w.excess for w in ref.worst}) < len(ref.worst)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_agrees_with_reference(case, accumulate):
    name, a, e, tol = case
    result = mlx_backend.compare_arrays(to_mlx(a), to_mlx(e), tol, name)
    check_mode(result, a, e, tol, accumulate, name)
    assert result.dtype_actual == a.dtype.name and result.dtype_expected == e.dtype.name


@pytest.mark.parametrize("case", CASES[:8:3] + CASES[-6:], ids=lambda c: c[0])
def test_numpy_on_the_other_side(case, accumulate):
    name, a, e, tol = case
    check_mode(mlx_backend.compare_arrays(to_mlx(a), e, tol, name), a, e, tol, accumulate, name)
    check_mode(mlx_backend.compare_arrays(a, to_mlx(e), tol, name), a, e, tol, accumulate, name)


def test_many_chunks_worst_across_chunks(monkeypatch, accumulate):
    monkeypatch.setattr(mlx_backend, "CHUNK", 1000)  # 38 chunks, a short last one
    monkeypatch.setattr(mlx_backend, "CHUNK_FLOAT32", 1000)
    for name, a, e, tol in CASES:
        if name in ("float32-planted", "nonfinite", "uint8", "bool", "int64-off-by-one"):
            check_mode(
                mlx_backend.compare_arrays(to_mlx(a), to_mlx(e), tol, name), a, e, tol, accumulate
            )


def test_worst_k_through_block_maxima(monkeypatch, accumulate):
    """Chunks large enough for the two-stage worst-k (block maxima, then the best blocks)."""
    monkeypatch.setattr(mlx_backend, "CHUNK", 4096)
    monkeypatch.setattr(mlx_backend, "CHUNK_FLOAT32", 4096)
    monkeypatch.setattr(mlx_backend, "TOPK_BLOCK", 64)
    rng = np.random.default_rng(7)
    a = rng.standard_normal(40_000).astype(np.float32)
    e = a.copy()
    hits = rng.choice(40_000, 60, replace=False)
    e[hits] += rng.uniform(0.1, 5, 60).astype(np.float32)
    e[hits[:12] // 64 * 64] += 10  # several large ones in one block
    tol = Tolerance(atol=1e-3, worst_k=10)
    check_mode(
        mlx_backend.compare_arrays(mx.array(a), mx.array(e), tol, "w"), a, e, tol, accumulate
    )


def test_exact_ulps_integers_and_largest_difference(accumulate):
    """Values whose float32 arithmetic would round: ULP distances beyond 2**24, integers beyond
    2**24 apart by one, uint64 beyond 2**63, a difference needing more than float32's bits."""
    # (float32 sums of squares overflow beyond ~1.8e19: magnitudes stay below that)
    f = np.array([1.0, -1.0, 1e-30, 7.0, -0.0], dtype=np.float32)
    g = np.array([1e15, 1.0, 1e15, 7.0, 0.0], dtype=np.float32)
    tol = Tolerance(atol=1e-3, max_ulp=100)
    result = mlx_backend.compare_arrays(mx.array(f), mx.array(g), tol, "f")
    check_mode(result, f, g, tol, accumulate)
    assert result.ulp_max > 2**24 and result.ulp_over == 3 and result.ulp_nonzero == 3
    big = np.array([2**40 + 1, -(2**53) - 3, 5, 2**62], dtype=np.int64)
    big2 = big.copy()
    big2[[0, 1]] += 1
    result = mlx_backend.compare_arrays(mx.array(big), mx.array(big2), Tolerance(), "i")
    check_mode(result, big, big2, Tolerance(), accumulate)
    assert result.mismatches == 2 and result.max_abs == 1
    u = np.array([2**63 + 5, 0, 17], dtype=np.uint64)
    u2 = np.array([2**63 + 4, 0, 17], dtype=np.uint64)
    result = mlx_backend.compare_arrays(mx.array(u), mx.array(u2), Tolerance(), "u")
    assert result.mismatches == 1 and result.max_abs == 1 and result.worst[0].index == (0,)
    small, small2 = np.array([0, 255, 3], dtype=np.uint8), np.array([255, 254, 3], dtype=np.uint8)
    result = mlx_backend.compare_arrays(mx.array(small), mx.array(small2), Tolerance(atol=1.5), "s")
    check_mode(result, small, small2, Tolerance(atol=1.5), accumulate)
    assert result.max_abs == 255 and result.mismatches == 1
    # A float32 difference that float32 cannot hold: max_abs is the exact (float64) difference.
    x = np.array([1.0 + 2**-23, 3.0], dtype=np.float32)
    y = np.array([-(2**-30), 3.0], dtype=np.float32)
    result = mlx_backend.compare_arrays(mx.array(x), mx.array(y), Tolerance(), "x")
    assert result.max_abs == float(x[0]) - float(y[0]) != float(np.float32(x[0] - y[0]))


def test_float32_accumulation_sends_float64_to_the_host(monkeypatch):
    monkeypatch.setattr(mlx_backend, "ACCUMULATE", "float32")
    a = np.linspace(0, 1, 1000)
    e = a + 1e-12
    result = mlx_backend.compare_arrays(
        mx.array(a, dtype=mx.float64), e, Tolerance(atol=1e-13), "d"
    )
    assert HOST_NOTE in result.promotion and result.mismatches > 900 and not result.passed
    assert math.isclose(result.max_abs, 1e-12, rel_tol=1e-3)  # float64 precision, not float32's
    ints = mlx_backend.compare_arrays(
        mx.array([2**24 + 1], dtype=mx.int32), np.array([2**24], dtype=np.float32), Tolerance(), "m"
    )
    assert HOST_NOTE in ints.promotion and ints.mismatches == 1 and ints.max_abs == 1


def test_accumulation_mode_from_the_environment(monkeypatch, on_cpu):
    monkeypatch.setattr(mlx_backend, "ACCUMULATE", None)
    monkeypatch.setenv("PARITYGATE_MLX_ACCUMULATE", "float32")
    assert not mlx_backend.accumulates_in_float64()
    d = mlx_backend.compare_arrays(
        mx.array([1.0], dtype=mx.float64), mx.array([1.0], dtype=mx.float64), Tolerance(), "d"
    )
    assert HOST_NOTE in d.promotion
    monkeypatch.setenv("PARITYGATE_MLX_ACCUMULATE", "auto")
    assert mlx_backend.accumulates_in_float64(mx.cpu)
    d = mlx_backend.compare_arrays(
        mx.array([1.0], dtype=mx.float64), mx.array([1.0], dtype=mx.float64), Tolerance(), "d"
    )
    assert d.promotion is None and d.backend == "mlx"
    monkeypatch.setenv("PARITYGATE_MLX_ACCUMULATE", "float16")
    with pytest.raises(InputError, match="PARITYGATE_MLX_ACCUMULATE.*float16"):
        mlx_backend.compare_arrays(mx.zeros(3), mx.zeros(3), Tolerance(), "x")


def test_transposed_arrays(accumulate):
    name, a, e, tol = next(c for c in CASES if c[0] == "float32-planted")
    result = mlx_backend.compare_arrays(to_mlx(a).T, to_mlx(e).T, tol, name)
    check_mode(result, a.T, e.T, tol, accumulate, name)


def test_pass_and_fail_with_the_right_failures(accumulate):
    x = mx.random.normal((64, 64), key=mx.random.key(1))
    same = mlx_backend.compare_arrays(x, x, Tolerance(max_ulp=0, min_cosine=1 - 1e-12), "y")
    assert same.passed and same.mismatches == 0 and same.ulp_max == 0 and same.max_abs == 0
    y = np.array(x)
    y[3, 5] += 0.5
    y[60, 1] = np.nan
    result = mlx_backend.compare_arrays(mx.array(y), x, Tolerance(atol=1e-3, max_ulp=8), "y")
    assert not result.passed
    assert {f.metric for f in result.failures} == {"elements", "nan", "ulp"}
    assert result.mismatches == 2
    assert result.worst[0].index == (60, 1) and result.worst[0].excess == math.inf
    assert result.worst[1].index == (3, 5)
    u = mlx_backend.compare_arrays(
        mx.array([0, 7], dtype=mx.uint8),
        mx.array([255, 7], dtype=mx.uint8),
        Tolerance(atol=254),
        "u",
    )
    assert not u.passed and u.max_abs == 255 and u.mismatches == 1


def test_empty_and_bad_input(accumulate):
    empty = mx.zeros((0, 3))
    assert mlx_backend.compare_arrays(empty, empty, Tolerance(min_cosine=0.9), "e").passed
    with pytest.raises(InputError, match=r"shape mismatch.*\(2, 3\).*\(3, 2\)"):
        mlx_backend.compare_arrays(mx.zeros((2, 3)), mx.zeros((3, 2)), Tolerance(), "o")


def test_registry_and_describe():
    x = mx.zeros((2, 3), dtype=mx.bfloat16)
    assert get_backend(x) is mlx_backend
    shape, dtype, _device = mlx_backend.describe(x)
    assert (shape, dtype) == ((2, 3), "bfloat16")
    back = mlx_backend.to_numpy(x)
    assert back.dtype.name == "bfloat16" and back.shape == (2, 3)


@pytest.mark.parametrize("mode", ["auto", "float32"])
def test_device_memory_is_bounded_whatever_the_size(mode):
    """Two 64 MiB bfloat16 arrays (16 chunks of float32 accumulation): MLX's peak memory above the
    inputs stays within about IN_FLIGHT chunks' temporaries (measured: 254 MiB for float32, 26 MiB
    for float64), far below what 16 queued chunks would hold (~2 GiB) and below the 1 GiB
    required on a GPU for two 2 GiB arrays."""
    values = run_isolated(
        f"""
        import mlx.core as mx
        from paritygate.backends import mlx as mb
        from paritygate.results import Tolerance
        mb.ACCUMULATE = "{mode}"
        if mb.ACCUMULATE == "auto":
            mx.set_default_device(mx.cpu)  # float64 accumulation: MLX's CPU
        n = 1 << 25
        x = mx.random.normal((n,), key=mx.random.key(0)).astype(mx.bfloat16)
        y = (x + mx.random.normal((n,), key=mx.random.key(1)) * 0.01).astype(mx.bfloat16)
        mx.eval(x, y)
        tol = Tolerance(atol=1e-3, max_ulp=0, min_cosine=0.999)
        mb.compare_arrays(x[:1 << 22], y[:1 << 22], tol, "warm")  # compile the step
        mx.synchronize()
        mx.reset_peak_memory()
        active = mx.get_active_memory()
        r = mb.compare_arrays(y, x, tol, "big")
        print("mlx_extra_mib=", (mx.get_peak_memory() - active) / 2**20)
        print("mismatches=", r.mismatches)
        """
    )
    assert values["mismatches"] > 0.5 * (1 << 25)
    assert values["mlx_extra_mib"] <= (320 if mode == "float32" else 64), values


def test_cosine_of_x_with_itself_is_one_within_1e_12_on_cpu(on_cpu):
    x = mx.random.uniform(-1e3, 1e3, (1 << 24,), key=mx.random.key(0))
    mx.eval(x)
    result = mlx_backend.compare_arrays(x, x, Tolerance(min_cosine=1 - 1e-12), "x")
    assert abs(result.cosine - 1.0) <= 1e-12 and result.passed


def test_float32_accumulation_bound(on_cpu):
    """The GPU path (no float64) forced on the CPU: sums within 2e-7 of float64 (measured 6.4e-8),
    1 - cosine within 2e-6 relative (the stated float32 bound; the former dot-product cosine was
    7.6e-8 off, 5% of 1 - cos here); max_abs exact."""
    from paritygate.backends._device import STATS, plan
    from paritygate.metrics import one_minus_cosine

    n = 1 << 24
    x = mx.random.uniform(-1e3, 1e3, (n,), key=mx.random.key(3))
    y = x + mx.random.normal((n,), key=mx.random.key(4))
    mx.eval(x, y)
    p = plan((n,), (n,), "float32", "float32", "x")
    tol = Tolerance()
    host, _ = mlx_backend._reduce(
        mlx_backend._Side(x), mlx_backend._Side(y), p, tol, acc_float64=False
    )
    exact, _ = mlx_backend._reduce(
        mlx_backend._Side(x), mlx_backend._Side(y), p, tol, acc_float64=True
    )
    assert host[STATS.index("max_abs")] == exact[STATS.index("max_abs")]  # exact in both
    for key in ("sum_abs", "dot", "norm_actual_sq", "norm_expected_sq"):
        i = STATS.index(key)
        assert abs(host[i] - exact[i]) <= 2e-7 * abs(exact[i]), (key, host[i], exact[i])
    omc32, omc64 = (one_minus_cosine(*v[STATS.index("dot") : 6]) for v in (host, exact))
    assert 1e-6 < omc64 < 2e-6
    assert abs(omc32 - omc64) <= 2e-6 * omc64, (omc32, omc64)


def test_host_memory_two_1gib_arrays():
    """Two 1 GiB MLX arrays (failing everywhere): at most 64 MiB more host memory.

    MLX on the CPU shares host memory, so both MLX's own peak and the process's peak RSS count.
    """
    values = run_isolated(
        """
        import resource, mlx.core as mx
        mx.set_default_device(mx.cpu)  # host memory of MLX's CPU device
        from paritygate.backends import mlx as mb
        from paritygate.results import Tolerance
        n = (1 << 30) // 8  # 1 GiB of float64 each
        a = mx.random.uniform(-1, 1, (n,)).astype(mx.float64)
        b = a + 1e-3
        mx.eval(a, b)
        mb.compare_arrays(a[:1000], b[:1000], Tolerance(max_ulp=0), "warm")  # load kernels
        mx.reset_peak_memory()
        active = mx.get_active_memory()
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = mb.compare_arrays(a, b, Tolerance(max_ulp=0), "big")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print("extra_mib=", (peak - base) / 1024)
        print("mlx_extra_mib=", (mx.get_peak_memory() - active) / 2**20)
        print("mismatches=", r.mismatches)
        print("worst=", len(r.worst))
        """
    )
    assert values["mismatches"] == (1 << 30) // 8 and values["worst"] == 10
    assert values["extra_mib"] <= 64, values
    assert values["mlx_extra_mib"] <= 64, values


def test_compare_dispatches_arrays_to_this_backend():
    from paritygate import compare

    x = mx.linspace(-1, 1, 1000)
    tree_a = {"logits": x, "boxes": {"editor": x[:10] + 1}}
    tree_e = {"logits": np.array(x), "boxes": {"editor": x[:10]}}
    result = compare(tree_a, tree_e, atol=1e-6)
    assert not result.passed
    assert result["logits"].backend == "mlx" and result["logits"].passed
    assert result["boxes/editor"].backend == "mlx" and result["boxes/editor"].mismatches == 10


def test_flow_control_waits_on_older_chunks_and_changes_nothing(monkeypatch):
    """At most in_flight chunks are queued: the host blocks on the chunk in_flight - 1 back."""
    from paritygate.backends._device import plan

    evals = []
    real_eval = mx.eval
    monkeypatch.setattr(mx, "eval", lambda *xs: (evals.append(len(xs)), real_eval(*xs)))
    n = 50_000
    x = mx.random.normal((n,), key=mx.random.key(5))
    y = x + mx.random.normal((n,), key=mx.random.key(6)) * 1e-3
    real_eval(x, y)
    p = plan((n,), (n,), "float32", "float32", "x")
    tol = Tolerance(atol=1e-3)
    side = mlx_backend._Side
    results = {}
    for in_flight in (1, 3, 100):
        evals.clear()
        results[in_flight] = mlx_backend._reduce(
            side(x), side(y), p, tol, acc_float64=False, chunk=1000, in_flight=in_flight
        )
        # one wait per chunk past the window, one final evaluation
        assert len(evals) == max(0, 50 - in_flight + 1) + 1, (in_flight, len(evals))
    assert results[1] == results[3] == results[100]


def test_complex_arrays_fall_back_to_the_host_and_say_so():
    a = np.array([1 + 2j, 3 - 1j], dtype=np.complex64)
    e = a.copy()
    e[1] += 0.5
    result = mlx_backend.compare_arrays(mx.array(a), mx.array(e), Tolerance(atol=1e-3), "c")
    assert not result.passed and result.mismatches == 1 and "on the host" in result.promotion
    assert result.worst[0].index == (1, 0)


# The small model of tests/unit/test_paired.py: a stack of tanh layers.
PAIRED_RNG = np.random.default_rng(0)
WEIGHTS = PAIRED_RNG.standard_normal((4, 16, 16)).astype(np.float32) / 4
INPUT = PAIRED_RNG.standard_normal((8, 16)).astype(np.float32)

# ---------------------------------------------------------------------------------------------
# mlx arrays through the framework-free layers (comparison, outputs, paired, calibration,
# equivalence)


def test_mlx_lazy_results_are_evaluated_and_compared_exactly():
    import mlx.core as mx

    w = mx.array(WEIGHTS)
    x = mx.array(INPUT)

    def mlx_model(bias: float = 0.0):
        h = x
        for i in range(w.shape[0]):
            h = mx.tanh(h @ w[i])
        return {"latents": h + bias, "bf16": h.astype(mx.bfloat16)}

    result = paired(mlx_model, mlx_model)
    assert result and result.run_counts == {"baseline": 3, "candidate": 3}

    planted = paired(mlx_model, lambda: mlx_model(1e-3), orders=("forward",))
    assert not planted and planted.checks[1].passed
    (difference,) = planted.checks[0].differences
    assert difference.path == "latents" and difference.max_abs == pytest.approx(1e-3, rel=1e-2)

    def bf16_changed():
        out = mlx_model()
        out["bf16"] = mx.concatenate([out["bf16"][:1] * 2, out["bf16"][1:]])
        return out

    planted = paired(mlx_model, bf16_changed, orders=("forward",))
    (difference,) = planted.checks[0].differences
    assert difference.path == "bf16" and difference.first_index[0] == 0


def test_mlx_outputs_are_evaluated(tmp_path):
    import mlx.core as mx

    spec = make_project(tmp_path, TINY_SPEC)
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    assert check_equivalence("y-close", {"y": mx.tanh(mx.array(x))}, {"y": np.tanh(x)}, spec=spec)


def test_mlx_outputs_are_evaluated_and_measured():
    import mlx.core as mx

    def pair(case):
        x = mx.array(np.random.default_rng(100 + case).standard_normal((12, 24)), mx.float32)
        w = mx.array(np.random.default_rng(0).standard_normal((24, 24)) / 5, mx.float32)
        fused = mx.tanh(x @ w)
        split = mx.tanh(mx.concatenate([x[:, :12] @ w[:12] + x[:, 12:] @ w[12:]], axis=0))
        return {"y": fused}, {"y": split}

    result = calibrate(pair, 16)
    assert result.claim_metric.largest_noise > 0 and result.proposal == "tolerance"


# ---------------------------------------------------------------------------------------------
# The one-pass kernel (mx.fast.cuda_kernel on a CUDA GPU). MLX's kernel APIs do not run on its CPU
# device, so the same kernel body is compiled here by the system C++ compiler and run thread by
# thread; its columns go through the same reduction (reduce_columns) as on the GPU.


def _kernel_columns(a: np.ndarray, e: np.ndarray, tol, tmp_path) -> tuple:
    """The kernel body run on the CPU: (F, U, groups, span) as the GPU returns them."""
    import ctypes
    import subprocess

    from paritygate.backends import _mlx_kernel

    dt = _mlx_kernel.DTYPES[a.dtype.name]
    defines = [
        f"-DDT={dt}",
        f"-DHAS_MAX_ULP={int(tol.max_ulp is not None)}",
        f"-DEQUAL_NAN={int(tol.equal_nan)}",
    ]
    src = tmp_path / "kernel.cpp"
    lib = tmp_path / f"kernel_{dt}_{int(tol.max_ulp is not None)}_{int(tol.equal_nan)}.so"
    if not lib.exists():
        src.write_text(_mlx_kernel.cpu_source())
        cmd = ["g++", "-O1", "-ffp-contract=off", "-shared", "-fPIC", *defines, str(src)]
        subprocess.run([*cmd, "-o", str(lib)], check=True, capture_output=True, text=True)
    groups, span, threads = _mlx_kernel.layout(a.size)
    bits = np.uint32 if a.dtype.name == "float32" else np.uint16
    a_bits = np.ascontiguousarray(a).reshape(-1).view(bits)
    e_bits = np.ascontiguousarray(e).reshape(-1).view(bits)
    params = np.array([tol.atol, tol.rtol, tol.rel_eps], np.float32)
    max_ulp = min(tol.max_ulp, 2**32 - 1) if tol.max_ulp is not None else 0
    info = np.array([a.size, span, threads, max_ulp], np.uint32)
    f = np.zeros((len(_mlx_kernel.FCOLS), threads), np.float32)
    u = np.zeros((len(_mlx_kernel.UCOLS), threads), np.uint32)
    ptr = ctypes.c_void_p
    ctypes.CDLL(str(lib)).pg_run(
        *(ptr(x.ctypes.data) for x in (a_bits, e_bits, params, info, f, u))
    )
    return f, u, groups, span


def _kernel_compare(a: np.ndarray, e: np.ndarray, tol, tmp_path):
    from paritygate.backends._device import finish_plan, plan, raw_stats, split_stats

    f, u, groups, span = _kernel_columns(a, e, tol, tmp_path)
    p = plan(a.shape, e.shape, a.dtype.name, e.dtype.name, "out")
    with mx.stream(mx.cpu):
        vec, kk = mlx_backend.reduce_columns(
            mx.array(f),
            mx.array(u),
            groups,
            span,
            to_mlx(a).reshape(-1),
            to_mlx(e).reshape(-1),
            p,
            tol,
        )
    stats = raw_stats(p, *split_stats(vec, kk), tol)
    return finish_plan(stats, p, tol, "out", "mlx")


KERNEL_CASES = [
    c
    for c in CASES
    if c[1].dtype == c[2].dtype and c[1].dtype.name in ("float32", "float16", "bfloat16")
]


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_one_pass_kernel_agrees_with_the_host(case, tmp_path):
    """The kernel body, thread by thread on the CPU: the float32 arithmetic's exact fields (counts,
    NaN/Inf accounting, ULPs, max_abs, worst elements) and bounded ones, as the chunked path."""
    name, a, e, tol = case
    check_mode(_kernel_compare(a, e, tol, tmp_path), a, e, tol, "float32")


def test_one_pass_kernel_catches_a_planted_bug(tmp_path, monkeypatch):
    """The same check fails when the kernel drops the mismatch count (its column zeroed)."""
    from paritygate.backends import _mlx_kernel

    name, a, e, tol = next(c for c in KERNEL_CASES if c[0] == "float32-planted")
    monkeypatch.setattr(_mlx_kernel, "BODY", _mlx_kernel.BODY.replace("n_mis += 1u;", ""))
    with pytest.raises(AssertionError, match="passed|mismatches"):
        check_mode(_kernel_compare(a, e, tol, tmp_path), a, e, tol, "float32")


def test_one_pass_kernel_worst_k_through_groups(tmp_path):
    """A million elements (512 groups, 2k of them revisited): the planted worst elements are found
    whatever group holds them, with bfloat16 noise making many ties below them."""
    import ml_dtypes

    rng = np.random.default_rng(5)
    e = rng.standard_normal(1 << 20).astype(ml_dtypes.bfloat16)
    a = (e.astype(np.float32) + rng.standard_normal(1 << 20).astype(np.float32) * 1e-2).astype(
        ml_dtypes.bfloat16
    )
    planted = rng.choice(1 << 20, 12, replace=False)
    a[planted] = (e[planted].astype(np.float32) + np.arange(1, 13, dtype=np.float32)).astype(
        ml_dtypes.bfloat16
    )
    tol = Tolerance(atol=1e-2, max_ulp=2)
    result = _kernel_compare(a, e, tol, tmp_path)
    check_mode(result, a, e, tol, "float32")
    assert {w.index[0] for w in result.worst} == set(planted[2:].tolist())


def _nvidia_gpu() -> bool:
    from paritygate.provenance import machine_facts

    return any("NVIDIA" in model for model in machine_facts()["gpu"])


@pytest.mark.gpu
@pytest.mark.skipif(not _nvidia_gpu(), reason="needs an NVIDIA GPU")
def test_one_pass_kernel_on_cuda_matches_the_host(monkeypatch):
    """On a CUDA GPU the kernel is taken (for same-dtype float pairs) and gives the host engine's
    exact fields, as the chunked path does."""
    from paritygate.backends import _mlx_kernel

    cuda = getattr(mx, "cuda", None)
    assert cuda is not None and cuda.is_available(), (
        "this machine has an NVIDIA GPU but MLX has no CUDA backend: install mlx-cuda-13 "
        "(the mlx[cpu] wheel cannot run this test)"
    )

    launches = []
    real = _mlx_kernel.run
    monkeypatch.setattr(_mlx_kernel, "run", lambda *a: (launches.append(1), real(*a))[1])
    for name, a, e, tol in KERNEL_CASES:
        result = mlx_backend.compare_arrays(to_mlx(a), to_mlx(e), tol, name)
        check_mode(result, a, e, tol, "float32")
    assert len(launches) == len(KERNEL_CASES)
    # 4 Mi bfloat16 elements (hundreds of groups), against the host engine: no chunked path here,
    # whose compiled step takes MLX a minute to build on a fresh CUDA machine.
    rng = np.random.default_rng(9)
    import ml_dtypes

    e = rng.standard_normal(1 << 22).astype(ml_dtypes.bfloat16)
    a = (e.astype(np.float32) + rng.standard_normal(1 << 22).astype(np.float32) * 1e-2).astype(
        ml_dtypes.bfloat16
    )
    tol = Tolerance(atol=1e-3, max_ulp=1, min_cosine=0.999)
    check_mode(mlx_backend.compare_arrays(to_mlx(a), to_mlx(e), tol, "out"), a, e, tol, "float32")
    assert len(launches) == len(KERNEL_CASES) + 1

"""The MLX backend: agreement with the host engine, failures, and no host copies."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest

from backend_reference import cases, check, reference, run_isolated
from paritygate.backends import get_backend
from paritygate.backends import mlx as mlx_backend
from paritygate.errors import InputError
from paritygate.results import Tolerance

CASES = cases()


def to_mlx(x: np.ndarray) -> mx.array:
    if x.dtype.name == "bfloat16":
        return mx.array(x.view(np.uint16)).view(mx.bfloat16)
    return mx.array(x, dtype=mlx_backend._mx_dtype(x.dtype.name))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_agrees_with_reference(case):
    name, a, e, tol = case
    result = mlx_backend.compare_arrays(to_mlx(a), to_mlx(e), tol, name)
    check(result, reference(a, e, tol))
    assert result.backend == "mlx"
    assert result.dtype_actual == a.dtype.name and result.dtype_expected == e.dtype.name


@pytest.mark.parametrize("case", CASES[:8:3] + CASES[-6:], ids=lambda c: c[0])
def test_numpy_on_the_other_side(case):
    name, a, e, tol = case
    check(mlx_backend.compare_arrays(to_mlx(a), e, tol, name), reference(a, e, tol))
    check(mlx_backend.compare_arrays(a, to_mlx(e), tol, name), reference(a, e, tol))


def test_many_chunks_worst_across_chunks(monkeypatch):
    monkeypatch.setattr(mlx_backend, "CHUNK", 1000)  # 38 chunks, a short last one
    for name, a, e, tol in CASES:
        if name in ("float32-planted", "nonfinite", "uint8", "bool"):
            check(mlx_backend.compare_arrays(to_mlx(a), to_mlx(e), tol, name), reference(a, e, tol))


def test_transposed_arrays():
    name, a, e, tol = next(c for c in CASES if c[0] == "float32-planted")
    check(mlx_backend.compare_arrays(to_mlx(a).T, to_mlx(e).T, tol, name), reference(a.T, e.T, tol))


def test_pass_and_fail_with_the_right_failures():
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
        mx.array([0, 7], dtype=mx.uint8), mx.array([255, 7], dtype=mx.uint8), Tolerance(atol=254), "u"
    )
    assert not u.passed and u.max_abs == 255 and u.mismatches == 1


def test_empty_and_bad_input():
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


def test_one_evaluation(monkeypatch):
    """Two MLX arrays: one blocking mx.eval for the whole comparison, many chunks."""
    evals = []
    real_eval = mx.eval
    monkeypatch.setattr(mx, "eval", lambda *xs: (evals.append(len(xs)), real_eval(*xs)))
    monkeypatch.setattr(mlx_backend, "CHUNK", 4096)
    a = mx.random.normal((100_000,), key=mx.random.key(2))
    b = a + 1
    mx.async_eval(a, b)  # inputs computed beforehand, outside the count
    real_eval(a, b)
    result = mlx_backend.compare_arrays(a, b, Tolerance(), "x")
    assert not result.passed and result.mismatches == 100_000
    assert len(evals) == 1


def test_cosine_of_x_with_itself_is_one_within_1e_12_on_cpu():
    x = mx.random.uniform(-1e3, 1e3, (1 << 24,), key=mx.random.key(0))
    mx.eval(x)
    result = mlx_backend.compare_arrays(x, x, Tolerance(min_cosine=1 - 1e-12), "x")
    assert abs(result.cosine - 1.0) <= 1e-12 and result.passed


def test_float32_accumulation_bound():
    """The GPU path (no float64) forced on the CPU: sums within 1e-7 of float64, cosine within 1e-8."""
    from paritygate.backends._device import STATS, plan

    n = 1 << 24
    x = mx.random.uniform(-1e3, 1e3, (n,), key=mx.random.key(3))
    y = x + mx.random.normal((n,), key=mx.random.key(4))
    mx.eval(x, y)
    p = plan((n,), (n,), "float32", "float32", "x")
    tol = Tolerance()
    host, _ = mlx_backend._reduce(mlx_backend._Side(x), mlx_backend._Side(y), p, tol, acc_float64=False)
    exact, _ = mlx_backend._reduce(mlx_backend._Side(x), mlx_backend._Side(y), p, tol, acc_float64=True)
    for key in ("sum_abs", "dot", "norm_actual_sq", "norm_expected_sq"):
        i = STATS.index(key)
        assert abs(host[i] - exact[i]) <= 1e-7 * abs(exact[i]), (key, host[i], exact[i])
    i = STATS.index("max_abs")
    assert abs(host[i] - exact[i]) <= 2**-23 * exact[i]
    cos32 = host[1] / math.sqrt(host[2] * host[3])
    cos64 = exact[1] / math.sqrt(exact[2] * exact[3])
    assert abs(cos32 - cos64) <= 1e-8


def test_host_memory_two_1gib_arrays():
    """Two 1 GiB MLX arrays (failing everywhere): at most 64 MiB more host memory.

    MLX on the CPU shares host memory, so both MLX's own peak and the process's peak RSS count.
    """
    values = run_isolated(
        """
        import resource, mlx.core as mx
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


def test_gpu_flow_control_window_gives_the_same_result(monkeypatch):
    """The GPU's flow-control window (forced here on the CPU) waits on old chunks, nothing else."""
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
    plain, kk = mlx_backend._reduce(side(x), side(y), p, tol, acc_float64=False, chunk=1000)
    evals.clear()
    windowed, kk2 = mlx_backend._reduce(side(x), side(y), p, tol, acc_float64=False, chunk=1000, window=3)
    assert len(evals) == 50 - 3 + 1  # one wait per chunk past the window, one final evaluation
    assert kk == kk2 and np.array_equal(plain, windowed)


def test_complex_arrays_fall_back_to_the_host_and_say_so():
    a = np.array([1 + 2j, 3 - 1j], dtype=np.complex64)
    e = a.copy()
    e[1] += 0.5
    result = mlx_backend.compare_arrays(mx.array(a), mx.array(e), Tolerance(atol=1e-3), "c")
    assert not result.passed and result.mismatches == 1 and "on the host" in result.promotion
    assert result.worst[0].index == (1, 0)

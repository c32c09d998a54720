"""1 - cosine near cos = 1, on every backend and device, against exact rational arithmetic.

Each backend states its bound (``BOUNDS``, repeated in the backends' docstrings): the absolute
error of ``one_minus_cosine`` is at most ``B * |a - e|^2 / (2 |a| |e|)``. Where the norms of the
two sides agree, that scale is 1 - cos itself and the bound is a relative one; where a difference
of norms dominates the difference (``scale-mismatch``) it is relative to the scale.

The reference is exact: the inputs are dyadic rationals, so ``|a|^2 |e|^2 - (a.e)^2`` is computed
in integers and only the final division rounds. Each test also runs the former formula,
``1 - dot / (|a| |e|)``, on the same backend's sums, and requires it to fail the same bound: the
tests can tell the two apart. A test runs on whatever device the framework uses by default (the
GPU machine runs this file through ``make test-gpu``).
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from functools import cache

import jax
import jax.numpy as jnp
import mlx.core as mx
import numpy as np
import onnxruntime
import pytest
import torch

import paritygate.metrics as metrics
from paritygate.backends import host
from paritygate.backends import jax as jax_backend
from paritygate.backends import mlx as mlx_backend
from paritygate.backends import onnxruntime as ort_backend
from paritygate.backends import torch as torch_backend
from paritygate.results import Tolerance

# Bounds on |computed - exact| / (|a - e|^2 / (2 |a| |e|)), per arithmetic:
B_HOST = 1e-14  # numpy / numba / ONNX Runtime on the host: float64, pairwise sums
B_FLOAT64 = 1e-12  # torch (CPU, CUDA chunked), JAX with x64, MLX on the CPU
B_FLOAT32 = 2e-6  # float32 arithmetic: the Triton kernel, JAX without x64 or Pallas, MLX on a GPU

N = 40_009  # odd: partial blocks and chunks


def exact_one_minus_cosine(a: np.ndarray, e: np.ndarray) -> float:
    """1 - cos(a, e) of the arrays' exact values: integer sums, one rounding at the end."""
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    ma, xa = np.frexp(a64)
    me, xe = np.frexp(e64)
    low = int(min(xa.min(), xe.min())) - 53
    ints_a = [int(m) << (int(x) - low) for m, x in zip((ma * 2**53).astype(np.int64), xa - 53)]
    ints_e = [int(m) << (int(x) - low) for m, x in zip((me * 2**53).astype(np.int64), xe - 53)]
    dot = sum(x * y for x, y in zip(ints_a, ints_e))
    na = sum(x * x for x in ints_a)
    ne = sum(y * y for y in ints_e)
    # 1 - cos = (na ne - dot^2) / (sqrt(na ne) (sqrt(na ne) + dot)), the numerator exact
    with localcontext() as ctx:
        ctx.prec = 80
        root = (Decimal(na) * Decimal(ne)).sqrt()
        return float(Decimal(na * ne - dot * dot) / (root * (root + Decimal(dot))))


def scale_of(a: np.ndarray, e: np.ndarray) -> float:
    """|a - e|^2 / (2 |a| |e|): what the bound is relative to (1 - cos where the norms agree)."""
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    d = a64 - e64
    return float(np.dot(d, d) / (2 * np.linalg.norm(a64) * np.linalg.norm(e64)))


@cache
def adversarial() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pairs with cos within 1e-6 .. 1e-17 of 1 (float32 unless named float64)."""
    rng = np.random.default_rng(14)
    e = (rng.standard_normal(N) * 10).astype(np.float32)
    noise = rng.standard_normal(N)
    cases = {
        "noise-1e-3": ((e + 1e-2 * noise).astype(np.float32), e),
        "noise-1e-6": ((e + 1e-5 * noise).astype(np.float32), e),
    }
    flips = e.copy()
    picked = rng.choice(N, size=37, replace=False)
    flips[picked] = np.nextafter(flips[picked], np.float32(np.inf))
    cases["ulp-flips"] = (flips, e)
    offset = (1000 + rng.standard_normal(N)).astype(np.float32)
    cases["offset-1000"] = ((offset + 1e-4 * noise).astype(np.float32), offset)
    cases["scale-mismatch"] = (((1 + 1e-3) * e + 1e-4 * noise).astype(np.float32), e)
    e64 = rng.standard_normal(N) * 10
    cases["float64-noise-1e-9"] = (e64 + 1e-8 * noise, e64)
    return cases


@cache
def reference(case: str) -> tuple[float, float]:
    a, e = adversarial()[case]
    return exact_one_minus_cosine(a, e), scale_of(a, e)


def _torch(x: np.ndarray, device: str) -> torch.Tensor:
    return torch.from_numpy(x).to(device)


def _ort(x: np.ndarray):
    return onnxruntime.OrtValue.ortvalue_from_numpy(x)


def _runners() -> list[tuple[str, float, object]]:
    """(name, bound, compare(a, e, tol)) for every backend and device present."""
    out = [
        ("numpy", B_HOST, lambda a, e, t: host.compare_arrays(a, e, t, "x", kernel="numpy")),
        ("numba", B_HOST, lambda a, e, t: host.compare_arrays(a, e, t, "x", kernel="numba")),
        (
            "onnxruntime-cpu",
            B_HOST,
            lambda a, e, t: ort_backend.compare_arrays(_ort(a), _ort(e), t, "x"),
        ),
        (
            "torch-cpu",
            B_FLOAT64,
            lambda a, e, t: torch_backend.compare_arrays(
                _torch(a, "cpu"), _torch(e, "cpu"), t, "x"
            ),
        ),
    ]
    if torch.cuda.is_available():
        out.append(("torch-cuda-chunked", B_FLOAT64, _torch_cuda("chunked")))
        out.append(("torch-cuda-triton", B_FLOAT32, _torch_cuda("triton")))
    platform = jax.default_backend()
    out.append((f"jax-{platform}-x64", B_FLOAT64, _jax(True)))
    out.append((f"jax-{platform}-float32", B_FLOAT32, _jax(False)))
    # the Pallas kernel of JAX on a GPU (compiled there, in Pallas's interpreter elsewhere)
    out.append((f"jax-{platform}-pallas", B_FLOAT32, _jax_pallas(platform == "gpu")))
    device = "cpu" if mx.default_device() == mx.cpu else "gpu"
    default_bound = B_FLOAT64 if mlx_backend.accumulates_in_float64() else B_FLOAT32
    out.append((f"mlx-{device}", default_bound, _mlx(None)))
    out.append((f"mlx-{device}-float32", B_FLOAT32, _mlx("float32")))
    return out


def _torch_cuda(kernel: str):
    def run(a, e, t):
        import os

        old = os.environ.get(torch_backend.KERNEL_ENV)
        os.environ[torch_backend.KERNEL_ENV] = kernel
        try:
            return torch_backend.compare_arrays(_torch(a, "cuda"), _torch(e, "cuda"), t, "x")
        finally:
            if old is None:
                del os.environ[torch_backend.KERNEL_ENV]
            else:
                os.environ[torch_backend.KERNEL_ENV] = old

    return run


def _jax(x64: bool):
    def run(a, e, t):
        with jax.enable_x64(x64):
            return jax_backend.compare_arrays(jnp.asarray(a), jnp.asarray(e), t, "x")

    return run


def _jax_pallas(gpu: bool):
    def run(a, e, t):
        import os

        old = os.environ.get(jax_backend.KERNEL_ENV)
        os.environ[jax_backend.KERNEL_ENV] = "pallas" if gpu else "pallas-interpret"
        try:
            return jax_backend.compare_arrays(jnp.asarray(a), jnp.asarray(e), t, "x")
        finally:
            if old is None:
                del os.environ[jax_backend.KERNEL_ENV]
            else:
                os.environ[jax_backend.KERNEL_ENV] = old

    return run


def _mlx(accumulate: str | None):
    def run(a, e, t):
        old = mlx_backend.ACCUMULATE
        mlx_backend.ACCUMULATE = accumulate
        try:
            # explicit dtype: mx.array would turn float64 into float32
            dtype = mx.float64 if a.dtype == np.float64 else mx.float32
            return mlx_backend.compare_arrays(mx.array(a, dtype), mx.array(e, dtype), t, "x")
        finally:
            mlx_backend.ACCUMULATE = old

    return run


RUNNERS = _runners()
CASES = list(adversarial())


def _old_formula(dot, norm_actual_sq, norm_expected_sq, diff_norm_sq, gap):
    """The former 1 - dot / (|a| |e|), from the same sums."""
    cosine = dot / (math.sqrt(norm_actual_sq) * math.sqrt(norm_expected_sq))
    return 1.0 - max(-1.0, min(1.0, cosine))


def _error(result, case: str) -> tuple[float, float]:
    exact, scale = reference(case)
    return abs(result.one_minus_cosine - exact), scale


def _pairs() -> list[tuple[str, tuple]]:
    """(runner, case) pairs: float64 data only where the arithmetic is float64 (a float32
    backend sends it to the host, and the Triton kernel takes 16- and 32-bit floats only)."""
    out = []
    for runner in RUNNERS:
        for case in CASES:
            float64_data = case.startswith("float64")
            if float64_data and (runner[1] == B_FLOAT32 or runner[0] == "torch-cuda-triton"):
                continue
            out.append((case, runner))
    return out


@pytest.mark.parametrize(("case", "runner"), _pairs(), ids=[f"{r[0]}-{c}" for c, r in _pairs()])
def test_one_minus_cosine_within_the_stated_bound(runner, case):
    name, bound, run = runner
    a, e = adversarial()[case]
    result = run(a, e, Tolerance())
    assert result.backend.split(" ")[0] == name.split("-")[0]  # computed where it says
    error, scale = _error(result, case)
    assert error <= bound * scale, (name, case, result.one_minus_cosine, reference(case), error)
    # cosine is 1 - one_minus_cosine rounded once
    assert result.cosine == 1.0 - result.one_minus_cosine


@pytest.mark.parametrize("runner", RUNNERS, ids=[r[0] for r in RUNNERS])
def test_the_former_formula_fails_the_same_bound(runner, monkeypatch):
    """The other direction: 1 - dot/(|a||e|) from the same backend's sums misses the bound."""
    name, bound, run = runner
    monkeypatch.setattr(metrics, "one_minus_cosine", _old_formula)
    for case in ("ulp-flips", "noise-1e-6", "offset-1000"):
        a, e = adversarial()[case]
        error, scale = _error(run(a, e, Tolerance()), case)
        assert error > bound * scale, (name, case, error, scale)


@pytest.mark.parametrize("runner", RUNNERS, ids=[r[0] for r in RUNNERS])
def test_a_calibrated_cosine_claim_is_judged_in_one_minus_x(runner):
    """cosine >= 1 - b with b 1% above and below the exact 1 - cos (~5e-10): pass, then fail."""
    name, bound, run = runner
    rng = np.random.default_rng(3)
    e = (rng.standard_normal(N) * 10).astype(np.float32)
    a = (e + 3e-4 * rng.standard_normal(N)).astype(np.float32)
    exact = exact_one_minus_cosine(a, e)
    assert 1e-10 < exact < 1e-9
    passing = run(a, e, Tolerance(atol=1.0, min_cosine=1 - 1.01 * exact))
    failing = run(a, e, Tolerance(atol=1.0, min_cosine=1 - 0.99 * exact))
    assert passing.passed, (name, passing.one_minus_cosine, exact)
    assert not failing.passed and [f.metric for f in failing.failures] == ["cosine"], name
    assert failing.failures[0].excess == pytest.approx(0.01 * exact, rel=0.01)


def test_the_exact_reference_is_exact():
    """The reference against a hand-computed value: a = (1, 1), e = (1, 1 + 2^-20)."""
    a = np.array([1.0, 1.0])
    e = np.array([1.0, 1.0 + 2**-20])
    # 1 - cos = 1 - (2 + h) / sqrt(2 (2 + 2h + h^2)) with h = 2^-20: ~ h^2 / 8
    h = Decimal(2) ** -20
    with localcontext() as ctx:
        ctx.prec = 80
        want = 1 - (2 + h) / (2 * (2 + 2 * h + h * h)).sqrt()
    assert exact_one_minus_cosine(a, e) == float(want)
    assert math.isclose(float(want), 2.0**-40 / 8, rel_tol=1e-5)

"""Shared cases for the device backends' tests, with the host engine as their reference.

The reference is the host engine (the numpy kernel of paritygate.backends.host) on the same
data as numpy arrays, so that every backend (torch, MLX, JAX, onnxruntime) computes the same
numbers as the host, field by field.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np

from paritygate.results import Tolerance


def np_dtype(name: str):
    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


def reference(actual: np.ndarray, expected: np.ndarray, tol: Tolerance, path: str = "out"):
    """The host engine's comparison of the same data as numpy arrays (the numpy kernel)."""
    from paritygate.backends import host

    return host.compare_arrays(actual, expected, tol, path, kernel="numpy")


FLOAT_FIELDS = ("max_abs", "mean_abs", "max_rel", "max_rel_symmetric", "atol_needed", "rtol_needed")
EXACT_FIELDS = (
    "passed",
    "shape",
    "size",
    "dtype_actual",
    "dtype_expected",
    "compared_as",
    "promotion",
    "ulp_max",
    "ulp_dtype",
    "ulp_nonzero",
    "ulp_over",
    "mismatches",
    "nonfinite",
    "cosine_undefined",
)


def check(result, ref, *, rel: float = 1e-9, cosine_abs: float = 1e-12) -> None:
    """Assert a backend's OutputComparison agrees with the host engine's, field by field."""

    def close(x, y, what, **kw):
        if y is None or x is None:
            assert x is y, f"{what}: {x} vs host {y}"
        elif math.isinf(y) or math.isnan(y):
            assert x == y or (math.isnan(x) and math.isnan(y)), f"{what}: {x} vs host {y}"
        else:
            assert math.isclose(x, y, **kw), f"{what}: {x} vs host {y}"

    for key in EXACT_FIELDS:
        assert getattr(result, key) == getattr(ref, key), (
            f"{key}: {getattr(result, key)} vs host {getattr(ref, key)}"
        )
    for key in FLOAT_FIELDS:
        close(getattr(result, key), getattr(ref, key), key, rel_tol=rel, abs_tol=1e-300)
    close(result.cosine, ref.cosine, "cosine", rel_tol=0, abs_tol=cosine_abs)
    assert [f.metric for f in result.failures] == [f.metric for f in ref.failures]
    # Worst elements: the same excesses in the same order (indices may differ only among ties).
    assert len(result.worst) == len(ref.worst), (result.worst, ref.worst)
    excesses = [w.excess for w in ref.worst]
    for got, want in zip(result.worst, ref.worst):
        close(got.excess, want.excess, "worst excess", rel_tol=rel, abs_tol=1e-300)
        if excesses.count(want.excess) == 1:
            assert got.index == want.index, (got, want)
            assert got.actual == want.actual or (math.isnan(got.actual) and math.isnan(want.actual))
            assert type(got.actual) is type(want.actual) and type(got.expected) is type(
                want.expected
            )


def cases(seed: int = 0) -> list[tuple[str, np.ndarray, np.ndarray, Tolerance]]:
    """Random data with planted differences, non-finite values, every dtype family."""
    rng = np.random.default_rng(seed)
    shape = (37, 1029)  # odd sizes: partial chunks and blocks
    base = rng.standard_normal(shape).astype(np.float32) * 10
    out = []

    def planted(x: np.ndarray) -> np.ndarray:
        y = x.copy()
        y.flat[[5, 700, 30000]] += np.array([3.0, -0.5, 0.25], dtype=y.dtype)
        return y

    for dt in ("float32", "float16", "bfloat16", "float64"):
        a = base.astype(np_dtype(dt))
        tol = Tolerance(atol=1e-2, rtol=1e-3, max_ulp=4, min_cosine=0.999)
        out.append((f"{dt}-equal", a, a.copy(), tol))
        out.append((f"{dt}-planted", planted(a), a, tol))
    # float16 port against a float32 reference: promotion, ULPs counted in float16
    noisy = (base + rng.standard_normal(shape).astype(np.float32) * 1e-3).astype(np.float16)
    out.append(("float16-vs-float32", noisy, base, Tolerance(atol=1e-2, rtol=1e-2)))
    # non-finite values: NaN on both sides, NaN on one side, matching and mismatching infinities
    a = base.copy()
    e = base.copy()
    a.flat[[1, 2, 3, 4, 9]] = [np.nan, np.nan, np.inf, -np.inf, np.inf]
    e.flat[[1, 3, 4, 10, 9]] = [np.nan, np.inf, np.inf, np.nan, 1.0]
    out.append(("nonfinite", a, e, Tolerance(atol=1e-6)))
    out.append(("nonfinite-equal-nan-off", a, e, Tolerance(atol=1e-6, equal_nan=False)))
    only_nan = base.copy()
    only_nan.flat[[11, 12]] = np.nan
    out.append(("nan-both-only", only_nan, only_nan.copy(), Tolerance()))
    # integers without wrap-around, bool masks exactly
    u = rng.integers(0, 256, size=shape, dtype=np.uint8)
    u2 = u.copy()
    u2.flat[[0, 50]] = 255 - u2.flat[[0, 50]]
    u2.flat[0], u.flat[0] = 255, 0
    out.append(("uint8", u, u2, Tolerance()))
    i = rng.integers(-(2**31), 2**31 - 1, size=shape, dtype=np.int64)
    i2 = i.copy()
    i2.flat[7] += 1
    out.append(("int64-off-by-one", i, i2, Tolerance()))
    m = rng.random(shape) > 0.5
    m2 = m.copy()
    m2.flat[[3, 4000]] = ~m2.flat[[3, 4000]]
    out.append(("bool", m, m2, Tolerance()))
    out.append(("bool-equal", m, m.copy(), Tolerance()))
    out.append(
        (
            "int32-vs-float32",
            rng.integers(-50, 50, size=shape).astype(np.int32),
            base,
            Tolerance(atol=100),
        )
    )
    return out


def run_isolated(code: str, timeout: float = 600) -> dict[str, float]:
    """Run code in a fresh interpreter (a clean peak-memory record); parse its `key=value` lines."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    values = {}
    for line in proc.stdout.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = float(value)
    return values

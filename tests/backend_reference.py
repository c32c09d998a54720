"""Shared cases and a plain-numpy reference for the device backends' tests.

The reference spells out the metric definitions of docs/architecture.md with whole-array numpy in
float64, as directly as possible, so that every backend (torch, MLX, JAX, onnxruntime) is checked
against the same independent formulas on the same data.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np

from paritygate.results import Tolerance

ULP_BITS = {"bfloat16": np.int16, "float16": np.int16, "float32": np.int32, "float64": np.int64}
FLOAT_BITS = {"bfloat16": 7, "float16": 10, "float32": 23, "float64": 52}


def np_dtype(name: str):
    return ml_dtypes.bfloat16 if name == "bfloat16" else np.dtype(name)


def ordered(x: np.ndarray, ulp_name: str) -> np.ndarray:
    bits = x.astype(np_dtype(ulp_name)).view(ULP_BITS[ulp_name]).astype(np.int64)
    nbits = np.dtype(ULP_BITS[ulp_name]).itemsize * 8
    magnitude = bits & ((1 << (nbits - 1)) - 1)
    return np.where(bits < 0, -magnitude, magnitude)


def reference(actual: np.ndarray, expected: np.ndarray, tol: Tolerance) -> dict:
    """The metrics of the definitions, computed the obvious way on the host in float64."""
    da, de = actual.dtype.name, expected.dtype.name
    is_float = all(n in FLOAT_BITS for n in (da, de))
    a = actual.astype(np.float64).ravel()
    e = expected.astype(np.float64).ravel()
    nan_a, nan_e, inf_a, inf_e = np.isnan(a), np.isnan(e), np.isinf(a), np.isinf(e)
    nonfinite = nan_a | nan_e | inf_a | inf_e
    fin = ~nonfinite
    af, ef = a[fin], e[fin]
    diff = np.abs(af - ef)
    abs_e = np.abs(ef)
    nan_both = int(np.sum(nan_a & nan_e))
    nan_one = int(np.sum(nan_a ^ nan_e))
    inf_mismatch = int(np.sum((inf_a | inf_e) & ~(nan_a | nan_e) & (a != e)))
    nf_mismatch = nan_one + inf_mismatch + (0 if tol.equal_nan else nan_both)
    finite_mismatch = int(np.sum(diff > tol.atol + tol.rtol * abs_e))
    out = dict(
        max_abs=float(diff.max()) if diff.size else 0.0,
        mean_abs=float(diff.sum() / diff.size) if diff.size else 0.0,
        max_rel=float((diff / (abs_e + tol.rel_eps)).max()) if diff.size else 0.0,
        max_rel_symmetric=float((diff / (np.maximum(np.abs(af), abs_e) + tol.rel_eps)).max())
        if diff.size
        else 0.0,
        mismatches=finite_mismatch + nf_mismatch,
        nan_one_side=nan_one,
        nan_both=nan_both,
        inf_mismatch=inf_mismatch,
        actual_nan=int(nan_a.sum()),
        expected_nan=int(nan_e.sum()),
        actual_inf=int(inf_a.sum()),
        expected_inf=int(inf_e.sum()),
    )
    na, ne = float(af @ af), float(ef @ ef)
    out["cosine"] = None if na == 0 or ne == 0 else max(-1.0, min(1.0, float(af @ ef) / math.sqrt(na * ne)))
    if nf_mismatch:
        out["atol_needed"] = out["rtol_needed"] = math.inf
    else:
        out["atol_needed"] = float(np.maximum(diff - tol.rtol * abs_e, 0).max()) if diff.size else 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(abs_e > 0, (diff - tol.atol) / abs_e, np.where(diff > tol.atol, np.inf, 0.0))
        out["rtol_needed"] = float(np.maximum(r, 0).max()) if diff.size else 0.0
    if is_float:
        ulp_name = da if FLOAT_BITS[da] <= FLOAT_BITS[de] else de
        ulp = np.abs(ordered(actual.ravel(), ulp_name) - ordered(expected.ravel(), ulp_name))[fin]
        out["ulp_max"] = int(ulp.max()) if ulp.size else 0
        out["ulp_nonzero"] = int(np.sum(ulp > 0))
        out["ulp_dtype"] = ulp_name
    else:
        out["ulp_max"] = out["ulp_nonzero"] = out["ulp_dtype"] = None
    # worst: the largest excess; non-finite mismatches first
    excess = np.full(a.size, -np.inf)
    excess[fin] = diff - (tol.atol + tol.rtol * abs_e)
    mism_nf = (nan_a ^ nan_e) | ((inf_a | inf_e) & ~(nan_a | nan_e) & (a != e))
    if not tol.equal_nan:
        mism_nf |= nan_a & nan_e
    excess[mism_nf] = np.inf
    order = np.lexsort((np.arange(a.size), -excess))
    order = [i for i in order if excess[i] > -np.inf][: tol.worst_k]
    out["worst_index"] = [np.unravel_index(i, actual.shape) for i in order]
    out["worst_excess"] = [float(excess[i]) for i in order]
    return out


def check(result, ref: dict, *, rel: float = 1e-9) -> None:
    """Assert a backend's OutputComparison agrees with the reference."""

    def close(x, y, what):
        if y is None or x is None:
            assert x is y, f"{what}: {x} vs reference {y}"
        elif math.isinf(y) or math.isnan(y):
            assert x == y or (math.isnan(x) and math.isnan(y)), f"{what}: {x} vs reference {y}"
        else:
            assert math.isclose(x, y, rel_tol=rel, abs_tol=1e-300), f"{what}: {x} vs reference {y}"

    for key in ("max_abs", "mean_abs", "max_rel", "max_rel_symmetric", "cosine", "atol_needed", "rtol_needed"):
        close(getattr(result, key), ref[key], key)
    for key in ("mismatches", "ulp_max", "ulp_nonzero", "ulp_dtype"):
        assert getattr(result, key) == ref[key], f"{key}: {getattr(result, key)} vs {ref[key]}"
    nf = result.nonfinite
    for key in ("nan_one_side", "nan_both", "inf_mismatch", "actual_nan", "expected_nan", "actual_inf", "expected_inf"):
        assert getattr(nf, key) == ref[key], f"{key}: {getattr(nf, key)} vs {ref[key]}"
    # Worst elements: the same excesses in the same order (indices may differ only among ties).
    got = [w.excess for w in result.worst]
    assert len(got) == len(ref["worst_excess"])
    for g, r in zip(got, ref["worst_excess"]):
        close(g, r, "worst excess")
    distinct = [i for i, x in enumerate(ref["worst_excess"]) if ref["worst_excess"].count(x) == 1]
    for i in distinct:
        assert result.worst[i].index == tuple(int(j) for j in ref["worst_index"][i])


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
    out.append(("int32-vs-float32", rng.integers(-50, 50, size=shape).astype(np.int32), base, Tolerance(atol=100)))
    return out


def run_isolated(code: str, timeout: float = 240) -> dict[str, float]:
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

"""The onnxruntime backend: OrtValues compared by the host kernel through views, never copies."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from backend_reference import cases, check, reference, run_isolated

from paritygate import compare
from paritygate.backends import get_backend
from paritygate.backends import onnxruntime as ort_backend

CASES = cases()


def to_ort(x: np.ndarray) -> ort.OrtValue:
    if x.dtype == ml_dtypes.bfloat16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(x.view(np.uint16), 16)
    return ort.OrtValue.ortvalue_from_numpy(x)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_agrees_with_reference(case):
    name, a, e, tol = case
    a, e = np.ascontiguousarray(a), np.ascontiguousarray(e)
    result = ort_backend.compare_arrays(to_ort(a), to_ort(e), tol, name)
    check(result, reference(a, e, tol))
    assert result.backend.startswith("onnxruntime")
    mixed = ort_backend.compare_arrays(to_ort(a), e, tol, name)
    check(mixed, reference(a, e, tol))


def test_views_share_the_ortvalue_buffer():
    x = np.linspace(0, 1, 1000, dtype=np.float32)
    value = to_ort(x)
    assert np.shares_memory(ort_backend.to_numpy(value), x)
    b = np.linspace(0, 1, 1000, dtype=np.float32).astype(ml_dtypes.bfloat16)
    value_b = to_ort(b)
    view = ort_backend.to_numpy(value_b)
    assert view.dtype == ml_dtypes.bfloat16 and np.shares_memory(view, b)
    assert ort_backend.describe(value_b) == ((1000,), "bfloat16", "cpu")
    assert get_backend(value) is ort_backend


def test_session_outputs_as_ort_values_pass_and_fail():
    import silero_vad

    model = os.path.join(os.path.dirname(silero_vad.__file__), "data", "silero_vad.onnx")
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {
        "input": rng.standard_normal((1, 512)).astype(np.float32) * 0.1,
        "state": np.zeros((2, 1, 128), dtype=np.float32),
        "sr": np.array(16000, dtype=np.int64),
    }
    as_numpy = session.run(None, feeds)
    as_values = session.run_with_ort_values(
        None, {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in feeds.items()}
    )
    from paritygate import compare

    same = compare(
        {"output": as_values[0], "stateN": as_values[1]},
        {"output": as_numpy[0], "stateN": as_numpy[1]},
    )
    assert same.passed and same["output"].backend.startswith("onnxruntime")
    shifted = as_numpy[1].copy()
    shifted[0, 0, 5] += 0.25
    result = compare({"stateN": as_values[1]}, {"stateN": shifted}, atol=1e-3)
    assert not result.passed
    out = result["stateN"]
    assert out.mismatches == 1 and out.worst[0].index == (0, 0, 5)
    assert out.failures[0].metric == "elements"


def test_host_memory_two_1gib_ort_values():
    """Two 1 GiB OrtValues (failing everywhere): at most 64 MiB more host memory."""
    values = run_isolated(
        """
        import os, resource, numpy as np, onnxruntime as ort
        os.environ["PARITYGATE_KERNEL"] = "numpy"  # the memory bound, without numba's compile time
        from paritygate.backends import onnxruntime as ob
        from paritygate.results import Tolerance
        n = (1 << 30) // 8
        a = np.sin(np.arange(n, dtype=np.float64))
        b = a + 1e-3
        va, vb = ort.OrtValue.ortvalue_from_numpy(a), ort.OrtValue.ortvalue_from_numpy(b)
        small = [ort.OrtValue.ortvalue_from_numpy(x[: 1 << 21]) for x in (a, b)]
        ob.compare_arrays(*small, Tolerance(max_ulp=0), "warm")  # compile the kernel first
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = ob.compare_arrays(va, vb, Tolerance(max_ulp=0), "big")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print("extra_mib=", (peak - base) / 1024)
        print("mismatches=", r.mismatches)
        """
    )
    assert values["mismatches"] == (1 << 30) // 8
    assert values["extra_mib"] <= 64, values


# ---------------------------------------------------------------------------------------------
# onnxruntime arrays through the framework-free layers (comparison, outputs, paired, calibration,
# equivalence)


def test_empty_framework_output_against_a_non_empty_one_fails_without_reading_data():
    import onnxruntime as ort
    import torch

    for empty, full in (
        (torch.zeros(0, 4), np.ones((2, 4))),
        (ort.OrtValue.ortvalue_from_numpy(np.zeros((0, 4), np.float32)), np.ones((2, 4))),
    ):
        out = compare({"boxes": empty}, {"boxes": full})["boxes"]
        assert not out.passed and [f.metric for f in out.failures] == ["size"]
        assert (
            "actual is empty with shape (0, 4), expected has 8 element(s) with shape (2, 4)"
            in out.failures[0].detail
        )
        assert compare({"boxes": empty}, {"boxes": np.zeros((0, 4))}).passed

"""Output dtypes users meet in ONNX and ml_dtypes: object arrays of Python strings (exact),
the small floats with ULPs counted on their own grids, and the sub-byte integers (exact)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from paritygate.compare import compare


def _grid(name: str, values) -> np.ndarray:
    return np.array(values, dtype=np.float32).astype(getattr(ml_dtypes, name))


def _ulp_failures(result):
    return [f for f in result.outputs[0].failures if f.metric == "ulp"]


@pytest.mark.parametrize(
    "name,a,e,ulps",
    [
        ("float8_e4m3fnuz", [1.5], [1.625], 1),  # 3 mantissa bits: 1/8 steps in [1, 2)
        ("float8_e5m2fnuz", [2.0], [2.5], 1),  # 2 mantissa bits: 1/2 steps in [2, 4)
        ("float8_e8m0fnu", [4.0], [8.0], 1),  # no sign, no zero: one ULP is a factor of 2
        ("float8_e8m0fnu", [0.25], [4.0], 4),
        ("float4_e2m1fn", [1.5], [3.0], 2),  # grid 0, 0.5, 1, 1.5, 2, 3, 4, 6
        ("float4_e2m1fn", [-0.5], [0.5], 2),  # -0 and +0 are one point
    ],
)
def test_small_floats_count_ulps_on_their_own_grid(name, a, e, ulps):
    actual, expected = _grid(name, a), _grid(name, e)
    result = compare(actual, expected, max_ulp=ulps, atol=100.0)
    assert result and result.outputs[0].ulp_max == ulps, result.outputs[0].ulp_max
    assert result.outputs[0].ulp_dtype == name
    assert _ulp_failures(compare(actual, expected, max_ulp=ulps - 1, atol=100.0))  # one less fails
    assert compare(actual, actual.copy(), max_ulp=0)  # equal passes at zero


@pytest.mark.parametrize("name", ["float8_e4m3fnuz", "float8_e5m2fnuz", "float4_e2m1fn"])
def test_no_negative_zero_the_distance_across_zero_is_the_sum(name):
    x = 0.5
    across = compare(_grid(name, [-x]), _grid(name, [x]), max_ulp=10**6, atol=10.0)
    half = compare(_grid(name, [0.0]), _grid(name, [x]), max_ulp=10**6, atol=10.0)
    assert across.outputs[0].ulp_max == 2 * half.outputs[0].ulp_max > 0
    negzero = compare(_grid(name, [-0.0]), _grid(name, [0.0]), max_ulp=0)
    assert negzero and negzero.outputs[0].ulp_max == 0


@pytest.mark.parametrize("name", ["int4", "uint4", "int2", "uint2"])
def test_sub_byte_integers_compare_exactly(name):
    dt = getattr(ml_dtypes, name)
    a = np.array([0, 1, 1], dtype=np.int64).astype(dt)
    assert compare(a, a.copy())
    b = np.array([0, 1, 0], dtype=np.int64).astype(dt)
    result = compare(b, a)
    assert not result and result.outputs[0].max_abs == 1 and result.outputs[0].mismatches == 1


def test_object_arrays_of_python_strings_compare_exactly():
    a = np.array([["yes", "no"], ["maybe", "x"]], dtype=object)
    assert compare(a, a.copy())
    b = a.copy()
    b[1, 0] = "perhaps"
    result = compare(b, a)
    assert not result
    [failure] = result.outputs[0].failures
    assert failure.where == "index 1,0" and "'perhaps'" in failure.detail


def test_object_arrays_of_other_objects_are_still_refused():
    from paritygate.errors import InputError

    mixed = np.array(["a", 1], dtype=object)
    with pytest.raises(InputError, match="object array"):
        compare(mixed, mixed.copy())

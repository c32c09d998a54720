"""compare(): metrics against their definitions, verdicts in both directions, bad input."""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest

import paritygate
from paritygate import InputError, Tolerance, compare, compare_output
from paritygate.reports.text import comparison_table, format_comparison
from paritygate.testing import assert_parity


def test_identical_arrays_pass_with_exact_metrics():
    x = np.linspace(-3, 3, 1000, dtype=np.float32).reshape(10, 100)
    result = compare(x, x.copy())
    assert result.passed and bool(result)
    out = result[""]
    assert (out.max_abs, out.mean_abs, out.max_rel, out.mismatches, out.ulp_max) == (
        0.0,
        0.0,
        0.0,
        0,
        0,
    )
    assert out.cosine == pytest.approx(1.0, abs=1e-15)
    assert out.worst == []
    assert out.shape == (10, 100) and out.compared_as == "float32" and out.promotion is None


def test_metrics_match_their_definitions():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(37, 53)).astype(np.float64)
    a = e + rng.normal(scale=1e-3, size=e.shape)
    out = compare(a, e, atol=1e-3, rtol=1e-2)[""]
    d = np.abs(a - e)
    assert out.max_abs == d.max()
    assert out.mean_abs == pytest.approx(d.mean(), rel=1e-12)
    assert out.max_rel == pytest.approx((d / (np.abs(e) + 1e-12)).max(), rel=1e-15)
    sym = d / (np.maximum(np.abs(a), np.abs(e)) + 1e-12)
    assert out.max_rel_symmetric == pytest.approx(sym.max(), rel=1e-15)
    cos = (a * e).sum() / np.sqrt((a * a).sum() * (e * e).sum())
    assert out.cosine == pytest.approx(cos, abs=1e-14)
    bound = 1e-3 + 1e-2 * np.abs(e)
    assert out.mismatches == int((d > bound).sum()) > 0
    assert out.atol_needed == pytest.approx((d - 1e-2 * np.abs(e)).max(), rel=1e-12)
    assert out.rtol_needed == pytest.approx(((d - 1e-3) / np.abs(e)).max(), rel=1e-12)
    # The bounds that "would have passed" do pass.
    assert compare(a, e, atol=out.atol_needed * (1 + 1e-12), rtol=1e-2)
    assert compare(a, e, atol=1e-3, rtol=out.rtol_needed * (1 + 1e-12))
    assert not out.passed


def test_planted_difference_fails_with_location_and_bound():
    e = np.zeros((4, 5), dtype=np.float32)
    a = e.copy()
    a[2, 3] = 0.5
    result = compare({"logits": a}, {"logits": e}, atol=0.1)
    assert not result
    out = result["logits"]
    assert out.mismatches == 1
    assert out.worst[0].index == (2, 3)
    assert out.worst[0].actual == 0.5 and out.worst[0].expected == 0.0
    assert out.worst[0].excess == pytest.approx(0.4)
    assert out.atol_needed == 0.5
    [failure] = out.failures
    assert failure.metric == "elements" and failure.where == "index 2,3"
    text = format_comparison(result)
    assert "output logits: FAIL" in text and "atol 0.5 at rtol=0 would have passed" in text
    # The same difference inside the bound passes.
    assert compare({"logits": a}, {"logits": e}, atol=0.5)


def test_every_failing_output_is_reported():
    e = {"a": np.zeros(3), "b": {"c": np.ones(4), "d": np.full(2, 5.0)}, "ok": np.arange(3.0)}
    a = {
        "a": np.full(3, 1.0),
        "b": {"c": np.ones(4) * 2, "d": np.full(2, 7.0)},
        "ok": np.arange(3.0),
    }
    result = compare(a, e)
    assert [o.path for o in result.failing()] == ["a", "b/c", "b/d"]
    assert result["ok"].passed
    text = format_comparison(result)
    for path in ("a", "b/c", "b/d"):
        assert f"output {path}: FAIL" in text
    assert "output ok: PASS" in text
    assert "failing outputs: a, b/c, b/d" in text


def test_missing_and_extra_outputs_fail_without_error():
    result = compare({"x": np.ones(2), "new": 1.0}, {"x": np.ones(2), "old": 2.0})
    assert result.missing == ["old"] and result.extra == ["new"]
    assert not result.passed
    assert result["x"].passed
    text = format_comparison(result)
    assert "missing outputs (in expected, not in actual): old" in text
    assert "extra outputs (in actual, not in expected): new" in text
    assert compare({"x": np.ones(2)}, {"x": np.ones(2)}).passed


def test_leaf_against_container_is_a_structure_mismatch_not_missing_outputs():
    # Same structure on both sides compares normally, nested or not ...
    assert compare({"x": [[1, 2], [3]]}, {"x": [[1, 2], [3]]}).passed
    assert compare({"a": {"b": np.ones(2)}}, {"a": {"b": np.ones(2)}}).passed
    # ... but a ragged list (a container) against a rectangular one (an array) names the output.
    with pytest.raises(
        InputError,
        match=r"^x: structure mismatch: actual has one output "
        r"\(int64 of shape \(2, 2\)\) here but expected has 2 nested "
        r"output\(s\) \(x/0, x/1\)",
    ):
        compare({"x": [[1, 2], [3, 4]]}, {"x": [[1, 2], [3]]})
    with pytest.raises(
        InputError,
        match=r"^x: structure mismatch: expected has one output "
        r"\(int64 of shape \(2,\)\) here but actual has 2",
    ):
        compare({"x": [1, "a"]}, {"x": [1, 2]})
    with pytest.raises(
        InputError, match=r"^output tree: structure mismatch: actual has one output"
    ):
        compare(np.zeros(3), {"a": np.zeros(3)})


def test_uint8_never_wraps():
    a = np.array([0, 255, 7], dtype=np.uint8)
    e = np.array([255, 0, 7], dtype=np.uint8)
    out = compare(a, e)[""]
    assert out.max_abs == 255 and out.mismatches == 2
    assert {el.index for el in out.worst} == {(0,), (1,)}
    assert out.ulp_max is None


def test_int64_extremes_are_exact():
    big = np.array([2**62 + 1, -(2**63), 2**63 - 1], dtype=np.int64)
    near = np.array([2**62, 2**63 - 1, 2**63 - 1], dtype=np.int64)
    out = compare(big, near)[""]
    # 2**62 + 1 vs 2**62 differ by one even though float64 cannot tell them apart.
    assert out.mismatches == 2
    assert out.max_abs == float(2**64 - 1)
    assert compare(big, big.copy())


def test_mixed_integers_and_uint64():
    a = np.array([1, 2, 3], dtype=np.int8)
    e = np.array([1, 2, 300], dtype=np.int32)
    out = compare(a, e)[""]
    assert out.compared_as == "int64" and out.mismatches == 1 and out.max_abs == 297
    u = np.array([2**64 - 1], dtype=np.uint64)
    assert compare(u, np.array([2**64 - 2], dtype=np.uint64))[""].max_abs == 1
    mixed = compare(u, np.array([-1], dtype=np.int64))[""]
    assert mixed.compared_as == "float64" and "no common integer type" in mixed.promotion
    assert mixed.mismatches == 1


def test_bool_masks_compare_exactly_with_counts():
    e = np.zeros((3, 4), dtype=bool)
    a = e.copy()
    a[0, 1] = a[2, 2] = True
    out = compare(a, e, atol=10.0)[""]
    assert out.mismatches == 2 and not out.passed
    assert [el.index for el in out.worst] == [(0, 1), (2, 2)]
    assert out.worst[0].actual is True and out.worst[0].expected is False
    assert compare(e, e.copy()).passed


def test_float8_ulps_counted_on_the_float8_grid_in_both_directions():
    # e4m3fn holds 3 mantissa bits: between 2 and 4 the grid step is 0.25.
    a = np.array([1.0, 2.0, 448.0], dtype=ml_dtypes.float8_e4m3fn)
    one_step = np.array([1.0, 2.25, 448.0], dtype=np.float32)
    two_steps = np.array([1.0, 2.5, 448.0], dtype=np.float32)
    out = compare(a, one_step, max_ulp=1, atol=0.25)[""]
    assert out.passed and out.ulp_dtype == "float8_e4m3fn" and out.compared_as == "float32"
    assert (out.ulp_max, out.ulp_nonzero) == (1, 1)
    assert out.promotion.startswith("float8_e4m3fn -> float32")
    out = compare(a, two_steps, max_ulp=1, atol=0.25)[""]
    assert not out.passed and out.ulp_max == 2
    assert [f.metric for f in out.failures] == ["elements", "ulp"]


def test_float16_against_float32_is_promoted_and_reported():
    e = np.linspace(0, 1, 101, dtype=np.float32)
    a = e.astype(np.float16)
    out = compare(a, e, atol=1e-3)[""]
    assert out.passed
    assert out.compared_as == "float32" and out.promotion == "float16 -> float32 (actual)"
    assert out.ulp_dtype == "float16"
    # Both sides rounded to float16 are equal, so the ULP distance is zero.
    assert out.ulp_max == 0
    assert not compare(a, e, atol=0)


def test_bfloat16_ulp():
    e = np.array([1.0, 2.0, -3.0], dtype=ml_dtypes.bfloat16)
    a = e.copy()
    a[1] = np.nextafter(np.float32(2.0), np.float32(3.0)).astype(ml_dtypes.bfloat16)
    a_bits = a.view(np.uint16).copy()
    a_bits[2] += 3  # three bfloat16 steps further from zero
    a = a_bits.view(ml_dtypes.bfloat16)
    out = compare(a, e, max_ulp=2)[""]
    assert out.ulp_dtype == "bfloat16" and out.ulp_max == 3 and out.ulp_over == 1
    assert any(f.metric == "ulp" for f in out.failures)
    assert compare(a, e, max_ulp=3, atol=1.0)


def test_nan_rules():
    e = np.array([np.nan, 1.0, np.nan, np.inf, -np.inf, 2.0])
    a = np.array([np.nan, np.nan, 3.0, np.inf, np.inf, 2.0])
    out = compare(a, e)[""]
    nf = out.nonfinite
    assert (nf.actual_nan, nf.expected_nan, nf.nan_both, nf.nan_one_side) == (2, 2, 1, 2)
    assert (nf.actual_inf, nf.expected_inf, nf.inf_mismatch) == (2, 2, 1)
    assert out.mismatches == 3  # two one-sided NaN, one unmatched infinity
    assert out.atol_needed == math.inf
    assert sorted(el.index for el in out.worst) == [(1,), (2,), (4,)]
    assert all(el.excess == math.inf for el in out.worst)
    # Only position 5 is finite on both sides.
    assert out.mean_abs == 0.0 and out.max_abs == 0.0
    metrics = {f.metric for f in out.failures}
    assert {"elements", "nan", "inf"} <= metrics


def test_nan_on_both_sides_is_configurable():
    a = np.array([np.nan, 1.0])
    e = np.array([np.nan, 1.0])
    assert compare(a, e).passed
    strict = compare(a, e, equal_nan=False)
    assert not strict.passed
    assert strict[""].mismatches == 1
    assert any("equal_nan=False" in f.detail for f in strict[""].failures)


def test_all_nan_and_zero_vectors_are_defined():
    nan = np.full(4, np.nan)
    assert compare(nan, nan.copy()).passed
    zeros = np.zeros(5)
    out = compare(zeros, zeros.copy(), min_cosine=0.99)[""]
    assert out.cosine is None and out.cosine_undefined == "both sides have zero norm"
    assert not out.passed and "undefined" in out.failures[0].detail
    assert compare(zeros, zeros.copy()).passed  # no cosine claim, equal values
    one = compare(np.ones(5), zeros, atol=2, min_cosine=0.5)[""]
    assert one.cosine_undefined == "expected has zero norm" and not one.passed


def test_empty_outputs():
    assert compare(np.zeros((0, 3)), np.zeros((0, 3))).passed
    assert compare(np.zeros((0,)), np.zeros((0,)), min_cosine=0.9).passed
    # Empty against non-empty is a defined case: the output fails (no bad-input error), either way.
    for actual, expected, empty, full in (
        (np.zeros((0, 4), np.float32), np.ones((3, 4)), "actual", "expected"),
        (np.ones(3), np.zeros(0), "expected", "actual"),
    ):
        result = compare({"boxes": actual}, {"boxes": expected}, atol=1.0)
        out = result["boxes"]
        assert not result.passed and not out.passed
        assert [f.metric for f in out.failures] == ["size"]
        assert out.failures[0].detail.startswith(f"{empty} is empty with shape")
        assert f"{full} has {max(actual.size, expected.size)} element(s)" in out.failures[0].detail
        assert out.cosine is None and out.cosine_undefined == f"{empty} is empty"
        text = format_comparison(result)
        assert "output boxes: FAIL" in text and "no element compared: one side is empty" in text
        json.dumps(result.to_dict())
    # Incompatible kinds stay input errors whatever the sizes; two non-empty shapes still must
    # match.
    with pytest.raises(InputError, match="complex"):
        compare(np.zeros(0, np.complex64), np.ones(2))
    with pytest.raises(
        InputError, match=r"shape mismatch: actual \(0, 3\) float64 vs expected \(3, 0\)"
    ):
        compare(np.zeros((0, 3)), np.zeros((3, 0)))


def test_shape_mismatch_names_path_shapes_and_dtypes():
    with pytest.raises(InputError) as info:
        compare(
            {"boxes": {"editor": np.zeros((2, 4), np.float32)}},
            {"boxes": {"editor": np.zeros((3, 4), np.float16)}},
        )
    text = str(info.value)
    assert "boxes/editor" in text and "(2, 4) float32" in text and "(3, 4) float16" in text


def test_incompatible_dtypes_are_input_errors():
    with pytest.raises(InputError, match="complex"):
        compare(np.ones(3, np.complex64), np.ones(3, np.float32))
    with pytest.raises(InputError, match="object array"):
        compare(np.array([1, "a"], dtype=object), np.ones(2))
    with pytest.raises(InputError, match="strings against numbers|strings are only compared"):
        compare({"t": "abc"}, {"t": np.ones(3)})
    with pytest.raises(InputError, match="strings against numbers"):
        compare(np.array(["a", "b"]), np.ones(2))


def test_complex_outputs_compare_as_pairs():
    e = np.array([1 + 2j, 3 - 4j], dtype=np.complex64)
    a = e.copy()
    a[1] = 3 - 4.5j
    out = compare(a, e, atol=0.1)[""]
    assert "real, imaginary" in out.promotion
    assert out.mismatches == 1 and out.worst[0].index == (1, 1)
    assert compare(e, e.copy())


def test_strings_compare_exactly_with_first_divergence():
    result = compare({"text": "the quick brown fox"}, {"text": "the quick brawn fox"})
    out = result["text"]
    assert not out.passed and out.failures[0].where == "position 12"
    assert "brown" in out.failures[0].detail and "brawn" in out.failures[0].detail
    assert compare({"text": "same"}, {"text": "same"}).passed
    longer = compare("abc", "abcd")[""]
    assert not longer.passed and longer.failures[0].where == "position 3"


def test_string_arrays():
    a = np.array(["a", "b", "c"])
    assert compare(a, a.copy()).passed
    out = compare(a, np.array(["a", "x", "c"]))[""]
    assert out.mismatches == 1 and out.failures[0].where == "index 1"


def test_scalars_and_numeric_lists():
    assert compare(1.0, 1.0).passed
    out = compare({"loss": 0.5}, {"loss": 0.25}, atol=0.1)["loss"]
    assert out.shape == () and out.mismatches == 1 and out.worst[0].index == ()
    assert compare([[1, 2], [3, 4]], np.array([[1, 2], [3, 4]])).passed
    assert not compare([[1, 2], [3, 5]], np.array([[1, 2], [3, 4]])).passed


def test_non_contiguous_and_big_endian_inputs():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(300, 400)).astype(np.float32)
    a = base.T  # not C-contiguous
    e = np.ascontiguousarray(a).astype(">f4")
    assert compare(a, e, max_ulp=0).passed
    e2 = np.array(e)
    e2[399, 299] += 1
    out = compare(a, e2, atol=0.5)[""]
    assert out.mismatches == 1 and out.worst[0].index == (399, 299)


def test_tolerance_object_or_keywords_not_both():
    tol = Tolerance(atol=0.5)
    assert compare(np.zeros(2), np.full(2, 0.4), tolerance=tol).passed
    with pytest.raises(InputError, match="not both"):
        compare(np.zeros(2), np.zeros(2), tolerance=tol, atol=0.1)
    with pytest.raises(InputError, match="atol must be"):
        compare(np.zeros(2), np.zeros(2), atol=-1)


def test_compare_output_single_leaf():
    out = compare_output(np.ones(3), np.ones(3) * 2, Tolerance(atol=1.0), "y")
    assert out.path == "y" and out.passed
    with pytest.raises(InputError, match="y: shape mismatch"):
        compare_output(np.ones(3), np.ones(4), Tolerance(), "y")


def test_rel_eps_and_mean_bound():
    e = np.array([0.0, 1.0])
    a = np.array([1e-6, 1.0])
    out = compare(a, e, atol=1, rel_eps=1e-3)[""]
    assert out.max_rel == pytest.approx(1e-6 / 1e-3)
    assert not compare(a, e, atol=1, max_mean_abs=1e-7)
    assert compare(a, e, atol=1, max_mean_abs=1e-6)


def test_result_is_json_serializable():
    a = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    e = np.array([1.0, 2.0, 3.5], dtype=np.float32)
    data = compare({"x": a, "t": "hi"}, {"x": e, "t": "ho"}, atol=0.1).to_dict()
    text = json.dumps(data)
    back = json.loads(text)
    assert back["passed"] is False
    assert back["outputs"][0]["atol_needed"] == "inf"
    assert back["outputs"][0]["worst"][0]["index"] == [1]


def test_assert_parity_message_is_full_report():
    e = {"a": np.zeros(3), "b": np.ones(3)}
    a = {"a": np.array([0, 0.5, 0]), "b": np.array([1, 1, 3.0])}
    with pytest.raises(AssertionError) as info:
        assert_parity(a, e, atol=0.1)
    message = str(info.value)
    assert message == format_comparison(compare(a, e, atol=0.1))
    assert "output a: FAIL" in message and "output b: FAIL" in message
    assert assert_parity(e, e, atol=0.1).passed


def test_comparison_table_renders_every_output():
    from rich.console import Console

    result = compare(
        {"x": np.ones(2), "y": np.zeros(2)}, {"x": np.ones(2), "y": np.ones(2), "z": 1.0}
    )
    console = Console(width=250, record=True)
    console.print(comparison_table(result))
    text = console.export_text()
    assert "MISSING" in text and "FAIL" in text and "PASS" in text


def test_comparison_table_at_80_columns_keeps_every_header_and_cell_whole():
    """At 80 columns the columns that fit are shown whole (no 'out…', 'ver…'); the rest are
    named under the table; a wide terminal shows all of them."""
    from rich.console import Console

    result = compare(
        {"logits": {"first_layer": np.ones((32, 10))}, "probabilities": np.full(4, 0.5)},
        {"logits": {"first_layer": np.ones((32, 10)) + 1e-7}, "probabilities": np.full(4, 0.25)},
        atol=1e-6,
    )
    narrow = Console(width=80, record=True, color_system=None)
    narrow.print(comparison_table(result))
    lines = narrow.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in "".join(lines)
    at = next(i for i, line in enumerate(lines) if line.startswith("output "))
    assert lines[at].split()[:4] == ["output", "verdict", "max_abs", "1-cosine"]
    rows = {line.split()[0]: line.split() for line in lines[at + 1 : at + 3]}
    assert rows["logits/first_layer"][1:3] == ["PASS", "1e-07"]
    assert rows["probabilities"][1:3] == ["FAIL", "0.25"]
    assert "not shown at this width: " in " ".join(lines[at + 3 :])
    wide = Console(width=250, record=True, color_system=None)
    wide.print(comparison_table(result))
    wide_text = wide.export_text()
    assert "worst (index: actual vs expected)" in wide_text and "not shown" not in wide_text


def test_public_api_exported():
    for name in ("compare", "compare_output", "flatten_outputs", "assert_parity"):
        assert name in paritygate.__all__ and hasattr(paritygate, name)


# ---------------------------------------------------------------------------------------------
# fault sweep: empty string outputs are compared, not refused


@pytest.mark.parametrize("dtype", [object, str])
def test_empty_string_outputs_compare_equal_and_fail_against_non_empty(dtype):
    empty = np.empty((0,), dtype=dtype)
    result = compare({"s": empty}, {"s": empty.copy()})
    assert result and result.outputs[0].size == 0

    for actual, expected, side in (
        (empty, np.array(["a"], dtype=dtype), "actual"),
        (np.array(["a"], dtype=dtype), empty, "expected"),
    ):
        result = compare({"s": actual}, {"s": expected})
        assert not result
        (failure,) = result.outputs[0].failures
        assert failure.metric == "size" and f"{side} is empty with shape (0,)" in failure.detail

    with pytest.raises(InputError, match=r"shape mismatch: actual \(0, 2\)"):
        compare(np.empty((0, 2), dtype=dtype), np.empty((0, 3), dtype=dtype))
    with pytest.raises(InputError, match="strings against numbers"):
        compare(empty, np.array([1.0]))


def test_empty_list_against_a_list_of_strings_is_a_size_failure_not_a_structure_mismatch():
    result = compare({"s": []}, {"s": ["a", "b"]})
    assert not result and result.missing == [] and result.extra == []
    (output,) = result.outputs
    assert output.path == "s" and [f.metric for f in output.failures] == ["size"]
    assert "expected has 2 nested output(s) (s/0, s/1)" in output.failures[0].detail
    result = compare({"s": ["a"]}, {"s": []})
    assert (
        not result and "actual has 1 nested output(s) (s/0)" in result.outputs[0].failures[0].detail
    )
    assert compare({"s": []}, {"s": []})
    with pytest.raises(InputError, match="structure mismatch"):  # non-empty: still bad input
        compare({"s": [1.0]}, {"s": ["a"]})


def test_paired_byte_check_takes_two_empty_object_outputs_as_equal():
    from paritygate.paired import byte_differences

    empty = np.empty((0,), dtype=object)
    assert byte_differences({"s": empty}, {"s": empty.copy()}) == []

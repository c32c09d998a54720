"""Structured comparators: each passes its good case and fails a planted bug with the right
report."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from paritygate.errors import InputError
from paritygate.results import Failure
from paritygate.structured import (
    box_iou,
    compare_class_decisions,
    compare_images,
    compare_keyed_boxes,
    compare_sequences,
    expected_calibration_error,
    match_boxes,
)

REFERENCE_BOXES = {
    "editor": [12.0, 40.0, 310.0, 220.0],
    "sidebar": [0.0, 0.0, 80.0, 600.0],
    "toolbar": [0.0, 0.0, 1024.0, 32.0],
}


def _json_round_trip(result) -> dict:
    data = json.loads(json.dumps(result.to_dict()))
    assert data["passed"] is bool(result)
    return data


# ---------------------------------------------------------------------------------------------
# (a) keyed boxes


def test_keyed_boxes_within_bound_pass_with_evidence():
    port = {k: [c + 1.5 for c in v] for k, v in REFERENCE_BOXES.items()}
    result = compare_keyed_boxes(port, REFERENCE_BOXES, max_edge_delta=2, path="boxes")
    assert result and result.failures == []
    assert result.observed_max_delta == pytest.approx(1.5)
    assert result.edge_deltas["editor"] == pytest.approx(
        {"x1": 1.5, "y1": 1.5, "x2": 1.5, "y2": 1.5}
    )
    assert _json_round_trip(result)["kind"] == "keyed-boxes"


def test_keyed_boxes_report_every_failing_edge_with_label_delta_and_excess():
    # The seed 002 story: a 9 px bug on one edge hidden by a loose gate, plus a second one.
    port = {k: list(v) for k, v in REFERENCE_BOXES.items()}
    port["editor"][2] += 9.0
    port["toolbar"][1] -= 3.0
    result = compare_keyed_boxes(port, REFERENCE_BOXES, max_edge_delta=2)
    assert not result
    where = {(f.where, f.metric): f for f in result.failures}
    assert set(where) == {("editor.x2", "edge_delta"), ("toolbar.y1", "edge_delta")}
    assert where["editor.x2", "edge_delta"].observed == pytest.approx(9.0)
    assert where["editor.x2", "edge_delta"].excess == pytest.approx(7.0)
    assert where["toolbar.y1", "edge_delta"].excess == pytest.approx(1.0)
    assert result.worst == "editor.x2" and result.bound_that_passes == pytest.approx(9.0)
    # the same outputs pass at the bound that would have passed
    assert compare_keyed_boxes(port, REFERENCE_BOXES, max_edge_delta=result.bound_that_passes)


def test_keyed_boxes_missing_and_extra_labels_fail():
    port = {k: v for k, v in REFERENCE_BOXES.items() if k != "sidebar"}
    port["popup"] = [1, 2, 3, 4]
    result = compare_keyed_boxes(port, REFERENCE_BOXES, max_edge_delta=100)
    assert not result
    assert result.missing == ["sidebar"] and result.extra == ["popup"]
    assert {(f.metric, f.where) for f in result.failures} == {
        ("missing_label", "sidebar"),
        ("extra_label", "popup"),
    }


def test_keyed_segments_with_named_edges_and_per_edge_bounds():
    expected = {"speech-1": {"start": 0.50, "end": 1.25}, "speech-2": {"start": 2.0, "end": 3.0}}
    actual = {"speech-1": [0.52, 1.25], "speech-2": [2.0, 3.2]}
    ok = compare_keyed_boxes(
        actual, expected, max_edge_delta={"start": 0.05, "end": 0.25}, edge_names=("start", "end")
    )
    assert ok
    bad = compare_keyed_boxes(
        actual, expected, max_edge_delta={"start": 0.05, "end": 0.1}, edge_names=("start", "end")
    )
    assert [f.where for f in bad.failures] == ["speech-2.end"]
    assert bad.failures[0].excess == pytest.approx(0.1)


def test_keyed_boxes_nan_coordinate_fails():
    port = {k: list(v) for k, v in REFERENCE_BOXES.items()}
    port["sidebar"][3] = math.nan
    result = compare_keyed_boxes(port, REFERENCE_BOXES, max_edge_delta=1000)
    assert [f.where for f in result.failures] == ["sidebar.y2"]
    assert "nan" in result.failures[0].detail


def test_keyed_boxes_bad_input_is_one_line():
    with pytest.raises(InputError, match="'editor' has 3 coordinates, expected 4"):
        compare_keyed_boxes(
            {"editor": [1, 2, 3]}, {"editor": [1, 2, 3, 4]}, max_edge_delta=1, path="boxes"
        )
    with pytest.raises(InputError, match="max_edge_delta must be a finite number"):
        compare_keyed_boxes({}, {}, max_edge_delta=-1)
    with pytest.raises(InputError, match="lacks edges"):
        compare_keyed_boxes(
            {"a": {"start": 1}}, {"a": [1, 2]}, max_edge_delta=1, edge_names=("start", "end")
        )


# ---------------------------------------------------------------------------------------------
# (b) IoU-matched boxes


def test_box_iou_known_values():
    iou = box_iou(
        [[0, 0, 10, 10]], [[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 0, 0]]
    )
    assert iou[0].tolist() == pytest.approx([1.0, 50 / 150, 0.0, 0.0])
    assert box_iou([[3, 3, 3, 3]], [[3, 3, 3, 3]])[0, 0] == 1.0  # identical degenerate boxes


def test_matched_boxes_pair_by_optimal_assignment_regardless_of_order():
    expected = np.array([[0, 0, 10, 10], [20, 20, 40, 40], [50, 0, 60, 30]], dtype=float)
    actual = expected[[2, 0, 1]] + 0.25  # shuffled, slightly shifted
    result = match_boxes(actual, expected, min_iou=0.8, max_edge_delta=0.5, path="detections")
    assert result, result.describe()
    assert {(p["actual"], p["expected"]) for p in result.pairs} == {(1, 0), (2, 1), (0, 2)}
    assert result.observed_max_delta == pytest.approx(0.25)
    _json_round_trip(result)


def test_matched_boxes_greedy_trap_needs_the_optimal_assignment():
    # Greedy matching takes the best pair first, actual[0]-expected[0] (IoU 0.9), and leaves
    # actual[1]-expected[1] at IoU 1/3, unmatched; the optimal assignment pairs both
    # (IoU 7/12 and 7/13).
    expected = np.array([[0, 0, 10, 10], [2, 0, 12, 10]], dtype=float)
    actual = np.array([[0, 0, 9, 10], [-3, 0, 7, 10]], dtype=float)
    iou = box_iou(actual, expected)
    assert iou[0, 0] == pytest.approx(0.9) and iou[1, 1] == pytest.approx(1 / 3)
    result = match_boxes(actual, expected, min_iou=0.5)
    assert result, result.describe()
    assert {(p["actual"], p["expected"]) for p in result.pairs} == {(0, 1), (1, 0)}


def test_matched_boxes_unmatched_and_edge_failures_are_all_reported():
    expected = np.array([[0, 0, 10, 10], [20, 20, 40, 40], [100, 100, 120, 120]], dtype=float)
    actual = np.array([[0, 0, 10, 12], [20, 20, 40, 40], [300, 300, 310, 310]], dtype=float)
    result = match_boxes(actual, expected, min_iou=0.5, max_edge_delta=1.0)
    assert not result
    metrics = {(f.metric, f.where) for f in result.failures}
    assert metrics == {
        ("edge_delta", "expected[0].y2"),
        ("unmatched_expected", "expected[2]"),
        ("unmatched_actual", "actual[2]"),
    }
    assert result.unmatched_expected == [2] and result.unmatched_actual == [2]


def test_matched_boxes_below_min_iou_do_not_match():
    result = match_boxes([[0, 0, 10, 10]], [[5, 0, 15, 10]], min_iou=0.5)
    assert not result
    failure = next(f for f in result.failures if f.metric == "unmatched_expected")
    assert failure.observed == pytest.approx(1 / 3)
    assert "actual[0]" in failure.detail
    assert match_boxes([[0, 0, 10, 10]], [[5, 0, 15, 10]], min_iou=0.3)


def test_matched_boxes_respect_classes_and_empty_sides():
    boxes = [[0, 0, 10, 10]]
    assert match_boxes(boxes, boxes, min_iou=0.9, actual_classes=["cat"], expected_classes=["cat"])
    wrong = match_boxes(boxes, boxes, min_iou=0.9, actual_classes=["dog"], expected_classes=["cat"])
    assert {f.metric for f in wrong.failures} == {"unmatched_expected", "unmatched_actual"}
    assert match_boxes(np.zeros((0, 4)), np.zeros((0, 4)), min_iou=0.5)
    empty = match_boxes(np.zeros((0, 4)), boxes, min_iou=0.5)
    assert [f.metric for f in empty.failures] == ["unmatched_expected"]
    with pytest.raises(InputError, match=r"shape \(n, 4\)"):
        match_boxes([[1, 2, 3]], boxes, min_iou=0.5)


# ---------------------------------------------------------------------------------------------
# (c) sequences


def test_identical_token_sequences_pass():
    ids = np.array([101, 7592, 2088, 102], dtype=np.int64)
    result = compare_sequences(ids, ids.tolist())
    assert result and result.first_divergence is None
    _json_round_trip(result)


def test_token_divergence_reports_first_position_and_context_of_both_sides():
    expected = list(range(100, 130))
    actual = list(expected)
    actual[17] = 999
    actual[25] = 998
    result = compare_sequences(actual, expected, context=3, path="tokens")
    assert not result
    assert result.first_divergence == 17 and result.mismatched_positions == 2
    assert result.context_start == 14
    assert result.actual_context == [114, 115, 116, 999, 118, 119, 120]
    assert result.expected_context == [114, 115, 116, 117, 118, 119, 120]
    (failure,) = result.failures
    assert failure.where == "position 17" and "999" in failure.detail and "117" in failure.detail


def test_length_difference_fails_even_when_one_is_a_prefix():
    result = compare_sequences([1, 2, 3, 4], [1, 2, 3])
    assert not result
    assert result.first_divergence == 3 and result.mismatched_positions == 0
    assert [(f.metric, f.observed, f.bound) for f in result.failures] == [("length", 4, 3)]


def test_text_sequences():
    assert compare_sequences("the cat sat", "the cat sat")
    result = compare_sequences("the cat sat", "the bat sat", context=2)
    assert result.first_divergence == 4
    assert result.actual_context == "e cat" and result.expected_context == "e bat"


def test_sequence_bad_input():
    with pytest.raises(InputError, match="text with a token sequence"):
        compare_sequences("abc", [1, 2, 3])
    with pytest.raises(InputError, match="one-dimensional"):
        compare_sequences([[1, 2]], [[1, 2]])
    with pytest.raises(InputError, match="token ids"):
        compare_sequences([1.5, 2.0], [1.5, 2.0])


# ---------------------------------------------------------------------------------------------
# (d) class decisions


@pytest.fixture
def logits():
    rng = np.random.default_rng(3)
    return rng.standard_normal((64, 10)) * 3


def test_class_decisions_small_noise_passes_every_bound(logits):
    rng = np.random.default_rng(4)
    labels = logits.argmax(axis=1)
    port = logits + rng.standard_normal(logits.shape) * 1e-4
    result = compare_class_decisions(
        port,
        logits,
        top_k=3,
        min_topk_agreement=1.0,
        max_prob_drift=1e-3,
        max_kl=1e-6,
        labels=labels,
        max_ece_increase=1e-3,
    )
    assert result, result.describe()
    assert result.argmax_agreement == 1.0 and result.topk_agreement == 1.0
    assert 0 < result.max_prob_drift < 1e-3
    assert result.ece_actual is not None
    _json_round_trip(result)


def test_class_decisions_flipped_row_fails_each_bound(logits):
    port = logits.copy()
    row = 11
    runner_up = int(np.argsort(logits[row])[-2])
    port[row, runner_up] = logits[row].max() + 5  # the port now decides otherwise on one row
    result = compare_class_decisions(
        port, logits, top_k=1, min_topk_agreement=1.0, max_prob_drift=0.05, max_kl=0.05
    )
    assert not result
    metrics = {f.metric for f in result.failures}
    assert metrics == {"argmax_agreement", "top1_agreement", "prob_drift", "kl_divergence"}
    assert result.argmax_disagreements == 1
    assert result.disagreeing_rows[0]["row"] == row
    assert result.disagreeing_rows[0]["actual_class"] == runner_up
    assert result.max_prob_drift_at["row"] == row and result.kl_max_row == row
    argmax = next(f for f in result.failures if f.metric == "argmax_agreement")
    assert argmax.observed == pytest.approx(63 / 64) and f"row {row}" in argmax.detail
    # the same flip passes a claim that allows it
    assert compare_class_decisions(port, logits, min_argmax_agreement=0.98)


def test_topk_agreement_compares_sets_of_classes():
    expected = np.log(np.array([[0.5, 0.3, 0.15, 0.05]]))
    swapped = np.log(np.array([[0.3, 0.5, 0.15, 0.05]]))  # top-2 set unchanged, top-1 changed
    result = compare_class_decisions(
        swapped, expected, min_argmax_agreement=None, top_k=2, min_topk_agreement=1.0
    )
    assert result and result.argmax_agreement == 0.0
    demoted = np.log(np.array([[0.5, 0.1, 0.15, 0.25]]))
    assert not compare_class_decisions(demoted, expected, top_k=2, min_topk_agreement=1.0)


def test_probabilities_kl_and_validation():
    expected = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    actual = np.array([[0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    result = compare_class_decisions(actual, expected, inputs="probabilities")
    kl_row0 = sum(p * math.log(p / q) for p, q in zip(expected[0], actual[0]))
    assert result.kl_max == pytest.approx(kl_row0) and result.kl_max_row == 0
    assert result.kl_mean == pytest.approx(kl_row0 / 2)
    assert result.max_prob_drift == pytest.approx(0.1)
    assert not compare_class_decisions(actual, expected, inputs="probabilities", max_kl=kl_row0 / 2)
    with pytest.raises(InputError, match="sum to 1"):
        compare_class_decisions(actual * 2, expected, inputs="probabilities")
    with pytest.raises(InputError, match="shape mismatch"):
        compare_class_decisions(actual[:1], expected, inputs="probabilities")
    with pytest.raises(InputError, match="needs labels"):
        compare_class_decisions(actual, expected, inputs="probabilities", max_ece_increase=0.1)


def test_expected_calibration_error_known_value():
    # Two bins used: confidences 0.9 (2 rows, 1 correct) and 0.6 (2 rows, 2 correct).
    probs = np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.4, 0.6]])
    labels = np.array([0, 1, 0, 1])
    ece = expected_calibration_error(probs, labels, n_bins=10)
    assert ece == pytest.approx(0.5 * abs(0.5 - 0.9) + 0.5 * abs(1.0 - 0.6))


def test_ece_increase_fails_an_overconfident_port(logits):
    rng = np.random.default_rng(5)
    labels = np.where(
        rng.random(len(logits)) < 0.7, logits.argmax(axis=1), rng.integers(0, 10, len(logits))
    )
    calibrated = compare_class_decisions(logits, logits, labels=labels, max_ece_increase=0.0)
    assert calibrated and calibrated.ece_increase == 0.0
    overconfident = compare_class_decisions(
        logits * 4, logits, labels=labels, max_ece_increase=0.01
    )
    assert not overconfident
    (failure,) = overconfident.failures
    assert failure.metric == "ece_increase" and failure.observed > 0.01


def test_batched_rows_are_named_by_index_tuple():
    expected = np.zeros((2, 3, 4))
    expected[..., 0] = 1.0
    actual = expected.copy()
    actual[1, 2] = [0, 5, 0, 0]
    result = compare_class_decisions(actual, expected)
    assert result.disagreeing_rows[0]["row"] == [1, 2]


# ---------------------------------------------------------------------------------------------
# (e) images


@pytest.fixture
def image():
    rng = np.random.default_rng(7)
    smooth = np.cumsum(np.cumsum(rng.random((48, 48, 3)), axis=0), axis=1)
    return (smooth / smooth.max() * 255).astype(np.uint8)


def test_images_identical_and_close_pass(image):
    same = compare_images(
        image, image, data_range=255, min_ssim=0.999, min_psnr=60, channel_axis=-1
    )
    assert same and same.ssim == pytest.approx(1.0) and same.psnr == math.inf
    assert _json_round_trip(same)["psnr"] == "inf"
    noisy = np.clip(
        image.astype(int) + np.random.default_rng(0).integers(-1, 2, image.shape), 0, 255
    )
    result = compare_images(
        noisy.astype(np.uint8), image, data_range=255, min_ssim=0.95, min_psnr=40, channel_axis=-1
    )
    assert result, result.describe()


def test_images_planted_artifact_fails_both_bounds(image):
    broken = image.copy()
    broken[10:30, 10:30] = 0  # a black patch, as from a wrong tile
    result = compare_images(
        broken, image, data_range=255, min_ssim=0.95, min_psnr=30, channel_axis=-1, path="frame"
    )
    assert not result
    assert {f.metric for f in result.failures} == {"ssim", "psnr"}
    psnr = next(f for f in result.failures if f.metric == "psnr")
    assert psnr.observed < 30 and psnr.excess == pytest.approx(30 - psnr.observed)


def test_images_data_range_is_required_and_checked(image):
    with pytest.raises(TypeError):
        compare_images(image, image, min_ssim=0.9)  # no default, never guessed
    with pytest.raises(InputError, match="data_range"):
        compare_images(image, image, data_range=0, min_ssim=0.9)
    with pytest.raises(InputError, match="shape mismatch"):
        compare_images(image[:10], image, data_range=255)


def test_images_with_nan_fail_every_bound():
    img = np.linspace(0, 1, 64 * 64).reshape(64, 64)
    bad = img.copy()
    bad[0, 0] = np.nan
    result = compare_images(bad, img, data_range=1.0, min_ssim=0.5, min_psnr=10)
    assert {f.metric for f in result.failures} == {"ssim", "psnr"}


def test_failures_are_results_failures():
    result = compare_sequences([1], [2])
    assert all(isinstance(f, Failure) for f in result.failures)
    assert "position 0" in result.describe()

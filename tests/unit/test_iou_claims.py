"""IoU-matched (unlabelled) boxes in the spec: params = { match = "iou" } on a max_edge_delta
claim pairs boxes by an optimal IoU assignment, bounds every edge of every pair, and fails an
unmatched box on either side."""

from __future__ import annotations

import numpy as np
import pytest
from spec_helpers import TINY_SPEC, make_project

from paritygate.errors import SpecError
from paritygate.gate import evaluate_claim
from paritygate.spec import load_spec

BOXES = np.array([[10, 10, 50, 40], [60, 5, 90, 30], [5, 50, 40, 80]], dtype=np.float32)


def _claim(tmp_path, params='{ match = "iou", min_iou = 0.5 }'):
    text = TINY_SPEC.replace(
        'metric = "max_abs"\nbound = 1e-5',
        f'metric = "max_edge_delta"\nbound = 2\nunit = "px"\nparams = {params}',
    )
    return load_spec(make_project(tmp_path, text)).claims["y-close"]


def test_unlabelled_boxes_in_another_order_pass_and_a_moved_edge_fails(tmp_path):
    claim = _claim(tmp_path)
    shuffled = BOXES[[2, 0, 1]] + np.float32(1)
    verdict = evaluate_claim(claim, "cand", "a", {"y": shuffled}, {"y": BOXES})
    assert verdict.passed and verdict.observed == 1
    moved = shuffled.copy()
    moved[1, 2] += 3  # box 0's right edge 4 px away
    verdict = evaluate_claim(claim, "cand", "a", {"y": moved}, {"y": BOXES})
    assert not verdict.passed and verdict.observed == 4
    [failure] = verdict.failures
    assert failure.metric == "edge_delta" and failure.where == "y expected[0].x2"
    assert "matched to actual[1]" in failure.detail and failure.detail.endswith("px")


def test_an_unmatched_box_fails_on_either_side(tmp_path):
    claim = _claim(tmp_path)
    verdict = evaluate_claim(claim, "cand", "a", {"y": BOXES[:2]}, {"y": BOXES})
    assert not verdict.passed and verdict.observed == float("inf")
    assert [f.metric for f in verdict.failures] == ["unmatched_expected"]
    extra = np.vstack([BOXES, [[200, 200, 220, 220]]]).astype(np.float32)
    verdict = evaluate_claim(claim, "cand", "a", {"y": extra}, {"y": BOXES})
    assert [f.metric for f in verdict.failures] == ["unmatched_actual"]


@pytest.mark.parametrize(
    "params,message",
    [
        ('{ match = "nearest" }', "expected 'label'"),
        ("{ min_iou = 0.5 }", "min_iou needs match = 'iou'"),
        ('{ match = "iou", min_iou = 2 }', "expected a number in [0, 1]"),
    ],
)
def test_bad_match_params_are_spec_errors(tmp_path, params, message):
    with pytest.raises(SpecError, match="claims.y-close.params") as info:
        _claim(tmp_path, params)
    assert message in str(info.value)

"""Regression tests for passes the gate must not give: each planted defect fails with the right
message, and the good case next to it still passes."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate.gate import evaluate_claim
from paritygate.spec import METRICS, Claim


def claim(metric: str, bound: float, outputs=("out",), **kw) -> Claim:
    scope, direction = METRICS[metric]
    return Claim(
        id=f"c-{metric}",
        outputs=tuple(outputs),
        metric=metric,
        bound=bound,
        unit="",
        scope=scope,
        direction=direction,
        oracle="equivalence",
        mode="stored",
        status="provisional",
        hardware="any",
        candidates=("cand",),
        **kw,
    )


REF = {"out": np.array([0.25, 1.5, 3.0], dtype=np.float32)}


@pytest.mark.parametrize(
    "metric,bound", [("exact", 0.0), ("max_abs", 1e-3), ("max_rel", 1e-3), ("ulp", 2)]
)
def test_element_claim_fails_an_empty_candidate_against_a_non_empty_reference(metric, bound):
    empty = {"out": np.zeros((0,), dtype=np.float32)}
    verdict = evaluate_claim(claim(metric, bound), "cand", "case0", empty, REF)
    assert not verdict.passed
    assert verdict.observed == float("inf")
    (failure,) = verdict.failures
    assert failure.metric == "size" and failure.where == "out"
    assert "actual is empty" in failure.detail and "3 element(s)" in failure.detail
    # The good case: the same claim passes the reference against itself.
    assert evaluate_claim(claim(metric, bound), "cand", "case0", dict(REF), REF).passed


def test_element_claim_passes_two_empty_outputs():
    empty = {"out": np.zeros((0, 2), dtype=np.int64)}
    assert evaluate_claim(claim("exact", 0.0), "cand", "c", empty, dict(empty)).passed


@pytest.mark.parametrize("metric,bound", [("cosine", 0.999), ("mean_abs", 1e-3)])
def test_output_claim_fails_an_empty_candidate(metric, bound):
    empty = {"out": np.zeros((0,), dtype=np.float32)}
    verdict = evaluate_claim(claim(metric, bound), "cand", "c", empty, REF)
    assert not verdict.passed
    assert any("actual is empty" in f.describe() for f in verdict.failures)


def test_cosine_claim_fails_nan_on_one_side_and_names_it():
    rng = np.random.default_rng(0)
    ref = {"out": rng.standard_normal(1000)}
    cand = {"out": ref["out"].copy()}
    cand["out"][17] = np.nan
    verdict = evaluate_claim(claim("cosine", 0.999), "cand", "c", cand, ref)
    assert not verdict.passed
    text = " ".join(f.describe() for f in verdict.failures)
    assert "actual has NaN at 1 of 1000 position(s)" in text
    assert "zero norm" not in text
    # Good case: the same output without the NaN passes.
    assert evaluate_claim(claim("cosine", 0.999), "cand", "c", dict(ref), ref).passed


def test_cosine_all_nan_against_all_zero_names_the_nan_not_a_zero_norm():
    ref = {"out": np.zeros(8)}
    cand = {"out": np.full(8, np.nan)}
    verdict = evaluate_claim(claim("cosine", 0.9), "cand", "c", cand, ref)
    assert not verdict.passed
    text = " ".join(f.describe() for f in verdict.failures)
    assert "actual has NaN at 8 of 8 position(s)" in text
    assert "zero norm" not in text


def test_mean_abs_claim_fails_nan_on_one_side():
    ref = {"out": np.ones(100)}
    cand = {"out": np.ones(100)}
    cand["out"][3] = np.nan
    verdict = evaluate_claim(claim("mean_abs", 1e-6), "cand", "c", cand, ref)
    assert not verdict.passed
    assert any(f.metric == "mean_abs" for f in verdict.failures)
    assert "NaN on one side" in " ".join(f.describe() for f in verdict.failures)
    assert evaluate_claim(claim("mean_abs", 1e-6), "cand", "c", dict(ref), ref).passed

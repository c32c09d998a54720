"""The claim-metric registry: one entry per metric, read by spec, oracles, calibration, the claims
check and the docs. A metric over an existing statistic is one entry (plus its docs row)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from spec_helpers import TINY_SPEC, make_project

from paritygate import claim_metrics
from paritygate.calibration import DIRECTIONS, calibrate, shift, spike
from paritygate.claim_metrics import ClaimMetric
from paritygate.claims_check import ONE_MINUS_METRICS
from paritygate.equivalence import check_equivalence
from paritygate.errors import SpecError
from paritygate.spec import METRICS, load_spec

DOCS = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def _docs_rows() -> dict[str, tuple[str, str]]:
    """metric -> (scope, bound column) of every row of the metric table in docs/spec.md."""
    rows = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not cells[0].startswith("`"):
            continue
        if cells[1] not in claim_metrics.SCOPES:
            continue
        for name in re.findall(r"`([a-z0-9_]+)`", cells[0]):
            rows[name] = (cells[1], cells[2])
    return rows


def test_every_registered_metric_has_its_docs_row_and_no_row_is_stale():
    rows = _docs_rows()
    assert sorted(rows) == sorted(claim_metrics.METRICS)
    for name, metric in claim_metrics.METRICS.items():
        scope, bound = rows[name]
        assert scope == metric.scope, name
        assert bound.startswith(metric.direction) or metric.fixed_bound is not None, (name, bound)


def test_spec_calibration_and_claims_check_read_the_registry():
    assert dict(METRICS) == {n: (m.scope, m.direction) for n, m in claim_metrics.METRICS.items()}
    assert set(DIRECTIONS) == {"max_abs", "mean_abs", "median_abs", "max_rel", "ulp", "cosine"} | {
        "ssim", "kl_mean", "kl_p99", "kl_max", "top1_agreement", "topk_overlap"
    }  # fmt: skip
    assert {"cosine", "ssim", "accuracy", "agreement"} <= set(ONE_MINUS_METRICS)
    assert "max_abs" not in ONE_MINUS_METRICS


def test_an_entry_is_checked_when_it_is_made():
    with pytest.raises(ValueError, match="needs measure"):
        ClaimMetric("m", scope="output", direction="max", comparison="compare", summary="")
    with pytest.raises(ValueError, match="needs tolerance"):
        ClaimMetric(
            "m", scope="element", direction="max", comparison="compare", summary="",
            measure=lambda p: p.compared.max_abs,
        )  # fmt: skip
    with pytest.raises(ValueError, match="already registered"):
        claim_metrics.register(claim_metrics.get("cosine"))


@pytest.fixture
def cosine_distance():
    """A metric over an existing statistic, added by one registry entry (and removed after)."""
    metric = claim_metrics.register(
        ClaimMetric(
            "cosine_distance_t",
            scope="output",
            direction="max",
            comparison="compare",
            measure=lambda p: p.compared.one_minus_cosine,
            calibration="measured",
            undefined_is_worst=True,
            summary="1 - cosine similarity",
        )
    )
    yield metric
    del claim_metrics.METRICS[metric.name]


def test_one_entry_adds_a_metric_to_spec_gate_and_calibration(tmp_path, cosine_distance):
    spec_text = TINY_SPEC.replace(
        'metric = "max_abs"\nbound = 1e-5', 'metric = "cosine_distance_t"\nbound = 1e-6'
    )
    path = make_project(tmp_path, spec_text)
    claim = load_spec(path).claims["y-close"]
    assert (claim.scope, claim.direction) == ("output", "max")
    rng = np.random.default_rng(0)
    reference = {"y": rng.standard_normal((4, 8))}
    twin = {"y": reference["y"] * (1 + 1e-9)}  # same direction: distance ~0
    verdict = check_equivalence("y-close", twin, reference, spec=path)
    assert verdict and verdict.observed < 1e-6
    bug = {"y": reference["y"].copy()}
    bug["y"][0] = -bug["y"][0]
    verdict = check_equivalence("y-close", bug, reference, spec=path, case="a")
    assert not verdict and verdict.observed > 1e-6
    assert verdict.failures[0].metric == "cosine_distance_t"
    assert verdict.evidence["y"]["cosine_distance_t"] == verdict.observed
    assert DIRECTIONS["cosine_distance_t"] == "max"

    def pair(case):
        x = np.random.default_rng(case).standard_normal(64)
        return {"y": x}, {"y": x.astype(np.float32).astype(np.float64)}

    # float32 rounding moves 1 - cosine by ~1e-16; a spiked element or a shifted row by far more
    result = calibrate(
        pair,
        16,
        metric="cosine_distance_t",
        metrics=["cosine_distance_t"],
        mutations=[spike(), shift()],
    )
    assert result and result.claim_metric.largest_noise < 1e-12
    assert result.proposed_bound < result.claim_metric.smallest_bug


def _median_spec(tmp_path, bound="1e-3"):
    spec_text = TINY_SPEC.replace(
        'metric = "max_abs"\nbound = 1e-5', f'metric = "median_abs"\nbound = {bound}'
    )
    return make_project(tmp_path, spec_text)


def test_median_abs_claim_passes_sparse_outliers_and_fails_a_shift(tmp_path):
    """median |a - e| is measured on the host arrays: a few large outliers leave it near the
    typical error (where max_abs and mean_abs would move), a shift of every element moves it."""
    path = _median_spec(tmp_path)
    rng = np.random.default_rng(1)
    reference = {"y": rng.standard_normal((16, 16))}
    noisy = {"y": reference["y"] + 1e-5 * rng.standard_normal((16, 16))}
    noisy["y"][0, :5] += 10.0  # five outliers of 256: the median does not see them
    verdict = check_equivalence("y-close", noisy, reference, spec=path, case="a")
    assert verdict, verdict.failures
    expected = float(np.median(np.abs(noisy["y"] - reference["y"])))
    assert verdict.observed == expected < 1e-4
    assert verdict.evidence["y"]["median_abs"] == expected
    assert verdict.evidence["y"]["max_abs"] > 9  # the outliers are there
    shifted = {"y": reference["y"] + 0.01}
    verdict = check_equivalence("y-close", shifted, reference, spec=path, case="a")
    assert not verdict
    (failure,) = verdict.failures
    assert (failure.metric, failure.where) == ("median_abs", "y")
    assert failure.observed == pytest.approx(0.01) and failure.excess == pytest.approx(0.009)
    assert "median_abs" in failure.describe() and "y" in failure.describe()


def test_median_abs_counts_finite_positions_and_fails_nan_on_one_side(tmp_path):
    path = _median_spec(tmp_path)
    reference = {"y": np.array([1.0, 2.0, np.nan, 4.0], dtype=np.float32)}
    same_nan = {"y": np.array([1.0, 2.5, np.nan, 4.0], dtype=np.float32)}
    verdict = check_equivalence("y-close", same_nan, reference, spec=path, case="a")
    assert verdict and verdict.observed == 0.0  # median of 0, 0.5, 0 (NaN both sides left out)
    one_side = {"y": np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)}
    verdict = check_equivalence("y-close", one_side, reference, spec=path, case="a")
    assert not verdict and verdict.observed == np.inf
    assert "NaN" in verdict.failures[0].detail
    text = {"y": "not a number"}  # strings are compared by equality, never measured
    verdict = check_equivalence("y-close", text, text, spec=path, case="a")
    assert not verdict
    assert verdict.failures[0].describe() == "input at y (median_abs needs numeric outputs)"


def test_median_abs_is_calibrated_like_every_measured_metric():
    def pair(case):
        x = np.random.default_rng(case).standard_normal(256)
        return {"y": x}, {"y": x.astype(np.float32).astype(np.float64)}

    result = calibrate(pair, 16, metric="median_abs", metrics=["median_abs"], mutations=[shift()])
    assert result and result.claim_metric.metric == "median_abs"
    assert result.claim_metric.largest_noise < 1e-7  # float32 rounding of unit values
    assert result.claim_metric.largest_noise < result.proposed_bound
    assert result.proposed_bound < result.claim_metric.smallest_bug


def test_an_unknown_metric_is_refused_naming_the_choices(tmp_path):
    path = make_project(tmp_path, TINY_SPEC.replace('"max_abs"', '"cosine_distance_t"'))
    with pytest.raises(SpecError, match="expected one of exact, max_abs"):
        load_spec(path)

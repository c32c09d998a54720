"""Approximation oracle: at the default threshold the cache changes the output on purpose, so the
claim is perceptual (SSIM of the decoded image against the in-process vanilla image) plus an
activity band (skipped body evaluations, counted by paritygate, never by the cache itself), so
that a cache that does nothing, or one that lies about what it skipped, cannot pass."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate import count_calls
from paritygate.structured import compare_images


@pytest.fixture(scope="module")
def claim(spec):
    return spec.claims["cache-ssim"]


def _counted(function, case, claim):
    """A run's outputs and the calls of the claim's counted callable (DiT.body) it made."""
    with count_calls([claim.activity.calls]) as counter:
        out = function(case)
    return out, counter.counts[claim.activity.calls]


@pytest.fixture(scope="module")
def vanilla_calls(runners, cases, claim):
    return _counted(runners.vanilla, cases[0], claim)[1]


@pytest.fixture(scope="module")
def proxy_cached(runners, cases, claim):
    return {case.name: _counted(runners.proxy_cached, case, claim) for case in cases}


def _ssim(actual, expected, claim):
    return compare_images(
        actual["image"],
        expected["image"],
        data_range=claim.params["data_range"],
        min_ssim=claim.bound,
        path="image",
    )


def _activity(claim, vanilla_calls, calls):
    from paritygate import check_activity

    band = claim.activity
    return check_activity({band.counter: calls}, band, {band.counter: vanilla_calls})


def test_the_spec_counts_the_body_and_refuses_a_self_reported_counter(claim):
    from paritygate import ActivityBand, SpecError

    assert (claim.activity.calls, claim.activity.measure) == ("model:DiT.body", "skipped")
    with pytest.raises(SpecError, match="not activity evidence"):
        ActivityBand.from_mapping({"counter": "skipped_steps", "min": 6, "max": 9})


def test_cache_keeps_the_ssim_floor_and_skips_within_the_band(
    proxy_cached, vanilla_outputs, vanilla_calls, claim, cases
):
    assert vanilla_calls == 25  # the exact path evaluates the body on every step
    skips = []
    for case in cases:
        out, calls = proxy_cached[case.name]
        result = _ssim(out, vanilla_outputs[case.name], claim)
        assert result, (case.name, result.failures)
        assert result.ssim < 1.0, "at the default threshold the cache must change the image"
        assert _activity(claim, vanilla_calls, calls) is None, (case.name, calls)
        skips.append(vanilla_calls - calls)
    assert min(skips) >= claim.activity.low and max(skips) <= claim.activity.high


def test_eager_variant_is_byte_equal_to_the_proxy(runners, proxy_cached, cases, claim):
    """Measured, not assumed: on MLX CPU the eager closure over the compiled pipeline takes the
    same skip decisions and produces the same bytes as the re-walking proxy."""
    for case in cases[:4]:
        eager, eager_calls = _counted(runners.eager_cached, case, claim)
        proxy, proxy_calls = proxy_cached[case.name]
        assert eager_calls == proxy_calls
        assert np.array_equal(eager["sample"], proxy["sample"])


def test_a_cache_that_never_skips_fails_the_band_but_not_the_floor(
    vanilla_outputs, vanilla_calls, claim, cases
):
    from mutations import never_skip_case

    case = cases[0]
    out, calls = _counted(never_skip_case, case, claim)
    assert _ssim(out, vanilla_outputs[case.name], claim)  # perfect quality: SSIM alone passes it
    failure = _activity(claim, vanilla_calls, calls)
    assert failure is not None and failure.metric == "activity:model:DiT.body"
    assert "skipped (reference minus candidate) = 0 (counted by paritygate)" in failure.detail
    assert "the optimization did nothing" in failure.detail


def test_a_cache_that_lies_about_its_skips_fails_the_band(
    vanilla_outputs, vanilla_calls, claim, cases
):
    """Its counter says 7 skipped steps; its body ran on all 25: the counted band fails it."""
    from mutations import lying_cache_case

    case = cases[0]
    with count_calls([claim.activity.calls]) as counter:
        out, reported = lying_cache_case(case)
    assert reported == 7 and claim.activity.low <= reported <= claim.activity.high
    assert counter.counts[claim.activity.calls] == vanilla_calls
    assert _ssim(out, vanilla_outputs[case.name], claim)  # quality alone passes it
    failure = _activity(claim, vanilla_calls, counter.counts[claim.activity.calls])
    assert failure is not None and "the optimization did nothing" in failure.detail


@pytest.mark.parametrize("bug", ["residual_dropped_case", "stale_residual_case"])
def test_planted_cache_bugs_fall_below_the_ssim_floor(bug, vanilla_outputs, claim, cases):
    import mutations

    worst = min(
        _ssim(getattr(mutations, bug)(case), vanilla_outputs[case.name], claim).ssim
        for case in cases[:4]
    )
    assert worst < claim.bound


def test_skip_decisions_follow_the_threshold(runners, teacache, cases):
    """More threshold, more skips: the counter is driven by the rescaled change, not fixed."""
    pipeline = runners.shared_pipeline()
    inputs = runners.case_inputs(cases[0])
    counts = []
    for threshold in (0.0, 0.01, teacache.DEFAULT_THRESHOLD, 0.05):
        cache = teacache.install(pipeline, "proxy", rel_l1_thresh=threshold)
        try:
            pipeline.sample(*inputs)
        finally:
            teacache.uninstall(pipeline)
        counts.append(cache.skips_per_run[0])
        decisions = cache.decisions[0]
        assert len(decisions) == pipeline.steps and not decisions[0] and not decisions[-1]
    assert counts[0] == 0 and counts == sorted(counts) and counts[-1] > counts[2] > 0

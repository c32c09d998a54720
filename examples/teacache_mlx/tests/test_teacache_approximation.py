"""Approximation oracle: at the default threshold the cache changes the output on purpose, so the
claim is perceptual (SSIM of the decoded image against the in-process vanilla image) plus an
activity band (skipped steps), so that a cache that does nothing cannot pass."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate.approximation import check_activity
from paritygate.structured import compare_images


@pytest.fixture(scope="module")
def claim(spec):
    return spec.claims["cache-ssim"]


@pytest.fixture(scope="module")
def proxy_cached(runners, cases):
    return {case.name: runners.proxy_cached(case) for case in cases}


def _ssim(actual, expected, claim):
    return compare_images(
        actual["image"],
        expected["image"],
        data_range=claim.params["data_range"],
        min_ssim=claim.bound,
        path="image",
    )


def test_cache_keeps_the_ssim_floor_and_skips_within_the_band(
    proxy_cached, vanilla_outputs, claim, cases
):
    skips = []
    for case in cases:
        out = proxy_cached[case.name]
        result = _ssim(out, vanilla_outputs[case.name], claim)
        assert result, (case.name, result.failures)
        assert result.ssim < 1.0, "at the default threshold the cache must change the image"
        assert check_activity(out, claim.activity) is None, (case.name, out["skipped_steps"])
        skips.append(int(out["skipped_steps"]))
    assert min(skips) >= claim.activity.low and max(skips) <= claim.activity.high


def test_eager_variant_is_byte_equal_to_the_proxy(runners, proxy_cached, cases):
    """Measured, not assumed: on MLX CPU the eager closure over the compiled pipeline takes the
    same skip decisions and produces the same bytes as the re-walking proxy."""
    for case in cases[:4]:
        eager = runners.eager_cached(case)
        proxy = proxy_cached[case.name]
        assert int(eager["skipped_steps"]) == int(proxy["skipped_steps"])
        assert np.array_equal(eager["sample"], proxy["sample"])


def test_a_cache_that_never_skips_fails_the_band_but_not_the_floor(vanilla_outputs, claim, cases):
    from mutations import never_skip_case

    case = cases[0]
    out = never_skip_case(case)
    assert _ssim(out, vanilla_outputs[case.name], claim)  # perfect quality: SSIM alone passes it
    failure = check_activity(out, claim.activity)
    assert failure is not None and failure.metric == "activity:skipped_steps"
    assert (
        "skipped_steps = 0" in failure.detail and "the optimization did nothing" in failure.detail
    )


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

"""No-op oracle: at rel_l1_thresh = 0 each cache variant is byte-equal to vanilla, paired in one
process (baseline -> candidate -> baseline again, and the reversed order), with zero skips; and
uninstall restores the pipeline exactly. The planted leak fails check (b)."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate import paired


@pytest.fixture(scope="module")
def batch(runners, cases):
    """Four spec cases as one batch: the cache decides per batch, and at threshold 0 never."""
    pairs = [runners.case_inputs(c) for c in cases[:4]]
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def _noop_pair(teacache, pipeline, variant, batch, threshold=0.0, cls=None):
    caches = []

    def baseline():
        return {"sample": pipeline.sample(*batch)}

    def candidate():
        if cls is None:
            cache = teacache.install(pipeline, variant, rel_l1_thresh=threshold)
        else:
            cache = cls(threshold).install(pipeline)
        try:
            out = pipeline.sample(*batch)
        finally:
            cache.uninstall()
        caches.append(cache)
        return {"sample": out}

    return baseline, candidate, caches


@pytest.mark.parametrize("variant, compiled", [("proxy", False), ("eager", True)])
def test_threshold_zero_is_byte_equal_in_both_orders_with_zero_skips(
    runners, teacache, batch, variant, compiled, paritygate_paired
):
    pipeline = runners.shared_pipeline(compiled)
    baseline, candidate, caches = _noop_pair(teacache, pipeline, variant, batch)
    # No reset hook: nothing carries over legitimately between runs (the noise comes with the
    # case), and a reset must never undo what the candidate leaked.
    result = paritygate_paired(
        baseline, candidate, reset=None, tolerance=None, label=f"{variant} no-op"
    )
    assert result.exact and result.orders == ["forward", "reversed"]
    assert result.run_counts == {"baseline": 3, "candidate": 3}
    assert [c.skips_per_run for c in caches] == [[0], [0], [0]]
    assert len(result.checks) == 4 and all(c.exact for c in result.checks)


def test_threshold_zero_creates_no_cache_tensors(runners, teacache, batch):
    pipeline = runners.shared_pipeline()
    for threshold, expect_tensors in ((0.0, False), (teacache.DEFAULT_THRESHOLD, True)):
        cache = teacache.install(pipeline, "proxy", rel_l1_thresh=threshold)
        held = []
        pipeline.callbacks.insert(
            0, lambda step, t, x, held=held, cache=cache: held.append(cache.holds_tensors)
        )
        try:
            pipeline.sample(*batch)
        finally:
            pipeline.callbacks.pop(0)
            teacache.uninstall(pipeline)
        assert any(held) is expect_tensors, (threshold, held)
        assert len(held) == pipeline.steps


@pytest.mark.parametrize("variant, compiled", [("proxy", False), ("eager", True), ("eager", False)])
def test_uninstall_restores_the_pipeline_exactly(runners, teacache, variant, compiled):
    pipeline = runners.shared_pipeline(compiled)
    before = teacache.fingerprint(pipeline)
    predict, transformer = pipeline.predict, pipeline.transformer
    cache = teacache.install(pipeline, variant)
    assert teacache.fingerprint(pipeline) != before
    assert teacache.installed(pipeline) is cache
    teacache.uninstall(pipeline)
    assert teacache.fingerprint(pipeline) == before
    assert pipeline.predict is predict and pipeline.transformer is transformer
    assert teacache.installed(pipeline) is None and pipeline.callbacks == []


def test_proxy_refuses_a_compiled_pipeline(runners, teacache):
    with pytest.raises(RuntimeError, match="compiled predict has traced the real transformer"):
        teacache.install(runners.shared_pipeline(compiled=True), "proxy")
    assert teacache.installed(runners.shared_pipeline(compiled=True)) is None


@pytest.fixture
def private_pipeline(runners, model_mod):
    """A pipeline of its own, so that a planted leak cannot reach the shared ones."""
    return model_mod.Pipeline(runners.shared_model(), compiled=True)


def test_planted_leak_fails_check_b(teacache, private_pipeline, batch, example_folder):
    from mutations import LeakyEagerTeaCache

    pipeline = private_pipeline
    before = teacache.fingerprint(pipeline)
    baseline, candidate, _ = _noop_pair(
        teacache, pipeline, "eager", batch, teacache.DEFAULT_THRESHOLD, LeakyEagerTeaCache
    )
    result = paired(baseline, candidate, tolerance=None, orders=("forward",), label="leaky")
    assert not result
    failed = {(c.check, c.actual_run) for c in result.failing()}
    assert ("b", "baseline-after") in failed, result.summary()
    assert any("check (b) baseline-after vs baseline-before" in m for m in result.messages())
    # The leak is structural too: the fingerprint sees it even where the outputs could not.
    assert teacache.fingerprint(pipeline) != before


def test_a_correct_cache_passes_check_b_while_it_approximates(teacache, private_pipeline, batch):
    """The same paired run with the correct eager cache: check (b) holds, check (a) reports the
    intended approximation. Check (b) is what separates the leak from the cache itself."""
    baseline, candidate, caches = _noop_pair(
        teacache, private_pipeline, "eager", batch, teacache.DEFAULT_THRESHOLD
    )
    result = paired(baseline, candidate, tolerance=None, orders=("forward",))
    checks = {c.check: c for c in result.checks}
    assert checks["b"].passed and not checks["a"].passed
    assert caches[0].skips_per_run[0] > 0


def test_threshold_zero_leak_is_invisible_to_outputs_but_not_to_the_fingerprint(
    teacache, private_pipeline, batch
):
    """At threshold 0 the leaked closure computes the vanilla math: outputs cannot show it (so
    check (b) runs the cache at its default threshold), the structural fingerprint can."""
    from mutations import LeakyEagerTeaCache

    pipeline = private_pipeline
    before = teacache.fingerprint(pipeline)
    baseline, candidate, _ = _noop_pair(teacache, pipeline, "eager", batch, 0.0, LeakyEagerTeaCache)
    result = paired(baseline, candidate, tolerance=None, orders=("forward",))
    assert result, result.summary()
    assert teacache.fingerprint(pipeline) != before

"""Equivalence oracle: the PyTorch twin is a genuinely different numerical path (float32 PyTorch
CPU kernels against MLX's), so its claim is a tolerance calibrated on a measured, non-zero noise
distribution, with planted bugs on the far side of the bound."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate import Tolerance, compare, evaluate_claim
from paritygate.calibration import DEFAULT_MUTATIONS, NO_GAP_REASON, calibrate


@pytest.fixture(scope="module")
def run_pair(vanilla_outputs, twin_outputs):
    return lambda case: (
        {"sample": vanilla_outputs[case.name]["sample"]},
        {"sample": twin_outputs[case.name]["sample"]},
    )


@pytest.fixture(scope="module")
def twin_calibration(run_pair, cases, runners, example_folder):
    import mutations

    return calibrate(
        run_pair,
        cases,
        metric="max_abs",
        mutations=DEFAULT_MUTATIONS,
        model_mutations={
            "twin-block3-scaled-1.01": lambda c: {
                "sample": mutations.torch_block_scaled_case(c)["sample"]
            },
            "twin-block3-zeroed": lambda c: {
                "sample": mutations.torch_block_zeroed_case(c)["sample"]
            },
        },
        margin_for={"another x86-64 CPU or BLAS build": 4.0},
        claim_id="twin-max-abs",
    )


def test_twin_noise_is_real_and_separated_from_every_bug(twin_calibration, cases):
    result = twin_calibration
    assert result, result.summary()
    dist = result.claim_metric
    assert not result.noise_exactly_zero and result.proposal == "tolerance"
    assert len(dist.noise) == len(cases) >= 16
    assert min(dist.noise) > 0, "float32 PyTorch against MLX: every case differs a little"
    assert dist.separated and dist.smallest_bug > 100 * dist.largest_noise
    assert all(m.caught == m.cases == len(cases) for m in result.mutations), result.summary()


def test_the_spec_bound_holds_and_catches_what_calibration_injected(twin_calibration, bound):
    """The bound in parity.toml (written by calibrate_claims.py) still lies between the noise
    measured now and the smallest bug signal."""
    dist = twin_calibration.claim_metric
    published = bound("twin-max-abs")
    assert dist.largest_noise <= published < dist.smallest_bug


def test_calibration_on_a_metric_without_gap_is_refused(run_pair, cases):
    """max_rel divides by near-zero pixels of the sample: its twin noise (~4e-3) exceeds what a
    float16 drop does to it, so the calibration refuses and says to change the comparison."""
    result = calibrate(run_pair, cases, metric="max_rel", model_mutations={})
    assert not result and result.refused and result.proposal == "none"
    assert result.reason.startswith(NO_GAP_REASON)
    assert "max_abs" in result.reason  # it names the metrics that would separate


@pytest.mark.parametrize("factor", [1.01, 0.0])
def test_mlx_model_mutation_is_caught_by_the_calibrated_bound(
    factor, spec, runners, model_mod, twin_outputs, cases
):
    """A body block of the MLX model scaled by 1.01 (or dropped) fails the twin claim; the
    unmutated model passes it. MLX has no hooks: the mutation is a block of the model."""
    claim = spec.claims["twin-max-abs"]
    model = runners.shared_model()
    for case in cases[:2]:
        clean = evaluate_claim(
            claim, "torch-twin", case.name, twin_outputs[case.name], runners.vanilla(case)
        )
        assert clean.passed, clean.failures
        restore = model_mod.mutate_block(model, 3, factor)
        try:
            mutated = runners.vanilla(case)
        finally:
            restore()
        verdict = evaluate_claim(claim, "torch-twin", case.name, twin_outputs[case.name], mutated)
        assert not verdict.passed and verdict.observed > claim.bound
        assert any(f.metric == "max_abs" for f in verdict.failures)
        comparison = compare(
            twin_outputs[case.name]["sample"],
            mutated["sample"],
            tolerance=Tolerance(atol=claim.bound),
        )
        assert not comparison and np.isfinite(comparison.outputs[0].max_abs)

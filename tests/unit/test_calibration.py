"""Calibration: noise distributions, mutations, gap, proposal, refusal and writing the bound."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from paritygate.calibration import (
    NO_GAP_REASON,
    additive_noise,
    calibrate,
    calibration_plot,
    reduced_precision,
    shift,
    spike,
    swap_channels,
)
from paritygate.errors import InputError

WEIGHTS = [np.random.default_rng(i).standard_normal((24, 24)) / 5 for i in range(4)]


def model(x: np.ndarray, dtype=np.float32, *, zero_block: int | None = None) -> dict:
    """A residual MLP; ``zero_block`` zeroes one block's output (a model-level bug)."""
    h = x.astype(dtype)
    for i, w in enumerate(WEIGHTS):
        r = np.tanh(h @ w.astype(dtype))
        if i == zero_block:
            r = np.zeros_like(r)
        h = h + r
    return {"hidden": h.astype(np.float32), "argmax": np.argmax(h, axis=-1)}


def inputs(case: int) -> np.ndarray:
    return np.random.default_rng(100 + case).standard_normal((12, 24))


def twin(case):  # float64 reference against the float32 port: small, non-zero noise
    return model(inputs(case), np.float64), model(inputs(case), np.float32)


def zeroed_block(case):
    """block 2 output zeroed"""
    return model(inputs(case), np.float32, zero_block=2)


def test_bound_is_proposed_past_the_noise_and_catches_a_model_level_mutation():
    result = calibrate(twin, 16, outputs=["hidden"], model_mutations={"zeroed block": zeroed_block})
    assert result and not result.refused and result.proposal == "tolerance"
    dist = result.claim_metric
    expected_noise = [
        float(
            np.max(
                np.abs(
                    model(inputs(c), np.float32)["hidden"].astype(np.float64)
                    - model(inputs(c), np.float64)["hidden"].astype(np.float64)
                )
            )
        )
        for c in range(16)
    ]
    assert dist.noise == pytest.approx(expected_noise)
    assert 0 < dist.largest_noise == max(expected_noise)
    tail = sorted(expected_noise)[-1] - sorted(expected_noise)[-1 - 4]  # top k = sqrt(16)
    assert result.tail_margin == pytest.approx(tail)
    assert dist.largest_noise + tail <= result.proposed_bound <= (dist.largest_noise + tail) * 1.1
    assert result.proposed_bound < dist.smallest_bug
    block = next(m for m in result.mutations if m.name == "zeroed block")
    assert block.kind == "model" and block.description == "block 2 output zeroed"
    assert block.cases == 16 and block.caught == 16
    assert block.smallest_signal > 100 * result.proposed_bound
    assert result.risk == pytest.approx(1 / 17)
    assert "proposal: max_abs <= " in result.summary()
    assert "margin: noise tail +" in result.summary() and "top 4 of 16" in result.summary()


def test_every_metric_keeps_its_raw_distribution_in_json():
    result = calibrate(twin, 16, outputs=["hidden"], model_mutations={"zeroed block": zeroed_block})
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data["by_metric"]) == {"max_abs", "mean_abs", "max_rel", "cosine"}
    cosine = data["by_metric"]["cosine"]
    assert len(cosine["noise"]) == 16 and cosine["direction"] == "min"
    assert set(cosine["bugs"]) >= {"zeroed block", "float16", "spike(0.1)"}
    assert data["basis"]["n"] == 16 and data["basis"]["metric"] == "max_abs"
    assert data["basis"]["hardware"] and data["basis"]["date"]
    assert data["format"] == "paritygate-calibration"
    assert data["calibration"]["noise"] == data["by_metric"]["max_abs"]["noise"]
    assert (
        data["calibration"]["zeroed block"] == data["by_metric"]["max_abs"]["bugs"]["zeroed block"]
    )
    assert data["bound"] == result.proposed_bound


def test_higher_is_better_metric_proposes_a_floor_below_the_noise():
    result = calibrate(
        twin, 16, metric="cosine", outputs=["hidden"], mutations=[shift(-1), spike(0.5)]
    )
    dist = result.claim_metric
    assert result.proposal == "tolerance"
    assert dist.smallest_bug < result.proposed_bound <= dist.largest_noise
    assert all(m.caught == m.cases for m in result.mutations)


def test_exactly_zero_noise_proposes_an_exact_claim():
    same = lambda case: (model(inputs(case)), model(inputs(case)))  # noqa: E731
    paired_result = calibrate(same, 16)
    assert paired_result.noise_exactly_zero and paired_result.proposal == "exact"
    assert paired_result.proposed_bound == 0
    assert paired_result.exact_claim() == {
        "metric": "exact",
        "bound": 0,
        "mode": "paired",
        "kind": "no-op",
    }
    assert "noise is exactly zero over 16 cases" in paired_result.reason
    stored = calibrate(same, 16, mode="stored")
    assert stored.exact_claim()["kind"] == "exact-equivalence"
    assert "exact-equivalence claim" in stored.reason


def test_zero_in_value_but_not_in_bytes_is_not_an_exact_claim():
    def signed_zeros(case):  # -0.0 against +0.0: max-abs 0, yet byte equality fails
        base = model(inputs(case))
        flipped = dict(base, hidden=base["hidden"].copy())
        flipped["hidden"][0, 0] = -0.0
        base["hidden"][0, 0] = 0.0
        return base, flipped

    result = calibrate(signed_zeros, 16, outputs=["hidden"])
    assert result.claim_metric.largest_noise == 0
    assert not result.noise_exactly_zero and result.proposal == "tolerance"
    assert result.exact_claim() is None and result.proposed_bound == 0
    assert "byte equality fails" in result.judge_bound("exact", 0)
    assert result.judge_bound("max_abs", 0).startswith("noise fails it in 0 of 16 runs")
    same = calibrate(lambda case: (model(inputs(case)), model(inputs(case))), 16)
    assert same.judge_bound("exact", 0).startswith("noise fails it in 0 of 16 runs")


def test_no_gap_is_refused_with_the_reason():
    def half_precision(case):  # a float16 port whose noise swamps a small, real bug
        return model(inputs(case), np.float64), model(inputs(case), np.float16)

    result = calibrate(half_precision, 16, outputs=["hidden"], mutations=[additive_noise(1e-5)])
    assert not result and result.refused and result.proposal == "none"
    assert result.proposed_bound is None
    assert result.reason.startswith(NO_GAP_REASON)
    assert "noise(1e-05) gives only" in result.reason
    assert "REFUSED: no gap between noise and the smallest bug" in result.summary()


def test_summary_states_the_gap_width_and_ratio_or_its_absence():
    result = calibrate(twin, 16, outputs=["hidden"], model_mutations={"zeroed block": zeroed_block})
    dist = result.claim_metric
    line = result.gap_line()
    assert line in result.summary()
    assert f"width {dist.smallest_bug - dist.largest_noise:.4g}" in line
    assert f"the bug {dist.smallest_bug / dist.largest_noise:.3g}x the noise" in line
    floor = calibrate(twin, 16, metric="cosine", outputs=["hidden"], mutations=[spike(0.5)])
    cos = floor.claim_metric
    assert f"{(1 - cos.smallest_bug) / (1 - cos.largest_noise):.3g}x" in floor.gap_line()

    def half_precision(case):
        return model(inputs(case), np.float64), model(inputs(case), np.float16)

    refused = calibrate(half_precision, 16, outputs=["hidden"], mutations=[additive_noise(1e-5)])
    assert "NO GAP, the bug hides inside the noise" in refused.gap_line()
    assert "x the noise" not in refused.gap_line()


def test_margin_is_applied_only_when_named_and_said():
    plain = calibrate(twin, 16, outputs=["hidden"])
    widened = calibrate(twin, 16, outputs=["hidden"], margin_for={"other machine": 3})
    assert widened.margins == {"other machine": 3.0}
    assert widened.bound_before_margin == plain.claim_metric.largest_noise
    assert (
        3 * plain.claim_metric.largest_noise
        <= widened.proposed_bound
        <= 3.3 * plain.claim_metric.largest_noise
    )
    assert "margin: other machine x3" in widened.summary()
    eaten = calibrate(twin, 16, outputs=["hidden"], margin_for={"another library": 1e5})
    assert eaten.refused and "with the margin for another library x100000" in eaten.reason
    with pytest.raises(InputError, match="factor >= 1"):
        calibrate(twin, 16, margin_for={"other machine": 0.5})


def test_too_few_cases_are_refused_unless_accepted_knowingly():
    with pytest.raises(InputError, match=r"at least 16 cases, got 5.*1/\(n\+1\)"):
        calibrate(twin, 5)
    assert calibrate(twin, 5, min_cases=5, outputs=["hidden"]).n == 5


def test_repeats_and_reordering_are_recorded():
    calls = []

    def recording(case):
        calls.append(case)
        return twin(case)

    result = calibrate(recording, 16, repeats=3, reorder=True, outputs=["hidden"])
    assert len(result.claim_metric.noise) == 48
    assert calls[:16] == list(range(16))
    assert sorted(calls[16:32]) == list(range(16)) and calls[16:32] != list(range(16))
    assert result.repeat_spread == 0.0
    assert "spread across repeats of one case: 0" in result.summary()


def test_builtin_mutations_do_what_they_say():
    rng = np.random.default_rng(0)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(shift(-1).apply(x, rng), np.roll(x, 1, axis=-1))
    swapped = swap_channels(0, 0, 2).apply(x, rng)
    assert np.array_equal(swapped[[2, 1, 0]], x)
    spiked = spike(0.5).apply(x, rng)
    (changed,) = np.flatnonzero(spiked != x)
    assert spiked.reshape(-1)[changed] - x.reshape(-1)[changed] == pytest.approx(0.5 * 11)
    noisy = additive_noise(1e-2).apply(x, np.random.default_rng(1))
    rms = float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))
    assert 0 < np.std(noisy - x) < 3e-2 * rms
    third = np.array([1 / 3], dtype=np.float32)
    assert reduced_precision("bfloat16").apply(third, rng)[0] == np.float32(0.333984375)
    assert additive_noise().apply(np.arange(3), rng) is None  # integers: not applicable
    assert swap_channels(-1, 0, 5).apply(x, rng) is None  # axis too short
    assert reduced_precision("float16").apply(np.ones(2, np.float16), rng) is None
    with pytest.raises(InputError, match="float16 and bfloat16"):
        reduced_precision("int8")


def test_mutations_that_change_nothing_are_not_counted_as_bugs():
    constant = lambda case: ({"y": np.ones((4, 4))}, {"y": np.ones((4, 4))})  # noqa: E731
    result = calibrate(constant, 16, mutations=[shift(-1), swap_channels(-1), spike(0.1)])
    by_name = {m.name: m for m in result.mutations}
    assert (
        by_name["shift(axis=-1,by=1)"].cases == 0
        and by_name["shift(axis=-1,by=1)"].smallest_signal is None
    )
    assert by_name["spike(0.1)"].cases == 16


def test_ssim_is_recorded_for_images_with_an_explicit_data_range():
    def images(case):
        image = np.random.default_rng(case).random((16, 16))
        return {"image": image}, {"image": np.clip(image + 1e-4 * (case % 3), 0, 1)}

    result = calibrate(
        images, 16, metric="ssim", ssim_data_range=1.0, mutations=[shift(0), spike(0.5)]
    )
    assert len(result.by_metric["ssim"].noise) == 16
    assert result.proposal == "tolerance"
    assert (
        result.claim_metric.smallest_bug
        < result.proposed_bound
        <= result.claim_metric.largest_noise
    )
    with pytest.raises(InputError, match="data range"):
        calibrate(images, 16, metric="ssim")


def test_bad_inputs_name_the_problem():
    with pytest.raises(InputError, match="cannot calibrate metric 'psnr'"):
        calibrate(twin, 16, metric="psnr")
    with pytest.raises(InputError, match=r"match none of the outputs \(hidden, argmax\)"):
        calibrate(twin, 16, outputs=["logits"])
    with pytest.raises(InputError, match=r"must return \(baseline_outputs, candidate_outputs\)"):
        calibrate(lambda case: model(inputs(case)), 16)


def test_plot_draws_noise_bugs_and_bound(tmp_path):
    result = calibrate(twin, 16, outputs=["hidden"], model_mutations={"zeroed block": zeroed_block})
    path = calibration_plot(result, tmp_path / "calibration.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_only_the_claims_outputs_are_read():
    def with_extras(case):
        baseline, candidate = twin(case)
        candidate = candidate | {"skipped_steps": 3, "note": "cache warm"}
        return baseline | {"note": "reference"}, candidate

    result = calibrate(with_extras, 16, outputs=["hid*"])
    assert result.outputs == ["hidden"] and result.proposal == "tolerance"
    with pytest.raises(InputError, match=r"is not numeric"):
        calibrate(with_extras, 16)


def test_write_bound_returns_plain_fields_and_refuses_a_refused_result(tmp_path):
    from spec_helpers import TINY_SPEC, make_project

    from paritygate.calibration import write_bound
    from paritygate.spec import load_spec

    spec = make_project(tmp_path, TINY_SPEC)
    result = calibrate(twin, 16, outputs=["hidden"], claim_id="y-close")
    fields = write_bound(spec, "y-close", result)
    assert json.loads(json.dumps(fields))["basis"]["n"] == 16
    claim = load_spec(spec).claims["y-close"]
    assert (claim.bound, claim.status) == (result.proposed_bound, "calibrated")

    before = spec.read_text()
    refused = calibrate(
        lambda case: (model(inputs(case), np.float64), model(inputs(case), np.float16)),
        16,
        outputs=["hidden"],
        mutations=[additive_noise(1e-5)],
    )
    with pytest.raises(InputError, match="calibration refused, nothing written: no gap"):
        write_bound(spec, "y-close", refused)
    assert spec.read_text() == before


def test_write_bound_refuses_another_claims_calibration(tmp_path):
    from spec_helpers import TINY_SPEC, make_project

    from paritygate.calibration import write_bound

    spec = make_project(tmp_path, TINY_SPEC)
    result = calibrate(twin, 16, outputs=["hidden"], claim_id="other-claim")
    with pytest.raises(InputError, match="measured claim 'other-claim', not 'y-close'"):
        write_bound(spec, "y-close", result)


def test_activity_counters_are_recorded_per_run_and_per_model_mutation():
    def cached(case):  # an approximation reporting how many steps it skipped
        base = model(inputs(case))
        approx = dict(base, hidden=base["hidden"] * np.float32(1 + 1e-4))
        return base, {**approx, "skipped": np.int64(5 + case % 3)}

    def never_skips(case):
        """a cache that never skips"""
        return {**model(inputs(case)), "skipped": 0}

    result = calibrate(
        cached,
        16,
        outputs=["hidden"],
        model_mutations={"never skips": never_skips},
        counters=["skipped"],
    )
    assert result.activity["skipped"]["candidate"] == [float(5 + c % 3) for c in range(16)]
    assert result.activity["skipped"]["never skips"] == [0.0] * 16
    assert (
        "activity skipped (min..max over runs): candidate 5..7; never skips 0..0"
        in result.summary()
    )
    assert result.judge_activity("skipped", 5, 7) == (
        "the candidate is inside it in 16 of 16 runs; it rejects never skips"
    )
    assert result.judge_activity("skipped", 0, 6) == "the candidate is inside it in 11 of 16 runs"
    with pytest.raises(InputError, match="reports no activity counter 'hits'"):
        calibrate(cached, 16, outputs=["hidden"], counters=["hits"])


def no_segments(case):
    """the segmenter finds no segment: an empty (0, 2) array where the reference has (2, 2)"""
    return {
        "hidden": model(inputs(case), np.float32)["hidden"],
        "segments": np.zeros((0, 2), np.int64),
    }


def with_segments(case):
    h = model(inputs(case), np.float32)["hidden"]
    return {"hidden": h, "segments": np.array([[0, 4], [6, 10]], np.int64) + case}


def segment_twin(case):
    baseline = with_segments(case)
    return {**baseline, "hidden": model(inputs(case), np.float64)["hidden"]}, with_segments(case)


@pytest.mark.parametrize("metric", ["max_abs", "cosine"])
def test_a_model_mutation_that_changes_an_outputs_structure_is_caught_in_every_case(metric):
    dropped = lambda case: {"hidden": with_segments(case)["hidden"]}  # noqa: E731
    extra = lambda case: {**with_segments(case), "debug": np.ones(3)}  # noqa: E731
    result = calibrate(
        segment_twin,
        16,
        metric=metric,
        model_mutations={"no segments": no_segments, "dropped": dropped, "extra": extra},
        mutations=[additive_noise(1e-2)],
    )
    assert result and result.proposal == "tolerance"
    dist = result.claim_metric
    worst = math.inf if metric == "max_abs" else -math.inf
    for name in ("no segments", "dropped", "extra"):
        assert dist.bugs[name] == [worst] * 16
    # The bound still rests on the real noise, not on the structural bugs.
    noise = [
        float(
            np.max(
                np.abs(
                    model(inputs(c), np.float32)["hidden"].astype(np.float64)
                    - model(inputs(c), np.float64)["hidden"]
                )
            )
        )
        for c in range(16)
    ]
    if metric == "max_abs":
        assert (
            dist.largest_noise == max(noise) and dist.largest_noise <= result.proposed_bound < 1e-3
        )
    else:
        assert dist.largest_noise < 1 and result.proposed_bound <= dist.largest_noise
    assert dist.smallest_bug_mutation == "noise(0.01)"
    summaries = {m.name: m for m in result.mutations}
    for name in ("no segments", "dropped", "extra"):
        assert summaries[name].cases == summaries[name].caught == 16
    assert summaries["no segments"].structure_changed[0] == (
        "case 0: structure changed: output 'segments' shape (0, 2) against (2, 2)"
    )
    assert (
        summaries["dropped"].structure_changed[3]
        == "case 3: structure changed: output 'segments' missing"
    )
    assert (
        summaries["extra"].structure_changed[15]
        == "case 15: structure changed: extra output 'debug'"
    )
    assert summaries["noise(0.01)"].structure_changed == []
    text = result.summary()
    assert (
        "structure changed: output 'segments' shape (0, 2) against (2, 2) (and 15 more cases)"
        in text
    )
    json.dumps(result.to_dict())


def test_an_unmutated_candidate_that_changes_an_outputs_structure_stops_calibration():
    def shrinking(case):
        baseline, candidate = segment_twin(case)
        if case == 5:
            candidate = {**candidate, "segments": np.zeros((0, 2), np.int64)}
        return baseline, candidate

    with pytest.raises(InputError) as info:
        calibrate(shrinking, 16, model_mutations={"no segments": no_segments})
    assert str(info.value) == (
        "case 5: output 'segments' of the unmutated candidate: shape (0, 2) against the baseline's "
        "(2, 2)"
    )
    assert "unmutated candidate must report the baseline's outputs" in info.value.hint

    def dropping(case):
        baseline, candidate = segment_twin(case)
        return baseline, {"hidden": candidate["hidden"]}

    with pytest.raises(
        InputError, match=r"case 0: outputs \['segments'\] missing from the unmutated candidate"
    ):
        calibrate(dropping, 16)

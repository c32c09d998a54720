"""Activity bands: a cache that does nothing fails, one inside its band passes."""

from __future__ import annotations

import pytest

from paritygate.approximation import ActivityBand, check_activity
from paritygate.errors import InputError, SpecError

BAND = ActivityBand("skipped_steps", 5, 7)


@pytest.mark.parametrize("skipped", [5, 6, 7])
def test_counter_inside_the_band_passes(skipped):
    assert check_activity({"skipped_steps": skipped, "steps": 25}, BAND) is None


def test_a_cache_that_does_nothing_fails():
    failure = check_activity({"skipped_steps": 0}, BAND)
    assert failure is not None
    assert failure.metric == "activity:skipped_steps"
    assert (failure.bound, failure.observed, failure.excess) == ("5..7", 0, 5.0)
    assert "skipped_steps = 0, claim requires 5..7" in failure.describe()
    assert "did nothing" in failure.detail


def test_too_much_activity_fails():
    failure = check_activity({"skipped_steps": 9}, BAND)
    assert failure.excess == 2.0 and "more activity than claimed" in failure.detail


def test_an_unreported_counter_fails():
    failure = check_activity({"steps": 25}, BAND)
    assert failure.observed is None
    assert "'skipped_steps' was not reported (reported: steps)" in failure.detail


def test_a_non_numeric_counter_fails():
    assert "is not a number" in check_activity({"skipped_steps": "5"}, BAND).detail


def test_spec_form_round_trips():
    data = {"calls": "model:DiT.body", "measure": "skipped", "min": 5, "max": 7}
    band = ActivityBand.from_mapping(data)
    assert (band.calls, band.measure, band.low, band.high) == ("model:DiT.body", "skipped", 5, 7)
    assert band.counter == "@calls:model:DiT.body" and band.to_mapping() == data
    assert ActivityBand("hit_rate", 0.2, 0.4).text == "0.2..0.4"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"calls": "m:f", "min": 5, "max": 7, "mx": 1}, "unknown key(s) mx"),
        ({"calls": "m:f", "min": 5}, "missing key(s) max"),
        ({"calls": "m:f", "min": 8, "max": 7}, "empty: min 8 > max 7"),
        ({"calls": "m:f", "min": "5", "max": 7}, "min for '@calls:m:f' must be a number"),
        ({"calls": "m:f", "min": 5, "max": 7, "differ": "yes"}, "differ must be true or false"),
        ({"counter": "s", "min": 5, "max": 7}, "not activity evidence"),
        ([5, 7], "expected a table"),
    ],
)
def test_bad_spec_forms_name_the_claim(data, message):
    with pytest.raises(SpecError, match="claims.fast.activity") as info:
        ActivityBand.from_mapping(data, where="claims.fast.activity")
    assert message in str(info.value)


def test_constructor_validates():
    with pytest.raises(InputError):
        ActivityBand("", 0, 1)


def test_numpy_counters_from_runner_outputs_are_read():
    import numpy as np

    assert check_activity({"skipped_steps": np.array(6)}, BAND) is None
    assert check_activity({"skipped_steps": np.int64(0)}, BAND).observed == 0


def test_spec_claims_carry_an_activity_band(tmp_path):
    from spec_helpers import TINY_SPEC, make_project

    from paritygate.spec import load_spec

    band = '\nactivity = { calls = "tiny:candidate32", min = 5, max = 7 }\n'
    spec = load_spec(make_project(tmp_path / "ok", TINY_SPEC + band))
    assert spec.claims["y-close"].activity == ActivityBand(
        "@calls:tiny:candidate32", 5, 7, calls="tiny:candidate32"
    )
    assert load_spec(make_project(tmp_path / "none")).claims["y-close"].activity is None
    bad = '\nactivity = { calls = "tiny:candidate32", min = 5, maximum = 7 }\n'
    with pytest.raises(SpecError) as info:
        load_spec(make_project(tmp_path / "bad", TINY_SPEC + bad))
    assert "parity.toml: claims.y-close.activity" in str(info.value)
    assert "unknown key(s) maximum" in str(info.value)


def test_count_calls_counts_and_restores(tmp_path, monkeypatch):
    import sys

    from paritygate.approximation import count_calls

    (tmp_path / "counted_mod.py").write_text(
        "class A:\n    def f(self):\n        return 1\n\n\ndef g():\n    return A().f()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import counted_mod

    original = counted_mod.A.__dict__["f"]
    with count_calls(["counted_mod:A.f", "counted_mod:g"]) as counter:
        for _ in range(3):
            counted_mod.g()
    assert counter.counts == {"counted_mod:A.f": 3, "counted_mod:g": 3}
    assert counted_mod.A.__dict__["f"] is original and counted_mod.g() == 1
    with pytest.raises(InputError, match="not a callable paritygate can count"):
        count_calls(["counted_mod:A.h"]).__enter__()
    with pytest.raises(InputError, match="cannot import 'no_such_module_x'"):
        count_calls(["no_such_module_x:f"]).__enter__()
    del sys.modules["counted_mod"]

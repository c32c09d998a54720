"""The speed claim gated in CI (parity-speed.toml): batching by useful tokens is at least the
published bound faster than the baseline on the `variable` workload, judged by paritygate.bench on
the interval's pessimistic end; switching batching off (a planted slowdown with unchanged outputs)
fails the speed claim and only it."""

from __future__ import annotations

from paritygate import load_spec, run_gate

CLAIM = "token-batching-speedup"


def _speed(result):
    (verdict,) = [v for v in result.verdicts if v.claim_id == CLAIM]
    return verdict


def test_token_batching_speed_claim_holds_and_batching_off_fails_it(example_folder, runners):
    spec = load_spec(example_folder / "parity-speed.toml")
    bound = spec.claims[CLAIM].bound
    result = run_gate(spec)
    speed = _speed(result)
    assert result.passed, [f.describe() for v in result.verdicts for f in v.failures]
    low = 1.0 / speed.evidence["ratio_ci"][1]
    assert speed.evidence["verdict"] == "faster" and low >= bound
    assert speed.evidence["blocks"] >= 13  # a verdict needs the harness's minimum pairs

    real = runners._settings
    saved = runners._ENCODERS.pop("token-batching", None)
    runners._settings = lambda name: real("baseline" if name == "token-batching" else name)
    try:
        planted = run_gate(spec)
    finally:
        runners._settings = real
        runners._ENCODERS.pop("token-batching", None)
        if saved is not None:
            runners._ENCODERS["token-batching"] = saved
    failed = [v for v in planted.verdicts if not v.passed]
    assert [v.claim_id for v in failed] == [CLAIM], [v.claim_id for v in failed]
    (failure,) = failed[0].failures
    assert failure.metric == "speedup" and failure.observed < bound
    assert "the speedup's interval does not clear the bound" in failure.detail

"""The bench checks a path's outputs before timing it: a quantized path whose outputs are wrong
(as on MLX CUDA's faulty one-group kernel) is refused, never timed; a right one is timed."""

from __future__ import annotations

import types

import numpy as np
import pytest


class Fake:
    """An encoder stand-in: fixed outputs, counted calls (``timer`` as the bench passes it)."""

    def __init__(self, outputs):
        self.outputs = outputs
        self.calls = 0
        self.model = types.SimpleNamespace(parameters=dict)  # no weights to count

    def __call__(self, items, timer=None):
        self.calls += 1
        return self.outputs


def _outputs(seed: int, n: int = 20) -> dict:
    rng = np.random.default_rng(seed)
    return {"action": rng.standard_normal((n, 10)), "choice": rng.standard_normal((n, 5))}


@pytest.fixture(scope="module")
def bench(model_mod, example_module):
    return example_module("bench_encoder")


def test_a_quantized_path_with_wrong_outputs_is_refused_before_timing(bench):
    base = _outputs(0)
    near = {k: v + 1e-4 for k, v in base.items()}  # q8-like: decisions kept
    wrong = _outputs(1)  # a faulty kernel: decisions scrambled
    evidence = bench.check_before_timing("q8", Fake(near), [], base, exact=False)
    assert evidence["argmax_agreement"] == 1.0 and evidence["max_abs_vs_baseline"] < 2e-4
    with pytest.raises(bench.WrongOutputs, match=r"q4: outputs fail the check before timing"):
        bench.check_before_timing("q4", Fake(wrong), [], base, exact=False)
    nan = {k: np.full_like(v, np.nan) for k, v in base.items()}
    with pytest.raises(bench.WrongOutputs, match="not timed"):
        bench.check_before_timing("q8", Fake(nan), [], base, exact=False)


def test_the_latency_phase_times_a_right_path_and_never_a_wrong_one(bench):
    base = _outputs(0)
    encoders = {
        "baseline": Fake(base),
        "q8": Fake({k: v + 1e-4 for k, v in base.items()}),
        "q4": Fake(_outputs(1)),
    }
    runners = types.SimpleNamespace(encoder_for=lambda name: encoders[name])
    out = bench.latency(runners, {"w": []}, "w", ["baseline", "q8", "q4"], 20, "test", None)
    assert "p50_s" in out["baseline"] and "p50_s" in out["q8"]
    assert out["q8"]["output_check_before_timing"]["argmax_agreement"] == 1.0
    assert "WrongOutputs" in out["q4"]["error"] and "not timed" in out["q4"]["error"]
    assert "p50_s" not in out["q4"]
    assert encoders["q4"].calls == 1  # the one untimed check, nothing timed
    assert encoders["q8"].calls > 20

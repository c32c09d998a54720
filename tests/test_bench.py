"""The benchmark harness: interleaving, pairing, variability, sample sufficiency, provenance."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from paritygate.bench import (
    amdahl_bound,
    check_comparable,
    input_fingerprint,
    min_samples_for,
    percentile,
    run_bench,
)
from paritygate.errors import InputError, UserError


def _sleeper(seconds: float, value: float = 1.0):
    def fn(it):
        with it.stage("prepare"):
            x = np.full(4, value)
        with it.stage("compute"):
            time.sleep(seconds)
        return x

    return fn


def test_real_speedup_counts_and_stage_fractions_come_from_the_same_iterations():
    result = run_bench(
        _sleeper(0.006), _sleeper(0.002), workload="sleep", blocks=6, block_size=4, warmup=1
    )
    assert result.improvement_counts, result.verdict
    assert result.speedup > 1.8
    assert "faster" in result.verdict
    fractions = result.candidate.stage_fractions()
    assert 0.5 < fractions["compute"] <= 1.0
    # every iteration recorded every stage, so the fractions are per-iteration ratios
    assert len(result.candidate.stages_s["compute"]) == len(result.candidate.end_to_end_s) == 24


def test_identical_sides_do_not_count_as_an_improvement():
    result = run_bench(
        _sleeper(0.002), _sleeper(0.002), workload="same", blocks=6, block_size=4, warmup=1
    )
    assert not result.improvement_counts
    assert "faster" not in result.verdict


def test_blocks_alternate_order_and_cold_is_apart():
    calls = []

    def make(name):
        def fn(it):
            calls.append(name)
            return None

        return fn

    result = run_bench(make("A"), make("B"), workload="order", blocks=4, block_size=2, warmup=0)
    assert calls[:2] == ["A", "B"]  # cold calls first, timed apart
    body = calls[2:]
    assert body == ["A", "A", "B", "B", "B", "B", "A", "A", "A", "A", "B", "B", "B", "B", "A", "A"]
    assert result.baseline.cold_s >= 0 and len(result.baseline.end_to_end_s) == 8


def test_changed_output_is_not_a_speedup():
    with pytest.raises(UserError, match="differs from baseline"):
        run_bench(
            _sleeper(0.0, 1.0),
            _sleeper(0.0, 2.0),
            workload="wrong",
            blocks=2,
            block_size=1,
            warmup=0,
            check_outputs=lambda a, b: np.array_equal(a, b),
        )


def test_percentiles_need_enough_samples():
    assert (
        min_samples_for(0.5) == 20
        and min_samples_for(0.95) == 200
        and min_samples_for(0.99) == 1000
    )
    with pytest.raises(InputError, match="p95 needs at least 200 samples, got 50"):
        percentile([1.0] * 50, 0.95)
    assert percentile(list(range(201)), 0.95) == pytest.approx(190.0)


def test_amdahl_bound():
    assert amdahl_bound(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert amdahl_bound(1.0, 4.0) == pytest.approx(4.0)
    assert amdahl_bound(0.0, 100.0) == pytest.approx(1.0)
    with pytest.raises(InputError):
        amdahl_bound(1.5, 2.0)


def test_input_fingerprint_hashes_actual_tensors():
    a = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    same = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    other_dtype = {"x": np.arange(6, dtype=np.float64).reshape(2, 3)}
    other_shape = {"x": np.arange(6, dtype=np.float32).reshape(3, 2)}
    assert input_fingerprint(a) == input_fingerprint(same)
    assert input_fingerprint(a) != input_fingerprint(other_dtype)
    assert input_fingerprint(a) != input_fingerprint(other_shape)


def test_runs_with_differing_checked_provenance_refuse_to_mix(tmp_path):
    check_comparable(
        {"source_revision": "abc", "device": "cpu"}, {"source_revision": "abc", "device": "cpu"}
    )
    with pytest.raises(UserError, match="source_revision: 'abc' vs 'def'"):
        check_comparable({"source_revision": "abc"}, {"source_revision": "def"})


def test_cli_bench_compare_refuses_mixed_revisions(tmp_path):
    from paritygate.cli import main

    result = run_bench(
        _sleeper(0.0),
        _sleeper(0.0),
        workload="w",
        blocks=2,
        block_size=1,
        warmup=0,
        provenance={"source_revision": "abc"},
    )
    first = tmp_path / "a.json"
    first.write_text(json.dumps(result.to_dict()))
    data = result.to_dict()
    data["provenance"]["source_revision"] = "def"
    second = tmp_path / "b.json"
    second.write_text(json.dumps(data))
    assert main(["bench", "show", str(first)]) == 0
    assert main(["bench", "compare", str(first), str(first)]) == 0
    assert main(["bench", "compare", str(first), str(second)]) == 2
    garbage = tmp_path / "g.json"
    garbage.write_text("{nope")
    assert main(["bench", "show", str(garbage)]) == 2

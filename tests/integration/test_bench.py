"""The benchmark harness: the decision rule on synthetic samples whose false-alarm rate is known
exactly, sequential looks, sync planning, loop calibration on a fake clock, and the paired run
end to end (verdict fields, refusals, provenance, the A/A threshold cache). No assertion here
depends on how fast this machine is."""

from __future__ import annotations

import itertools
import json
import math
import time

import numpy as np
import pytest

from paritygate.bench import (
    BenchResult,
    Verdict,
    _noise,
    _stats,
    _timing,
    amdahl_bound,
    check_comparable,
    decide,
    format_ratio,
    input_fingerprint,
    load_samples,
    min_decisive_pairs,
    min_pairs,
    min_samples_for,
    percentile,
    run_bench,
    save_samples,
    stage_amdahl,
)
from paritygate.bench._run import SideSamples
from paritygate.errors import InputError, UserError


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE_DIR", str(tmp_path / "cache"))


# ---------------------------------------------------------------- the rule, exactly


def _sign_patterns(magnitudes):
    for signs in itertools.product((1.0, -1.0), repeat=len(magnitudes)):
        yield [s * m for s, m in zip(signs, magnitudes)]


def test_false_alarm_rate_is_exact_under_a_symmetric_null():
    """Under any distribution symmetric about 0, given the magnitudes every sign pattern is
    equally likely; counting the patterns called 'slower' gives the exact false-alarm rate,
    which must equal the signed-rank tail P(T+ <= k) and stay below alpha / 2."""
    n, alpha = 12, 0.05
    magnitudes = np.random.default_rng(3).exponential(0.05, n)  # distinct: no ties, no zeros
    calls = {v: 0 for v in Verdict}
    wider = 0
    for diffs in _sign_patterns(magnitudes):
        decision = decide(diffs, 1e-12, alpha)
        calls[decision.verdict] += 1
        wider += decision.ratio_ci[0] > 1.02  # what a 2 % threshold would call slower
    k = _stats.signed_rank_critical(n, alpha)
    exact = _stats.signed_rank_cdf(k, n)
    assert calls[Verdict.SLOWER] == calls[Verdict.FASTER] == round(exact * 2**n)
    assert exact <= alpha / 2 and exact > alpha / 4  # the level is used, not wasted
    # a threshold the effect must clear only removes false calls
    assert wider < calls[Verdict.SLOWER]


def test_critical_values_match_the_signed_rank_table():
    # two-sided 5 %: n=10 -> 8, n=20 -> 52, n=30 -> 137 (standard tables)
    assert [_stats.signed_rank_critical(n, 0.05) for n in (10, 20, 30)] == [8, 52, 137]
    assert _stats.signed_rank_critical(5, 0.05) is None  # 2**-5 > 0.025: no finite interval
    assert min_pairs(0.05) == 6 and min_pairs(0.025) == 7
    # past the exact range the normal approximation continues smoothly
    exact, approx = (
        _stats._signed_rank_cdf_exact(4000, 150),
        _stats._signed_rank_cdf_normal(4000, 150),
    )
    assert abs(exact - approx) < 2e-3


def _simulate(looks_alpha, sims=200, max_pairs=160, seed=7):
    """Fraction of A/A sequences (heavy-tailed, symmetric, theta = 0) called at any look."""
    rng = np.random.default_rng(seed)
    schedule = [n for n in _stats.look_schedule(0.05, max_pairs)]
    false = 0
    for _ in range(sims):
        d = list(rng.standard_t(3, max_pairs) * 0.03)
        for j, n in enumerate(schedule):
            if decide(d[:n], 1e-12, looks_alpha(j)).verdict in (Verdict.FASTER, Verdict.SLOWER):
                false += 1
                break
    return false / sims, len(schedule)


def test_sequential_looks_spend_alpha_and_naive_looks_inflate_it():
    spent, looks = _simulate(lambda j: _stats.look_alpha(0.05, j))
    naive, _ = _simulate(lambda j: 0.05)
    assert looks >= 7
    assert spent <= 0.05  # union bound over the looks: at most alpha in all
    assert naive > 0.08  # looking at 5 % every time calls noise far more often
    assert sum(_stats.look_alpha(0.05, j) for j in range(10_000)) < 0.05


def test_verdicts_on_known_effects():
    rng = np.random.default_rng(0)
    slow = decide(list(math.log(1.10) + rng.normal(0, 0.02, 40)), 0.03, 0.05)
    assert slow.verdict is Verdict.SLOWER and abs(slow.ratio - 1.10) < 0.02
    assert slow.ratio_ci[0] > 1.03 and format_ratio(slow.ratio).endswith("x slower")
    fast = decide(list(-math.log(1.31) + rng.normal(0, 0.02, 40)), 0.03, 0.05)
    assert fast.verdict is Verdict.FASTER and 1.28 < fast.speedup < 1.34
    same = decide(list(rng.normal(0, 0.01, 60)), 0.03, 0.05)
    assert same.verdict is Verdict.EQUIVALENT and same.more_pairs is None
    # a 5 % effect in 10 % noise over 12 pairs cannot be called against 2 % yet
    half = rng.normal(0, 0.10, 6)
    noise = np.concatenate([half, -half])  # symmetric: the estimate is exactly the shift
    unsure = decide(list(math.log(1.05) + noise), 0.02, 0.05)
    assert unsure.verdict is Verdict.INCONCLUSIVE and unsure.more_pairs >= 1
    # the same spread over the pairs it asked for (and a little more) does decide
    copies = math.ceil((12 + unsure.more_pairs) / 12) + 1
    longer = decide(list(math.log(1.05) + np.tile(noise, copies)), 0.02, 0.05)
    assert longer.verdict is Verdict.SLOWER
    # an effect sitting right at the threshold: more pairs are unlikely to decide
    at = decide(list(math.log(1.02) + noise), 0.02, 0.05)
    assert at.verdict is Verdict.INCONCLUSIVE and (at.more_pairs is None or at.more_pairs > 1000)


def test_refusals_of_the_rule():
    with pytest.raises(ValueError, match="threshold must be > 0"):
        decide([0.1] * 10, 0.0, 0.05)
    with pytest.raises(ValueError, match="need 6"):
        decide([0.1] * 5, 0.05, 0.05)


def test_ratios_read_the_way_people_read_them():
    assert format_ratio(1.19) == "1.19x slower"
    assert format_ratio(1 / 1.31) == "1.31x faster"
    assert format_ratio(1.0004) == "1.00x (same)"


# ---------------------------------------------------------------- timing primitives


def test_default_sync_does_nothing_for_outputs_that_need_none():
    import torch

    for out in (np.ones(3), {"a": np.ones(2), "b": [1.0, 2]}, 3.5, None, torch.ones(2)):
        sync, how = _timing.plan_sync(out, None)
        assert sync is None and how.startswith("none")


def test_lazy_frameworks_are_synchronized_and_refused_unsynchronized():
    import jax.numpy as jnp
    import mlx.core as mx

    sync, how = _timing.plan_sync({"y": mx.ones(3)}, None)
    assert how == "mx.eval" and sync is mx.eval
    sync, how = _timing.plan_sync(jnp.ones(3), None)
    assert how == "jax.block_until_ready"
    with pytest.raises(InputError, match="unsynchronized timing of mlx outputs"):
        _timing.plan_sync(mx.ones(3), False)
    assert _timing.plan_sync(np.ones(3), False)[0] is None  # numpy needs no sync: allowed


class _FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_loops_make_a_sample_last_100x_the_harness_overhead(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr(_timing, "_perf", clock)

    def one_microsecond():
        clock.now += 1e-6

    loops, per_call = _timing.calibrate_loops(one_microsecond, None, overhead=2e-7)
    assert per_call == pytest.approx(1e-6) and loops == 20  # 20 x 1 us >= 100 x 0.2 us
    assert _timing.calibrate_loops(one_microsecond, None, overhead=1e-9)[0] == 1
    times = _timing.sample(one_microsecond, None, loops, 4)
    assert times == pytest.approx([1e-6] * 4)  # seconds per call, not per sample


def test_plain_callables_and_stage_callables_are_told_apart():
    assert not _timing.takes_iteration(lambda: 1)
    assert _timing.takes_iteration(lambda it: 1)
    assert not _timing.takes_iteration(lambda x=1: x)
    with pytest.raises(InputError, match="takes 2 required arguments"):
        _timing.takes_iteration(lambda a, b: 1)


def test_warm_up_ends_when_the_rolling_median_settles():
    assert not _timing.settled([5.0, 3.0, 2.0], 0.02)
    assert not _timing.settled([1.0, 1.0], 0.02)
    assert _timing.settled([5.0, 1.0, 1.01, 1.0], 0.02)


# ---------------------------------------------------------------- the run, end to end


def _sleeper(seconds: float, value: float = 1.0):
    def fn():
        time.sleep(seconds)
        return np.full(4, value)

    return fn


def _worker(iterations: int):
    def fn():
        total = 0
        for i in range(iterations):
            total += i * i
        return np.ones(3)

    return fn


def test_a_real_slowdown_is_called_slower_with_its_evidence():
    # CPU work (a busy machine stretches both sides alike; a sleep's wake-up delay does not).
    # The run stops at its first decisive look (about a second here); the budget is what a
    # loaded machine may need for more looks, and does not change what is called slower.
    result = run_bench(_worker(10_000), _worker(30_000), workload="work", budget=20, threshold=0.2)
    assert result.verdict is Verdict.SLOWER and not result and result.slower
    assert result.describe().startswith("slower: ") and "x slower" in result.describe()
    assert result.blocks == len(result.pair_ratios) >= min_decisive_pairs(0.025) == 13
    assert result.stop_reason.startswith("decisive at look") and result.looks
    design = result.provenance["design"]
    assert design["loops_per_sample"] == 1 and design["sync"] == "none (outputs need none)"
    assert "load_average" in result.provenance["noise"]["before"]
    data = json.loads(json.dumps(result.to_dict()))
    again = BenchResult.from_dict(data)
    assert again.verdict is Verdict.SLOWER and again.pair_ratios == result.pair_ratios


def test_stages_come_from_the_same_iterations():
    def staged(it):
        with it.stage("prepare"):
            x = np.ones(4)
        with it.stage("compute"):
            time.sleep(0.002)
        return x

    result = run_bench(staged, _sleeper(0.002), workload="st", blocks=6, threshold=0.5)
    fractions = result.baseline.stage_fractions()
    assert 0.5 < fractions["compute"] <= 1.0
    assert len(result.baseline.stages_s["compute"]) == len(result.baseline.end_to_end_s)


def test_blocks_alternate_order():
    calls = []

    def make(name):
        def fn():
            calls.append(name)
            time.sleep(0.0005)

        return fn

    run_bench(make("A"), make("B"), workload="o", blocks=6, block_size=2, threshold=0.5)
    tail = "".join(calls[-24:])
    assert tail == "AABB" + "BBAA" + "AABB" + "BBAA" + "AABB" + "BBAA"


def test_too_few_blocks_and_a_zero_threshold_are_refused():
    with pytest.raises(InputError, match="blocks=2: a 95% interval .* needs at least 6"):
        run_bench(_sleeper(0.0), _sleeper(0.0), workload="w", blocks=2, threshold=0.1)
    with pytest.raises(InputError, match="threshold must be a change > 0"):
        run_bench(_sleeper(0.0), _sleeper(0.0), workload="w", blocks=6, threshold=0)


def test_changed_output_is_not_a_speedup():
    with pytest.raises(UserError, match="differs from baseline on the first call"):
        run_bench(
            _sleeper(0.0, 1.0),
            _sleeper(0.0, 2.0),
            workload="wrong",
            blocks=6,
            threshold=0.1,
            check_outputs=lambda a, b: np.array_equal(a, b),
        )


def test_the_default_threshold_is_an_a_a_calibration_cached_per_workload(tmp_path):
    first = run_bench(_sleeper(0.0005), _sleeper(0.0005), workload="aa", blocks=8)
    assert (
        "A/A on this machine" in first.threshold_source and "cached" not in first.threshold_source
    )
    assert first.threshold >= 0.005
    cache = json.loads((tmp_path / "cache" / "bench-aa-thresholds.json").read_text())
    (entry,) = cache["entries"].values()
    assert entry["basis"]["workload"] == "aa" and "source_revision" not in json.dumps(entry)
    second = run_bench(_sleeper(0.0005), _sleeper(0.0005), workload="aa", blocks=8)
    assert second.threshold == first.threshold and "cached" in second.threshold_source


def test_truthiness_means_shown_not_slower():
    result = run_bench(_sleeper(0.0), _sleeper(0.0), workload="t", blocks=6, threshold=0.5)
    for verdict, truth in (
        ("faster", True),
        ("equivalent", True),
        ("slower", False),
        ("inconclusive", False),
    ):
        result.verdict = Verdict(verdict)
        assert bool(result) is truth


# ---------------------------------------------------------------- helpers kept from v1


def test_percentiles_need_enough_samples():
    assert (min_samples_for(0.5), min_samples_for(0.95), min_samples_for(0.99)) == (20, 200, 1000)
    with pytest.raises(InputError, match="p95 needs at least 200 samples, got 50"):
        percentile([1.0] * 50, 0.95)
    assert percentile(list(range(201)), 0.95) == pytest.approx(190.0)


def test_amdahl_bound():
    assert amdahl_bound(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert amdahl_bound(1.0, 4.0) == pytest.approx(4.0)
    with pytest.raises(InputError):
        amdahl_bound(1.5, 2.0)


def test_input_fingerprint_hashes_actual_tensors():
    a = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    assert input_fingerprint(a) == input_fingerprint({"x": a["x"].copy()})
    assert input_fingerprint(a) != input_fingerprint({"x": a["x"].astype(np.float64)})
    assert input_fingerprint(a) != input_fingerprint({"x": a["x"].reshape(3, 2)})


def test_runs_with_differing_checked_provenance_refuse_to_mix():
    check_comparable({"source_revision": "abc"}, {"source_revision": "abc"})
    with pytest.raises(UserError, match="source_revision: 'abc' vs 'def'"):
        check_comparable({"source_revision": "abc"}, {"source_revision": "def"})


def test_cli_compares_saved_runs_statistically_and_refuses_mixed_provenance(tmp_path, capsys):
    from paritygate.cli import main

    result = run_bench(
        _sleeper(0.0005),
        _sleeper(0.001),
        workload="w",
        blocks=8,
        threshold=0.1,
        provenance={"source_revision": "abc"},
    )
    # the saved pair ratios, and the verdict the rule gives them, are made known (timing on a
    # busy machine is not): what is saved, shown and compared is what is checked here
    result.pair_ratios = list(np.exp(np.random.default_rng(5).normal(0.2, 0.01, 40)))
    known = decide([math.log(r) for r in result.pair_ratios], 0.1, 0.05)
    result.verdict, result.ratio, result.ratio_ci = known.verdict, known.ratio, known.ratio_ci
    result.blocks, result.more_blocks = known.pairs, known.more_pairs
    first = tmp_path / "a.json"
    first.write_text(json.dumps(result.to_dict()))
    data = result.to_dict()
    data["pair_ratios"] = [r * 1.5 for r in data["pair_ratios"]]  # the effect grew by half
    grown = tmp_path / "grown.json"
    grown.write_text(json.dumps(data))
    assert main(["bench", "show", str(first)]) == 0
    assert f"slower: {format_ratio(known.ratio)}" in capsys.readouterr().out
    assert main(["bench", "compare", str(first), str(first)]) == 0
    assert "equivalent: the effect in" in capsys.readouterr().out
    assert main(["bench", "compare", str(first), str(grown)]) == 1
    out = capsys.readouterr().out
    assert "slower: the effect in" in out and "is 1.50x slower" in out
    data["provenance"]["source_revision"] = "def"
    other = tmp_path / "b.json"
    other.write_text(json.dumps(data))
    assert main(["bench", "compare", str(first), str(other)]) == 2
    assert "source_revision: 'abc' vs 'def'" in capsys.readouterr().err
    old = dict(result.to_dict(), format_version=1)
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert main(["bench", "show", str(tmp_path / "old.json")]) == 2
    assert "format version 1 is not 2" in capsys.readouterr().err
    garbage = tmp_path / "g.json"
    garbage.write_text("{nope")
    assert main(["bench", "show", str(garbage)]) == 2


# ---------------------------------------------------------------- GPU timing (on a fake CUDA)


class _FakeCuda:
    """Enough of torch.cuda for the timing loop: a device clock that kernels advance."""

    def __init__(self):
        self.device_ms = 0.0
        self.log = []

    def synchronize(self, *_):
        self.log.append("sync")

    def Event(self, enable_timing=False):  # noqa: N802 (torch's name)
        cuda = self

        class Event:
            def record(self):
                self.at = cuda.device_ms
                cuda.log.append("record")

            def elapsed_time(self, end):
                return end.at - self.at

        return Event()


def test_cuda_samples_carry_event_and_wall_times_and_flush_outside_them(monkeypatch):
    import sys
    import types

    cuda = _FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))

    def kernel():
        cuda.device_ms += 2.0
        cuda.log.append("kernel")

    flushes = []
    wall, device = _timing.sample_cuda(kernel, 3, 2, flush=lambda: flushes.append(cuda.log[:]))
    assert device == pytest.approx([2e-3, 2e-3])  # per call, from the events
    assert len(wall) == 2 and all(w >= 0 for w in wall)
    one_sample = ["sync", "record", "kernel", "kernel", "kernel", "record", "sync"]
    assert cuda.log == one_sample * 2
    assert len(flushes) == 2 and flushes[1] == one_sample  # flushed before the 2nd sample


def test_an_l2_flush_needs_cuda_outputs():
    with pytest.raises(InputError, match="flush=True evicts the GPU's L2 cache"):
        run_bench(_sleeper(0.0), _sleeper(0.0), workload="f", blocks=6, threshold=0.5, flush=True)
    flushed = []
    run_bench(
        _sleeper(0.0),
        _sleeper(0.0),
        workload="f",
        blocks=6,
        threshold=0.5,
        flush=lambda: flushed.append(1),
    )
    assert flushed  # a callable flush runs between samples


# ---------------------------------------------------------------- the benchmark method (issue 25)


def test_fewer_pairs_than_a_verdict_needs_are_undecided_never_a_pass():
    # the minimum is derived from the rule: k >= n, so no single pair reaches either end
    assert min_decisive_pairs(0.05) == 12 and _stats.signed_rank_critical(12, 0.05) >= 12
    assert _stats.signed_rank_critical(11, 0.05) < 11
    clear = [math.log(1.5) + 0.01 * i for i in range(12)]
    assert decide(clear, 0.03, 0.05).verdict is Verdict.SLOWER
    short = decide(clear[:11], 0.03, 0.05)  # every pair says slower, but one pair could decide
    assert short.verdict is Verdict.INCONCLUSIVE and short.more_pairs == 1

    # why: at 11 pairs one wild pair drags the interval's end past any threshold; at 12 it cannot
    def upper(diffs):
        return _stats.hodges_lehmann_interval(diffs, 0.05)[1][1]

    calm = [0.01 * (i - 5) for i in range(11)]
    assert upper(calm[:-1] + [5.0]) > 1.0 > 0.2 > upper(calm + [0.0])
    assert upper(calm + [5.0]) < 0.2
    # sequential looks start where a verdict is possible, each at least that many pairs
    looks = _stats.look_schedule(0.05, 300)
    assert looks[0] == 13 and all(
        n >= min_decisive_pairs(_stats.look_alpha(0.05, j)) for j, n in enumerate(looks)
    )
    # run_bench with fixed blocks below the minimum: a 3x slowdown is still undecided
    result = run_bench(_sleeper(0.0), _worker(30_000), workload="few", blocks=8, threshold=0.1)
    assert result.verdict is Verdict.INCONCLUSIVE and not result
    assert "undecided: a verdict needs 12 block pairs" in result.stop_reason


def test_stage_amdahl_uses_the_stage_fraction_and_the_stage_speedup():
    def side(name, prepare, compute, n=30):
        return SideSamples(
            name=name,
            cold_s=0.0,
            end_to_end_s=[prepare + compute] * n,
            stages_s={"prepare": [prepare] * n, "compute": [compute] * n},
        )

    base = side("baseline", 0.2, 0.8)  # f(compute) = 0.8 exactly
    only_compute = side("fast", 0.2, 0.2)  # compute 4x faster, nothing else changed
    got = stage_amdahl(base, only_compute, "compute")
    assert got["fraction"] == pytest.approx(0.8) and got["stage_speedup"] == pytest.approx(4.0)
    assert got["bound"] == pytest.approx(2.5) == 1.0 / 0.4  # = the end-to-end speedup here
    # the planted error: plugging the end-to-end speedup in as the stage speedup
    both = side("both", 0.1, 0.2)  # prepare sped up too: end to end 1.0 / 0.3 = 3.33x
    planted = amdahl_bound(0.8, 1.0 / 0.3)
    assert planted == pytest.approx(1 / (0.2 + 0.8 * 0.3)) and planted < 1.0 / 0.3
    measured = stage_amdahl(base, both, "compute")
    assert measured["bound"] == pytest.approx(2.5) != pytest.approx(planted)
    # a bound below the measured speedup says another stage changed too
    assert measured["bound"] < 1.0 / 0.3
    with pytest.raises(InputError, match="stage 'postprocess' was not timed on both sides"):
        stage_amdahl(base, both, "postprocess")


def test_saved_samples_recompute_every_interval(tmp_path):
    result = run_bench(_sleeper(0.0), _worker(20_000), workload="s", blocks=12, threshold=0.1)
    path = tmp_path / "run.samples.json.gz"
    save_samples({"s": result}, path)
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"  # gzip, not pickle
    ((name, loaded),) = load_samples(path).items()
    assert name == "s" and loaded.baseline.end_to_end_s == result.baseline.end_to_end_s
    # the interval again, from the saved pair ratios alone
    logs = [math.log(r) for r in loaded.pair_ratios]
    _, (lo, hi) = _stats.hodges_lehmann_interval(logs, 1 - loaded.confidence)
    assert (math.exp(lo), math.exp(hi)) == pytest.approx(result.ratio_ci, rel=1e-12)
    # ... and the pair ratios again, from the saved block medians
    medians = zip(loaded.baseline.block_medians_s, loaded.candidate.block_medians_s)
    again = [c / b for b, c in medians]
    assert again == pytest.approx(loaded.pair_ratios, rel=1e-12)
    # tampered samples no longer give the saved interval (every ratio e times larger: one
    # changed sample alone may leave a rank-based interval where it was)
    _, tampered = _stats.hodges_lehmann_interval([x + 1.0 for x in logs], 1 - loaded.confidence)
    assert (math.exp(tampered[0]), math.exp(tampered[1])) == pytest.approx(
        (math.e * result.ratio_ci[0], math.e * result.ratio_ci[1]), rel=1e-9
    )
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(InputError, match="not a gzip-compressed JSON samples file"):
        load_samples(bad)


def test_a_cached_a_a_threshold_is_not_reused_under_another_load(monkeypatch):
    readings = {
        "quiet": {"cpu_count": 2, "cpus_usable": 2, "load_average": [0.3, 0.3, 0.3]},
        "busy": {"cpu_count": 2, "cpus_usable": 2, "load_average": [3.1, 3.0, 2.9]},
    }
    assert [_noise.load_class(r) for r in readings.values()] == ["quiet", "busy"]
    assert _noise.load_class({}) == "unmeasured"
    now = {"reading": readings["quiet"]}
    monkeypatch.setattr(_noise, "snapshot", lambda *a, **k: dict(now["reading"]))

    def run():
        return run_bench(_sleeper(0.0), _sleeper(0.0), workload="aa-load", blocks=6)

    quiet = run()
    assert "quiet" in quiet.threshold_source and "cached" not in quiet.threshold_source
    now["reading"] = readings["busy"]
    busy = run()  # measured again: a quiet threshold does not judge a busy run
    assert "busy" in busy.threshold_source and "cached" not in busy.threshold_source
    now["reading"] = readings["quiet"]
    again = run()  # the same conditions reuse it
    assert "quiet" in again.threshold_source and "cached" in again.threshold_source
    assert again.threshold == quiet.threshold

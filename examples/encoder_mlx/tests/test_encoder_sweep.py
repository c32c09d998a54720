"""The correctness sweep, directly on the inference path, in both directions.

Lengths around 64 and 128 (the local window and the 64-query block edges), batch sizes around
the 16-item chunk, one to five options, padding mixes, duplicated items, shape changes after
compilation, finite and deterministic outputs. Every optimization is byte-equal to the baseline
on MLX CPU; each planted bug (mutations.py) makes it differ.
"""

from __future__ import annotations

import numpy as np
import pytest

# compiled is checked over the sweep by test_compiled_path_after_shape_changes
EXACT = ("token-batching", "pruned", "prefix-cache", "block-local")
KEYS = ("action", "choice", "ids", "markers")


@pytest.fixture(scope="module")
def all_items(sweep):
    return [it for items in sweep.values() for it in items]


@pytest.fixture(scope="module")
def baseline_out(runners, sweep):
    return {name: runners.run_items("baseline", items) for name, items in sweep.items()}


@pytest.mark.parametrize("runner", EXACT)
def test_every_exact_optimization_is_byte_equal_over_the_sweep(
    runners, sweep, baseline_out, runner
):
    for name, items in sweep.items():
        out = runners.run_items(runner, items)
        for key in KEYS:
            assert out[key].dtype == baseline_out[name][key].dtype
            assert np.array_equal(out[key], baseline_out[name][key]), (runner, name, key)


def test_outputs_are_finite_and_deterministic_over_repeated_calls(runners, sweep, baseline_out):
    for name in ("len-64", "len-129", "padding-mix"):
        for _ in range(2):
            again = runners.run_items("baseline", sweep[name])
            for key in KEYS:
                assert np.array_equal(again[key], baseline_out[name][key])
        assert np.isfinite(baseline_out[name]["action"]).all()
        assert np.isfinite(baseline_out[name]["choice"]).all()


def test_compiled_path_after_shape_changes(encoder_mod, sweep, baseline_out):
    """One compiled closure sees every shape of the sweep, forwards then backwards."""
    enc = encoder_mod.Encoder(encoder_mod.Settings(compiled=True))
    names = list(sweep)
    for name in names + names[::-1]:
        out = enc(sweep[name])
        assert np.array_equal(out["action"], baseline_out[name]["action"]), name
        assert np.array_equal(out["choice"], baseline_out[name]["choice"]), name


def test_shape_buckets_and_batch_sizes_change_nothing(encoder_mod, all_items, runners):
    base = runners.run_items("baseline", all_items)
    for settings in (
        encoder_mod.Settings(length_multiple=64),
        encoder_mod.Settings(max_batch=1),
        encoder_mod.Settings(max_batch=17),
        encoder_mod.Settings(batching="tokens", token_budget=130, max_batch=64),
    ):
        out = encoder_mod.Encoder(settings)(all_items)
        assert np.array_equal(out["action"], base["action"]), settings
        assert np.array_equal(out["choice"], base["choice"]), settings


def test_token_batching_groups_by_length_and_reports_padding(runners, sweep):
    items = sweep["padding-mix"] + sweep["batch-15"]
    out = runners.run_items("token-batching", items)
    assert out["reordered_items"] > 0
    assert 0 <= out["padding_waste"] < 0.2
    enc = runners.encoder_for("baseline")
    enc(items)
    assert enc.last.padding_waste > 0.5  # insertion order pads the short items to 130


def test_block_local_loses_nothing_past_two_windows(model_mod):
    """Long random sequences (up to 4 blocks, ragged lengths): block-local == dense mask."""
    import mlx.core as mx

    m, _ = model_mod.load_model()
    rng = np.random.default_rng(1)
    for length, lens in ((256, [256, 129, 65]), (200, [200, 64, 1])):
        ids = mx.array(rng.integers(5, 60, (3, length)).astype(np.int32))
        lengths = mx.array(lens)
        markers = mx.array(np.tile([[1, 2, 3, 0, 0]], (3, 1)).astype(np.int32))
        mmask = mx.array(np.tile([[True, True, True, False, False]], (3, 1)))
        feats = mx.zeros((3, 4))
        dense = m(ids, lengths, markers, mmask, feats)
        for block in (64, 32):
            sw = model_mod.Switches(block_local=True, block_size=block)
            local = m(ids, lengths, markers, mmask, feats, sw=sw)
            assert np.array_equal(np.array(local[0]), np.array(dense[0]))
            assert np.array_equal(np.array(local[1]), np.array(dense[1]))


@pytest.mark.parametrize(
    "mutation,case",
    [
        ("stale-checkpoint", "len-64"),
        ("order-not-restored", "padding-mix"),
        ("pruned-without-key-mask", "padding-mix"),
        ("cache-key-without-options", "batch-15"),
        ("window-off-by-one", "len-129"),
    ],
)
def test_each_planted_bug_changes_the_outputs(mutations, sweep, baseline_out, mutation, case):
    runner, bug = mutations.MUTATIONS[mutation]
    with bug():
        try:
            import gate_runners

            out = gate_runners.run_items(runner, sweep[case])
        except ValueError as exc:  # the cache bug can also break the marker count
            assert "marker count" in str(exc)
            return
    assert any(not np.array_equal(out[k], baseline_out[case][k]) for k in KEYS), mutation


def test_a_planted_bug_is_gone_after_its_block(mutations, runners, sweep, baseline_out):
    with mutations.MUTATIONS["window-off-by-one"][1]():
        pass
    out = runners.run_items("block-local", sweep["len-129"])
    assert np.array_equal(out["action"], baseline_out["len-129"]["action"])

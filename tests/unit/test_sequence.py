"""paritygate.sequence: each comparison passes the good case and fails a planted bug."""

from __future__ import annotations

import json

import numpy as np
import pytest

from paritygate.errors import InputError
from paritygate.sequence import (
    TeacherForcedAccumulator,
    compare_teacher_forced,
    compare_token_ids,
    delta_perplexity,
    greedy_divergence,
    log_softmax,
)

VOCAB = ["<a>", "the", " cat", " sat", " on", " mat", " dog", "."]


@pytest.fixture(scope="module")
def logits():
    rng = np.random.default_rng(0)
    return rng.normal(size=(12, 50)).astype(np.float32) * 3


def test_token_ids_identical_and_divergent_with_pieces():
    assert compare_token_ids([1, 2, 3], np.array([1, 2, 3]))
    result = compare_token_ids([1, 2, 6, 4], [1, 2, 3, 4], decode=VOCAB, context=1)
    assert not result
    assert result.first_divergence == 2
    assert (result.actual_piece, result.expected_piece) == (" dog", " sat")
    assert result.actual_context_text == " cat dog on" and result.expected_context == [2, 3, 4]
    assert "actual 6 ' dog' vs expected 3 ' sat'" in result.failures[0].detail
    assert result.failures[0].where == "position 2"
    json.dumps(result.to_dict())


def test_token_ids_decode_callable_and_length():
    result = compare_token_ids([1, 2], [1, 2, 3], decode=lambda ids: "|".join(map(str, ids)))
    assert not result and result.first_divergence == 2 and result.expected_piece == "3"
    assert result.failures[0].metric == "length"
    with pytest.raises(InputError, match="integers"):
        compare_token_ids([1.5], [1.5])


def test_log_softmax_is_stable():
    out = log_softmax([[1e4, 0.0], [0.0, 0.0]])
    assert np.isfinite(out).all()
    assert np.allclose(np.exp(out).sum(-1), 1.0)


def test_teacher_forced_identical_passes(logits):
    result = compare_teacher_forced(logits, logits.copy(), max_abs=0, max_kl=0)
    assert result, result.describe()
    assert result.kl_max == 0 and result.top1_agreement == 1 and result.topk_overlap == 1


def test_teacher_forced_shifted_row_fails_naming_the_position(logits):
    cand = logits.copy()
    cand[7] = logits[8]  # an off-by-one position
    result = compare_teacher_forced(logits, cand, max_kl=1e-3, min_top1_agreement=1.0)
    assert not result
    kl = next(f for f in result.failures if f.metric == "kl_divergence")
    assert kl.where == "position 7" and "1 of 12 positions" in kl.detail
    assert result.kl_max_position == 7 and result.top1_disagreeing_positions == [7]
    assert "position 7" in result.describe()


def test_teacher_forced_noise_within_bounds_passes(logits):
    noise = np.random.default_rng(1).normal(scale=1e-4, size=logits.shape)
    result = compare_teacher_forced(logits, logits + noise, max_abs=1e-3, max_kl=1e-6)
    assert result, result.describe()
    assert 0 < result.kl_max <= 1e-6 and result.max_abs < 1e-3


def test_accumulator_chunks_equal_one_shot(logits):
    cand = logits + 0.05 * np.random.default_rng(2).normal(size=logits.shape)
    acc = TeacherForcedAccumulator(top_k=3)
    acc.add(logits[0], cand[0])  # one position
    acc.add(logits[1:5], cand[1:5])  # a chunk
    acc.add(logits[5:], cand[5:])
    streamed, whole = acc.result(), compare_teacher_forced(logits, cand, top_k=3)
    assert streamed.n_positions == 12
    for key in ("max_abs", "kl_mean", "kl_p99", "kl_max", "top1_agreement", "topk_overlap"):
        assert getattr(streamed, key) == pytest.approx(getattr(whole, key))
    # nothing of vocab size kept: per position four scalars and two top-k id lists
    assert all(part[4].shape[1:] == (3,) and part[0].ndim == 1 for part in acc._parts)
    with pytest.raises(InputError, match="vocab changed from 50 to 49 at position 12"):
        acc.add(logits[:1, :49], cand[:1, :49])


def test_accumulator_rejects_nan_naming_position(logits):
    cand = logits.copy()
    cand[4, 3] = np.nan
    with pytest.raises(InputError, match="candidate logits hold NaN .* at position 4"):
        compare_teacher_forced(logits, cand)


def _two_way(top1_margin):
    row = np.zeros(8)
    row[2], row[5] = 5.0, 5.0 - top1_margin
    return row


def test_greedy_identical_near_tie_and_diverged():
    ref_logits = np.stack([_two_way(3.0), _two_way(3.0), _two_way(1e-4)])
    assert greedy_divergence([2, 2, 2], [2, 2, 2], ref_logits, noise_bound=1e-3).verdict == (
        "identical"
    )
    tie = greedy_divergence([2, 2, 2], [2, 2, 5], ref_logits, noise_bound=1e-3)
    assert tie and tie.verdict == "near-tie" and tie.first_divergence == 2
    assert tie.reference_margin == pytest.approx(1e-4)
    flip = greedy_divergence([2, 2, 2], [2, 5, 5], ref_logits, noise_bound=1e-3)
    assert not flip and flip.verdict == "diverged" and flip.first_divergence == 1
    assert flip.failures[0].where == "step 1" and "margin of 3" in flip.failures[0].detail


def test_greedy_containment_both_ways():
    ref_logits = np.stack([_two_way(1e-4)])
    cand_ok = np.stack([_two_way(1e-4)[[0, 1, 5, 3, 4, 2, 6, 7]]])  # 2 and 5 swapped
    ok = greedy_divergence(
        [2], [5], ref_logits, noise_bound=1e-3, candidate_logits=cand_ok, top_k=2
    )
    assert ok and ok.candidate_in_reference_topk and ok.reference_in_candidate_topk
    cand_bad = np.zeros((1, 8))
    cand_bad[0, 5], cand_bad[0, 7] = 9.0, 8.0  # reference token 2 not in candidate top-2
    bad = greedy_divergence(
        [2], [5], ref_logits, noise_bound=1e-3, candidate_logits=cand_bad, top_k=2
    )
    assert not bad and bad.verdict == "near-tie"
    assert bad.failures[0].metric == "top2_containment"
    assert "reference token 2 in candidate top-2: False" in bad.failures[0].detail


def test_delta_perplexity(logits):
    targets = np.argmax(logits, axis=1)
    same = delta_perplexity(logits, logits, targets, max_relative_delta=0.0)
    assert same and same.relative_delta == 0
    flat = np.zeros_like(logits)  # a candidate that forgot everything: ppl = vocab
    worse = delta_perplexity(logits, flat, targets, max_relative_delta=0.05)
    assert not worse and worse.candidate_ppl == pytest.approx(50.0)
    assert worse.failures[0].metric == "delta_perplexity"
    with pytest.raises(InputError, match="11 rows for 12 target tokens"):
        delta_perplexity(logits[:11], logits[:11], targets)


def test_accumulator_inner_chunks_match_float64_log_softmax_and_reject_minus_inf(logits):
    """Long inputs are split into chunks of positions inside add(); the statistics are those of
    the textbook float64 formula, and a -inf anywhere (hidden from the row maxima) is refused
    before anything is kept."""
    cand = logits + 0.01 * np.random.default_rng(3).normal(size=logits.shape)
    lr, lc = log_softmax(logits), log_softmax(cand)
    kl = (np.exp(lr) * (lr - lc)).sum(axis=1)
    acc = TeacherForcedAccumulator(top_k=3)
    acc.CHUNK_ELEMENTS = 150  # 3 positions of 50 per chunk
    acc.add(logits, cand)
    np.testing.assert_allclose(acc.kl, kl, rtol=1e-9)
    assert acc.top1[0].tolist() == logits.argmax(axis=1).tolist()
    bad = cand.copy()
    bad[10, 7] = -np.inf
    fresh = TeacherForcedAccumulator()
    fresh.CHUNK_ELEMENTS = 150
    with pytest.raises(InputError, match="candidate logits hold NaN .* at position 10"):
        fresh.add(logits, bad)
    assert fresh.kl.size == 0


def test_compiled_top_k_equals_numpy_ties_included(monkeypatch):
    """The compiled top-k (numba) and the numpy one give the same ids in the same order: among
    equal values the lower id first, also where a tie straddles the k-th place; a wrong kernel
    (here: numpy's argpartition order, which breaks ties arbitrarily) is told apart."""
    from paritygate import sequence

    pytest.importorskip("numba")
    rng = np.random.default_rng(4)
    x = rng.integers(0, 6, size=(64, 600)).astype(np.float32)  # many ties
    x[0, [3, 9, 17, 40]] = 9.0  # four equal maxima, k = 3 takes the three lowest ids
    x[1] = 0.0  # a constant row: ids 0, 1, 2
    y = rng.normal(size=(40, 1000))
    monkeypatch.setattr(sequence, "_COMPILED_MIN_ELEMENTS", 0)
    for arr in (x, y):
        compiled = sequence._top_k_fast(arr, 3)
        expected = np.argsort(-arr, axis=1, kind="stable")[:, :3]
        np.testing.assert_array_equal(compiled, expected)
        np.testing.assert_array_equal(sequence._top_k(arr, 3), expected)
    assert compiled.dtype == np.int64
    assert sequence._top_k_fast(x, 3)[:2].tolist() == [[3, 9, 17], [0, 1, 2]]
    arbitrary = np.argpartition(-x, 3, axis=1)[:, :3]
    assert not np.array_equal(np.sort(arbitrary, axis=1), np.sort(expected, axis=1))


def test_accumulator_compiled_and_numpy_paths_agree_exactly(monkeypatch):
    from paritygate import sequence

    pytest.importorskip("numba")
    rng = np.random.default_rng(5)
    ref = (rng.normal(size=(70, 900)) * 3).astype(np.float32)
    cand = (ref + rng.normal(scale=1e-3, size=ref.shape)).astype(np.float32)
    cand[11] = ref[12]  # one position off
    results = []
    for threshold in (0, 1 << 62):
        monkeypatch.setattr(sequence, "_COMPILED_MIN_ELEMENTS", threshold)
        results.append(compare_teacher_forced(ref, cand, top_k=4, max_kl=1e-3).to_dict())
    assert results[0] == results[1]
    assert results[0]["top1_disagreeing_positions"] == [11]

"""Pinned assets, the data split and the tokenizer (framework-free except tokenizers)."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_weights_config_and_tokenizer_are_pinned(example_folder, data_mod, spec, heldout_spec):
    sums = {}
    for line in (example_folder / "weights" / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        sums[name] = digest
    for s in (spec, heldout_spec):
        files = s.runners["baseline"].pins["files"]
        assert len(files) == 3
        for rel, digest in files.items():
            assert data_mod.sha256_file(example_folder / rel) == digest == sums[rel.split("/")[-1]]


def test_tokenizer_comes_from_the_tokenizers_library_and_covers_the_text(data_mod):
    tok = data_mod.load_tokenizer()
    assert type(tok).__module__.startswith("tokenizers")
    rebuilt = data_mod.build_tokenizer()
    assert rebuilt.get_vocab() == tok.get_vocab()  # the pinned file is what the code builds
    item = data_mod.Item(tuple(range(16)) * 4, (3, 7), rubric=2, digit=3)
    (prep,) = data_mod.prepare_items(tok, [item])
    assert tok.token_to_id("[UNK]") not in prep.ids.tolist()
    assert prep.ids[0] == tok.token_to_id("[CLS]") and prep.ids[-1] == tok.token_to_id("[SEP]")
    assert [tok.id_to_token(int(prep.ids[m + 1])) for m in prep.markers] == ["d3", "d7"]


def test_a_changed_tokenizer_or_configuration_never_reuses_cached_ids(data_mod):
    tok = data_mod.load_tokenizer()
    item = data_mod.Item(tuple([5] * 64), (1, 2, 3), rubric=1, digit=2)
    cache = data_mod.PrefixCache(tok, data_mod.tokenizer_identity())
    cache.prepare([item, item])
    assert cache.hits >= 2
    other = data_mod.PrefixCache(tok, "another-tokenizer-sha256", parts=cache.parts)
    other.prepare([item])
    assert other.hits == 0 and other.misses == 2  # same entries dict, another identity: no reuse
    changed = data_mod.PrefixCache(
        tok, data_mod.tokenizer_identity(), config=("another",), parts=cache.parts
    )
    changed.prepare([item])
    assert changed.hits == 0


def test_pinned_digits_are_scikit_learns_and_a_changed_file_is_refused(
    data_mod, tmp_path, monkeypatch
):
    import importlib.util
    from pathlib import Path

    # scikit-learn's own file, found without importing scikit-learn (seconds): byte-identical
    bundled = Path(importlib.util.find_spec("sklearn").origin).parent / "datasets" / "data"
    assert (bundled / "digits.csv.gz").read_bytes() == data_mod.DIGITS_PATH.read_bytes()
    images, digits = data_mod.digits()
    assert images.shape == (1797, 64) and images.dtype == np.int64 and digits.shape == (1797,)
    assert images.min() == 0 and images.max() == 16 and set(digits.tolist()) == set(range(10))
    changed = tmp_path / "digits.csv.gz"
    raw = bytearray(data_mod.DIGITS_PATH.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one byte of the pinned file changed
    changed.write_bytes(bytes(raw))
    monkeypatch.setattr(data_mod, "DIGITS_PATH", changed)
    with pytest.raises(ValueError, match="does not match its pinned sha256"):
        data_mod.digits()


def test_heldout_images_are_disjoint_from_training_and_at_least_500(
    example_folder, data_mod, heldout_spec
):
    images, digits = data_mod.digits()
    train, held = data_mod.split()
    assert not set(train) & set(held) and len(held) >= 500
    seen = {tuple(images[i]) for i in train}
    items = [i for c in heldout_spec.cases.values() for i in data_mod.read_items(c.load())]
    assert len(items) == len(held) >= 500
    # one question per image: items are independent
    assert len({it.image for it in items}) == len(items)
    # an image identical to a training image would not be held out (digits has a few duplicates)
    assert sum(it.image in seen for it in items) <= 5
    for case in heldout_spec.cases.values():
        part = data_mod.read_items(case.load())
        assert list(case.labels["action"]) == [it.digit for it in part]
        assert list(case.labels["choice"]) == [it.answer for it in part]
        assert all(2 <= len(it.options) <= data_mod.MAX_OPTIONS for it in part)


def test_case_files_are_pinned_and_refuse_bad_items(example_folder, data_mod, spec):
    for case in spec.cases.values():
        assert data_mod.sha256_file(case.path) == case.sha256
    bad = {"format": "encoder-items", "version": 1, "items": [{"image": [17] * 64, "options": [1]}]}
    try:
        data_mod.read_items(bad)
    except ValueError as exc:
        assert "ink levels" in str(exc)
    else:
        raise AssertionError("an ink level of 17 was accepted")
    try:
        data_mod.read_items({**bad, "version": 2})
    except ValueError as exc:
        assert "version" in str(exc)
    else:
        raise AssertionError("an unknown case version was accepted")


def test_token_budget_schedule_restores_order_and_cuts_padding(data_mod):
    lengths = [45, 180, 47, 61, 130, 46, 59, 177]
    plan = data_mod.plan_by_tokens(lengths, token_budget=384, max_batch=4)
    assert sorted(i for b in plan for i in b) == list(range(len(lengths)))
    for b in plan:
        assert len(b) <= 4 and len(b) * max(lengths[i] for i in b) <= 384 or len(b) == 1
    baseline = data_mod.chunks_in_order(len(lengths), 16)
    assert data_mod.padding_waste(plan, lengths) < data_mod.padding_waste(baseline, lengths) / 3
    assert json.loads(json.dumps(plan)) == plan
    assert np.isclose(data_mod.padding_waste([[0]], lengths), 0.0)

"""Sequence claims (token ids, teacher-forced distributions, greedy divergence, perplexity)
through the claim registry: the spec reads them, the equivalence oracle judges them with
messages that name the position and the decoded pieces, calibration measures them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from spec_helpers import make_project

from paritygate.calibration import calibrate, shift
from paritygate.equivalence import check_equivalence
from paritygate.errors import SpecError
from paritygate.spec import load_spec

VOCAB = ["<s>", "a", "b", "c", "Ġthe", "Ġcat", "Ġsat", "."]

SPEC = """
format_version = 2
outputs = ["prompt_ids", "continuation_ids", "logits", "greedy_ids", "greedy_logits"]

[waived]
continuation_ids = "targets of delta_ppl"
greedy_logits = "read by greedy_divergence"

[cases.a]
path = "cases/a.npz"
sha256 = "{sha:a}"

[runners.reference]
role = "reference"
callable = "tiny:reference"

[runners.cand]
role = "candidate"
callable = "tiny:reference"

[claims.ids]
outputs = ["prompt_ids"]
metric = "token_ids_equal"
bound = 0
oracle = "equivalence"
status = "provisional"
params = { tokenizer = "tokenizer.json" }

[claims.kl]
outputs = ["logits"]
metric = "kl_max"
bound = 1e-3
oracle = "equivalence"
status = "provisional"
params = { tokenizer = "tokenizer.json" }

[claims.top1]
outputs = ["logits"]
metric = "top1_agreement"
bound = 1.0
oracle = "equivalence"
status = "provisional"

[claims.greedy]
outputs = ["greedy_ids"]
metric = "greedy_divergence"
bound = 0.1
oracle = "equivalence"
status = "provisional"
params = { tokenizer = "tokenizer.json" }

[claims.greedy-strict]
outputs = ["greedy_ids"]
metric = "greedy_divergence"
bound = 0.1
oracle = "equivalence"
status = "provisional"
params = { near_tie = "fail" }

[claims.ppl]
outputs = ["logits"]
metric = "delta_ppl"
bound = 0.01
oracle = "equivalence"
status = "provisional"
"""

MODEL = """
def reference(case):
    return {}
"""


@pytest.fixture
def spec(tmp_path):
    path = make_project(tmp_path, SPEC, modules={"tiny.py": MODEL}, cases={"a": {"x": np.zeros(1)}})
    tokenizer = {
        "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(VOCAB)}},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": [],
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    return load_spec(path)


def _outputs(seed=0, steps=6):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((7, len(VOCAB))).astype(np.float32)
    greedy_logits = rng.standard_normal((steps, len(VOCAB))).astype(np.float32)
    return {
        "prompt_ids": np.array([0, 4, 5, 6, 7], dtype=np.int64),
        "continuation_ids": np.array([5, 6], dtype=np.int64),
        "logits": logits,
        "greedy_ids": greedy_logits.argmax(axis=1).astype(np.int64),
        "greedy_logits": greedy_logits,
    }


def test_token_ids_equal_names_the_first_differing_position_and_pieces(spec):
    ref = _outputs()
    verdict = check_equivalence(spec.claims["ids"], ref, ref)
    assert verdict and verdict.observed == 0
    cand = dict(ref, prompt_ids=np.array([0, 4, 6, 5, 7], dtype=np.int64))
    verdict = check_equivalence(spec.claims["ids"], cand, ref)
    assert not verdict and verdict.observed == 2
    (failure,) = verdict.failures
    assert (failure.metric, failure.where) == ("token_ids_equal", "prompt_ids position 2")
    assert "actual 6 ' sat' vs expected 5 ' cat'" in failure.detail
    assert "context from position 0: actual '<s> the sat cat.'" in failure.detail
    shorter = dict(ref, prompt_ids=ref["prompt_ids"][:3])
    verdict = check_equivalence(spec.claims["ids"], shorter, ref)
    assert not verdict and "actual (ended) vs expected 6 ' sat'" in verdict.failures[0].detail
    floats = dict(ref, prompt_ids=ref["prompt_ids"].astype(np.float32))
    verdict = check_equivalence(spec.claims["ids"], floats, ref)
    assert not verdict and verdict.failures[0].metric == "input"


def test_teacher_forced_claims_pass_noise_and_fail_a_flipped_distribution(spec):
    ref = _outputs()
    noisy = dict(ref, logits=ref["logits"] + np.float32(1e-5))
    for cid in ("kl", "top1", "ppl"):
        assert check_equivalence(spec.claims[cid], noisy, ref), cid
    bug = dict(ref, logits=ref["logits"].copy())
    bug["logits"][3] = -bug["logits"][3]  # position 3's distribution turned over
    verdict = check_equivalence(spec.claims["kl"], bug, ref)
    assert not verdict
    (failure,) = verdict.failures
    assert (failure.metric, failure.where) == ("kl_max", "logits position 3")
    top_r, top_c = int(ref["logits"][3].argmax()), int(bug["logits"][3].argmax())
    assert f"reference top-1 {top_r} {VOCAB[top_r].replace('Ġ', ' ')!r}" in failure.detail
    assert f"candidate top-1 {top_c}" in failure.detail
    verdict = check_equivalence(spec.claims["top1"], bug, ref)
    assert not verdict and verdict.observed == pytest.approx(6 / 7)
    assert "top-1 differs at 1 of 7 positions: 3 (reference" in verdict.failures[0].detail
    assert check_equivalence(spec.claims["ppl"], bug, ref)  # row 3 scores no continuation token
    bug["logits"][5] = -bug["logits"][5]  # row 5 predicts the last continuation token
    verdict = check_equivalence(spec.claims["ppl"], bug, ref)
    assert not verdict and verdict.failures[0].metric == "delta_ppl"
    assert verdict.evidence["logits"]["tokens"] == 2
    other = dict(ref, logits=ref["logits"][:5])  # another tokenization: positions do not pair
    verdict = check_equivalence(spec.claims["kl"], other, ref)
    assert not verdict and verdict.failures[0].metric == "input"


def _diverging(ref, margin):
    """A candidate whose greedy run parts at step 2 where the reference's top-2 margin is
    ``margin``."""
    logits = ref["greedy_logits"].copy()
    row = logits[2]
    order = np.argsort(-row)
    row[order[0]] = row[order[1]] + margin
    ref = dict(ref, greedy_logits=logits, greedy_ids=logits.argmax(axis=1).astype(np.int64))
    cand_ids = ref["greedy_ids"].copy()
    cand_ids[2] = order[1]
    cand_logits = logits.copy()
    cand_logits[2, order[1]] = row[order[0]] + 1e-3
    return ref, dict(ref, greedy_ids=cand_ids, greedy_logits=cand_logits)


def test_greedy_divergence_fails_diverged_and_reports_a_near_tie(spec):
    ref = _outputs()
    assert check_equivalence(spec.claims["greedy"], ref, ref).observed == 0
    ref_tie, tie = _diverging(ref, 0.01)
    verdict = check_equivalence(spec.claims["greedy"], tie, ref_tie)
    assert verdict and verdict.evidence["greedy_ids"]["verdict"] == "near-tie"
    verdict = check_equivalence(spec.claims["greedy-strict"], tie, ref_tie)
    assert not verdict
    (failure,) = verdict.failures
    assert (failure.metric, failure.where) == ("greedy_divergence", "greedy_ids step 2")
    assert failure.detail.startswith("near-tie:") and "params.near_tie = 'fail'" in failure.detail
    ref_far, far = _diverging(ref, 1.0)
    verdict = check_equivalence(spec.claims["greedy"], far, ref_far)
    assert not verdict and verdict.observed == pytest.approx(1.0, rel=1e-5)
    failure = verdict.failures[0]
    assert failure.detail.startswith("diverged: the reference chose")
    assert "(noise bound 0.1)" in failure.detail and "common prefix" in failure.detail
    no_logits = {k: v for k, v in ref_far.items() if k != "greedy_logits"}
    verdict = check_equivalence(spec.claims["greedy"], far, no_logits)
    assert not verdict and "reads output 'greedy_logits'" in verdict.failures[0].detail


def test_spec_checks_sequence_params_and_bounds(tmp_path, spec):
    text = (tmp_path / "parity.toml").read_text()
    for old, new, message in (
        ('bound = 0\noracle', 'bound = 1\noracle', "the bound must be 0"),
        ('{ near_tie = "fail" }', '{ near_tie = "warn" }', "expected 'pass'"),
        ('{ near_tie = "fail" }', "{ top_k = 0 }", "whole number >= 1"),
        ('bound = 1.0\n', 'bound = 1.5\n', r"top1_agreement lies in \[0, 1\]"),
        ('"tokenizer.json" }\n\n[claims.kl]', '"nope.json" }\n\n[claims.kl]', "does not exist"),
        ('{ near_tie = "fail" }', '{ logits = "step_logits" }',
         "reads output 'step_logits' beside the covered ones; no runner produces it"),
    ):  # fmt: skip
        assert old in text, old
        (tmp_path / "parity.toml").write_text(text.replace(old, new, 1))
        with pytest.raises(SpecError, match=message):
            load_spec(tmp_path / "parity.toml")


def test_teacher_forced_metrics_are_calibrated_from_output_pairs():
    def pair(case):
        x = np.random.default_rng(case).standard_normal((12, 32))
        return {"logits": x}, {"logits": x.astype(np.float32).astype(np.float64)}

    result = calibrate(pair, 16, metric="kl_max", metrics=["kl_mean"], mutations=[shift()])
    assert result and result.claim_metric.largest_noise < 1e-10
    assert result.proposed_bound < result.claim_metric.smallest_bug


def test_calibration_reads_the_claims_top_k():
    def pair(case):
        x = np.random.default_rng(case).standard_normal((12, 32))
        y = x + 0.3 * np.random.default_rng(case + 100).standard_normal((12, 32))
        return {"logits": x}, {"logits": y}

    overlap = {
        k: calibrate(
            pair, 16, metric="topk_overlap", metrics=[], mutations=[shift()], params={"top_k": k}
        ).claim_metric.largest_noise
        for k in (1, 8)
    }
    assert overlap[1] != overlap[8]

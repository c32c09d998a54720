"""Evidence every claim kind carries: the bound that would have passed, the rows that disagree,
and the output a claim found nothing to measure in."""

from __future__ import annotations

from spec_helpers import TINY_MODEL, TINY_SPEC, make_project

from paritygate.gate import run_gate
from paritygate.references import record
from paritygate.spec import load_spec

FLIP = """

def candidate_flip(case):
    out = candidate32(case)
    if case.name == "b":
        out["logits"] = -out["logits"]
    return out
"""

AGREEMENT = """
[claims.decisions]
outputs = ["logits"]
metric = "agreement"
bound = 1.0
oracle = "equivalence"
status = "provisional"
"""


def _project(tmp_path, spec, candidate="candidate32"):
    text = spec.replace('callable = "tiny:candidate32"', f'callable = "tiny:{candidate}"')
    path = make_project(tmp_path, text, modules={"tiny.py": TINY_MODEL + FLIP})
    record(load_spec(path))
    return path


def test_element_claims_carry_the_bound_that_would_have_passed(tmp_path):
    path = _project(tmp_path, TINY_SPEC.replace("bound = 1e-5", "bound = 1e-12"))
    result = run_gate(load_spec(path))
    assert not result.passed
    needed = max(v.evidence["bound_that_passes"] for v in result.verdicts)
    assert needed == max(v.observed for v in result.verdicts) > 1e-12
    # the documented key is what it says: that bound passes, and just under it fails
    path.write_text(path.read_text().replace("bound = 1e-12", f"bound = {needed!r}"))
    assert run_gate(load_spec(path)).passed
    path.write_text(path.read_text().replace(f"bound = {needed!r}", f"bound = {needed * 0.99!r}"))
    assert not run_gate(load_spec(path)).passed


def test_agreement_failures_name_the_rows_that_flipped(tmp_path):
    path = _project(tmp_path, TINY_SPEC + AGREEMENT, candidate="candidate_flip")
    result = run_gate(load_spec(path), claims=["decisions"])
    (verdict,) = result.verdicts
    assert not verdict.passed
    assert verdict.evidence["disagreeing"] == [f"b[{i}]" for i in range(3)]
    assert verdict.evidence["disagreeing_count"] == 3
    assert "disagreeing: b[0], b[1], b[2]" in verdict.failures[0].detail


def test_agreement_that_holds_lists_no_rows(tmp_path):
    path = _project(tmp_path, TINY_SPEC + AGREEMENT)
    (verdict,) = run_gate(load_spec(path), claims=["decisions"]).verdicts
    assert verdict.passed and verdict.evidence["disagreeing"] == []


def test_nothing_to_measure_names_the_missing_output(tmp_path):
    path = _project(tmp_path, TINY_SPEC + AGREEMENT, candidate="candidate_missing")
    result = run_gate(load_spec(path), claims=["decisions"])
    details = " ".join(f.detail for v in result.verdicts for f in v.failures)
    assert not result.passed
    assert (
        "nothing to measure: no candidate output matches logits (claims.decisions.outputs)"
        in details
    )


TWO_HEADS = """

V = np.random.default_rng(1).standard_normal((8, 3))


def reference_heads(case):
    out = reference(case)
    out["choice"] = case.load()["x"] @ V
    return out


def candidate_heads(case):
    out = candidate32(case)
    out["choice"] = case.load()["x"].astype(np.float32) @ V.astype(np.float32)
    return out


def candidate_heads_flip(case):
    out = candidate_heads(case)
    if case.name == "b":
        out["choice"] = -out["choice"]
    return out
"""

HEADS_CLAIM = """
[claims.decisions]
outputs = ["logits", "choice"]
metric = "agreement"
bound = 1.0
oracle = "equivalence"
status = "provisional"
"""


def _heads_project(tmp_path, candidate, claim=HEADS_CLAIM):
    text = (
        TINY_SPEC.replace('outputs = ["y", "logits"]', 'outputs = ["y", "logits", "choice"]')
        .replace('callable = "tiny:reference"', 'callable = "tiny:reference_heads"')
        .replace('callable = "tiny:candidate32"', f'callable = "tiny:{candidate}"')
    )
    path = make_project(tmp_path, text + claim, modules={"tiny.py": TINY_MODEL + TWO_HEADS})
    record(load_spec(path))
    return path


def test_agreement_pools_outputs_with_different_class_counts(tmp_path):
    # an action head (4 classes) and a choice head (3) under one claim: decided per output
    (verdict,) = run_gate(
        load_spec(_heads_project(tmp_path, "candidate_heads")), claims=["decisions"]
    ).verdicts
    assert verdict.passed and verdict.observed == 1.0 and verdict.evidence["rows"] == 12


def test_agreement_over_two_heads_names_the_choice_rows_that_flipped(tmp_path):
    path = _heads_project(tmp_path, "candidate_heads_flip")
    (verdict,) = run_gate(load_spec(path), claims=["decisions"]).verdicts
    assert not verdict.passed
    assert verdict.evidence["disagreeing"][:1] == ["b/choice[0]"]
    assert all(row.startswith("b/choice[") for row in verdict.evidence["disagreeing"])


def test_ece_over_heads_with_different_class_counts_is_one_clear_failure(tmp_path):
    claim = HEADS_CLAIM.replace('metric = "agreement"', 'metric = "ece"').replace(
        "bound = 1.0", 'bound = 0.5\nparams = { inputs = "logits" }'
    )
    path = _heads_project(tmp_path, "candidate_heads", claim=claim)
    (verdict,) = run_gate(load_spec(path), claims=["decisions"]).verdicts
    assert not verdict.passed
    assert "hold [3, 4] classes" in " ".join(f.detail for f in verdict.failures)

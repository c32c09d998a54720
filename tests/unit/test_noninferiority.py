"""The non-inferiority claim (``accuracy_noninferiority``, spec format 9): a quantized model is
gated as not worse than the reference by more than a published margin, on paired rows, by the
one-sided lower confidence bound of the accuracy difference. Tested both ways through the gate:
a candidate that changes a few decisions passes; a planted degradation fails naming the margin,
the observed difference and its confidence bound."""

from __future__ import annotations

import numpy as np
import pytest
from spec_helpers import make_project

from paritygate.errors import SpecError
from paritygate.gate import run_gate
from paritygate.references import record
from paritygate.spec import load_spec

MODEL = """
import numpy as np

W = np.random.default_rng(0).standard_normal((8, 4))


def reference(case):
    return {"scores": case.load()["x"] @ W}


def near(case):
    # a quantization-like perturbation: a handful of close decisions move, either way
    x = case.load()["x"]
    return {"scores": x @ (W + 0.02 * np.random.default_rng(1).standard_normal(W.shape))}


def degraded(case):
    # a planted degradation: every fifth row's decision moves to the next class
    scores = case.load()["x"] @ W
    top = scores.argmax(axis=1)
    rows = np.arange(0, len(scores), 5)
    scores[rows, (top[rows] + 1) % 4] = scores[rows].max(axis=1) + 1.0
    return {"scores": scores}
"""


def _project(tmp_path, bound=-0.03, extra="", version=9):
    rng = np.random.default_rng(5)
    w = np.random.default_rng(0).standard_normal((8, 4))
    cases = {f"c{i}": {"x": rng.standard_normal((100, 8))} for i in range(4)}
    tables = ""
    for name, arrays in cases.items():
        labels = np.argmax(arrays["x"] @ w, axis=1)
        labels[::7] = (labels[::7] + 2) % 4  # rows the reference gets wrong
        tables += (
            f'\n[cases.{name}]\npath = "cases/{name}.npz"\nsha256 = "{{sha:{name}}}"\n'
            f"label = {labels.tolist()}\n"
        )
    spec = f"""
format_version = {version}
outputs = ["scores"]
{tables}
[runners.reference]
role = "reference"
callable = "model:reference"

[runners.near]
role = "candidate"
callable = "model:near"

[runners.degraded]
role = "candidate"
callable = "model:degraded"

[claims.not-worse]
outputs = ["scores"]
metric = "accuracy_noninferiority"
bound = {bound}
oracle = "approximation"
status = "provisional"
{extra}
"""
    path = make_project(tmp_path, spec, modules={"model.py": MODEL}, cases=cases)
    record(load_spec(path))
    return path


def test_a_near_candidate_is_non_inferior_and_a_planted_degradation_fails(tmp_path):
    result = run_gate(load_spec(_project(tmp_path)))
    by = {v.candidate: v for v in result.verdicts if v.claim_id == "not-worse"}
    near, bad = by["near"], by["degraded"]
    assert near.passed, near.failures
    ev = near.evidence
    assert ev["difference"] == pytest.approx(ev["candidate_accuracy"] - ev["reference_accuracy"])
    assert -0.03 <= near.observed == ev["lower_bound"] <= ev["difference"]
    assert ev["only_candidate_right"] + ev["only_reference_right"] > 0  # decisions did move
    assert not bad.passed
    (failure,) = bad.failures
    text = failure.describe()
    # the margin, the observed difference and its confidence bound, all named
    assert "against the margin 0.03" in text
    assert f"accuracy difference {bad.evidence['difference']:+.4f}" in text
    assert f"lower confidence bound {bad.observed:+.4f}" in text
    assert "right only in the reference" in text and "McNemar exact p" in text
    assert bad.evidence["difference"] < -0.15 and bad.observed < -0.03


def test_the_bound_is_the_margin_and_the_lower_bound_is_one_sided(tmp_path):
    """A tighter margin fails the near candidate when its lower bound is below it; a higher
    confidence lowers the bound."""
    path = _project(tmp_path)
    near = next(
        v for v in run_gate(load_spec(path)).verdicts if v.candidate == "near" and v.claim_id
    )
    assert near.observed < 0  # the bootstrap's lower bound lies under a zero difference
    tight = path.read_text().replace("bound = -0.03", f"bound = {near.observed / 2}")
    path.write_text(tight)
    again = next(v for v in run_gate(load_spec(path)).verdicts if v.candidate == "near")
    assert not again.passed and again.observed == near.observed  # seeded: the same bound
    path.write_text(tight + "params = { confidence = 0.99 }\n")
    wider = next(v for v in run_gate(load_spec(path)).verdicts if v.candidate == "near")
    assert wider.observed < near.observed


@pytest.mark.parametrize(
    ("version", "bound", "extra", "message"),
    [
        (8, -0.03, "", "needs format_version = 9"),
        (9, 0.03, "", "claims.not-worse"),
        (9, -0.03, "params = { confidence = 1.5 }", "expected a number in [0.5, 0.999]"),
        (9, -0.03, "params = { resamples = 10 }", "expected a whole number 100 to 100000"),
    ],
)
def test_bad_noninferiority_claims_are_refused(tmp_path, version, bound, extra, message):
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _project(tmp_path, bound=bound, extra=extra, version=version)

"""Regression tests for passes the gate must not give: each planted defect fails with the right
message, and the good case next to it still passes."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate.gate import evaluate_claim
from paritygate.spec import METRICS, Claim


def claim(metric: str, bound: float, outputs=("out",), **kw) -> Claim:
    scope, direction = METRICS[metric]
    return Claim(
        id=f"c-{metric}",
        outputs=tuple(outputs),
        metric=metric,
        bound=bound,
        unit="",
        scope=scope,
        direction=direction,
        oracle="equivalence",
        mode="stored",
        status="provisional",
        hardware="any",
        candidates=("cand",),
        **kw,
    )


REF = {"out": np.array([0.25, 1.5, 3.0], dtype=np.float32)}


@pytest.mark.parametrize(
    "metric,bound", [("exact", 0.0), ("max_abs", 1e-3), ("max_rel", 1e-3), ("ulp", 2)]
)
def test_element_claim_fails_an_empty_candidate_against_a_non_empty_reference(metric, bound):
    empty = {"out": np.zeros((0,), dtype=np.float32)}
    verdict = evaluate_claim(claim(metric, bound), "cand", "case0", empty, REF)
    assert not verdict.passed
    assert verdict.observed == float("inf")
    (failure,) = verdict.failures
    assert failure.metric == "size" and failure.where == "out"
    assert "actual is empty" in failure.detail and "3 element(s)" in failure.detail
    # The good case: the same claim passes the reference against itself.
    assert evaluate_claim(claim(metric, bound), "cand", "case0", dict(REF), REF).passed


def test_element_claim_passes_two_empty_outputs():
    empty = {"out": np.zeros((0, 2), dtype=np.int64)}
    assert evaluate_claim(claim("exact", 0.0), "cand", "c", empty, dict(empty)).passed


@pytest.mark.parametrize("metric,bound", [("cosine", 0.999), ("mean_abs", 1e-3)])
def test_output_claim_fails_an_empty_candidate(metric, bound):
    empty = {"out": np.zeros((0,), dtype=np.float32)}
    verdict = evaluate_claim(claim(metric, bound), "cand", "c", empty, REF)
    assert not verdict.passed
    assert any("actual is empty" in f.describe() for f in verdict.failures)


def test_cosine_claim_fails_nan_on_one_side_and_names_it():
    rng = np.random.default_rng(0)
    ref = {"out": rng.standard_normal(1000)}
    cand = {"out": ref["out"].copy()}
    cand["out"][17] = np.nan
    verdict = evaluate_claim(claim("cosine", 0.999), "cand", "c", cand, ref)
    assert not verdict.passed
    text = " ".join(f.describe() for f in verdict.failures)
    assert "actual has NaN at 1 of 1000 position(s)" in text
    assert "zero norm" not in text
    # Good case: the same output without the NaN passes.
    assert evaluate_claim(claim("cosine", 0.999), "cand", "c", dict(ref), ref).passed


def test_cosine_all_nan_against_all_zero_names_the_nan_not_a_zero_norm():
    ref = {"out": np.zeros(8)}
    cand = {"out": np.full(8, np.nan)}
    verdict = evaluate_claim(claim("cosine", 0.9), "cand", "c", cand, ref)
    assert not verdict.passed
    text = " ".join(f.describe() for f in verdict.failures)
    assert "actual has NaN at 8 of 8 position(s)" in text
    assert "zero norm" not in text


def test_mean_abs_claim_fails_nan_on_one_side():
    ref = {"out": np.ones(100)}
    cand = {"out": np.ones(100)}
    cand["out"][3] = np.nan
    verdict = evaluate_claim(claim("mean_abs", 1e-6), "cand", "c", cand, ref)
    assert not verdict.passed
    assert any(f.metric == "mean_abs" for f in verdict.failures)
    assert "NaN on one side" in " ".join(f.describe() for f in verdict.failures)
    assert evaluate_claim(claim("mean_abs", 1e-6), "cand", "c", dict(ref), ref).passed


# --------------------------------------------------------------------------------------------
# Declared outputs: covered by a claim or waived with a reason; a declared output nothing
# produces fails in record and in gate.

BOX_DECLARED = 'outputs = ["boxes/question", "boxes/editor"]'
BOX_WITH_LOGITS = 'outputs = ["boxes/question", "boxes/editor", "logits"]'


def _box_port(tmp_path, *, declared: str = BOX_WITH_LOGITS, waived: str = ""):
    from spec_helpers import copy_box_port

    project = copy_box_port(tmp_path)
    path = project / "parity.toml"
    text = path.read_text()
    assert BOX_DECLARED in text
    text = text.replace(BOX_DECLARED, declared)
    if waived:
        text = text.replace("format_version = 1", "format_version = 2").replace(
            "\n[cases.leetcode]", f"\n[waived]\n{waived}\n\n[cases.leetcode]"
        )
    path.write_text(text)
    return project


def test_declared_output_no_claim_covers_is_refused_at_load(tmp_path, capsys):
    from paritygate.cli import main

    project = _box_port(tmp_path)
    assert main(["record", str(project / "parity.toml")]) == 2
    err = capsys.readouterr().err
    assert "'logits' covered by no claim" in err and "outputs" in err
    assert not (project / "references").exists()


def test_waiver_needs_a_reason_and_a_declared_output(tmp_path):
    from paritygate.errors import SpecError
    from paritygate.spec import load_spec

    with pytest.raises(SpecError, match="waived.logits: expected the reason"):
        load_spec(_box_port(tmp_path / "a", waived='logits = ""') / "parity.toml")
    with pytest.raises(SpecError, match="waived.scores: not a declared output"):
        load_spec(_box_port(tmp_path / "b", waived='scores = "x"') / "parity.toml")
    # A waiver in a version-1 spec is refused with the version it needs.
    project = _box_port(tmp_path / "c", waived='logits = "debug"')
    path = project / "parity.toml"
    path.write_text(path.read_text().replace("format_version = 2", "format_version = 1"))
    with pytest.raises(SpecError, match="needs format_version = 2"):
        load_spec(path)


def test_waived_declared_output_that_nothing_produces_fails_record(tmp_path, capsys):
    from paritygate.cli import main

    project = _box_port(tmp_path, waived='logits = "the detector head, gated upstream"')
    assert main(["record", str(project / "parity.toml")]) == 2
    err = capsys.readouterr().err
    assert "did not produce the declared output(s) 'logits'" in err
    assert not (project / "references").exists()
    # Good case: declared as the runners produce it, with every output covered, it records.
    good = _box_port(tmp_path / "good", declared=BOX_DECLARED)
    assert main(["record", str(good / "parity.toml")]) == 0


def test_declared_output_missing_from_an_older_reference_fails_the_gate(tmp_path, capsys):
    from paritygate.cli import main

    project = _box_port(tmp_path, declared=BOX_DECLARED)
    assert main(["record", str(project / "parity.toml")]) == 0
    assert main(["gate", str(project / "parity.toml")]) == 0
    path = project / "parity.toml"
    text = path.read_text()
    path.write_text(
        text.replace(BOX_DECLARED, BOX_WITH_LOGITS)
        .replace("format_version = 1", "format_version = 2")
        .replace("\n[cases.leetcode]", '\n[waived]\nlogits = "debug"\n\n[cases.leetcode]')
    )
    capsys.readouterr()
    assert main(["gate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "declared output(s) 'logits' not in the recorded reference" in out

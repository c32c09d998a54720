"""Paired-mode claims of every oracle: the claim's own metric on live runs, plus the leaked-state
checks (b) of both orders, byte for byte."""

from __future__ import annotations

import numpy as np
from spec_helpers import TINY_SPEC, make_project

from paritygate.gate import run_gate
from paritygate.references import record
from paritygate.spec import load_spec

# The float64 reference and float32 candidates of spec_helpers' tiny model, with module state the
# reference reads: what a candidate leaves there changes every later reference run.
PAIRED_MODEL = """
import numpy as np

W = np.random.default_rng(0).standard_normal((8, 4))
_state = {"leaked": False, "last": None}


def reference(case):
    x = case.load()["x"]
    logits = x @ W
    y = np.tanh(logits)
    if _state["leaked"]:
        y = y + 1e-9  # a hook left installed: far inside the claim's 1e-5, yet not the same bytes
    _state["last"] = "reference"
    return {"y": y, "logits": logits}


def candidate32(case):
    x = case.load()["x"].astype(np.float32)
    logits = x @ W.astype(np.float32)
    return {"y": np.tanh(logits), "logits": logits}


def candidate_leaky(case):
    out = candidate32(case)
    _state["leaked"] = True
    return out


def candidate_off(case):
    out = candidate32(case)
    out["y"] = out["y"] + np.float32(1e-3)
    return out


def candidate_alternating(case):
    # A double-buffered cache that serves its stale buffer on every second call.
    _state["calls"] = _state.get("calls", 0) + 1
    out = candidate32(case)
    if _state["calls"] % 2 == 0:
        out["y"] = out["y"] + np.float32(1e-3)
    return out
"""

PAIRED_SPEC = TINY_SPEC.replace('status = "provisional"', 'mode = "paired"\nstatus = "provisional"')


def _project(root, candidate):
    path = make_project(
        root,
        PAIRED_SPEC.replace("tiny:candidate32", f"tiny:{candidate}"),
        modules={"tiny.py": PAIRED_MODEL},
    )
    record(load_spec(path))
    return load_spec(path)


def _failures(result):
    return [f for v in result.verdicts for f in v.failures]


def test_paired_equivalence_claim_passes_with_three_runs_per_order(tmp_path):
    result = run_gate(_project(tmp_path, "candidate32"), claims=["y-close"])
    assert result.passed, [f.describe() for f in _failures(result)]
    assert [(v.case, v.oracle, v.metric) for v in result.verdicts] == [
        ("a", "equivalence", "max_abs"),
        ("b", "equivalence", "max_abs"),
    ]
    for verdict in result.verdicts:
        assert 0 < verdict.observed <= 1e-5  # float32 vs float64: measured, not byte-equal
        paired = verdict.evidence["paired"]
        assert paired["run_counts"] == {"baseline": 3, "candidate": 3}
        assert [(c["order"], c["check"], c["exact"]) for c in paired["checks"]] == [
            ("forward", "b", True),
            ("reversed", "b", True),
        ]
        assert verdict.evidence["reversed_order"]["passed"]
        assert verdict.evidence["y"]["max_abs"] == verdict.observed  # the claim's own evidence


def test_paired_equivalence_claim_fails_a_leak_the_metric_cannot_see(tmp_path):
    result = run_gate(_project(tmp_path, "candidate_leaky"), claims=["y-close"])
    assert not result.passed
    failures = _failures(result)
    assert [f.metric for f in failures] == ["byte_equality"]  # the metric itself holds
    (leak,) = failures
    assert leak.where == "forward check b: baseline-after vs baseline-before, y"
    assert leak.detail.startswith("bytes: max_abs 1e-09")
    verdict = next(v for v in result.verdicts if not v.passed)
    assert verdict.case == "a" and verdict.observed <= 1e-5 and verdict.excess is None


def test_paired_equivalence_claim_fails_a_metric_violation_with_the_metrics_message(tmp_path):
    result = run_gate(_project(tmp_path, "candidate_off"), claims=["y-close"])
    assert not result.passed
    failures = _failures(result)
    # One failure per case: both orders break the claim the same way, and it is reported once.
    assert [f.metric for f in failures] == ["max_abs", "max_abs"]
    assert all(
        f.where.startswith("y at index ") and "elements beyond the bound" in f.detail
        for f in failures
    )
    assert all(abs(f.observed - 1e-3) < 1e-5 and f.bound == 1e-5 for f in failures)
    assert all(abs(v.excess - (v.observed - 1e-5)) < 1e-12 for v in result.verdicts)


def test_paired_claim_names_the_reversed_order_when_only_it_breaks_the_claim(tmp_path):
    # Case a: the candidate's calls 1 (forward), 2 (reversed, before) and 3 (reversed, after).
    result = run_gate(_project(tmp_path, "candidate_alternating"), claims=["y-close"], cases=["a"])
    assert not result.passed
    (verdict,) = result.verdicts
    wheres = [(f.metric, f.where.split(" at index")[0]) for f in verdict.failures]
    assert wheres == [
        ("max_abs", "reversed order, candidate-before vs baseline, y"),
        ("byte_equality", "reversed check b: candidate-after vs candidate-before, y"),
    ]
    assert verdict.observed > 1e-5 and verdict.evidence["reversed_order"]["passed"] is False


BOX_MODEL = """
import numpy as np

_state = {"leaked": False}


def reference(case):
    shift = 1 if _state["leaked"] else 0
    return {
        "boxes/question": np.array([10, 20, 110, 60]) + shift,
        "boxes/editor": np.array([10, 70, 110, 150]),
    }


def port(case):
    return {
        "boxes/question": np.array([11, 20, 110, 61]),
        "boxes/editor": np.array([10, 72, 109, 150]),
    }


def port_leaky(case):
    _state["leaked"] = True
    return port(case)


def port_off(case):
    out = port(case)
    out["boxes/editor"] = out["boxes/editor"] + np.array([0, 0, 0, 3])
    return out
"""

BOX_SPEC = """
format_version = 1
outputs = ["boxes/question", "boxes/editor"]

[cases.a]
path = "cases/a.npz"
sha256 = "{sha:a}"

[runners.reference]
role = "reference"
callable = "boxes:reference"

[runners.port]
role = "candidate"
callable = "boxes:PORT"

[claims.panel-edges]
outputs = ["boxes/*"]
metric = "max_edge_delta"
bound = 2
unit = "px"
scope = "edge"
oracle = "equivalence"
mode = "paired"
status = "provisional"
"""


def test_paired_edge_claim_on_nested_output_names_both_directions(tmp_path):
    verdicts = {}
    for port in ("port", "port_leaky", "port_off"):
        path = make_project(
            tmp_path / port,
            BOX_SPEC.replace("PORT", port),
            modules={"boxes.py": BOX_MODEL},
            cases={"a": {"x": np.zeros(1)}},
        )
        record(load_spec(path))
        (verdicts[port],) = run_gate(load_spec(path)).verdicts
    assert verdicts["port"].passed and verdicts["port"].observed == 2
    leak = verdicts["port_leaky"]
    assert (
        not leak.passed and leak.observed == 2
    )  # every edge within 2 px, yet the reference changed
    assert [(f.metric, f.where) for f in leak.failures] == [
        ("byte_equality", "forward check b: baseline-after vs baseline-before, boxes/question")
    ]
    off = verdicts["port_off"]
    assert not off.passed and off.observed == 3
    assert [(f.metric, f.where) for f in off.failures] == [("edge_delta", "box editor, edge y2")]

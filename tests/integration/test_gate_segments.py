"""Edge claims on segments: ``params.edges = ["start", "end"]`` gates (N, 2) rows per edge."""

from __future__ import annotations

import numpy as np
import pytest
from spec_helpers import make_project

from paritygate.errors import SpecError
from paritygate.gate import run_gate
from paritygate.references import record
from paritygate.spec import load_spec

SEGMENTS_MODEL = """
import numpy as np


def reference(case):
    return {"segments": case.load()["segments"]}


def shifted(case):
    seg = case.load()["segments"].copy()
    seg[-1, 1] += 2  # the last segment ends two chunks late
    return {"segments": seg}


def one_more(case):
    seg = case.load()["segments"]
    return {"segments": np.concatenate([seg, [[90, 95]]])}
"""

SPEC = """
format_version = 1
outputs = ["segments"]

[cases.a]
path = "cases/a.npz"
sha256 = "{sha:a}"

[runners.ref]
role = "reference"
callable = "segs:reference"

[runners.cand]
role = "candidate"
callable = "segs:CANDIDATE"

[claims.edges]
outputs = ["segments"]
metric = "max_edge_delta"
bound = 1
unit = "chunks"
scope = "edge"
oracle = "equivalence"
mode = "stored"
status = "provisional"
params = { edges = EDGES }
"""


def project(tmp_path, candidate, edges='["start", "end"]'):
    spec = make_project(
        tmp_path,
        SPEC.replace("CANDIDATE", candidate).replace("EDGES", edges),
        modules={"segs.py": SEGMENTS_MODEL},
        cases={"a": {"segments": np.array([[3, 10], [20, 41]], dtype=np.int64)}},
    )
    return load_spec(spec)


def test_segments_within_the_bound_pass_and_a_moved_edge_fails(tmp_path):
    spec = project(tmp_path / "ok", "reference")
    record(spec)
    assert run_gate(spec).passed
    spec = project(tmp_path / "bad", "shifted")
    record(spec)
    result = run_gate(spec)
    (verdict,) = [v for v in result.verdicts if v.claim_id == "edges"]
    assert not verdict.passed and verdict.observed == 2
    (failure,) = verdict.failures
    assert (failure.where, failure.observed, failure.bound) == (
        "element segments/1, edge end",
        2.0,
        1.0,
    )
    assert "chunks" in failure.detail


def test_an_extra_segment_fails(tmp_path):
    spec = project(tmp_path, "one_more")
    record(spec)
    (verdict,) = [v for v in run_gate(spec).verdicts if v.claim_id == "edges"]
    assert not verdict.passed
    assert any(f.metric == "extra_label" and f.where == "segments/2" for f in verdict.failures)


def test_edges_parameter_is_validated(tmp_path):
    with pytest.raises(SpecError, match=r"claims\.edges\.params\.edges.*distinct edge names"):
        project(tmp_path, "reference", edges='["start", "start"]')

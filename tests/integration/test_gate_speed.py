"""Speed claims in the gate are experiments (paritygate.bench), evaluated on their hardware
class."""

from __future__ import annotations

import pytest
from spec_helpers import make_project

from paritygate.gate import run_gate
from paritygate.references import record
from paritygate.spec import load_spec

SLEEPY_MODEL = """
import itertools

import numpy as np

W = np.random.default_rng(0).standard_normal((8, 4))
_calls = itertools.count()


def _model(case, work):
    # CPU work, not sleep: a busy machine stretches both sides alike, while a sleep's wake-up
    # delay adds a constant that squeezes every ratio towards 1
    total = 0
    for i in range(work):
        total += i * i
    return {"y": np.tanh(case.load()["x"] @ W)}


def reference(case):
    return _model(case, 40_000)


def fast(case):
    return _model(case, 10_000)


def same_speed(case):
    return _model(case, 40_000)


def drifting(case):
    # answers differently on every call: what it times is not what the gate checked
    out = _model(case, 10_000)
    out["y"] = out["y"] + next(_calls) * 1e-3
    return out
"""


def _spec(candidate: str, metric: str, bound: float) -> str:
    return f"""
format_version = 1
outputs = ["y"]

[cases.a]
path = "cases/a.npz"
sha256 = "{{sha:a}}"

[runners.reference]
role = "reference"
callable = "sleepy:reference"

[runners.cand]
role = "candidate"
callable = "sleepy:{candidate}"

[claims.y-close]
outputs = ["y"]
metric = "max_abs"
bound = 0.5
oracle = "equivalence"
status = "provisional"

[claims.fast]
outputs = ["y"]
metric = "{metric}"
bound = {bound}
oracle = "approximation"
status = "provisional"
hardware = "bench-box"
params = {{ budget = 8, warmup = 1 }}

[hardware.bench-box]
system = "*"
"""


def _gate(tmp_path, candidate, metric, bound):
    import numpy as np

    path = make_project(
        tmp_path,
        _spec(candidate, metric, bound),
        modules={"sleepy.py": SLEEPY_MODEL},
        cases={"a": {"x": np.random.default_rng(1).standard_normal((3, 8))}},
    )
    record(load_spec(path))
    result = run_gate(load_spec(path))
    (speed,) = [v for v in result.verdicts if v.claim_id == "fast"]
    return result, speed


def test_speedup_claim_holds_for_a_real_speedup(tmp_path):
    result, speed = _gate(tmp_path, "fast", "speedup", 1.5)
    assert speed.passed and result.passed, speed.failures
    assert speed.observed > 2.0
    evidence = speed.evidence
    assert evidence["format"] == "paritygate-bench-result"
    pairs = len(evidence["pair_ratios"])  # one paired ratio per interleaved block pair
    assert pairs == evidence["blocks"] >= 7  # the first look needs 7 pairs
    assert evidence["verdict"] == "faster" and evidence["threshold"] == 0.5  # the bound
    assert 1 / evidence["ratio_ci"][1] >= 1.5  # the whole interval clears the claim
    per_block = evidence["provenance"]["design"]["samples_per_block"]
    assert len(evidence["baseline"]["end_to_end_s"]) == per_block * pairs  # raw samples kept


def test_speedup_claim_fails_when_the_candidate_is_not_faster(tmp_path):
    result, speed = _gate(tmp_path, "same_speed", "speedup", 1.3)
    assert not speed.passed and not result.passed
    assert speed.observed < 1.3
    (failure,) = speed.failures
    assert failure.metric == "speedup"
    assert "the speedup's interval does not clear the bound" in failure.detail
    assert speed.evidence["verdict"] in ("equivalent", "inconclusive")


def test_latency_claim_needs_enough_samples_and_holds_or_fails_on_the_bound(tmp_path):
    _, loose = _gate(tmp_path / "loose", "fast", "p50_ms", 100)
    assert loose.passed and 0 < loose.observed < 100
    assert len(loose.evidence["samples_ms"]) >= 20
    # 10,000 Python loop iterations take far more than 10 us on any machine
    _, tight = _gate(tmp_path / "tight", "fast", "p50_ms", 0.01)
    assert not tight.passed
    assert tight.failures[0].metric == "p50_ms"
    assert tight.failures[0].excess == pytest.approx(tight.observed - 0.01)


def test_the_code_timed_must_be_the_code_gated(tmp_path):
    _, speed = _gate(tmp_path, "drifting", "speedup", 1.5)
    assert not speed.passed
    assert "differs from baseline" in speed.failures[0].detail


def test_reports_show_the_speed_evidence(tmp_path):
    """Markdown and HTML say what a speed claim measured (both sides, the paired ratios, the
    variability; the latency samples), and a floor missed reads 'short by', not 'exceeded by'."""
    from paritygate.reports import render_html, render_markdown
    from paritygate.reports._common import fmt
    from paritygate.results import to_jsonable

    result, speed = _gate(tmp_path / "ok", "fast", "speedup", 1.5)
    data = to_jsonable(result)
    section = render_markdown(data).split("### Speed claims", 1)[1]
    assert "`fast` on case `a` (cand): reference median" in section and "cand median" in section
    assert "speedup per block pair median" in section and "threshold 50.00% (stated)" in section
    assert "output checked on the first call and after each of" in section
    html = render_html(data)
    assert "<h2>Speed claims</h2>" in html and "speed samples, both sides" in html

    result, speed = _gate(tmp_path / "floor", "fast", "speedup", 50)
    assert not speed.passed
    low = 1 / speed.evidence["ratio_ci"][1]  # the interval's pessimistic end is judged
    markdown = render_markdown(to_jsonable(result))
    assert f"speedup at case a observed {fmt(low)} bound 50 short by {fmt(50 - low)}" in markdown
    assert "exceeded by" not in markdown

    result, latency = _gate(tmp_path / "lat", "fast", "p50_ms", 0.01)
    markdown = render_markdown(to_jsonable(result))
    samples = len(latency.evidence["samples_ms"])
    assert (
        f"`fast` on case `a` (cand): p50_ms {fmt(latency.observed)} ms of {samples} samples"
        in markdown
    )
    assert "exceeded by" in markdown and "short by" not in markdown
    assert "speed samples, bound dashed" in render_html(to_jsonable(result))

"""Activity is measured by paritygate: it wraps a callable inside the candidate and counts its
calls. A cache that reports skips it did not make fails; a self-reported counter is refused."""

from __future__ import annotations

import json

import pytest
from spec_helpers import make_project

from paritygate.cli import main
from paritygate.gate import run_gate
from paritygate.spec import load_spec

CACHE = """
import numpy as np

STEPS = 25


def _body(h):
    return np.tanh(h) * 0.9 + 0.01


class Body:
    def run(self, h):
        return _body(h)


BODY = Body()


def _denoise(x, skip):
    h, residual = x, None
    for step in range(STEPS):
        if residual is not None and skip(step):
            h = h + residual
        else:
            out = BODY.run(h)
            residual = out - h
            h = out
    return h


def _skips(step):
    return step in (3, 6, 9, 12, 15, 18)  # 6 of 25 steps


def reference(case):
    return {"y": _denoise(case.load()["x"], lambda step: False)}


def honest(case):
    return {"y": _denoise(case.load()["x"], _skips)}


def liar(case):
    # Says it skipped 6 steps, ran the body on all 25: its output is the reference's.
    return {"y": _denoise(case.load()["x"], lambda step: False), "skipped_steps": np.int64(6)}


def unused_skip(case):
    # Skips 6 body calls whose results it never used: active, but it changes nothing.
    x = h = case.load()["x"]
    for step in range(STEPS):
        if not _skips(step):
            BODY.run(x)
        h = _body(h)
    return {"y": h}
"""

SPEC = """
format_version = 3
outputs = ["y"]

[cases.a]
path = "cases/a.npz"
sha256 = "{sha:a}"

[cases.b]
path = "cases/b.npz"
sha256 = "{sha:b}"

[runners.reference]
role = "reference"
callable = "cache:reference"

[runners.cand]
role = "candidate"
callable = "cache:CANDIDATE"

[claims.cache-close]
outputs = ["y"]
metric = "max_abs"
bound = 0.5
oracle = "approximation"
mode = "paired"
status = "provisional"
ACTIVITY
"""

SKIPPED = 'activity = { calls = "cache:Body.run", measure = "skipped", min = 5, max = 7 }'


def _project(tmp_path, candidate, activity=SKIPPED, *, recorded=True):
    text = SPEC.replace("CANDIDATE", candidate).replace("ACTIVITY", activity)
    path = make_project(tmp_path, text, modules={"cache.py": CACHE})
    if recorded:
        from paritygate.references import record

        record(load_spec(path))  # the counted reference calls are not recorded as outputs
        manifest = json.loads((tmp_path / "references" / "manifest.json").read_text())
        assert list(manifest["cases"]["a"]["outputs"]) == ["y"]
    return path


def test_honest_cache_passes_with_the_skips_paritygate_counted(tmp_path):
    result = run_gate(load_spec(_project(tmp_path, "honest")))
    assert result.passed, [f.describe() for v in result.verdicts for f in v.failures]
    assert len(result.verdicts) == 2


def test_a_cache_that_lies_about_its_skips_fails(tmp_path, capsys):
    path = _project(tmp_path, "liar")
    assert main(["gate", str(path)]) == 1
    result = json.loads((tmp_path / "parity-reports" / "parity" / "result.json").read_text())
    failures = [f for v in result["verdicts"] for f in v["failures"]]
    assert failures and all(f["metric"] == "activity:cache:Body.run" for f in failures)
    detail = failures[0]["detail"]
    assert "calls of cache:Body.run skipped (reference minus candidate) = 0" in detail
    assert "counted by paritygate" in detail and "the optimization did nothing" in detail
    # the terminal says the count is under the band and by how much, and offers no bound of the
    # metric as a fix (no bound of the metric makes a cache that did nothing pass)
    out = capsys.readouterr().out
    assert "observed 0 bound 5..7 under by 5" in out, out
    assert "over by" not in out and "would have held" not in out


def test_measured_calls_band_in_stored_mode(tmp_path):
    activity = 'activity = { calls = "cache:Body.run", min = 18, max = 20 }'
    path = _project(tmp_path, "honest", activity, recorded=False)
    text = path.read_text().replace('mode = "paired"', 'mode = "stored"')
    path.write_text(text)
    from paritygate.references import record

    record(load_spec(path))
    assert run_gate(load_spec(path)).passed
    path.write_text(text.replace("cache:honest", "cache:liar"))
    result = run_gate(load_spec(path))
    assert not result.passed
    details = [f.detail for v in result.verdicts for f in v.failures]
    assert details and all("calls of cache:Body.run = 25" in d for d in details)
    assert all("more activity than claimed" in d for d in details)


def test_a_self_reported_counter_is_refused_as_activity_evidence(tmp_path, capsys):
    activity = 'activity = { counter = "skipped_steps", min = 5, max = 7 }'
    path = _project(tmp_path, "liar", activity, recorded=False)
    assert main(["gate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "claims.cache-close.activity" in err
    assert "a count the candidate reports about itself is not activity evidence" in err


def test_differ_requires_a_measurable_difference_from_the_exact_path(tmp_path):
    differ = (
        'activity = { calls = "cache:Body.run", measure = "skipped", min = 5, max = 7, '
        "differ = true }"
    )
    result = run_gate(load_spec(_project(tmp_path / "unused", "unused_skip", differ)))
    assert not result.passed
    metrics = {f.metric for v in result.verdicts for f in v.failures}
    assert metrics == {"activity:differ"}
    assert run_gate(load_spec(_project(tmp_path / "honest", "honest", differ))).passed


@pytest.mark.parametrize(
    "activity,message",
    [
        ('activity = { calls = "cache", min = 1, max = 2 }', "module:attribute.path"),
        (
            'activity = { calls = "cache:Body.run", measure = "often", min = 1, max = 2 }',
            "measure must be one of calls, skipped",
        ),
    ],
)
def test_bad_activity_tables_are_spec_errors(tmp_path, capsys, activity, message):
    assert main(["gate", str(_project(tmp_path, "honest", activity, recorded=False))]) == 2
    assert message in capsys.readouterr().err


def test_skipped_needs_paired_mode(tmp_path, capsys):
    path = _project(tmp_path, "honest", recorded=False)
    path.write_text(path.read_text().replace('mode = "paired"', 'mode = "stored"'))
    assert main(["gate", str(path)]) == 2
    assert 'it needs mode = "paired"' in capsys.readouterr().err


def test_a_callable_that_does_not_exist_fails_the_run_naming_it(tmp_path):
    activity = 'activity = { calls = "cache:Body.walk", min = 1, max = 30 }'
    result = run_gate(load_spec(_project(tmp_path, "honest", activity)))
    assert not result.passed
    assert any("cache:Body.walk" in e for e in result.errors), result.errors

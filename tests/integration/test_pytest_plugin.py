"""The pytest plugin, run on real small parity projects through pytester."""

from __future__ import annotations

import subprocess
import sys

import pytest
from spec_helpers import make_project

pytest_plugins = ["pytester"]

TEST_MODULE = """
def test_whole_spec(paritygate_gate):
    result = paritygate_gate("parity.toml")
    assert result.passed and len(result.verdicts) == 2


def test_one_claim_one_case(paritygate_claim):
    result = paritygate_claim("parity.toml", "y-close", case="b")
    assert [(v.claim_id, v.case) for v in result.verdicts] == [("y-close", "b")]
"""


@pytest.fixture
def project(pytester):
    make_project(pytester.path)
    pytester.makepyfile(test_claims=TEST_MODULE)
    return pytester


def _record(project) -> None:
    result = project.runpytest("--paritygate-record", "-p", "no:cacheprovider")
    # a re-record never passes silently: every test that gated fails and says why
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*re-recorded: re-run without --paritygate-record*"])
    assert (project.path / "references").is_dir()


def test_record_fails_the_run_then_the_gate_passes_and_writes_reports(project):
    _record(project)
    result = project.runpytest("-p", "no:cacheprovider", "--paritygate-reports", "out")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*= paritygate =*",
            "parity.toml (all claims) in test_claims.py::test_whole_spec:",
            "  pass y-close (cand): 2/2 cases  worst * @ *  bound 1e-05  *x margin",
            "parity.toml (claim y-close case b) in test_claims.py::test_one_claim_one_case:",
            "  pass y-close (cand): 1/1 cases  worst *  bound 1e-05  *x margin",
        ]
    )
    # passing cases are listed only with -v
    assert "    pass a:" not in result.stdout.str()
    verbose = project.runpytest("-p", "no:cacheprovider", "-v")
    verbose.stdout.fnmatch_lines(["    pass a: max_abs * (bound 1e-05)", "    pass b: max_abs *"])
    written = sorted(
        p.relative_to(project.path / "out").as_posix() for p in (project.path / "out").rglob("*.md")
    )
    assert written == [
        "test_claims.py_test_one_claim_one_case/summary.md",
        "test_claims.py_test_whole_spec/summary.md",
    ]


def test_violated_claim_fails_naming_claim_case_and_excess(project):
    _record(project)
    (project.path / "tiny.py").write_text(
        (project.path / "tiny.py")
        .read_text()
        .replace(
            'return {"y": np.tanh(logits), "logits": logits}\n\n\ndef candidate_extra',
            'return {"y": np.tanh(logits) + 1e-3, "logits": logits}\n\n\ndef candidate_extra',
        )
    )
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    # the short summary names claim, case and excess
    result.stdout.fnmatch_lines(
        ["FAILED test_claims.py::test_whole_spec - Failed: y-close @ a: over by 0.0009*"]
    )
    wide = project.runpytest("-p", "no:cacheprovider", "-rf", "-vv")
    wide.stdout.fnmatch_lines(
        [
            "FAILED test_claims.py::test_whole_spec - Failed: y-close @ a: over by 0.00099 "
            "(max_abs 0.001, bound 1e-05) [[]cand] +1 more failing"
        ]
    )
    result.stdout.fnmatch_lines(["FAIL  y-close  cand  0/2 cases*", "  FAIL y-close (cand): *"])


UNKNOWN_CLAIM = """
def test_unknown_claim(paritygate_claim):
    paritygate_claim("parity.toml", "nope")
"""


def test_missing_references_and_spec_errors_fail_in_one_line(project):
    project.makepyfile(test_unknown=UNKNOWN_CLAIM)
    result = project.runpytest("-p", "no:cacheprovider", "-k", "whole_spec or unknown_claim")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*no reference recorded yet*(in a pytest run: pytest --paritygate-record)"]
    )
    result.stdout.fnmatch_lines(
        ["paritygate: *parity.toml: no claim 'nope'; the spec has: y-close"]
    )
    out = result.stdout.str()
    assert "Traceback" not in out and "During handling" not in out
    # one error per test, not a chained pair
    # once in the failure's body (the short summary repeats it whole where pytest sees CI=true)
    assert out.split("short test summary info")[0].count("no claim 'nope'") == 1


def test_importing_paritygate_imports_no_pytest():
    code = (
        "import sys, paritygate, paritygate.reports, paritygate.claims_check; "
        "print('pytest' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


SPEED_CLAIM = """
[claims.instant]
outputs = ["y"]
metric = "p50_ms"
bound = 1e-9
oracle = "approximation"
status = "provisional"
hardware = "this-box"
params = { blocks = 2, block_size = 10, warmup = 1 }

[hardware.this-box]
system = "*"
"""

SPEED_TEST_MODULE = """
def test_whole_spec(paritygate_gate):
    result = paritygate_gate("parity.toml")
    assert [(n.claim_id, n.reason) for n in result.not_evaluated] == [
        ("instant", "speed claim: evaluated only by a gate run on its hardware class, never "
         "inside a unit-test suite")]
"""


def test_speed_claims_are_not_evaluated_inside_the_test_suite(pytester):
    """A speed claim on this machine's hardware class (1e-9 ms: it fails wherever it is timed) is
    listed as not evaluated by the plugin, while a gate run on the class evaluates and fails it."""
    from spec_helpers import TINY_SPEC

    from paritygate.gate import run_gate
    from paritygate.references import record
    from paritygate.spec import load_spec

    path = make_project(pytester.path, TINY_SPEC + SPEED_CLAIM)
    pytester.makepyfile(test_speed=SPEED_TEST_MODULE)
    record(load_spec(path))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    gated = run_gate(load_spec(path))
    assert not gated.passed and [v.claim_id for v in gated.verdicts if not v.passed] == ["instant"]


BASELINE_TESTS = """
import numpy as np


def test_logits(paritygate_baseline):
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    paritygate_baseline("logits", {"logits": x * SCALE}, atol=ATOL)
"""


def _baseline_project(pytester, scale: float, atol: float = 0.0, name: str = "test_base"):
    pytester.makepyfile(
        **{name: BASELINE_TESTS.replace("SCALE", repr(scale)).replace("ATOL", repr(atol))}
    )


def test_baseline_fixture_writes_then_compares_then_updates_with_the_diff(pytester):
    _baseline_project(pytester, 1.0)
    first = pytester.runpytest("-p", "no:cacheprovider")
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines(
        ["*baseline written: *baselines/logits.safetensors*review it and re-run*"]
    )
    stored = pytester.path / "baselines" / "logits.safetensors"
    provenance = pytester.path / "baselines" / "logits.json"
    assert stored.is_file() and '"format": "paritygate-baseline"' in provenance.read_text()
    assert '"python"' in provenance.read_text()  # provenance travels with the baseline
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    # a change fails, naming the flag that re-records it, and writes nothing
    _baseline_project(pytester, 1.001)
    before = stored.read_bytes()
    changed = pytester.runpytest("-p", "no:cacheprovider")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*differs from baseline logits*--paritygate-update-baselines*"])
    assert stored.read_bytes() == before
    # within the test's own bound it passes
    _baseline_project(pytester, 1.001, atol=0.01)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    # the update flag re-records, fails with the diff, and the next plain run passes
    _baseline_project(pytester, 1.001)
    updated = pytester.runpytest("-p", "no:cacheprovider", "--paritygate-update-baselines")
    updated.assert_outcomes(failed=1)
    updated.stdout.fnmatch_lines(["*baseline re-recorded*", "*output logits: FAIL*"])
    assert stored.read_bytes() != before
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_update_lists_baselines_no_test_uses(pytester):
    _baseline_project(pytester, 1.0)
    pytester.runpytest("-p", "no:cacheprovider")
    (pytester.path / "baselines" / "gone.safetensors").write_bytes(
        (pytester.path / "baselines" / "logits.safetensors").read_bytes()
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--paritygate-update-baselines")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*1 baseline(s) no test used in this run*", "*baselines/gone.safetensors"]
    )
    assert "logits.safetensors" not in result.stdout.str().split("no test used")[1]

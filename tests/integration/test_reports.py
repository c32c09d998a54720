"""Reports of a gate run: JSON, Markdown, JUnit XML, HTML, and ``paritygate report``."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from paritygate.cli import main
from paritygate.errors import InputError
from paritygate.reports import (
    load_result,
    render_html,
    render_junit,
    render_markdown,
    write_all,
)
from paritygate.results import ClaimVerdict, DriftItem, Failure, GateResult, NotEvaluated


def _passing(case: str, observed: float = 1.0) -> ClaimVerdict:
    return ClaimVerdict(
        claim_id="boxes.edge_px",
        candidate="swift-port",
        case=case,
        passed=True,
        oracle="equivalence",
        metric="edge_abs",
        bound=2,
        unit="px",
        observed=observed,
        evidence={"edge_deltas": {"question": {"x1": observed, "y1": 0, "x2": 0, "y2": 0}}},
    )


def _failing() -> ClaimVerdict:
    return ClaimVerdict(
        claim_id="boxes.edge_px",
        candidate="swift-port",
        case="leetcode_test",
        passed=False,
        oracle="equivalence",
        metric="edge_abs",
        bound=2,
        unit="px",
        observed=9.0,
        excess=7.0,
        failures=[
            Failure("edge_abs", 2, 9.0, 7.0, where="editor.x2"),
            Failure("edge_abs", 2, 5.0, 3.0, where="question.y1", detail="outer edge"),
        ],
        evidence={
            "edge_deltas": {
                "editor": {"x1": 0, "y1": 1, "x2": 9, "y2": 0},
                "question": {"x1": 0, "y1": 5, "x2": 0, "y2": 0},
            },
            "calibration": {"noise": [0.0, 0.5, 1.0, 0.5, 0.0], "mutation.crop": [3.0, 4.0, 5.0]},
        },
    )


def _cosine() -> ClaimVerdict:
    return ClaimVerdict(
        claim_id="prob.cosine",
        candidate="swift-port",
        case=None,
        passed=True,
        oracle="equivalence",
        metric="cosine",
        bound=0.97,
        observed=0.9987,
    )


@pytest.fixture
def mixed() -> GateResult:
    return GateResult(
        spec="parity.toml",
        verdicts=[_passing("receipt"), _failing(), _cosine()],
        not_evaluated=[
            NotEvaluated("speed.p50", "hardware class apple-m2, this machine is linux-x86_64")
        ],
        drift=[DriftItem("pin", "reference/mlx_vlm", "0.4.3", "0.4.4", "framework version")],
        errors=["runner swift-port crashed on case broken.png\nstderr: segmentation fault | core"],
        started="2026-11-29T14:00:00Z",
        finished="2026-11-29T14:01:00Z",
    )


@pytest.fixture
def passing() -> GateResult:
    return GateResult(spec="parity.toml", verdicts=[_passing("receipt"), _passing("leetcode", 1.5)])


def test_markdown_rolls_up_per_claim_with_violations_not_evaluated_drift_and_error(mixed):
    text = render_markdown(mixed.to_dict())
    assert text.startswith("## ⚠️ paritygate: DRIFT")
    assert (
        "1 of 2 claims hold (2 of 3 claim × case verdicts) · 1 violated · 1 not evaluated · "
        "1 drift · 1 errors" in text
    )
    rows = [
        line for line in text.splitlines() if line.startswith("| ✅") or line.startswith("| ❌")
    ]
    assert rows == [
        "| ❌ | `boxes.edge_px` | swift-port | edge_abs | 1/2 passed, 1 failed | "
        "worst 9 px @ leetcode_test | bound 2 px | over by 7 (4.5x) |",
        "| ✅ | `prob.cosine` | swift-port | cosine | dataset | 1-cosine 0.0013 | bound 0.03 | "
        "23x margin |",
    ]
    assert "- **`boxes.edge_px`** (swift-port): 1 of 2 cases failed" in text
    assert "edge_abs at editor.x2 observed 9 bound 2 exceeded by 7" in text
    assert "edge_abs at question.y1 observed 5 bound 2 exceeded by 3 (outer edge)" in text
    assert "[report.html](report.html)" in text
    assert "- `speed.p50`: hardware class apple-m2" in text
    assert "| pin | reference/mlx_vlm | 0.4.3 | 0.4.4 | framework version |" in text
    assert "runner swift-port crashed on case broken.png" in text
    assert "segmentation fault | core" in text  # stderr kept verbatim in a code block


def test_markdown_failure_details_are_capped_short_and_point_to_the_full_report():
    """Many failing cases with many long failures: one row for the claim, three cases expanded
    with two failures each, every line short, the rest named and left to report.html."""
    long_detail = "the detail of this failure goes on and on " * 6
    failing = [
        ClaimVerdict(
            "probs.max_abs",
            "onnx",
            f"clip{i:03d}",
            False,
            "equivalence",
            "max_abs",
            1e-4,
            observed=0.25,
            excess=0.2499,
            failures=[
                Failure("max_abs", 1e-4, 0.25, 0.2499, where=f"probs[{j}]", detail=long_detail)
                for j in range(10)
            ],
        )
        for i in range(40)
    ]
    holding = [
        ClaimVerdict(
            "probs.max_abs", "onnx", f"ok{i}", True, "equivalence", "max_abs", 1e-4, observed=1e-5
        )
        for i in range(10)
    ]
    text = render_markdown(GateResult(spec="p.toml", verdicts=failing + holding).to_dict())
    rows = [line for line in text.splitlines() if line.startswith(("| ✅", "| ❌"))]
    assert rows == [
        "| ❌ | `probs.max_abs` | onnx | max_abs | 10/50 passed, 40 failed | worst 0.25 @ clip000 "
        "| bound 0.0001 | over by 0.2499 (2500x) |"
    ]
    details = [line for line in text.splitlines() if line.startswith("  - ")]
    assert [d.split("`")[1] for d in details[:3]] == ["clip000", "clip001", "clip002"]
    assert all(len(d) <= 200 for d in details), max(details, key=len)
    assert details[0].endswith("; +8 more")
    assert details[3].startswith("  - … and 37 more failing cases: `clip003`, `clip004`")
    assert "Every case and every failure: [report.html](report.html)" in text
    assert len(text) < 2500, len(text)


def test_markdown_of_a_passing_run_and_of_an_empty_run(passing):
    text = render_markdown(passing.to_dict())
    assert text.startswith("## ✅ paritygate: PASS")
    assert "### Violations" not in text and "### Drift" not in text
    empty = render_markdown(GateResult(spec="parity.toml").to_dict())
    assert empty.startswith("## ❌ paritygate: FAIL")
    assert "No claim was evaluated" in empty
    # a gate that evaluated none says so once, as its error
    gated = GateResult(
        spec="parity.toml",
        errors=["no claim was evaluated: a run that evaluates none proves nothing"],
    ).to_dict()
    for text in (render_markdown(gated), render_html(gated)):
        assert text.lower().count("no claim was evaluated") == 1


def test_markdown_escapes_table_cells():
    verdict = _passing("a")
    verdict.candidate = "swift|port"
    text = render_markdown(GateResult(spec="s.toml", verdicts=[verdict]).to_dict())
    assert "| swift\\|port |" in text


def test_junit_has_one_testcase_per_claim_and_case(mixed):
    root = ET.fromstring(render_junit(mixed.to_dict()))
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    claim_cases = [c for c in cases if c.get("classname", "").startswith("paritygate.swift-port.")]
    assert sorted((c.get("classname"), c.get("name")) for c in claim_cases) == [
        ("paritygate.swift-port.boxes.edge_px", "leetcode_test"),
        ("paritygate.swift-port.boxes.edge_px", "receipt"),
        ("paritygate.swift-port.prob.cosine", "(dataset)"),
    ]
    failing = [c for c in claim_cases if c.find("failure") is not None]
    assert len(failing) == 1 and failing[0].get("name") == "leetcode_test"
    message = failing[0].find("failure").get("message")
    assert "editor.x2 observed 9 bound 2 exceeded by 7" in message
    assert "question.y1 observed 5" in message
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert [c.get("classname") for c in skipped] == ["paritygate.not-evaluated.speed.p50"]
    errors = [c.find("error") for c in cases if c.find("error") is not None]
    assert sorted(e.get("type") for e in errors) == ["drift", "run-error"]
    # totals agree with the testcases, on every suite and on the root
    for suite in root.findall("testsuite"):
        inner = suite.findall("testcase")
        assert int(suite.get("tests")) == len(inner)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in inner)
        assert int(suite.get("errors")) == sum(c.find("error") is not None for c in inner)
        assert int(suite.get("skipped")) == sum(c.find("skipped") is not None for c in inner)
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == (
        "6",
        "1",
        "2",
        "1",
    )


def test_junit_of_an_empty_run_is_an_error_and_control_characters_are_removed():
    result = GateResult(spec="s.toml", errors=["crash \x1b[31mred\x00"]).to_dict()
    text = render_junit(result)
    root = ET.fromstring(text)  # would raise on a raw control character
    types = [e.get("type") for e in root.iter("error")]
    assert types == ["run-error"]  # the run's error fails the file; no second entry repeats it
    assert "\x1b" not in text and "\x00" not in text
    # a result holding nothing at all still fails
    empty = ET.fromstring(render_junit(GateResult(spec="s.toml").to_dict()))
    assert [e.get("type") for e in empty.iter("error")] == ["empty-run"] and empty.get(
        "errors"
    ) == "1"


def test_junit_of_a_gate_that_evaluated_no_claim_says_it_once(tmp_path):
    """A run whose selection leaves no claim to evaluate (here: a speed claim on this machine's
    hardware class, in a run that does not time, as the pytest plugin's) is an error in JUnit,
    said once, with the claim listed as skipped and why."""
    from spec_helpers import TINY_SPEC, make_project

    from paritygate.gate import SPEED_IN_TESTS, run_gate
    from paritygate.references import record
    from paritygate.spec import load_spec

    speed_claim = (
        '\n[claims.instant]\noutputs = ["y"]\nmetric = "p50_ms"\nbound = 1e-9\n'
        'oracle = "approximation"\nstatus = "provisional"\nhardware = "this-box"\n'
        "params = { blocks = 2, block_size = 10, warmup = 1 }\n\n"
        '[hardware.this-box]\nsystem = "*"\n'
    )
    path = make_project(tmp_path, TINY_SPEC + speed_claim)
    record(load_spec(path))
    result = run_gate(load_spec(path), claims=["instant"], speed=False)
    root = ET.fromstring(render_junit(result.to_dict()))
    errors = [e.get("message") for e in root.iter("error")]
    assert errors == ["no claim was evaluated: a run that evaluates none proves nothing"]
    assert [s.get("message") for s in root.iter("skipped")] == [SPEED_IN_TESTS]


def _without_data_uris(html: str) -> str:
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:", html)


def test_html_has_tables_and_plots_and_no_network_assets(mixed):
    html = render_html(mixed.to_dict())
    # one metric plot per claim with numeric observations (2), a per-edge plot for the failing
    # verdict with edge deltas (a passing one's would show deltas within the bound: omitted),
    # one calibration distribution
    assert html.count("data:image/png;base64,") == 4
    assert "calibration distribution: boxes.edge_px / swift-port / leetcode_test" in html
    stripped = _without_data_uris(html)
    assert "http://" not in stripped and "https://" not in stripped
    assert "<script" not in stripped
    assert "<td><code>boxes.edge_px</code></td>" in stripped
    assert "hardware class apple-m2" in stripped
    assert "reference/mlx_vlm" in stripped
    assert "Plots need matplotlib" not in stripped


def test_html_without_matplotlib_still_renders_tables(mixed, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    html = render_html(mixed.to_dict())
    assert "data:image/png" not in html
    assert "Plots need matplotlib" in html and "paritygate[plots]" in html
    assert "<td><code>boxes.edge_px</code></td>" in html


def test_html_escapes_names():
    verdict = _passing("<script>alert(1)</script>")
    html = render_html(GateResult(spec="s.toml", verdicts=[verdict]).to_dict())
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_write_all_writes_four_reports_and_json_round_trips(mixed, tmp_path):
    paths = write_all(mixed, tmp_path / "reports")
    assert {k: p.name for k, p in paths.items()} == {
        "json": "result.json",
        "markdown": "summary.md",
        "junit": "junit.xml",
        "html": "report.html",
    }
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths.values())
    loaded = load_result(paths["json"])
    assert loaded == json.loads(json.dumps(mixed.to_dict()))
    assert loaded["exit_code"] == 3
    assert not list((tmp_path / "reports").glob(".*tmp"))  # no temporary files left behind


def test_non_finite_observations_survive_the_json_round_trip(tmp_path):
    verdict = ClaimVerdict(
        "c", "port", "x", False, "equivalence", "max_abs", 1e-3, observed=float("nan")
    )
    paths = write_all(GateResult(spec="s.toml", verdicts=[verdict]), tmp_path)
    loaded = load_result(paths["json"])
    assert loaded["verdicts"][0]["observed"] == "nan"
    assert "| ❌ | `c` | port | max_abs | 0/1 passed, 1 failed | worst nan | bound 0.001 |" in (
        render_markdown(loaded)
    )


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not JSON (line 1"),
        ('{"verdicts": []}', "not a paritygate gate result"),
        ("[1, 2]", "not a paritygate gate result"),
        (
            '{"format": "paritygate-gate-result", "format_version": 2}',
            "format_version 2 is not supported",
        ),
        (
            '{"format": "paritygate-gate-result", "format_version": 1, "verdicts": [{}]}',
            "verdicts[0] lacks claim_id",
        ),
    ],
)
def test_load_result_rejects_other_files(tmp_path, content, message):
    path = tmp_path / "result.json"
    path.write_text(content)
    with pytest.raises(InputError, match=re.escape(message)) as info:
        load_result(path)
    assert str(path) in str(info.value)


def test_load_result_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such result file"):
        load_result(tmp_path / "absent.json")


@pytest.mark.parametrize("which, code", [("passing", 0), ("failing", 1), ("drift", 3)])
def test_report_command_exit_code_mirrors_the_result(tmp_path, capsys, which, code):
    results = {
        "passing": GateResult(spec="p.toml", verdicts=[_passing("receipt")]),
        "failing": GateResult(spec="p.toml", verdicts=[_passing("receipt"), _failing()]),
        "drift": GateResult(
            spec="p.toml",
            verdicts=[_passing("receipt")],
            drift=[DriftItem("reference-file", "refs/a.safetensors", "ab", "cd")],
        ),
    }
    source = tmp_path / "run" / "result.json"
    write_all(results[which], source.parent)
    out = tmp_path / "again"
    assert main(["report", str(source), "--out", str(out)]) == code
    printed = capsys.readouterr().out
    assert "boxes.edge_px" in printed
    assert str(out / "report.html") in printed
    assert sorted(p.name for p in out.iterdir()) == [
        "junit.xml",
        "report.html",
        "result.json",
        "summary.md",
    ]


def test_report_command_bad_input_exits_2(tmp_path, capsys):
    path = tmp_path / "result.json"
    path.write_text('{"hello": 1}')
    assert main(["report", str(path)]) == 2
    assert "not a paritygate gate result" in capsys.readouterr().err


def test_markdown_of_a_large_run_stays_comment_sized_with_failures_first():
    items = [_passing(f"case{i:04d}") for i in range(400)] + [_failing()]
    items += [
        ClaimVerdict(f"claim{i:03d}", "port", "a", True, "equivalence", "max_abs", 1e-3, observed=0)
        for i in range(200)
    ]
    text = render_markdown(GateResult(spec="p.toml", verdicts=items).to_dict())
    rows = [
        line for line in text.splitlines() if line.startswith("| ✅") or line.startswith("| ❌")
    ]
    assert len(rows) == 150
    assert rows[0].startswith("| ❌ | `boxes.edge_px` | swift-port | edge_abs | 400/401 passed")
    assert "… 51 more claims" in text
    assert len(text.encode()) < 64 * 1024

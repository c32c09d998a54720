"""The gate's terminal output: one line per claim and candidate, readable at 80 columns."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console

from paritygate.reports.terminal import (
    claim_summaries,
    console,
    render_lines,
    run_error_groups,
    verdict_table,
)
from paritygate.results import ClaimVerdict, Failure, GateResult

CASES = [f"batch_{i:02d}" for i in range(20)]


def _element_claim(failing_case: str | None = None) -> list[ClaimVerdict]:
    out = []
    for i, case in enumerate(CASES):
        observed = 3.3e-07 if case == "batch_12" else 1e-08 * (i + 1)
        failures = []
        excess = None
        if case == failing_case:
            observed, excess = 5.0e-06, 1.7e-06
            failures = [
                Failure(
                    "max_abs",
                    3.3e-06,
                    observed,
                    excess,
                    where="probabilities at index 109",
                    detail="actual 0.5315088033676147, expected 0.5315038033676147",
                )
            ]
        out.append(
            ClaimVerdict(
                "prob-max-abs",
                "onnx",
                case,
                not failures,
                "equivalence",
                "max_abs",
                3.3e-06,
                "probability",
                observed=observed,
                excess=excess,
                failures=failures,
                evidence={"bound_that_passes": observed},
            )
        )
    return out


def _cosine_claim() -> list[ClaimVerdict]:
    return [
        ClaimVerdict(
            "probability-cosine-against-the-torchscript-reference",
            "onnxruntime-cpu-execution-provider",
            case,
            True,
            "equivalence",
            "cosine",
            0.99999999932,
            "cosine",
            observed=1 - 6.8e-15,
        )
        for case in CASES
    ]


def _edge_claim() -> list[ClaimVerdict]:
    return [
        ClaimVerdict(
            "panel-edges",
            "port",
            "wide_editor",
            False,
            "equivalence",
            "max_edge_delta",
            2,
            "px",
            observed=3,
            excess=1,
            failures=[Failure("edge_delta", 2, 3, 1, where="box editor, edge x2")],
        ),
        ClaimVerdict(
            "panel-edges", "port", "leetcode", True, "equivalence", "max_edge_delta", 2, "px", 2
        ),
    ]


def _result(verdicts: list[ClaimVerdict], **kwargs) -> dict:
    return GateResult(spec="parity.toml", verdicts=verdicts, **kwargs).to_dict()


def _render(result: dict, width: int, **kwargs) -> list[str]:
    target = Console(width=width, record=True, color_system=None)
    target.print(verdict_table(result, **kwargs))
    return target.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 100, 160])
def test_no_line_passes_the_width_and_no_cell_is_split(width):
    result = _result(_element_claim() + _cosine_claim() + _edge_claim())
    lines = _render(result, width)
    assert max(len(line.rstrip()) for line in lines) <= width
    # every cell of every claim's line lies whole on one printed line
    for summary in claim_summaries(result):
        for cell in (
            summary.claim_id,
            summary.candidate,
            summary.cases_cell(),
            summary.worst_cell(),
            summary.bound_cell(),
            summary.margin_cell(),
        ):
            assert any(cell in line for line in lines), (width, cell, lines)
    # one summary per claim and candidate, not one row per case
    assert sum(line.startswith(("pass", "FAIL")) for line in lines) == 3
    assert not any("batch_03" in line for line in lines)


def test_the_issue_s_line_at_100_columns_and_in_two_at_80():
    line = "pass prob-max-abs onnx 20/20 cases worst 3.3e-07 @ batch_12 bound 3.3e-06 10x margin"
    assert _render(_result(_element_claim()), 100)[0].split() == line.split()
    two = _render(_result(_element_claim()), 80)[:2]
    assert " ".join(" ".join(two).split()) == line and two[1].startswith("     worst")


def test_wide_terminals_get_one_line_per_claim_and_narrow_ones_break_between_cells():
    result = _result(_element_claim() + _cosine_claim())
    wide = _render(result, 200)
    assert [line.split()[:3] for line in wide[:2]] == [
        ["pass", "prob-max-abs", "onnx"],
        [
            "pass",
            "probability-cosine-against-the-torchscript-reference",
            "onnxruntime-cpu-execution-provider",
        ],
    ]
    assert "bound 6.8e-10" in wide[1] and "1e5x margin" in wide[1]
    narrow = _render(result, 80)
    assert narrow[0].startswith("pass prob-max-abs") and "20/20 cases" in narrow[0]
    assert narrow[1].startswith("     worst 3.3e-07 @ batch_12")
    # the row whose names do not fit packs its cells; the others stay aligned
    assert narrow[2] == "pass probability-cosine-against-the-torchscript-reference"
    assert narrow[3].strip() == "onnxruntime-cpu-execution-provider"


def test_cosine_is_shown_as_one_minus_cosine_so_the_margin_is_visible():
    (summary,) = claim_summaries(_result(_cosine_claim()))
    assert summary.worst_cell().startswith("1-cosine 6.8e-15")
    assert summary.bound_cell() == "bound 6.8e-10"
    assert summary.margin_cell() == "1e5x margin"
    # and a cosine under its floor says by how much, in the same 1 - x terms
    short_one = _cosine_claim()[0]
    short_one.observed, short_one.passed = 1 - 1e-9, False
    (summary,) = claim_summaries(_result([short_one]))
    assert summary.margin_cell().startswith("over by 3.2e-10")


def test_a_failure_is_expanded_under_its_claim_and_passing_cases_only_with_verbose():
    result = _result(_element_claim(failing_case="batch_05"))
    lines = _render(result, 80)
    text = " ".join(" ".join(lines).split())
    assert lines[0].startswith("FAIL prob-max-abs")
    assert "19/20 cases worst 5e-06 @ batch_05 bound 3.3e-06 over by 1.7e-06 (1.5x)" in text
    assert (
        "batch_05: max_abs at probabilities at index 109 observed 5e-06 bound 3.3e-06 over by "
        "1.7e-06 (actual 0.5315088, expected 0.5315038) a bound of 5e-06 would have held" in text
    )
    assert "batch_04" not in text  # a passing case is not listed by default
    verbose = " ".join(_render(result, 80, verbose=True))
    assert "batch_04" in verbose and "batch_19" in verbose
    # the passing run expands nothing
    assert len(_render(_result(_element_claim()), 80)) == 3  # claim (2 lines) + verdict


def test_run_errors_come_first_grouped_with_one_traceback():
    trace = "Traceback (most recent call last):\n  File 'runner.py', line 3\nZeroDivisionError: x"
    errors = [
        f"runner onnx, case {case}: crash: ZeroDivisionError: division by zero\n{trace}"
        for case in CASES
    ] + ["runner mlx: crash: factory make_model raised OSError: no weights"]
    verdicts = _element_claim()
    for v in verdicts:
        v.passed = False
        v.failures = [Failure("run", None, None, detail="runner onnx produced no outputs")]
    lines = [text for text, _ in render_lines(_result(verdicts, errors=errors), width=80)]
    assert lines[0] == (
        "ERROR runner onnx crashed on 20/20 cases: ZeroDivisionError: division by zero"
    )
    assert sum("ZeroDivisionError: x" in line for line in lines) == 1
    assert lines[4] == "ERROR runner mlx crashed: factory make_model raised OSError: no weights"
    assert "no outputs on 20 case(s): the runner failed (see above)" in " ".join(lines)
    # different messages are not merged
    groups = run_error_groups(
        ["runner a, case x: crash: ValueError: bad", "runner a, case y: crash: KeyError: 'k'"]
    )
    assert [g.cases for g in groups] == [["x"], ["y"]]


def test_a_case_name_inside_a_word_is_not_masked():
    groups = run_error_groups(
        [
            "runner r, case a: crash: cannot open a.npz",
            "runner r, case b: crash: cannot open b.npz",
            "runner r, case c: crash: cannot read c.npz",
        ]
    )
    assert [g.cases for g in groups] == [["a", "b"], ["c"]]


def test_environment_differences_are_one_line_and_the_report_path_is_last():
    result = _result(_element_claim())
    result["provenance"] = {
        "unpinned_differences": [
            "package ml_dtypes: recorded 0.6.0, now 0.7.0 (not pinned)",
            'os: recorded {"release": "6.18"}, now {"release": "6.19"} (not pinned)',
            "git: recorded abc (dirty), now def (not pinned)",
        ]
    }
    lines = [text for text, _ in render_lines(result, width=80, report="out/report.html")]
    info = [line for line in lines if line.startswith("info:")]
    assert len(info) == 1 and "3 unpinned difference(s)" in info[0]
    assert "(ml_dtypes, os, git)" in " ".join(" ".join(lines).split())
    assert lines[-1] == "report: out/report.html"


def test_cli_console_is_100_wide_when_piped_and_follows_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # not a terminal
    assert console().width == 100
    monkeypatch.setenv("COLUMNS", "80")
    assert console().width == 80


def test_gate_command_output_at_80_columns(tmp_path, capsys, monkeypatch):
    from spec_helpers import TINY_SPEC, make_project

    from paritygate.cli import main
    from paritygate.references import record
    from paritygate.spec import load_spec

    long_id = "y-close-to-the-float64-reference-everywhere"
    path = make_project(tmp_path, TINY_SPEC.replace("[claims.y-close]", f"[claims.{long_id}]"))
    record(load_spec(path))
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["gate", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in out[:-1]) <= 80  # the last line is a path: never split
    assert out[0].split()[:4] == ["pass", long_id, "cand", "2/2"]
    assert out[-1] == f"report: {tmp_path / 'parity-reports' / 'parity' / 'report.html'}"
    # -v adds a row per case
    assert main(["gate", str(path), "-v"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["pass", "a"] == rows[2][:2] and ["pass", "b"] == rows[3][:2]


def test_exitfirst_stops_at_the_first_violating_case(tmp_path, capsys):
    from spec_helpers import copy_box_port, plant_scale_bug

    from paritygate.cli import main
    from paritygate.gate import run_gate
    from paritygate.references import record
    from paritygate.spec import load_spec

    project = copy_box_port(tmp_path)
    spec_path = project / "parity.toml"
    record(load_spec(spec_path))
    # sound port: -x runs every case and passes
    spec = load_spec(spec_path)
    whole = run_gate(spec, stop_at_first_violation=True)
    assert whole.passed and {v.case for v in whole.verdicts} == set(spec.cases)
    assert len(spec.cases) > 2
    plant_scale_bug(project)
    result = run_gate(load_spec(spec_path), stop_at_first_violation=True)
    assert not result.passed and result.exit_code == 1
    assert sorted(result.provenance["seconds"]["port"]) == ["leetcode", "wide_editor"]
    assert {v.case for v in result.verdicts} == {"leetcode", "wide_editor"}
    assert any("stopped at the first violation" in n.reason for n in result.not_evaluated)
    # the command line's -x says the same
    assert main(["gate", str(spec_path), "-x"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "FAIL panel-edges port 1/2 cases" in out and "stopped at the first violation" in out


def test_cosine_display_reads_the_backends_one_minus_cosine():
    """Near 1 the cosine itself rounds: 1 - 0.9999999999999999 is 1.1e-16 whatever the data.
    The evidence's one_minus_cosine is exact; the display reads it."""
    verdict = ClaimVerdict(
        "probs-cosine",
        "onnx",
        "a",
        True,
        "equivalence",
        "cosine",
        0.99999999932,
        observed=1.0,
        evidence={"probs": {"cosine": 1.0, "one_minus_cosine": 3e-17}},
    )
    (summary,) = claim_summaries(_result([verdict]))
    assert summary.worst_cell() == "1-cosine 3e-17"
    # without it, 1 - observed: here 0, shown as exact agreement rather than a made-up number
    verdict.evidence = {}
    (summary,) = claim_summaries(_result([verdict]))
    assert summary.worst_cell() == "1-cosine 0"
    # at the bound the margin keeps the digits that say how close
    verdict.evidence = {"probs": {"one_minus_cosine": 6.797760124842649e-10}}
    (summary,) = claim_summaries(_result([verdict]))
    assert summary.margin_cell() == "1.0003x margin"

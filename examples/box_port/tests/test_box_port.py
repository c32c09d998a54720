"""The box-port example end to end: the correct port passes its published 2 px claim, the
seed's preprocessing bug fails it naming case, box, edge and excess, and the 30 px gate that hid
the bug is refused by the claims check of the README."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from paritygate import load_spec, record, run_gate
from paritygate.cli import main

BOX_PORT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def box_port(tmp_path):
    """A fresh copy of the example (without recorded references or reports), recorded."""
    project = tmp_path / "box_port"
    shutil.copytree(
        BOX_PORT,
        project,
        ignore=shutil.ignore_patterns("references", "parity-reports", "tests", "__pycache__", ".*"),
    )
    record(load_spec(project / "parity.toml"))
    return project


def plant_scale_bug(project: Path) -> None:
    """The planted regression: the port's preprocessing computes its resize scale with the
    align-corners convention ((n - 1) / (m - 1)) instead of n / m; right and bottom edges drift."""
    path = project / "port_detector.py"
    source = path.read_text()
    buggy = source.replace(
        "scale_x = width / MODEL_WIDTH", "scale_x = (width - 1) / (MODEL_WIDTH - 1)"
    ).replace("scale_y = height / MODEL_HEIGHT", "scale_y = (height - 1) / (MODEL_HEIGHT - 1)")
    assert buggy != source
    path.write_text(buggy)


def test_correct_port_passes_the_2px_claim(box_port, capsys):
    assert main(["gate", str(box_port / "parity.toml")]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out
    result = json.loads((box_port / "parity-reports" / "result.json").read_text())
    edge = [v for v in result["verdicts"] if v["claim_id"] == "panel-edges"]
    assert [v["case"] for v in edge] == ["leetcode", "wide_editor", "narrow"]
    assert all(v["passed"] and v["observed"] == 0 for v in edge)
    assert result["exit_code"] == 0 and (box_port / "parity-reports" / "junit.xml").is_file()


def test_planted_preprocessing_bug_fails_naming_case_box_edge_and_excess(box_port, capsys):
    """The seed's incident: the port's resize scale uses the align-corners convention. One edge
    of one box of one case drifts by 3 px; every other edge stays within 2 px."""
    plant_scale_bug(box_port)
    result = run_gate(load_spec(box_port / "parity.toml"))
    assert not result.passed and result.exit_code == 1
    failing = [v for v in result.verdicts if not v.passed]
    assert [(v.claim_id, v.case) for v in failing] == [("panel-edges", "wide_editor")]
    (failure,) = failing[0].failures
    assert (failure.where, failure.observed, failure.bound, failure.excess) == (
        "box editor, edge x2",
        3.0,
        2.0,
        1.0,
    )
    assert "actual 303, expected 300" in failure.detail
    deltas = failing[0].evidence["edge_deltas"]
    assert (
        deltas["editor"]["x2"] == 3
        and max(max(d.values()) for d in deltas.values() if d is not deltas["editor"]) <= 2
    )
    assert all(
        v.observed <= 2
        for v in result.verdicts
        if v.claim_id == "panel-edges" and v.case != "wide_editor"
    )
    # the command line says the same and exits 1
    assert main(["gate", str(box_port / "parity.toml")]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "FAIL panel-edges port 2/3 cases worst 3 px @ wide_editor bound 2 px over by 1" in out
    assert (
        "wide_editor: edge_delta at box editor, edge x2 observed 3 bound 2 over by 1 "
        "(actual 303, expected 300 px) a bound of 3 would have held" in out
    )


def test_the_30px_gate_hides_the_same_bug(box_port):
    """Why claims check exists: the 30 px variant passes the regression the 2 px claim catches."""
    plant_scale_bug(box_port)
    result = run_gate(load_spec(box_port / "parity-30px.toml"))
    assert result.passed
    assert max(v.observed for v in result.verdicts if v.claim_id == "panel-edges") == 3


def test_example_readme_publishes_the_number_the_gate_enforces(capsys):
    """The example's README ties its "≤ 2 px" to the claim; the 30 px variant is refused."""
    readme = str(BOX_PORT / "README.md")
    assert main(["claims", "check", readme, "--spec", str(BOX_PORT / "parity.toml")]) == 0
    assert main(["claims", "check", readme, "--spec", str(BOX_PORT / "parity-30px.toml")]) == 1
    captured = capsys.readouterr()
    assert "looser than the published" in captured.out + captured.err

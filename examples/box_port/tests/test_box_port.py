"""The box-port example end to end, as its README tells it: the correct port passes its published
2 px claim and its two entry points agree; the seed's preprocessing bug fails the claim naming
case, box, edge and excess; the 30 px gate that hid the bug is refused by the claims check of the
README; drift of a case or of a reference pin is caught; an entry point carrying a stale threshold
is caught even where every claim still holds."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from paritygate import load_spec, record, run_gate, verify
from paritygate.cli import main

BOX_PORT = Path(__file__).resolve().parents[1]
# the canonical images, then the boundary cases the mutation run asked for (make_cases.py)
CASES = ("leetcode", "wide_editor", "narrow", "edge_to_edge", "icon", "on_threshold")


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


def test_correct_port_passes_the_2px_claim(box_port, capsys):
    assert main(["gate", str(box_port / "parity.toml")]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out
    result = json.loads((box_port / "parity-reports" / "parity" / "result.json").read_text())
    edge = [v for v in result["verdicts"] if v["claim_id"] == "panel-edges"]
    assert [v["case"] for v in edge] == list(CASES)
    assert all(v["passed"] and v["observed"] == 0 for v in edge)
    # the cross-adapter check: the Python API agrees with the command line at zero tolerance
    cross = [v for v in result["verdicts"] if v["oracle"] == "cross-adapter"]
    assert [(v["claim_id"], v["candidate"], v["case"]) for v in cross] == [
        ("cross-adapter:port", "port-python", case) for case in CASES
    ]
    assert all(v["passed"] and v["bound"] == 0 and v["observed"] == 0 for v in cross)
    assert (
        result["exit_code"] == 0
        and (box_port / "parity-reports" / "parity" / "junit.xml").is_file()
    )


def test_planted_preprocessing_bug_fails_naming_case_box_edge_and_excess(
    box_port, capsys, example_module
):
    """The seed's incident: the port's resize scale uses the align-corners convention. One edge
    of one box of a canonical case drifts by 3 px; every other edge there stays within 2 px. (The
    boundary cases that reach a right or bottom border catch it too.)"""
    example_module("plant_bug").plant_bug(box_port)
    result = run_gate(load_spec(box_port / "parity.toml"))
    assert not result.passed and result.exit_code == 1
    failing = [v for v in result.verdicts if not v.passed]
    assert [(v.claim_id, v.case) for v in failing] == [
        ("panel-edges", case) for case in ("wide_editor", "edge_to_edge", "icon", "on_threshold")
    ]
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
        if v.claim_id == "panel-edges" and v.case in ("leetcode", "narrow")
    )
    # the command line says the same and exits 1
    assert main(["gate", str(box_port / "parity.toml")]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "FAIL panel-edges port 2/6 cases worst 3 px @ wide_editor bound 2 px over by 1" in out
    assert (
        "wide_editor: edge_delta at box editor, edge x2 observed 3 bound 2 over by 1 "
        "(actual 303, expected 300 px) a bound of 3 would have held" in out
    )


def test_the_30px_gate_hides_the_same_bug(box_port, example_module):
    """Why claims check exists: the 30 px variant passes the regression the 2 px claim catches."""
    example_module("plant_bug").plant_bug(box_port)
    result = run_gate(load_spec(box_port / "parity-30px.toml"))
    assert result.passed
    assert max(v.observed for v in result.verdicts if v.claim_id == "panel-edges") == 3


def test_example_readme_publishes_the_number_the_gate_enforces(capsys):
    """The example's README ties its "≤ 2 px" to the claim (and its mutation score to
    mutation.json: 10 measured markers); the 30 px variant is refused."""
    readme = str(BOX_PORT / "README.md")
    assert main(["claims", "check", readme, "--spec", str(BOX_PORT / "parity.toml")]) == 0
    strict = capsys.readouterr()
    assert "claims check: ok, 11 marker(s) in 1 doc(s)" in strict.out + strict.err
    assert main(["claims", "check", readme, "--spec", str(BOX_PORT / "parity-30px.toml")]) == 1
    loose = capsys.readouterr()
    assert "claims check: FAIL, 1 problem(s)" in loose.out + loose.err
    assert re.search(
        r"README\.md:\d+: claim panel-edges: the gate's bound 30 px "
        r"\(.*parity-30px\.toml:\d+\) is looser than the published '≤ 2 px' \(2\)",
        loose.out,
    ), loose.out


def test_verify_catches_drift_of_a_case_and_of_a_reference_pin(box_port, capsys):
    """`paritygate verify`: the recorded example holds; a case image edited after its sha256 pin,
    or the reference's pinned preprocessing changed in the spec, is drift (exit 3), named."""
    spec_path = box_port / "parity.toml"
    assert main(["verify", str(spec_path)]) == 0 and verify(load_spec(spec_path)).passed
    capsys.readouterr()
    case = box_port / "cases" / "narrow.npz"
    pinned = case.read_bytes()
    with np.load(case, allow_pickle=False) as arrays:
        image = arrays["image"].copy()
    image[0, 0] ^= 1  # one pixel, one bit
    np.savez(case, image=image)
    assert main(["verify", str(spec_path)]) == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "case-input: narrow: expected" in out and "(input differs from its pin)" in out
    assert [(d.kind, d.subject) for d in verify(load_spec(spec_path)).drift] == [
        ("case-input", "narrow")
    ]
    case.write_bytes(pinned)
    spec_path.write_text(spec_path.read_text().replace("sigma = 1.0", "sigma = 1.5"))
    drift = verify(load_spec(spec_path)).drift
    assert [d.subject for d in drift] == ["runner reference: preprocess.sigma"]


def test_adapter_with_a_stale_threshold_is_caught_even_when_the_claim_holds(box_port):
    """The command-line adapter carries a stale copy of an old threshold. Each box moves 4 px,
    a 30 px claim still holds, but the adapters disagree and the gate fails."""
    cli = box_port / "port_cli.py"
    source = cli.read_text()
    stale = source.replace(
        "result = detect_image(image)", "result = detect_image(image, threshold=0.6)"
    )
    assert stale != source
    cli.write_text(stale)
    result = run_gate(load_spec(box_port / "parity-30px.toml"))
    assert all(v.passed for v in result.verdicts if v.claim_id == "panel-edges")
    cross = [v for v in result.verdicts if v.oracle == "cross-adapter"]
    assert len(cross) == 3 and not any(cross) and not result.passed and result.exit_code == 1
    first = cross[0].failures[0]
    assert first.where == "boxes/editor at index 0" and first.observed == 4 and first.bound == 0
    assert "port-python 132, port 136" in first.detail

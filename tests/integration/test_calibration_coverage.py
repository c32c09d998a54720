"""Coverage of cases in calibration: a mutation that changes no output on any case means the
cases do not exercise what it mutates; it is reported as uncovered (one rule for output and model
mutations), never counted as noise, and the report carries a coverage summary."""

from __future__ import annotations

import json

import numpy as np
import pytest
from spec_helpers import make_project
from test_cli_calibrate import CASES, MODEL, SPEC

from paritygate.calibration import calibrate, shift
from paritygate.cli import main

COVERAGE_MODEL = (
    MODEL
    + '''

def candidate32_dead_branch(case):
    """a mutation of a branch no case reaches (inputs beyond 1e6)"""
    x = case.load()["x"].astype(np.float32)
    y = np.tanh(x @ W.astype(np.float32))
    if np.abs(x).max() > 1e6:
        y = y * 0
    return {"y": y}
'''
)


@pytest.fixture
def project(tmp_path):
    rng = np.random.default_rng(3)
    cases = {c: {"x": rng.standard_normal((6, 8))} for c in CASES}
    return make_project(tmp_path, SPEC, modules={"calib.py": COVERAGE_MODEL}, cases=cases)


def test_a_model_mutation_that_changes_nothing_is_reported_uncovered(project, tmp_path, capsys):
    out_json = tmp_path / "calibration.json"
    args = [
        "calibrate",
        str(project),
        "--claim",
        "y-close",
        "--model-mutation",
        "zeroed column=calib:candidate32_zeroed",
        "--model-mutation",
        "dead branch=calib:candidate32_dead_branch",
        "--json",
        str(out_json),
    ]
    assert main(args) == 0  # the covered mutation still separates noise from bugs
    out = capsys.readouterr().out
    assert (
        "mutation dead branch changed nothing on any of 16 cases: the cases do not cover it" in out
    )
    assert "uncovered: dead branch" in out
    assert "proposal: max_abs <= " in out
    coverage = json.loads(out_json.read_text())["coverage"]
    assert coverage["uncovered"] == ["dead branch"]
    assert "zeroed column" in coverage["covered"]


def test_one_rule_for_output_and_model_mutations_in_the_python_api():
    rng = np.random.default_rng(0)
    cases = [rng.standard_normal(8) for _ in range(16)]

    def run_pair(x):
        return {"y": x}, {"y": x * (1 + 1e-7)}

    result = calibrate(
        run_pair,
        cases,
        metric="max_abs",
        mutations=[shift()],
        model_mutations={"noop": lambda x: {"y": x * (1 + 1e-7)}, "big": lambda x: {"y": x + 1}},
    )
    by_name = {m.name: m for m in result.mutations}
    assert by_name["noop"].uncovered and not by_name["big"].uncovered
    assert by_name["noop"].cases == 0 and len(by_name["big"].changed_cases) == 16
    assert result.coverage()["uncovered"] == ["noop"]
    assert "mutation noop changed nothing on any of 16 cases" in result.summary()
    assert result.proposal == "tolerance"  # the uncovered mutation is not noise


FACTORY_MODEL = (
    MODEL
    + '''

def make_port(scale):
    """the float32 port as a factory, built with its options"""

    def run(case):
        x = case.load()["x"].astype(np.float32)
        return {"y": np.tanh(x @ W.astype(np.float32)) * np.float32(scale)}

    return run


def make_port_zeroed(scale):
    """the factory port with the projection's last column zeroed"""

    def run(case):
        x = case.load()["x"].astype(np.float32)
        w = W.astype(np.float32).copy()
        w[:, -1] = 0
        return {"y": np.tanh(x @ w) * np.float32(scale)}

    return run
'''
)

FACTORY_CLAIM = """
[runners.port-factory]
role = "candidate"
factory = "calib:make_port"
options = { scale = 1.0 }

[claims.y-factory]
outputs = ["y"]
metric = "max_abs"
bound = 1e-3
oracle = "equivalence"
mode = "paired"
status = "provisional"
candidates = ["port-factory"]
"""


def test_a_model_mutation_of_a_factory_runner_is_called_like_the_runner(tmp_path, capsys):
    rng = np.random.default_rng(3)
    cases = {c: {"x": rng.standard_normal((6, 8))} for c in CASES}
    path = make_project(
        tmp_path, SPEC + FACTORY_CLAIM, modules={"calib.py": FACTORY_MODEL}, cases=cases
    )
    args = ["calibrate", str(path), "--claim", "y-factory"]
    assert main([*args, "--model-mutation", "zeroed=calib:make_port_zeroed"]) == 0
    out = capsys.readouterr().out
    assert "zeroed" in out and "caught in 16/16 cases" in out
    assert "TypeError" not in out


def test_stored_mode_calibrate_reads_output_names_with_a_slash(tmp_path, capsys):
    """Regression (examples/box_port): a max_abs claim on boxes/* calibrated against the recorded
    reference, whose outputs are named boxes/editor and boxes/question."""
    from spec_helpers import copy_box_port

    project = copy_box_port(tmp_path)
    spec = project / "parity.toml"
    spec.write_text(
        spec.read_text()
        + '\n[claims.box-max-abs]\noutputs = ["boxes/*"]\nmetric = "max_abs"\nbound = 2\n'
        'oracle = "equivalence"\nmode = "stored"\nstatus = "provisional"\n'
    )
    assert main(["record", str(spec)]) == 0
    capsys.readouterr()
    args = ["calibrate", str(spec), "--claim", "box-max-abs", "--min-cases", "3"]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("outputs: "))
    assert sorted(line[len("outputs: ") :].split(", ")) == ["boxes/editor", "boxes/question"]
    assert "stored mode" in out


def test_a_per_edge_claim_is_calibrated_from_per_edge_deltas_and_keeps_its_metric(tmp_path, capsys):
    """max_edge_delta on the box port: labelled boxes' per-edge deltas (|a - e| of each
    coordinate) are measured, the shift bug separates from the (zero) noise, and --write keeps
    metric = max_edge_delta with bound 0."""
    from spec_helpers import copy_box_port

    from paritygate.spec import load_spec

    project = copy_box_port(tmp_path)
    spec = project / "parity.toml"
    assert main(["record", str(spec)]) == 0
    args = ["calibrate", str(spec), "--claim", "panel-edges", "--min-cases", "3"]
    assert main([*args, "--mutations", "shift,swap", "--write"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert "cannot be calibrated" not in out
    assert "propose bound 0 on every edge (max_edge_delta = 0)" in out
    assert "spec now: max_edge_delta <= 2" in out and "was not measured" not in out
    claim = load_spec(spec).claims["panel-edges"]
    assert (claim.metric, claim.bound, claim.scope, claim.status) == (
        "max_edge_delta",
        0,
        "edge",
        "calibrated",
    )
    # The calibrated claim still gates: the port passes, a planted 9 px bug would fail it.
    assert main(["gate", str(spec)]) == 0


def test_the_default_margin_comes_from_the_noise_tail_never_past_the_smallest_bug():
    """Regression: a proposal landed exactly on the largest noise (7.2e-05 against 7.15e-05).
    Without a named spread the bound now adds the spread of the noise's upper tail, shown in the
    proposal, and stays at most halfway into the gap."""
    noise = [1e-5 * (1 + i / 3) for i in range(15)] + [7.15e-5]
    cases = list(range(16))

    def run_pair(i):
        return {"y": np.zeros(3)}, {"y": np.array([noise[i], 0.0, 0.0])}

    def bug(i):
        return {"y": np.array([1e-3, 0.0, 0.0])}

    result = calibrate(run_pair, cases, metric="max_abs", mutations=[], model_mutations={"b": bug})
    top = sorted(noise)
    tail = top[-1] - top[-5]
    assert result.tail_margin == pytest.approx(tail)
    assert result.proposed_bound >= 7.15e-5 + tail > 7.2e-5
    assert "margin: noise tail +" in result.summary()
    # A bug close to the noise: the tail margin stops halfway into the gap.
    near = calibrate(
        run_pair,
        cases,
        metric="max_abs",
        mutations=[],
        model_mutations={"b": lambda i: {"y": np.array([7.3e-5, 0.0, 0.0])}},
    )
    assert 7.15e-5 < near.proposed_bound <= 7.15e-5 + (7.3e-5 - 7.15e-5) / 2 + 1e-12
    # A named spread replaces the default.
    named = calibrate(
        run_pair,
        cases,
        metric="max_abs",
        mutations=[],
        model_mutations={"b": bug},
        margin_for={"other CPU": 2.0},
    )
    assert named.tail_margin is None and named.proposed_bound == pytest.approx(1.5e-4, rel=0.05)

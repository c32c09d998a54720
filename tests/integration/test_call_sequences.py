"""Call-sequence cases (format 10): the switches a stateful runner allows (a new stream after a
call on another input, a reset between calls), pinned like any case and written by
``paritygate cases add --sweep T:after=O[,reset=true]``. A runner that keeps a stream's state
across calls passes the plain cases and fails the sequence; the correct one passes."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from paritygate.boundaries import parse_sweep, sweep_cases
from paritygate.cli import main
from paritygate.errors import SpecError
from paritygate.execution import plan
from paritygate.gate import run_gate
from paritygate.references import record
from paritygate.spec import load_spec, sequence_sha256

MODEL = """
import numpy as np


def reference(case):
    # each call is one stream: every element minus the running mean of its stream so far
    x = np.asarray(case.load(), dtype=np.float64)
    return {"y": x - np.cumsum(x) / np.arange(1, len(x) + 1)}


class Streaming:
    # the port: a running mean kept in the object, element by element
    def __init__(self, mode):
        self.mode = mode
        self.total = 0.0
        self.count = 0

    def __call__(self, case):
        if self.mode == "fresh":  # a call is a new stream
            self.total, self.count = 0.0, 0
        # "leaky": never starts a new stream; "carry": a stream spans calls until reset()
        out = []
        for value in np.asarray(case.load(), dtype=np.float64):
            self.total += value
            self.count += 1
            out.append(value - self.total / self.count)
        return {"y": np.array(out)}

    def reset(self):
        self.total = 0.0
        if self.mode != "carry_bad_reset":  # this one forgets the count
            self.count = 0


class NoReset:
    def __call__(self, case):
        return reference(case)


def make(mode):
    return NoReset() if mode == "no_reset" else Streaming(mode)
"""

SPEC = """format_version = {version}
name = "streaming"
outputs = ["y"]

[runners.reference]
role = "reference"
callable = "model:reference"

[runners.port]
role = "candidate"
factory = "model:make"
options = {{ mode = "{mode}" }}

[claims.y-max-abs]
outputs = ["y"]
metric = "max_abs"
bound = 1e-9
oracle = "equivalence"
mode = "{claim_mode}"
status = "provisional"

[cases]
x = {{ path = "cases/x.npy", sha256 = "{x}" }}
y = {{ path = "cases/y.npy", sha256 = "{y}" }}
{extra}"""


def _project(tmp_path, mode="fresh", *, version=10, extra="", claim_mode="stored"):
    (tmp_path / "cases").mkdir(exist_ok=True)
    pins = {}
    for name, values in (("x", [1.0, 2.0, 4.0, 8.0]), ("y", [100.0, -50.0, 30.0])):
        np.save(tmp_path / "cases" / f"{name}.npy", np.array(values))
        pins[name] = hashlib.sha256((tmp_path / "cases" / f"{name}.npy").read_bytes()).hexdigest()
    (tmp_path / "model.py").write_text(MODEL)
    text = SPEC.format(version=version, mode=mode, extra=extra, claim_mode=claim_mode, **pins)
    (tmp_path / "parity.toml").write_text(text)
    return tmp_path / "parity.toml"


def _pin(spec_path, *steps):
    spec = load_spec(spec_path) if not isinstance(spec_path, dict) else None
    pins = spec_path if spec is None else {n: c.sha256 for n, c in spec.cases.items()}
    return sequence_sha256(s if s == "reset" else [s, pins[s]] for s in steps)


def _set_mode(path, mode):
    text = path.read_text()
    for old in ("fresh", "leaky", "carry_bad_reset", "carry", "no_reset"):
        text = text.replace(f'mode = "{old}"', f'mode = "{mode}"')
    path.write_text(text)


def _record(path):
    assert record(load_spec(path)).written


def _failed(result):
    return sorted(v.case for v in result.verdicts if not v.passed)


def test_the_pin_is_the_sha256_of_the_canonical_steps():
    steps = [["a", "0" * 64], "reset", ["b", "1" * 64]]
    text = '[["a","' + "0" * 64 + '"],"reset",["b","' + "1" * 64 + '"]]'
    assert json.dumps(steps, separators=(",", ":")) == text
    assert sequence_sha256(steps) == hashlib.sha256(text.encode()).hexdigest()


def test_a_port_that_never_starts_a_new_stream_fails_the_after_case_and_the_fixed_port_passes(
    tmp_path, capsys
):
    path = _project(tmp_path, mode="leaky")
    _record(path)
    assert run_gate(load_spec(path), cases=["x"]).exit_code == 0  # the plain case: first call
    assert main(["cases", "add", "--sweep", "x:after=y", "--spec", str(path)]) == 0
    _record(path)  # the reference (a function) runs the sequence too
    out = capsys.readouterr().out
    assert "added x_after.y: sequence [y, x]" in out and "1 case(s) added" in out
    spec = load_spec(path)
    assert [m.name for m in spec.cases["x_after.y"].sequence] == ["y", "x"]
    assert spec.cases["x_after.y"].sha256 == _pin(path, "y", "x")
    # on a fresh runner: only the call on y before x makes x wrong
    result = run_gate(spec, cases=["x_after.y"])
    assert result.exit_code == 1 and _failed(result) == ["x_after.y"]
    verdict = next(v for v in result.verdicts if not v.passed)
    assert verdict.claim_id == "y-max-abs" and verdict.case == "x_after.y"
    assert main(["gate", str(path), "--case", "x_after.y"]) == 1
    assert "x_after.y" in capsys.readouterr().out
    _set_mode(path, "fresh")
    assert run_gate(load_spec(path)).exit_code == 0


def test_a_reset_that_forgets_a_field_fails_the_reset_case_and_a_full_reset_passes(
    tmp_path, capsys
):
    path = _project(tmp_path, mode="carry_bad_reset")
    assert main(["cases", "add", "--sweep", "x:after=y,reset=true", "--spec", str(path)]) == 0
    assert "2 case(s) added" in capsys.readouterr().out
    _record(path)
    spec = load_spec(path)
    assert spec.cases["x_reset.y"].sha256 == _pin(path, "y", "reset", "x")
    assert spec.cases["x_reset.y"].sequence[1] is None
    # a stream spans calls by design: only the reset case says whether reset() is complete
    assert run_gate(spec, cases=["x"]).exit_code == 0
    result = run_gate(spec, cases=["x_reset.y"])
    assert result.exit_code == 1 and _failed(result) == ["x_reset.y"]
    _set_mode(path, "carry")
    assert run_gate(load_spec(path), cases=["x_reset.y"]).exit_code == 0
    # again: nothing new
    assert main(["cases", "add", "--sweep", "x:after=y,reset=true", "--spec", str(path)]) == 0
    assert "0 case(s) added, 2 already pinned" in capsys.readouterr().out


def test_stored_mode_records_the_sequence_and_a_changed_member_is_drift_naming_it(tmp_path, capsys):
    path = _project(tmp_path, mode="leaky")
    sweep_cases(path, parse_sweep("x:after=y"))
    assert main(["record", str(path), "--yes"]) == 0  # the reference runs the sequence too
    capsys.readouterr()
    assert _failed(run_gate(load_spec(path))) == ["x_after.y", "y"]  # y runs after x: leaks
    _set_mode(path, "fresh")
    assert run_gate(load_spec(path)).exit_code == 0
    np.save(tmp_path / "cases" / "y.npy", np.array([1.0, 2.0, 3.0]))  # a member's input changed
    assert main(["gate", str(path)]) == 3
    result = run_gate(load_spec(path))
    assert result.exit_code == 3
    drift = {d.subject: d.detail for d in result.drift if d.kind == "case-input"}
    assert sorted(drift) == ["x_after.y", "y"]
    assert drift["x_after.y"].startswith("sequence [y, x] differs from its pin")


def test_a_pin_that_does_not_match_the_members_is_drift_and_a_missing_one_is_refused(tmp_path):
    extra = f'"x_after.y" = {{ sequence = ["y", "x"], sha256 = "{"0" * 64}" }}\n'
    path = _project(tmp_path, extra=extra, claim_mode="paired")
    result = run_gate(load_spec(path))
    assert result.exit_code == 3
    assert [d.subject for d in result.drift] == ["x_after.y"]
    assert "differs from its pin" in result.drift[0].detail
    path.write_text(path.read_text().replace(f', sha256 = "{"0" * 64}"', ""))
    with pytest.raises(SpecError, match=r"cases\.x_after\.y\.sha256: required key is missing"):
        load_spec(path)


@pytest.mark.parametrize(
    ("sequence", "words"),
    [
        ('["z", "x"]', "'z' is neither a case of the spec nor a switch"),
        ('["s", "x"]', "'s' is itself a sequence"),
        ('["y", "rest", "x"]', "did you mean 'reset'?"),
        ("[]", "expected at least one member case"),
        ('["reset"]', "expected at least one member case"),
        ('["x", "reset"]', 'ends with "reset"'),
        ('"x"', "expected a list of case names"),
    ],
)
def test_bad_sequences_exit_2_in_one_line(tmp_path, capsys, sequence, words):
    extra = (
        f's = {{ sequence = ["y", "x"], sha256 = "{"0" * 64}" }}\n'
        f'bad = {{ sequence = {sequence}, sha256 = "{"0" * 64}" }}\n'
    )
    path = _project(tmp_path, extra=extra)
    assert main(["gate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cases.bad.sequence" in err and words in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_format_9_spec_with_a_sequence_is_refused(tmp_path, capsys):
    extra = f'"x_after.y" = {{ sequence = ["y", "x"], sha256 = "{"0" * 64}" }}\n'
    path = _project(tmp_path, version=9, extra=extra)
    assert main(["gate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cases.x_after.y.sequence: needs format_version = 10" in err


def test_the_sweep_raises_the_format_and_combines_with_lengths(tmp_path, capsys):
    path = _project(tmp_path, version=6)
    declaration = "x:axis=0,chunk=2,max=1,after=y"
    assert main(["cases", "add", "--sweep", declaration, "--spec", str(path)]) == 0
    spec = load_spec(path)
    assert spec.format_version == 10
    assert {"x_edges.0", "x_edges.3", "x_after.y"} <= set(spec.cases)
    capsys.readouterr()
    assert main(["cases", "add", "--sweep", declaration, "--spec", str(path)]) == 0
    assert "0 case(s) added" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("declaration", "words"),
    [
        ("x:reset=true", "reset=true needs after=OTHER"),
        ("x:after=nope", "no case 'nope'"),
        ("x:after=y,reset=maybe", "expected true or false"),
        ("x:name=q", "declare axis="),
    ],
)
def test_bad_sequence_sweeps_exit_2_in_one_line(tmp_path, capsys, declaration, words):
    path = _project(tmp_path)
    before = path.read_text()
    assert main(["cases", "add", "--sweep", declaration, "--spec", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert path.read_text() == before


def test_a_runner_without_reset_is_named_in_one_line_and_a_plain_function_needs_none(tmp_path):
    path = _project(tmp_path, mode="no_reset", claim_mode="paired")
    sweep_cases(path, parse_sweep("x:after=y,reset=true"))
    result = run_gate(load_spec(path))
    assert result.exit_code == 1
    assert len(result.errors) == 1
    first = result.errors[0].splitlines()[0]
    assert "runner port, case x_reset.y: import: runner port has no reset()" in first
    assert "the sequence case x_reset.y [y, reset, x] needs one" in first
    assert "factory model:make returned a NoReset without one" in first
    # the reference (a plain function) ran the reset case: nothing to reset, no error for it
    assert not any("reference" in e for e in result.errors)


def test_an_earlier_members_failure_is_the_sequence_cases_naming_the_member(tmp_path):
    path = _project(tmp_path, claim_mode="paired")
    sweep_cases(path, parse_sweep("x:after=y"))
    (tmp_path / "model.py").write_text(
        MODEL + "\n\ndef broken(case):\n    if case.name == 'y':\n        raise ValueError('no')\n"
        "    return reference(case)\n"
    )
    text = path.read_text().replace('factory = "model:make"', 'callable = "model:broken"')
    path.write_text(text.replace('options = { mode = "fresh" }\n', ""))
    result = run_gate(load_spec(path), cases=["x", "x_after.y"])
    assert len(result.errors) == 1
    assert "case x_after.y: crash" in result.errors[0]
    assert "call 1 of 2 (member y, step 1 of [y, x]): ValueError: no" in result.errors[0]


def test_sequences_run_on_a_pool_of_two(tmp_path):
    path = _project(tmp_path, mode="leaky")
    sweep_cases(path, parse_sweep("x:after=y"))
    _record(path)
    spec = load_spec(path)
    result = run_gate(spec, cases=["x_after.y"], execution=plan(spec, jobs=2))
    assert _failed(result) == ["x_after.y"]
    _set_mode(path, "fresh")
    spec = load_spec(path)
    assert run_gate(spec, execution=plan(spec, jobs=2)).exit_code == 0


def test_locate_refuses_a_sequence_in_one_line(tmp_path, capsys):
    path = _project(tmp_path)
    sweep_cases(path, parse_sweep("x:after=y"))
    code = main(["locate", str(path), "--claim", "y-max-abs", "--case", "x_after.y"])
    err = capsys.readouterr().err
    assert code == 2 and "is a call sequence [y, x]" in err and "Traceback" not in err


def test_mutation_runs_sequences_and_the_reset_case_catches_dropped_resets(tmp_path, capsys):
    path = _project(tmp_path, mode="carry")
    sweep_cases(path, parse_sweep("x:after=y,reset=true"))
    _record(path)
    mutate = ["mutate", str(path), "--operators", "drop-reset", "--case", "x"]
    assert main(mutate) == 0
    assert "0/2 caught" in capsys.readouterr().out  # the plain case never calls reset()
    assert main([*mutate, "--case", "x_reset.y"]) == 0
    out = capsys.readouterr().out
    assert "2/2 caught" in out and out.count("y-max-abs @ x_reset.y") == 2


def test_a_command_runs_a_sequence_with_a_reset_as_a_new_process_per_call(tmp_path):
    path = _project(tmp_path, claim_mode="paired")
    (tmp_path / "cmd.py").write_text(
        "import sys\nimport numpy as np\n"
        "x = np.load(sys.argv[1]).astype(np.float64)\n"
        "np.savez(sys.argv[2], y=x - np.cumsum(x) / np.arange(1, len(x) + 1))\n"
    )
    text = path.read_text().replace(
        'factory = "model:make"\noptions = { mode = "fresh" }',
        'command = ["{python}", "cmd.py", "{case}", "{out}"]\nformat = "npz"',
    )
    path.write_text(text)
    sweep_cases(path, parse_sweep("x:after=y,reset=true"))
    result = run_gate(load_spec(path), cases=["x_reset.y"])
    assert result.exit_code == 0 and [v.case for v in result.verdicts] == ["x_reset.y"]

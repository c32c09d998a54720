"""A runner's failure on one short line, the calling-convention hint, and the working folder
in-process runners run in."""

from __future__ import annotations

import os
import pickle
import textwrap

import pytest

from paritygate.errors import MESSAGE_LIMIT, RunFailure, failure_site, shorten
from paritygate.runners import in_spec_folder, suggested_pass
from paritygate.spec import Case, spec_from_text

TRACEBACK = textwrap.dedent(
    """\
    Traceback (most recent call last):
      File "/opt/x/site-packages/paritygate/runners.py", line 452, in run
        host_arrays(function(argument), root=BARE_OUTPUT)
      File "/home/u/port/runners.py", line 11, in sklearn_reference
        return {"y": _model.predict(inputs["x"])}
    TypeError: 'Case' object is not subscriptable
    """
)


def _raise(function, argument):
    try:
        function(argument)
    except Exception as exc:  # noqa: BLE001 - the exception is what is tested
        return exc
    raise AssertionError("did not raise")


def test_a_function_reading_inputs_handed_a_case_is_told_pass_inputs(tmp_path):
    case = Case("c", tmp_path / "c.npz", "0" * 64)
    exc = _raise(lambda inputs: inputs["x"], case)
    assert suggested_pass("case", exc) == "inputs"
    assert suggested_pass("case", _raise(lambda inputs: inputs.items(), case)) == "inputs"
    assert suggested_pass("case", _raise(open, case)) == "path"
    assert suggested_pass("inputs", _raise(lambda c: c.load(), {"x": 1})) == "case"
    assert suggested_pass("inputs", _raise(open, {"x": 1})) == "path"
    assert suggested_pass("path", _raise(lambda inputs: inputs["x"], "a.npz")) == "inputs"
    assert suggested_pass("path", _raise(lambda c: c.load(), "a.npz")) == "case"


def test_other_failures_get_no_pass_hint(tmp_path):
    case = Case("c", tmp_path / "c.npz", "0" * 64)
    assert suggested_pass("case", _raise(lambda c: 1 / 0, case)) is None
    assert suggested_pass("inputs", _raise(lambda inputs: inputs["x"], {"y": 1})) is None
    assert suggested_pass("case", RuntimeError("'Case' object is not subscriptable")) is None
    # the right style handed: the same error text is not about the convention
    assert suggested_pass("inputs", _raise(lambda inputs: inputs["x"], case)) is None


def test_run_failure_one_line_names_where_and_cuts_the_message():
    exc = RunFailure(
        "reference",
        "batch_00",
        "crash",
        "TypeError: 'Case' object is not subscriptable " + "x" * 400,
        TRACEBACK,
        suggested_pass="inputs",
    )
    line = exc.one_line()
    assert "\n" not in line and len(line) < MESSAGE_LIMIT + 120, line
    assert line.startswith(
        "runner reference, case batch_00: crash at /home/u/port/runners.py:11: TypeError: "
    )
    assert line.endswith('… (set pass = "inputs" in [runners.reference])')
    assert "--- stderr ---" in exc.describe() and "line 452" in exc.describe()
    copy = pickle.loads(pickle.dumps(exc))
    assert copy.one_line() == line and copy.suggested_pass == "inputs"


def test_a_command_crash_keeps_its_last_words():
    exc = RunFailure("port", "c1", "crash", "exited with status 1", "warming up\nValueError: bad")
    assert exc.one_line() == "runner port, case c1: crash: exited with status 1: ValueError: bad"


def test_failure_site_skips_paritygate_and_installed_packages():
    import numpy

    numpy_file = os.path.join(os.path.dirname(numpy.__file__), "lib", "_npyio_impl.py")
    frames = [("/home/u/port/runners.py", 7), (numpy_file, 455)]
    assert failure_site(frames) == "/home/u/port/runners.py:7"
    # named relative to the working folder where it lies inside it (a venv inside the checkout)
    shown = os.path.relpath(numpy_file)
    shown = numpy_file if shown.startswith("..") else shown
    assert failure_site([(numpy_file, 455)]) == f"{shown}:455"
    assert failure_site(TRACEBACK) == "/home/u/port/runners.py:11"
    assert failure_site("no traceback here") is None


def test_shorten_cuts_at_a_space():
    assert shorten("a  b\n c") == "a b c"
    cut = shorten("word " * 100, 50)
    assert len(cut) <= 50 and cut.endswith("word…")


def test_in_spec_folder_restores_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec_folder = tmp_path / "port"
    spec_folder.mkdir()
    with in_spec_folder(spec_folder):
        assert os.getcwd() == str(spec_folder)
    assert os.getcwd() == str(tmp_path)
    with pytest.raises(ZeroDivisionError), in_spec_folder(spec_folder):
        1 / 0  # noqa: B018
    assert os.getcwd() == str(tmp_path)


def test_a_case_runner_sees_the_spec_folder(tmp_path, monkeypatch):
    """An in-process runner's call runs in the spec's folder; the caller's folder is back
    after it."""
    from paritygate.runners import make_runner

    project = tmp_path / "port"
    project.mkdir()
    (project / "where.py").write_text(
        "import os\n\ndef run(case):\n    return {'y': len(open('model.txt').read())}\n"
    )
    (project / "model.txt").write_text("abc")
    (project / "c.json").write_text("{}")
    import hashlib

    digest = hashlib.sha256(b"{}").hexdigest()
    text = (
        'format_version = 2\noutputs = ["y"]\n'
        '[runners.reference]\nrole = "reference"\ncallable = "where:run"\n'
        '[runners.cand]\nrole = "candidate"\ncallable = "where:run"\n'
        '[claims.y]\noutputs = ["y"]\nmetric = "exact"\nbound = 0\noracle = "equivalence"\n'
        'status = "provisional"\n'
        f'[cases.c]\npath = "c.json"\nsha256 = "{digest}"\n'
    )
    spec = spec_from_text(text, project / "parity.toml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with make_runner(spec.runners["cand"], spec) as runner:
        assert int(runner.run(spec.cases["c"]).outputs["y"]) == 3
    assert os.getcwd() == str(elsewhere)

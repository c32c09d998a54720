"""Faults of a sweep over file loading and spec parsing, checked at the command line: each bad file
or spec is one line naming it with exit 2 (never a silent pass, never a traceback that reads as
exit 1, "claim violated"), and the good file or spec beside it still works.

The CLI runs in process (click's output captured); the deep specs also run in a subprocess, where
the recursion limit is that of a real command line."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from spec_helpers import TINY_SPEC, make_project

from paritygate.cli import main

pytestmark = pytest.mark.slow


def _cli(*args: str | Path) -> tuple[int | None, str, str]:
    """Exit code, stdout and stderr of ``paritygate ARGS`` run in process; an exception that
    escapes (a traceback at the command line) comes back as exit None and its text."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except BaseException as exc:  # counted, never hidden
            return None, out.getvalue(), f"Traceback: {type(exc).__name__}: {exc}"
    return code, out.getvalue(), err.getvalue()


def _subprocess_cli(*args: str | Path) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "paritygate", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def _one_line_error(args: tuple[str | Path, ...], *needles: str, run=_cli) -> str:
    code, _out, err = run(*args)
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, err)
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# 1. malformed .npy / .npz files


def test_npy_holding_two_arrays_exits_2_naming_the_file(tmp_path):
    good = tmp_path / "good.npy"
    good.write_bytes(_npy(np.arange(3.0)))
    two = tmp_path / "two.npy"
    two.write_bytes(_npy(np.arange(3.0)) + _npy(np.arange(3.0) + 1))
    for args in (("compare", two, good), ("compare", good, two)):
        _one_line_error(args, str(two), "holds a second .npy array")
    assert _cli("compare", good, good)[0] == 0


def test_npy_with_trailing_bytes_exits_2_naming_the_file(tmp_path):
    good = tmp_path / "good.npy"
    good.write_bytes(_npy(np.arange(3.0)))
    trailing = tmp_path / "trailing.npy"
    trailing.write_bytes(_npy(np.arange(3.0)) + b"\x00garbage")
    _one_line_error(("compare", trailing, good), str(trailing), "8 byte(s) after the array")


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_npz_with_duplicate_members_exits_2_naming_file_and_member(tmp_path):
    good = tmp_path / "good.npz"
    np.savez(good, x=np.arange(3.0))
    dup = tmp_path / "dup.npz"
    with zipfile.ZipFile(dup, "w") as archive:
        archive.writestr("x.npy", _npy(np.arange(3.0)))
        archive.writestr("x.npy", _npy(np.arange(3.0) + 1))
    for args in (("compare", dup, good), ("compare", good, dup)):
        _one_line_error(args, str(dup), "'x.npy' appears twice")
    code, out, _err = _cli("compare", good, good)
    assert code == 0 and "PASS" in out


def test_npz_member_holding_two_arrays_exits_2_naming_the_member(tmp_path):
    good = tmp_path / "good.npz"
    np.savez(good, x=np.arange(3.0))
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("x.npy", _npy(np.arange(3.0)) + _npy(np.arange(3.0) + 1))
    _one_line_error(("compare", bad, good), f"{bad}[x]", "second .npy array")


# ---------------------------------------------------------------------------------------------
# 2. deep nesting: spec TOML and JSON output files


@pytest.mark.parametrize(
    "nested",
    [
        "x = " + "[" * 100_000 + "]" * 100_000,
        "x = " + "{a = " * 20_000 + "1" + "}" * 20_000,
        "x = " + "[" * 900 + "]" * 900,  # parses in a shallow stack, overflows later
    ],
    ids=["arrays-100k", "inline-tables-20k", "arrays-900"],
)
@pytest.mark.parametrize("command", ["gate", "verify"])
def test_deeply_nested_spec_exits_2_naming_the_spec(tmp_path, nested, command):
    path = make_project(tmp_path, nested + "\n" + TINY_SPEC)
    _one_line_error((command, path), str(path), "TOML nested too deeply")
    if command == "gate":
        _one_line_error(
            (command, path), str(path.name), "TOML nested too deeply", run=_subprocess_cli
        )


@pytest.mark.parametrize("depth", [100_000, 990, 300])
def test_deeply_nested_json_output_exits_2_naming_the_file(tmp_path, depth):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"x": [[1.0, 2.0]]}))
    deep = tmp_path / "deep.json"
    deep.write_text('{"x": ' + "[" * depth + "1" + "]" * depth + "}")
    for args in (("compare", deep, good), ("compare", good, deep)):
        _one_line_error(args, str(deep), "JSON nested too deeply")
    assert _cli("compare", good, good)[0] == 0


def test_json_numbers_nested_past_numpy_dimensions_exit_2(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"x": ' + "[" * 100 + "1" + "]" * 100 + "}")
    _one_line_error(("compare", deep, deep), "x", "nested 100 levels deep")


# ---------------------------------------------------------------------------------------------
# 3. empty string outputs


def test_empty_string_lists_compare_and_empty_against_non_empty_fails(tmp_path):
    empty_a, empty_b, one = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "one.json"
    empty_a.write_text(json.dumps({"s": []}))
    empty_b.write_text(json.dumps({"s": []}))
    one.write_text(json.dumps({"s": ["a"]}))
    code, out, err = _cli("compare", empty_a, empty_b)
    assert code == 0 and "PASS" in out and err == ""
    for actual, expected, side in ((empty_a, one, "actual"), (one, empty_a, "expected")):
        code, out, err = _cli("compare", actual, expected)
        assert code == 1 and "Traceback" not in err, (code, err)
        assert "size" in out and f"{side} is empty with shape (0,)" in out, out
    code, out, _err = _cli("compare", one, one)
    assert code == 0


# ---------------------------------------------------------------------------------------------
# 4. integers a float cannot hold


def test_bound_beyond_float64_precision_exits_2_naming_the_claim(tmp_path):
    path = make_project(tmp_path, TINY_SPEC.replace("bound = 1e-5", "bound = 99999999999999999999"))
    for command in ("record", "gate"):
        line = _one_line_error(
            (command, path), "claims.y-close.bound", "99999999999999999999", "write it as a float"
        )
        assert "1e+20" in line
    assert not (tmp_path / "references").exists()  # nothing recorded from the refused spec
    path.write_text(path.read_text().replace("99999999999999999999", "1e20"))
    code, _out, err = _cli("record", path)
    assert code == 0, err
    code, _out, err = _cli("gate", path)
    assert code == 0, err

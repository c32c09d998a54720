"""``paritygate compare A B``: exit 0 within bounds, 1 outside, 2 on bad input, in every entry
point."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

import paritygate
from paritygate.cli import cli, main
from paritygate.files import save_outputs

SRC = Path(paritygate.__file__).resolve().parents[1]


def _reference() -> dict:
    rng = np.random.default_rng(11)
    return {
        "logits": rng.standard_normal((8, 16)).astype(np.float32),
        "boxes": {"editor": np.array([12.0, 40.0, 310.0, 220.0], dtype=np.float32)},
        "mask": np.array([True, False, True, True]),
    }


def _port(drift_at: tuple[int, int] | None = (3, 5), drift: float = 0.25) -> dict:
    outputs = _reference()
    logits = outputs["logits"].astype(np.float16)  # a float16 port: rounding noise everywhere
    if drift_at is not None:
        logits[drift_at] += drift
    outputs["logits"] = logits
    return outputs


@pytest.fixture
def files(tmp_path):
    ref = save_outputs(tmp_path / "reference.safetensors", _reference())
    port = save_outputs(tmp_path / "port.safetensors", _port())
    clean = save_outputs(tmp_path / "clean.safetensors", _port(drift_at=None))
    return {"ref": str(ref), "port": str(port), "clean": str(clean), "dir": tmp_path}


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(["compare", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


# ---------------------------------------------------------------------------------------------
# verdicts


def test_identical_files_exit_0(files, capsys):
    code, out, _ = _run([files["ref"], files["ref"]], capsys)
    assert code == 0
    assert "PASS: 3 of 3 outputs within bounds" in out


def test_float16_port_passes_at_its_tolerance_and_fails_exact(files, capsys):
    code, out, _ = _run([files["clean"], files["ref"], "--atol", "5e-3"], capsys)
    assert code == 0, out
    code, out, _ = _run([files["clean"], files["ref"]], capsys)
    assert code == 1
    assert "FAIL" in out and "logits" in out


def test_planted_drift_fails_and_names_output_and_element(files, capsys):
    code, out, _ = _run([files["port"], files["ref"], "--atol", "5e-3"], capsys)
    assert code == 1
    assert "output logits: FAIL" in out
    assert "3,5" in out  # the planted element, in the table and the worst list
    assert "FAIL: 2 of 3 outputs within bounds" in out
    # the bound that would have passed is reported, and passes
    code, _, _ = _run([files["port"], files["ref"], "--atol", "0.26"], capsys)
    assert code == 0


def test_missing_and_extra_outputs_fail(files, capsys):
    extra = _port(drift_at=None)
    extra["scores"] = np.ones(3)
    del extra["mask"]
    path = save_outputs(files["dir"] / "shape-shifted.safetensors", extra)
    code, out, _ = _run([str(path), files["ref"], "--atol", "1"], capsys)
    assert code == 1
    assert "missing: mask" in out and "extra: scores" in out
    assert "MISSING" in out and "EXTRA" in out


@pytest.mark.parametrize(
    "flag, failing, passing",
    [
        ("--rtol", "1e-6", "0.7"),
        ("--min-cosine", "0.9999999", "0.99"),
        ("--max-ulp", "0", "2048"),
        ("--max-mean-abs", "1e-6", "0.01"),
    ],
)
def test_each_bound_flag_takes_effect_in_both_directions(files, capsys, flag, failing, passing):
    loose_atol = ["--atol", "1"] if flag != "--rtol" else ["--atol", "0"]
    code, out, _ = _run([files["port"], files["ref"], *loose_atol, flag, failing], capsys)
    assert code == 1, out
    code, out, _ = _run([files["port"], files["ref"], *loose_atol, flag, passing], capsys)
    assert code == 0, out


def test_json_output_is_the_comparison(files, capsys):
    code, out, _ = _run(
        [files["port"], files["ref"], "--atol", "5e-3", "--json", "--worst-k", "3"], capsys
    )
    assert code == 1
    data = json.loads(out)
    assert data["passed"] is False
    assert data["actual_file"] == files["port"] and data["expected_file"] == files["ref"]
    logits = next(o for o in data["outputs"] if o["path"] == "logits")
    assert logits["passed"] is False and logits["mismatches"] == 1
    assert len(logits["worst"]) == 3 and logits["worst"][0]["index"] == [3, 5]
    assert data["tolerance"]["atol"] == 5e-3
    code, out, _ = _run([files["ref"], files["ref"], "--json"], capsys)
    assert code == 0 and json.loads(out)["passed"] is True


def test_npy_files_compare_whatever_their_names(tmp_path, capsys):
    np.save(tmp_path / "mine.npy", np.arange(5, dtype=np.float32))
    np.save(tmp_path / "theirs.npy", np.arange(5, dtype=np.float64))
    np.save(tmp_path / "off.npy", np.arange(5, dtype=np.float64) + [0, 0, 0, 0, 1])
    code, _, _ = _run([str(tmp_path / "mine.npy"), str(tmp_path / "theirs.npy")], capsys)
    assert code == 0
    code, out, _ = _run([str(tmp_path / "mine.npy"), str(tmp_path / "off.npy")], capsys)
    assert code == 1 and "output off: FAIL" in out  # named after B


def test_files_of_one_unnamed_output_compare_whatever_their_names(tmp_path, capsys):
    (tmp_path / "mine.json").write_text("[1, 2, 3]")
    (tmp_path / "theirs.json").write_text(" [1, 2, 3]")
    (tmp_path / "off.json").write_text("[1, 2, 4]")
    np.save(tmp_path / "array.npy", np.array([1, 2, 3]))
    (tmp_path / "named.json").write_text(json.dumps({"mine": [1, 2, 3]}))
    for actual, expected in (
        ("mine.json", "theirs.json"),
        ("array.npy", "theirs.json"),
        ("mine.json", "array.npy"),
    ):
        code, out, err = _run([str(tmp_path / actual), str(tmp_path / expected)], capsys)
        assert code == 0, (actual, expected, out, err)
    code, out, _ = _run([str(tmp_path / "mine.json"), str(tmp_path / "off.json")], capsys)
    assert code == 1 and "output off: FAIL" in out
    assert "2      3       4         1         1" in out  # index, actual, expected, diff, excess
    # An object names its outputs: it is not renamed to the other file's stem.
    code, out, _ = _run([str(tmp_path / "named.json"), str(tmp_path / "theirs.json")], capsys)
    assert code == 1 and "missing: theirs" in out and "extra: mine" in out


def test_json_and_npz_files(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps({"ids": [1, 2, 3], "text": "hello"}))
    (tmp_path / "b.json").write_text(json.dumps({"ids": [1, 2, 3], "text": "hello"}))
    (tmp_path / "c.json").write_text(json.dumps({"ids": [1, 2, 4], "text": "hello"}))
    assert _run([str(tmp_path / "a.json"), str(tmp_path / "b.json")], capsys)[0] == 0
    assert _run([str(tmp_path / "c.json"), str(tmp_path / "b.json")], capsys)[0] == 1
    save_outputs(tmp_path / "a.npz", _reference())
    assert _run([str(tmp_path / "a.npz"), str(tmp_path / "a.npz")], capsys)[0] == 0


# ---------------------------------------------------------------------------------------------
# bad input: exit 2, one line, no traceback


class _Payload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_bad_inputs_exit_2_with_one_line(files, capsys):
    tmp = files["dir"]
    marker = tmp / "executed.marker"
    pickled = tmp / "outputs.npz"
    pickled.write_bytes(pickle.dumps({"logits": _Payload(marker)}))
    garbage = tmp / "garbage.safetensors"
    garbage.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    wrong_shape = save_outputs(
        tmp / "wrong.safetensors", {**_reference(), "logits": np.zeros((2, 2))}
    )
    cases = [
        ([str(pickled), files["ref"]], "pickle"),
        ([str(tmp / "absent.safetensors"), files["ref"]], "not found"),
        ([files["ref"], str(tmp / "model.pt")], "unknown output file type"),
        ([str(garbage), files["ref"]], "garbage.safetensors"),
        ([str(wrong_shape), files["ref"]], "logits"),
    ]
    (tmp / "model.pt").write_bytes(b"x")
    for args, needle in cases:
        code, out, err = _run(args, capsys)
        assert code == 2, (args, out, err)
        assert out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("paritygate: error:"), err
        assert needle in lines[0], (needle, err)
        assert "Traceback" not in err
    assert not marker.exists()


def test_odd_files_exit_2_with_one_line_naming_the_file(tmp_path, capsys):
    """Files a user may hand over by mistake: each is refused in one line, nothing is unpickled."""
    from safetensors.numpy import save_file

    good = tmp_path / "good.npy"
    np.save(good, np.arange(6, dtype=np.float32))
    pickled_npy = tmp_path / "pickled.npy"
    np.save(pickled_npy, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    raw_pickle = tmp_path / "raw.npy"
    raw_pickle.write_bytes(pickle.dumps({"x": [1, 2]}))
    save_file({"x": np.arange(6, dtype=np.float32)}, str(tmp_path / "full.safetensors"))
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes((tmp_path / "full.safetensors").read_bytes()[:-5])
    truncated_npy = tmp_path / "truncated.npy"
    truncated_npy.write_bytes(good.read_bytes()[:-4])
    empty_npy = tmp_path / "empty.npy"
    empty_npy.write_bytes(b"")
    object_npz = tmp_path / "objects.npz"
    np.savez(object_npz, x=np.array([None], dtype=object))
    wide = tmp_path / "wide.npy"
    np.save(wide, np.zeros((2, 3), np.float32))
    complex_npy = tmp_path / "complex.npy"
    np.save(complex_npy, np.arange(6, dtype=np.complex64))
    (tmp_path / "rect.json").write_text(json.dumps({"x": [[1, 2], [3, 4]]}))
    (tmp_path / "ragged.json").write_text(json.dumps({"x": [[1, 2], [3]]}))
    (tmp_path / "words.json").write_text(json.dumps({"x": "hello"}))
    (tmp_path / "number.json").write_text(json.dumps({"x": 1.0}))
    (tmp_path / "cut.json").write_text('{"x": [1, 2')
    folder = tmp_path / "outputs.npy"
    folder.mkdir()
    # 'a/b' names the output boxes/a/b, which the nested table names too: one name, two outputs
    (tmp_path / "slash.json").write_text(json.dumps({"boxes": {"a/b": [1, 2], "a": {"b": [3]}}}))
    cases = [
        (pickled_npy, good, "pickled.npy: holds an object array"),
        (raw_pickle, good, "raw.npy: is a pickle file, refused"),
        (
            truncated,
            tmp_path / "full.safetensors",
            "truncated.safetensors: not a valid safetensors",
        ),
        (truncated_npy, good, "truncated.npy: corrupt or truncated .npy"),
        (empty_npy, good, "empty.npy: is empty"),
        (object_npz, object_npz, "objects.npz[x]: holds an object array"),
        (wide, good, "good: shape mismatch: actual (2, 3) float32 vs expected (6,) float32"),
        (complex_npy, good, "complex (complex64) against real (float32)"),
        (tmp_path / "rect.json", tmp_path / "ragged.json", "x: structure mismatch"),
        (
            tmp_path / "words.json",
            tmp_path / "number.json",
            "strings are only compared with strings",
        ),
        (tmp_path / "cut.json", tmp_path / "rect.json", "cut.json: invalid JSON at line 1"),
        (folder, good, "outputs.npy: is a directory"),
        (
            tmp_path / "rect.json",
            tmp_path / "slash.json",
            "slash.json[boxes/a/b]: two outputs share this name",
        ),
        (good, folder, "outputs.npy: is a directory"),
        (tmp_path / "absent.npy", good, "absent.npy: file not found"),
    ]
    for actual, expected, needle in cases:
        code, out, err = _run([str(actual), str(expected)], capsys)
        assert (code, out) == (2, ""), (actual, expected, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("paritygate: error: "), err
        assert needle in lines[0], (needle, err)


def test_odd_but_valid_files_get_a_verdict(tmp_path, capsys):
    """bfloat16 against float32, nested JSON lists and empty arrays are comparisons, not errors."""
    from safetensors.numpy import save_file

    values = np.arange(-4, 4, 0.5, dtype=np.float32)
    save_file({"x": values.astype(ml_dtypes.bfloat16)}, str(tmp_path / "bf16.safetensors"))
    save_file({"x": values}, str(tmp_path / "f32.safetensors"))
    code, out, _ = _run(
        [str(tmp_path / "bf16.safetensors"), str(tmp_path / "f32.safetensors")], capsys
    )
    assert code == 0 and "bfloat16/float32" in out  # the bf16 grid holds these values exactly
    save_file({"x": values + np.float32(1e-3)}, str(tmp_path / "shifted.safetensors"))
    code, out, _ = _run(
        [
            str(tmp_path / "bf16.safetensors"),
            str(tmp_path / "shifted.safetensors"),
            "--atol",
            "1e-4",
        ],
        capsys,
    )
    assert code == 1 and "output x: FAIL" in out and "worst elements" in out
    (tmp_path / "a.json").write_text(json.dumps({"x": [[1, 2], [3, 4]], "y": {"z": [[1.5]]}}))
    (tmp_path / "b.json").write_text(json.dumps({"x": [[1, 2], [3, 5]], "y": {"z": [[1.5]]}}))
    assert _run([str(tmp_path / "a.json"), str(tmp_path / "a.json")], capsys)[0] == 0
    code, out, _ = _run([str(tmp_path / "a.json"), str(tmp_path / "b.json")], capsys)
    assert code == 1 and "output x: FAIL" in out and "1,1" in out and "y/z" in out
    np.save(tmp_path / "e1.npy", np.zeros((0, 3), np.float32))
    np.save(tmp_path / "e2.npy", np.zeros((0, 3), np.float64))
    assert _run([str(tmp_path / "e1.npy"), str(tmp_path / "e2.npy")], capsys)[0] == 0
    # empty against non-empty: outside bounds (exit 1) with the reason, not bad input
    np.save(tmp_path / "full.npy", np.ones((2, 3), np.float32))
    code, out, err = _run(
        [str(tmp_path / "e1.npy"), str(tmp_path / "full.npy"), "--atol", "1"], capsys
    )
    assert (code, err) == (1, "") and "output full: FAIL" in out
    assert "actual is empty with shape (0, 3), expected has 6 element(s) with shape (2, 3)" in out


def test_bad_flag_values_exit_2(files, capsys):
    code, _, err = _run([files["ref"], files["ref"], "--atol", "-1"], capsys)
    assert code == 2 and "atol" in err
    code, _, err = _run([files["ref"], files["ref"], "--min-cosine", "2"], capsys)
    assert code == 2 and "min_cosine" in err
    code, _, err = _run([files["ref"]], capsys)
    assert code == 2 and "Missing argument" in err
    # Usage errors are one line too, naming the option and where the help is.
    for args, needle in (
        ([files["ref"]], "Missing argument 'B'"),
        ([files["ref"], files["ref"], "--bogus"], "No such option '--bogus'"),
        ([files["ref"], files["ref"], "--worst-k", "-1"], "Invalid value for '--worst-k'"),
        ([files["ref"], files["ref"], "--atol"], "Option '--atol' requires an argument"),
    ):
        code, out, err = _run(args, capsys)
        lines = err.strip().splitlines()
        assert (code, out, len(lines)) == (2, "", 1), err
        assert lines[0].startswith("paritygate: error: ") and needle in lines[0], err
        assert lines[0].endswith(" --help')") and "(see 'paritygate" in lines[0], err


# ---------------------------------------------------------------------------------------------
# entry points: python -m paritygate, the console script, click's runner


def test_python_dash_m_gives_each_exit_code(files):
    base = [sys.executable, "-m", "paritygate", "compare"]
    ok = subprocess.run(
        [*base, files["ref"], files["ref"]], env=_env(), capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [*base, files["port"], files["ref"], "--atol", "5e-3"],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "output logits: FAIL" in bad.stdout
    broken = subprocess.run(
        [*base, files["ref"], str(Path(files["dir"]) / "nope.npz")],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert broken.returncode == 2 and "nope.npz: file not found" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_console_script_gives_each_exit_code(files):
    script = Path(sys.executable).with_name("paritygate")
    assert script.exists(), f"console script not installed next to {sys.executable}"
    ok = subprocess.run(
        [str(script), "compare", files["ref"], files["ref"]],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [str(script), "compare", files["port"], files["ref"]],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    broken = subprocess.run(
        [str(script), "compare", files["ref"], "x.unknown"],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert broken.returncode == 2 and "Traceback" not in broken.stderr


def test_click_runner_standalone_mode_exit_codes(files):
    runner = CliRunner()
    assert runner.invoke(cli, ["compare", files["ref"], files["ref"]]).exit_code == 0
    result = runner.invoke(cli, ["compare", files["port"], files["ref"], "--atol", "5e-3"])
    assert result.exit_code == 1 and "logits" in result.output


def test_help_names_which_side_is_which(capsys):
    code = main(["compare", "--help"])
    out = capsys.readouterr().out
    assert code == 0
    assert "A (actual: the candidate" in out and "B" in out and "reference" in out
    for flag in (
        "--atol",
        "--rtol",
        "--min-cosine",
        "--max-ulp",
        "--max-mean-abs",
        "--worst-k",
        "--json",
    ):
        assert flag in out

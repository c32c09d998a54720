"""Faults around ``record``, the reference folder and the gate, found by a fault sweep: a full
disk, a gate that spans two records, a missing case file, a ``references`` path that is a file,
a user's own file or a symbolic link inside the references, and a port that edits its own input.
Each ends in one clear line with the documented exit code, and nothing is lost."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat

import numpy as np
import pytest
from spec_helpers import TINY_MODEL, TINY_SPEC, make_project, recorded_file

from paritygate.cli import main
from paritygate.drift import verify
from paritygate.gate import run_gate
from paritygate.references import load_reference, record
from paritygate.spec import load_spec

pytestmark = pytest.mark.slow

# The fault suite's reference (outputs move by a harmless 1e-9 step per SCALE, so that each record
# writes a new version the float32 candidate still passes), and candidates that misbehave.
MODEL = (
    TINY_MODEL.replace(
        """def reference(case):
    x = case.load()["x"]
    logits = x @ W""",
        """def reference(case):
    import os

    x = case.load()["x"]
    logits = x @ W * (1 + 1e-9 * float(os.environ.get("SCALE", "0")))""",
    )
    + '''

def candidate_rerecords(case):
    """A port slow enough that the reference is recorded twice while the gate runs it: on its
    first case it runs `paritygate record` twice (each writes a new version)."""
    import os
    import subprocess
    import sys

    spec = os.environ.get("RERECORD_SPEC")
    if spec and case.name == "a":
        for scale in ("1", "2"):
            subprocess.run(
                [sys.executable, "-m", "paritygate", "record", spec, "--yes"],
                env={**os.environ, "SCALE": scale, "RERECORD_SPEC": ""},
                check=True,
                capture_output=True,
            )
    return candidate32(case)


def reference_edits_input(case):
    """A reference that writes to its own input file (on case b)."""
    out = reference(case)
    if case.name == "b":
        np.savez(case.path, x=case.load()["x"] * 2.0)
    return out


def candidate_edits_input(case):
    """A port that writes to its own input file (on case a) after computing its outputs."""
    out = candidate32(case)
    if case.name == "a":
        np.savez(case.path, x=case.load()["x"] + 1.0)
    return out
'''
)
assert "SCALE" in MODEL


def _project(tmp_path, candidate: str = "candidate32", reference: str = "reference"):
    spec = TINY_SPEC.replace('callable = "tiny:candidate32"', f'callable = "tiny:{candidate}"')
    spec = spec.replace('callable = "tiny:reference"', f'callable = "tiny:{reference}"')
    return make_project(tmp_path, spec, modules={"tiny.py": MODEL})


def _snapshot(folder) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _cli(args: list[str], capsys) -> tuple[int, list[str], str]:
    """Exit code, the non-empty stderr lines, and stdout; a traceback fails the test."""
    code = main(args)  # an exception escaping main is the traceback the user would see
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    # stdout as one line: the terminal report wraps long lines
    return (
        code,
        [line for line in captured.err.splitlines() if line.strip()],
        " ".join(captured.out.split()),
    )


def _litter(spec) -> list[str]:
    names = [p.name for p in spec.references.iterdir()] if spec.references.is_dir() else []
    return [n for n in names if n.startswith("v-tmp-") or n.endswith(".tmp")]


# --------------------------------------------------------------------------------------------
# 1. record on a full disk


def _fail_writes(monkeypatch, error: int, *, after: int = 0) -> None:
    """Make the atomic writer's fsync fail with ``error`` after ``after`` successful ones (the
    bytes reached the temporary file, the filesystem could not keep them)."""
    real = os.fsync
    calls = {"n": 0}

    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return real(fd)  # a folder's fsync: not a write
        calls["n"] += 1
        if calls["n"] > after:
            raise OSError(error, os.strerror(error))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("after", [0, 1, 2], ids=["first-output", "second-output", "manifest"])
def test_record_on_a_full_disk_is_one_line_exit_2_and_keeps_the_old_reference(
    tmp_path, monkeypatch, capsys, after
):
    path = _project(tmp_path)
    spec = load_spec(path)
    record(spec)
    before = _snapshot(spec.references)
    monkeypatch.setenv("SCALE", "1")  # new outputs: a new version to write
    _fail_writes(monkeypatch, errno.ENOSPC, after=after)
    code, err, _ = _cli(["record", str(path), "--yes"], capsys)
    assert code == 2 and len(err) == 1, err
    assert str(spec.references) in err[0] and "no space left" in err[0]
    assert "needs about" in err[0] and "free" in err[0] and "unchanged" in err[0], err[0]
    monkeypatch.undo()
    assert _snapshot(spec.references) == before  # the old reference, and nothing else
    assert not _litter(spec)
    assert verify(spec).drift == [] and run_gate(spec).passed


def test_first_record_on_a_full_disk_leaves_no_version_folder(tmp_path, monkeypatch, capsys):
    path = _project(tmp_path)
    spec = load_spec(path)
    _fail_writes(monkeypatch, errno.ENOSPC, after=2)  # both outputs written, the manifest fails
    code, err, _ = _cli(["record", str(path), "--yes"], capsys)
    monkeypatch.undo()
    assert code == 2 and len(err) == 1 and "no space left" in err[0], err
    assert list(spec.references.iterdir()) == []
    code, err, _ = _cli(["verify", str(path)], capsys)
    assert code == 2 and "no reference recorded yet" in err[0]


def test_any_other_write_error_in_record_is_one_line(tmp_path, monkeypatch, capsys):
    path = _project(tmp_path)
    spec = load_spec(path)
    record(spec)
    before = _snapshot(spec.references)
    monkeypatch.setenv("SCALE", "1")
    _fail_writes(monkeypatch, errno.EIO, after=1)
    code, err, _ = _cli(["record", str(path), "--yes"], capsys)
    monkeypatch.undo()
    assert code == 2 and len(err) == 1, err
    assert "cannot record the reference" in err[0] and os.strerror(errno.EIO) in err[0]
    assert str(spec.references) in err[0]
    assert _snapshot(spec.references) == before and not _litter(spec)


# --------------------------------------------------------------------------------------------
# 2. a gate that spans two records


def test_a_gate_spanning_two_records_finishes_on_the_version_it_started_with(tmp_path, monkeypatch):
    path = _project(tmp_path, "candidate_rerecords")
    spec = load_spec(path)
    record(spec)
    started = _version(spec)
    monkeypatch.setenv("RERECORD_SPEC", str(path))
    result = run_gate(spec)
    monkeypatch.delenv("RERECORD_SPEC")
    # The two records happened during the gate: the manifest points two versions further on,
    # and the version the gate started with is gone from the folder.
    now = _version(spec)
    assert now != started and not (spec.references / started).exists()
    assert result.drift == [] and result.errors == [], (result.drift, result.errors)
    assert result.passed and result.exit_code == 0
    # The report names the version the gate compared against.
    reference = result.to_dict()["provenance"]["reference"]
    assert (
        reference["version"] == started
        and reference["digest"] != load_reference(spec).manifest["digest"]
    )
    # And the next gate runs on the new one.
    assert run_gate(load_spec(path)).to_dict()["provenance"]["reference"]["version"] == now


def test_a_gate_whose_version_is_removed_before_it_reads_it_says_run_it_again(
    tmp_path, monkeypatch
):
    """The one window left: two records between the gate's verification and its read of the
    recorded outputs. The gate says what happened, not that the reference is damaged."""
    import paritygate.gate as gate_module

    path = _project(tmp_path)
    spec = load_spec(path)
    record(spec)
    started = _version(spec)
    real = gate_module._verify

    def verify_then_two_records(*args, **kwargs):
        checked = real(*args, **kwargs)
        for scale in ("1", "2"):
            monkeypatch.setenv("SCALE", scale)
            record(load_spec(path))
        return checked

    monkeypatch.setattr(gate_module, "_verify", verify_then_two_records)
    result = run_gate(spec)
    assert result.exit_code == 3 and [d.subject for d in result.drift] == ["case a", "case b"]
    for item in result.drift:
        assert item.detail == (
            f"the reference was re-recorded while the gate read version {started} (its files "
            "are gone); run the gate again"
        )


def _version(spec) -> str:
    """The version folder the reference's manifest points into."""
    manifest = json.loads((spec.references / "manifest.json").read_text())
    (version,) = {rel.split("/")[0] for rel in manifest["files"]}
    return version


# --------------------------------------------------------------------------------------------
# 3. record with a case file missing


def test_record_with_a_case_file_missing_is_exit_2_naming_the_file_and_spec_line(tmp_path, capsys):
    path = _project(tmp_path)
    spec = load_spec(path)
    record(spec)
    before = _snapshot(spec.references)
    missing = spec.cases["b"].path
    missing.unlink()
    code, err, _ = _cli(["record", str(path), "--yes"], capsys)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "[cases.b]" in text)
    assert code == 2 and len(err) == 1, err
    assert f"{path}:{line}" in err[0] and "cases.b" in err[0] and str(missing) in err[0]
    assert "does not exist" in err[0] and "nothing was recorded" in err[0]
    assert _snapshot(spec.references) == before


# --------------------------------------------------------------------------------------------
# 4. references is a regular file


def test_references_path_that_is_a_file_is_exit_2_in_record_verify_and_gate(tmp_path, capsys):
    path = _project(tmp_path)
    spec = load_spec(path)
    spec.references.write_text("my notes\n")
    for command in ("record", "verify", "gate"):
        code, err, _ = _cli([command, str(path)], capsys)
        assert code == 2 and len(err) == 1, (command, err)
        assert str(spec.references) in err[0] and "is a file, not a folder" in err[0], err
        assert "move that file away" in err[0], err
    assert spec.references.read_text() == "my notes\n"  # the user's file is untouched
    spec.references.unlink()
    assert _cli(["record", str(path)], capsys)[0] == 0
    assert _cli(["gate", str(path)], capsys)[0] == 0


# --------------------------------------------------------------------------------------------
# 5. a user's own file inside references/


def test_a_stray_file_in_references_is_drift_naming_it_and_what_to_do(tmp_path, capsys):
    path = _project(tmp_path)
    spec = load_spec(path)
    record(spec)
    stray = spec.references / "notes.txt"
    stray.write_text("mine\n")
    code, _, out = _cli(["verify", str(path)], capsys)
    assert code == 3 and "notes.txt" in out and f"move it out of {spec.references}" in out, out
    # record is not blocked, warns about the file, and does not delete it
    code, err, _ = _cli(["record", str(path), "--yes"], capsys)
    assert code == 0 and stray.read_text() == "mine\n"
    assert any("notes.txt" in line and "move it out of" in line for line in err), err
    assert _cli(["verify", str(path)], capsys)[0] == 3  # still there: still drift
    stray.rename(tmp_path / "notes.txt")
    assert _cli(["verify", str(path)], capsys)[0] == 0
    assert _cli(["gate", str(path)], capsys)[0] == 0


# --------------------------------------------------------------------------------------------
# 6. a reference output symlinked outside the spec's folder


def test_a_reference_file_linked_outside_the_spec_folder_is_drift(tmp_path, capsys):
    path = _project(tmp_path / "project")
    spec = load_spec(path)
    record(spec)
    recorded = recorded_file(spec.references, "a")
    rel = recorded.relative_to(spec.references).as_posix()
    outside = tmp_path / "elsewhere" / "a.safetensors"
    outside.parent.mkdir()
    shutil.copy(recorded, outside)  # the same bytes: its sha256 matches the manifest
    recorded.unlink()
    recorded.symlink_to(outside)
    code, _, out = _cli(["verify", str(path)], capsys)
    assert code == 3 and rel in out and "symbolic link" in out and str(outside) in out, out
    code, _, out = _cli(["gate", str(path)], capsys)
    assert code == 3 and "symbolic link" in out, out
    # read directly, the file is refused as well
    from paritygate.errors import DriftError

    with pytest.raises(DriftError, match="symbolic link"):
        load_reference(spec).outputs("a")
    assert _cli(["record", str(path), "--yes"], capsys)[0] == 0
    assert _cli(["verify", str(path)], capsys)[0] == 0
    assert outside.is_file()  # nothing outside the project is touched


# --------------------------------------------------------------------------------------------
# 7. a port that edits its own input


def test_a_port_that_edits_its_own_input_fails_the_gate_naming_the_case_file(tmp_path, capsys):
    path = _project(tmp_path, "candidate_edits_input")
    spec = load_spec(path)
    record(spec)
    case = spec.cases["a"].path
    code, _, out = _cli(["gate", str(path)], capsys)
    assert code == 3, out
    assert "runner cand modified the input file" in out, out
    assert case.name in out
    result = json.loads((spec.reports / "result.json").read_text())
    (item,) = result["drift"]
    assert item["kind"] == "case-input" and item["subject"] == "a"
    assert str(case) in item["detail"] and "modified" in item["detail"]


def test_a_port_that_leaves_its_input_alone_passes(tmp_path, capsys):
    path = _project(tmp_path)
    spec = load_spec(path)
    record(spec)
    before = spec.cases["a"].path.read_bytes()
    code, _, out = _cli(["gate", str(path)], capsys)
    assert code == 0 and "modified" not in out, out
    assert spec.cases["a"].path.read_bytes() == before
    assert np.load(spec.cases["a"].path)["x"].shape == (3, 8)


def test_a_reference_that_edits_its_own_input_is_refused_by_record(tmp_path, capsys):
    path = _project(tmp_path, reference="reference_edits_input")
    spec = load_spec(path)
    code, err, _ = _cli(["record", str(path)], capsys)
    assert code == 2 and len(err) == 1, err
    assert "reference runner reference modified the input file" in err[0], err
    assert str(spec.cases["b"].path) in err[0] and "nothing was written" in err[0]
    assert not (spec.references / "manifest.json").exists()

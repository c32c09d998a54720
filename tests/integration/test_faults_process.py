"""Faults of the paritygate process itself, found by a fault sweep: what it reads and what it
writes.

- a FIFO (or any file that is not regular) given as a doc, spec or result is refused at once,
  never read (a read would wait forever for a writer);
- a spec whose file name is not UTF-8 gates end to end, its reports written and readable.

Every command runs as a real process: signals, exit codes and stdout's encoding are the
subject.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from spec_helpers import TINY_SPEC, make_project

pytestmark = pytest.mark.slow


def _cli(*args: str | os.PathLike[str], cwd: Path | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "paritygate", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        timeout=timeout,
    )


def _one_line(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "backslashreplace")
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# --------------------------------------------------------------------------------------------
# Files that are not regular: refused at once by the one reader (files.open_regular)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "doc.md"
    os.mkfifo(path)
    return path


def test_claims_check_refuses_a_fifo_doc_at_once_with_one_line(tmp_path, fifo):
    spec = make_project(tmp_path / "project")
    done = _cli("claims", "check", fifo, "--spec", spec, timeout=60)
    assert done.returncode == 2, done
    line = _one_line(done.stderr)
    assert str(fifo) in line and "not a regular file" in line and "doc" in line, line
    # the same doc as a regular file is read (and has no markers: a pass)
    regular = tmp_path / "regular.md"
    regular.write_text("no markers here\n")
    done = _cli("claims", "check", regular, "--spec", spec, timeout=60)
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.parametrize("command", ["claims-spec", "report", "compare"])
def test_every_path_reader_refuses_a_fifo_with_the_same_check(tmp_path, command):
    fifo = tmp_path / {"claims-spec": "parity.toml", "report": "result.json"}.get(
        command, "out.npz"
    )
    os.mkfifo(fifo)
    other = tmp_path / "b.npz"
    np.savez(other, y=np.zeros(3))
    args = {
        "claims-spec": ["claims", "check", "--spec", fifo],
        "report": ["report", fifo],
        "compare": ["compare", other, fifo],
    }[command]
    done = _cli(*args, timeout=60)
    assert done.returncode == 2, done
    line = _one_line(done.stderr)
    assert str(fifo) in line and "not a regular file (a FIFO, socket or device)" in line, line


def test_a_fifo_case_file_is_refused_when_pinned_and_never_read(tmp_path):
    from paritygate.errors import InputError
    from paritygate.files import load_case, read_text, sha256_file

    path = tmp_path / "case.npz"
    os.mkfifo(path)
    for reader in (sha256_file, load_case, read_text):
        with pytest.raises(InputError, match="not a regular file") as info:
            reader(path)
        assert info.value.where == str(path)


# --------------------------------------------------------------------------------------------
# A spec whose file name is not UTF-8


def _undecodable(tmp_path: Path, spec: str = TINY_SPEC) -> tuple[Path, str]:
    if sys.platform == "darwin":  # APFS refuses names that are not UTF-8
        pytest.fail("names that are not UTF-8 need a POSIX file system that allows them")
    name = os.fsdecode(b"spec-\xff.toml")
    make_project(tmp_path, spec, name=name)
    return tmp_path, name


def _reports(folder: Path) -> dict:
    result = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    summary = (folder / "summary.md").read_text(encoding="utf-8")
    ET.parse(folder / "junit.xml")  # well-formed XML
    (folder / "report.html").read_text(encoding="utf-8")  # strict UTF-8
    assert "spec-\\xff.toml" in summary, summary
    return result


def test_gate_on_a_spec_whose_name_is_not_utf8_writes_readable_reports(tmp_path):
    project, name = _undecodable(tmp_path)
    assert _cli("record", name, "--yes", cwd=project).returncode == 0
    assert _cli("verify", name, cwd=project).returncode == 0
    done = _cli("gate", name, cwd=project)
    assert done.returncode == 0, done.stderr.decode("utf-8", "backslashreplace")
    assert b"Traceback" not in done.stderr
    assert b"PASS" in done.stdout
    result = _reports(project / "parity-reports")
    assert result["spec"].endswith("spec-\\xff.toml") and result["exit_code"] == 0
    # the result re-renders from its file
    again = _cli("report", project / "parity-reports" / "result.json")
    assert again.returncode == 0 and b"PASS" in again.stdout, again


def test_gate_on_a_spec_whose_name_is_not_utf8_still_fails_a_violated_claim(tmp_path):
    spec = TINY_SPEC.replace("bound = 1e-5", "bound = 1e-12")
    project, name = _undecodable(tmp_path, spec)
    assert _cli("record", name, "--yes", cwd=project).returncode == 0
    done = _cli("gate", name, cwd=project)
    assert done.returncode == 1, done.stderr.decode("utf-8", "backslashreplace")
    assert b"Traceback" not in done.stderr and b"FAIL" in done.stdout
    result = _reports(project / "parity-reports")
    assert result["exit_code"] == 1 and not result["passed"]

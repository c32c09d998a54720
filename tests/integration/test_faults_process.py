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
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from spec_helpers import TINY_SPEC, make_project

import paritygate
from paritygate.spec import default_reports

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
    result = _reports(project / default_reports(Path(name)))
    assert result["spec"].endswith("spec-\\xff.toml") and result["exit_code"] == 0
    # the result re-renders from its file
    again = _cli("report", project / default_reports(Path(name)) / "result.json")
    assert again.returncode == 0 and b"PASS" in again.stdout, again


def test_gate_on_a_spec_whose_name_is_not_utf8_still_fails_a_violated_claim(tmp_path):
    spec = TINY_SPEC.replace("bound = 1e-5", "bound = 1e-12")
    project, name = _undecodable(tmp_path, spec)
    assert _cli("record", name, "--yes", cwd=project).returncode == 0
    done = _cli("gate", name, cwd=project)
    assert done.returncode == 1, done.stderr.decode("utf-8", "backslashreplace")
    assert b"Traceback" not in done.stderr and b"FAIL" in done.stdout
    result = _reports(project / default_reports(Path(name)))
    assert result["exit_code"] == 1 and not result["passed"]


# --------------------------------------------------------------------------------------------
# An aborted gate ends every process it started

HANGING_PORT = """
import os, subprocess, sys, time
folder = os.environ["PIDS"]
# a child of the port, in the port's process group, as a server or a compiler would be
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.path.join(folder, f"{os.getpid()}.pid"), "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def _sigint_default() -> None:
    """In the child before exec: SIGINT as a terminal's foreground job has it. A suite started in
    the background by a non-interactive shell inherits SIGINT ignored, and an ignored SIGINT
    stays ignored in the gate, which would then never see the Ctrl-C these tests send."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _hanging_gate(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A gate whose candidate port hangs, started as a user would; returns it once the port and
    the port's child are up, with their pids."""
    pids = tmp_path / "pids"
    pids.mkdir()
    spec = TINY_SPEC.replace(
        'callable = "tiny:candidate32"',
        'command = ["{python}", "hang.py", "{case}", "{out}"]\nformat = "npz"\n'
        f"env = {{ PIDS = {json.dumps(str(pids))} }}",
    )
    make_project(tmp_path, spec)
    (tmp_path / "hang.py").write_text(HANGING_PORT)
    assert _cli("record", "parity.toml", "--yes", cwd=tmp_path).returncode == 0
    gate = subprocess.Popen(
        [sys.executable, "-m", "paritygate", "gate", "parity.toml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_sigint_default,
    )
    deadline = time.monotonic() + 60
    while not list(pids.iterdir()):
        assert gate.poll() is None, gate.communicate()
        assert time.monotonic() < deadline, "the port never started"
        time.sleep(0.05)
    time.sleep(0.2)  # the pid file is written whole before the port sleeps
    (pid_file,) = pids.iterdir()
    started = [int(p) for p in pid_file.read_text().split()]
    assert all(_alive(p) for p in started)
    return gate, started


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_aborted_gate_ends_its_port_and_the_ports_children(tmp_path, signum):
    gate, started = _hanging_gate(tmp_path)
    gate.send_signal(signum)  # to paritygate alone, as `kill` or a job scheduler sends it
    out, err = gate.communicate(timeout=60)
    assert gate.returncode == 2, err
    assert _one_line(err) == f"paritygate: aborted ({signal.Signals(signum).name})"
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in started if _alive(p)], "a process the gate started outlived it"


def test_ctrl_c_at_any_moment_of_start_up_ends_in_one_line(tmp_path):
    """SIGINT from the first milliseconds of the command's life to the running gate. Once any
    line of paritygate runs, the answer is one line. Before that, the interpreter's own
    start-up (milliseconds on a quiet machine, far longer on a loaded one; paritygate's package
    and command-line module import nothing at module level) ends the way Python ends any
    program: killed by the signal, or Python's own KeyboardInterrupt report, in which no frame is
    paritygate's."""
    make_project(tmp_path)
    assert _cli("record", "parity.toml", "--yes", cwd=tmp_path).returncode == 0
    package = str(Path(paritygate.__file__).parent)
    outcomes = []
    delays = (0.0, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.45, 0.7)
    for delay in delays:
        gate = subprocess.Popen(
            [sys.executable, "-m", "paritygate", "gate", "parity.toml"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_sigint_default,
        )
        time.sleep(delay)
        gate.send_signal(signal.SIGINT)
        out, err = gate.communicate(timeout=60)
        text = err.decode("utf-8", "backslashreplace")
        assert package not in text, (delay, text)  # no frame of paritygate's
        if "paritygate: aborted" in text:
            # exit 2; killed by SIGINT (-2) where the interpreter itself reports the interrupt
            # it delivered, as it may on a loaded machine
            assert gate.returncode in (2, -signal.SIGINT), (delay, gate.returncode, text)
            assert _one_line(err) == "paritygate: aborted (SIGINT)", (delay, text)
            outcomes.append("aborted")
        elif gate.returncode == 0:  # the gate finished before the signal came
            assert b"PASS" in out, (delay, text)
            outcomes.append("finished")
        else:
            assert gate.returncode in (-signal.SIGINT, 1), (delay, gate.returncode, text)
            assert text == "" or text.rstrip().endswith("KeyboardInterrupt"), (delay, text)
            outcomes.append("interpreter start-up")
    # most of a gate's start-up is paritygate's own: the sweep reaches it
    assert outcomes.count("aborted") >= 3, outcomes

"""The permanent fault suite: kill -9 at every write step of ``record``, gates and verifies
running while a record switches the reference, and a catalogue of bad inputs over every file
loader and spec key. Targets: no silent pass, no traceback, no corrupted reference.

The switch of a reference is atomic on a local POSIX filesystem (``rename(2)`` of the manifest);
these tests run there."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from spec_helpers import TINY_MODEL, TINY_SPEC, make_project

from paritygate.cli import main
from paritygate.drift import verify
from paritygate.gate import run_gate
from paritygate.references import load_reference, record
from paritygate.spec import load_spec

# A reference whose outputs move by a harmless 1e-9 relative step per SCALE (so that a new
# record writes a new version that the float32 candidate still passes), and that can be slowed.
FAULT_MODEL = TINY_MODEL.replace(
    """def reference(case):
    x = case.load()["x"]
    logits = x @ W""",
    """def reference(case):
    import os
    import time

    time.sleep(float(os.environ.get("SLOW", "0")))
    x = case.load()["x"]
    logits = x @ W * (1 + 1e-9 * float(os.environ.get("SCALE", "0")))""",
)
assert FAULT_MODEL != TINY_MODEL


def _project(tmp_path: Path) -> Path:
    return make_project(tmp_path, modules={"tiny.py": FAULT_MODEL})


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _record_process(path: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "paritygate", "record", str(path), "--yes"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


STEPS = ["staging-created", "output-written", "before-switch", "after-switch"]


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_at_each_write_step_of_record_leaves_a_readable_reference(tmp_path, step):
    path = _project(tmp_path)
    spec = load_spec(path)
    record(spec)
    before = json.loads((spec.references / "manifest.json").read_text())
    process = _record_process(path, SCALE="1", PARITYGATE_RECORD_FAULT=step)
    process.communicate(timeout=120)
    assert process.returncode == -signal.SIGKILL, process.returncode
    # The reference is the old one (killed before the switch) or the new one, whole either way.
    assert verify(spec).drift == []
    after = json.loads((spec.references / "manifest.json").read_text())
    assert (after == before) == (step != "after-switch")
    reference = load_reference(spec)
    for case in spec.cases:
        assert sorted(reference.outputs(case)) == ["logits", "y"]
    assert run_gate(spec).passed
    # The next record removes what the killed one left behind.
    record(spec)
    names = sorted(p.name for p in spec.references.iterdir())
    pointed = {rel.split("/")[0] for rel in load_reference(spec).files}
    # The manifest, the version it points to, and at most the version it replaced.
    assert names[0] == "manifest.json" and pointed <= set(names) and len(names) <= 3
    assert not [n for n in names if n.startswith("v-tmp-") or n.endswith(".tmp")]
    assert not list(tmp_path.glob(".references.tmp-*")) and not list(
        tmp_path.glob(".references.old-*")
    )


def test_gates_and_verifies_during_a_record_see_one_whole_reference(tmp_path):
    path = _project(tmp_path)
    spec = load_spec(path)
    record(spec)
    verdicts: list[tuple[str, int]] = []
    problems: list = []
    for scale in ("1", "2"):
        process = _record_process(path, SCALE=scale, SLOW="0.4")
        while process.poll() is None:
            drift = verify(spec).drift
            verdicts.append(("verify", len(drift)))
            result = run_gate(load_spec(path))
            verdicts.append(("gate", result.exit_code))
            if result.exit_code:
                problems.append((result.errors, [d.detail for d in result.drift]))
        assert process.wait(timeout=120) == 0, process.stderr.read().decode()
    assert verdicts and all(code == 0 for _, code in verdicts), (verdicts, problems)
    manifest = json.loads((spec.references / "manifest.json").read_text())
    assert manifest == json.loads((spec.references / "manifest.json").read_text())
    assert verify(spec).drift == [] and run_gate(spec).passed


# --------------------------------------------------------------------------------------------
# The bad-input catalogue


def _npy_claiming(shape: tuple[int, ...], data: bytes = b"\0" * 16) -> bytes:
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def _safetensors(header: str, data: bytes = b"\0" * 4) -> bytes:
    return struct.pack("<Q", len(header)) + header.encode() + data


def _zip(members: dict[str, bytes]) -> bytes:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _pickled_npy() -> bytes:
    import io
    import pickle

    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    return buffer.getvalue() if buffer.getvalue() else pickle.dumps(1)


ST_OK = '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
FILE_CATALOGUE: dict[str, tuple[str, bytes | None]] = {
    "empty npy": ("x.npy", b""),
    "empty npz": ("x.npz", b""),
    "empty safetensors": ("x.safetensors", b""),
    "empty json": ("x.json", b""),
    "truncated npy": ("x.npy", _npy_claiming((8,), b"\0" * 8)),
    "npy header claims 10**18 elements": ("x.npy", _npy_claiming((10**12, 10**6))),
    "npz member claims 10**18 elements": ("x.npz", _zip({"a.npy": _npy_claiming((10**12, 10**6))})),
    "npz holding data.pkl": ("x.npz", _zip({"data.pkl": b"\x80\x04K\x01."})),
    "npz member not a npy": ("x.npz", _zip({"a.npy": b"garbage"})),
    "npy object array": ("x.npy", _pickled_npy()),
    "pickle renamed npy": ("x.npy", b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01."),
    "pickle renamed safetensors": ("x.safetensors", b"\x80\x04K\x01." + b"\0" * 8),
    "safetensors header longer than file": ("x.safetensors", struct.pack("<Q", 10**9) + b"{}"),
    "safetensors header not json": ("x.safetensors", _safetensors("not json at all")),
    "safetensors duplicate name": (
        "x.safetensors",
        _safetensors(ST_OK[:-1] + ',"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'),
    ),
    "safetensors bad offsets": ("x.safetensors", _safetensors(ST_OK.replace("[0,4]", "[0,400]"))),
    "safetensors unknown dtype": ("x.safetensors", _safetensors(ST_OK.replace("F32", "Q7"))),
    "json invalid": ("x.json", b'{"a": [1, 2'),
    "json duplicate key": ("x.json", b'{"a": [1], "a": [2]}'),
    "json not utf-8": ("x.json", b'{"a": "\xff\xfe"}'),
    "unknown extension": ("x.txt", b"1 2 3"),
    "directory": ("folder.npy", None),
    "missing file": ("missing.npy", b"-"),
    "fifo": ("fifo.npy", b"fifo"),
}


def _run_cli(args: list[str], capsys) -> tuple[int | None, str]:
    try:
        code = main(args)
    except BaseException as exc:  # a traceback: counted, never hidden
        return None, f"{type(exc).__name__}: {exc}"
    return code, capsys.readouterr().err


def _classify(code: int | None, err: str) -> str:
    if code is None or "Traceback" in err:
        return "traceback"
    if code == 0:
        return "silent pass"
    lines = [line for line in err.strip().splitlines() if line.strip()]
    if code == 2 and len(lines) == 1:
        return "clear error"
    return f"unclear (exit {code}, {len(lines)} lines)"


def test_bad_file_catalogue_every_loader_gives_one_clear_line(tmp_path, capsys):
    good = tmp_path / "good.npy"
    np.save(good, np.zeros(1, np.float32))
    outcome: dict[str, str] = {}
    for label, (name, data) in FILE_CATALOGUE.items():
        path = tmp_path / label.replace(" ", "_") / name
        path.parent.mkdir()
        if data is None:
            path.mkdir()
        elif data == b"fifo":
            os.mkfifo(path)
        elif data != b"-":
            path.write_bytes(data)
        for args in (["compare", str(path), str(good)], ["compare", str(good), str(path)]):
            started = time.monotonic()
            code, err = _run_cli(args, capsys)
            assert time.monotonic() - started < 30, label
            outcome[f"{label} ({'actual' if args[1] == str(path) else 'expected'})"] = _classify(
                code, err
            )
    bad = {k: v for k, v in outcome.items() if v != "clear error"}
    assert bad == {}, bad
    assert len(outcome) == 2 * len(FILE_CATALOGUE)


SPEC_CATALOGUE: dict[str, tuple[str, str]] = {
    # label: (text to replace in TINY_SPEC, replacement)
    "format_version unknown": ("format_version = 2", "format_version = 99"),
    "format_version a string": ("format_version = 2", 'format_version = "2"'),
    "outputs empty": ('outputs = ["y", "logits"]', "outputs = []"),
    "outputs a number": ('outputs = ["y", "logits"]', "outputs = 5"),
    "output covered by nothing": (
        TINY_WAIVED_LINE := 'logits = "the pre-activation of y, which the claims already gate"',
        "",
    ),
    "waiver without reason": (TINY_WAIVED_LINE, 'logits = ""'),
    "case path absolute": ('path = "cases/a.npz"', 'path = "/etc/passwd"'),
    "case path escapes": ('path = "cases/a.npz"', 'path = "../../a.npz"'),
    "case sha256 malformed": ('sha256 = "{sha:a}"', 'sha256 = "abc"'),
    "case unknown key": ('sha256 = "{sha:a}"', 'sha256 = "{sha:a}"\nweight = 2'),
    "runner callable malformed": ('callable = "tiny:candidate32"', 'callable = "tiny.candidate32"'),
    "runner role unknown": ('role = "candidate"', 'role = "boss"'),
    "runner timeout negative": (
        'callable = "tiny:candidate32"',
        'callable = "tiny:candidate32"\ntimeout = -1',
    ),
    "runner env not a table": (
        'callable = "tiny:candidate32"',
        'callable = "tiny:candidate32"\nenv = 3',
    ),
    "claim metric unknown": ('metric = "max_abs"', 'metric = "max_abz"'),
    "claim bound a string": ("bound = 1e-5", 'bound = "1e-5"'),
    "claim bound negative": ("bound = 1e-5", "bound = -1"),
    "claim bound nan": ("bound = 1e-5", "bound = nan"),
    "claim bound inf": ("bound = 1e-5", "bound = inf"),
    "claim oracle unknown": ('oracle = "equivalence"', 'oracle = "maybe"'),
    "claim mode unknown": ('oracle = "equivalence"', 'oracle = "equivalence"\nmode = "sometimes"'),
    "claim status unknown": ('status = "provisional"', 'status = "final"'),
    "claim outputs match nothing": ('outputs = ["y"]\nmetric', 'outputs = ["z"]\nmetric'),
    "claim key misspelt": ("bound = 1e-5", "bund = 1e-5"),
    "claim scope disagrees": ("bound = 1e-5", 'bound = 1e-5\nscope = "dataset"'),
    "claim hardware unknown": ("bound = 1e-5", 'bound = 1e-5\nhardware = "m9"'),
    "claim candidate unknown": ("bound = 1e-5", 'bound = 1e-5\ncandidates = ["nobody"]'),
    "claim params unknown": ("bound = 1e-5", "bound = 1e-5\nparams = { bins = 3 }"),
    "claim published a number": ("bound = 1e-5", "bound = 1e-5\npublished = 5"),
    "activity self-reported": (
        "bound = 1e-5",
        'bound = 1e-5\nactivity = { counter = "s", min = 1, max = 2 }',
    ),
    "activity calls malformed": (
        "bound = 1e-5",
        'bound = 1e-5\nactivity = { calls = "x", min = 1, max = 2 }',
    ),
    "activity band empty": (
        "bound = 1e-5",
        'bound = 1e-5\nactivity = { calls = "tiny:body", min = 3, max = 2 }',
    ),
    "exact with a bound": ('metric = "max_abs"\nbound = 1e-5', 'metric = "exact"\nbound = 1'),
    "malformed toml": ("bound = 1e-5", "bound = = 1e-5"),
    "unknown top-level key": ("format_version = 2", "format_version = 2\ncolour = 1"),
}


def test_bad_spec_catalogue_every_key_gives_one_clear_line_and_never_touches_the_reference(
    tmp_path, capsys
):
    path = _project(tmp_path)
    good_text = path.read_text()
    spec = load_spec(path)
    record(spec)
    before = _snapshot(spec.references)
    outcome: dict[str, str] = {}
    for label, (old, new) in SPEC_CATALOGUE.items():
        text = make_project.__globals__["textwrap"].dedent(TINY_SPEC)
        assert old in text, label
        for case in ("a", "b"):
            text = text.replace(
                "{sha:" + case + "}",
                hashlib.sha256((tmp_path / "cases" / f"{case}.npz").read_bytes()).hexdigest(),
            )
        old = old.replace(
            "{sha:a}", hashlib.sha256((tmp_path / "cases" / "a.npz").read_bytes()).hexdigest()
        )
        new = new.replace(
            "{sha:a}", hashlib.sha256((tmp_path / "cases" / "a.npz").read_bytes()).hexdigest()
        )
        path.write_text(text.replace(old, new, 1))
        for command in ("gate", "record", "verify"):
            code, err = _run_cli([command, str(path)], capsys)
            outcome[f"{label} ({command})"] = _classify(code, err)
        assert _snapshot(spec.references) == before, f"reference changed by {label}"
    path.write_text(good_text)
    bad = {k: v for k, v in outcome.items() if v != "clear error"}
    assert bad == {}, bad
    assert main(["gate", str(path)]) == 0  # the good spec still passes

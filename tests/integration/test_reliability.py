"""Reliability defects found by outside testing: each fails before its fix, and the good case
next to it still passes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import numpy as np
import pytest
from spec_helpers import TINY_MODEL, TINY_SPEC, make_project, recorded_file

from paritygate.cli import main
from paritygate.gate import run_gate
from paritygate.references import record
from paritygate.runners import RunFailure, make_runner
from paritygate.spec import load_spec

# --------------------------------------------------------------------------------------------
# Spec validation


@pytest.mark.parametrize(
    "metric,bound,message",
    [
        ("max_abs", "-1", "cannot be negative"),
        ("ulp", "1.5", "whole number"),
        ("cosine", "1.5", "cosine lies in [-1, 1]"),
    ],
)
def test_impossible_bounds_are_spec_errors_exit_2(tmp_path, capsys, metric, bound, message):
    text = TINY_SPEC.replace(
        'metric = "max_abs"\nbound = 1e-5', f'metric = "{metric}"\nbound = {bound}'
    )
    path = make_project(tmp_path, text)
    assert main(["gate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "claims.y-close.bound" in err and message in err
    # Good case: the spec's own bound loads.
    assert load_spec(make_project(tmp_path / "good")).claims["y-close"].bound == 1e-5


def test_a_fifo_case_input_is_refused_without_blocking(tmp_path):
    path = make_project(tmp_path)
    fifo = tmp_path / "cases" / "a.npz"
    fifo.unlink()
    os.mkfifo(fifo)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "paritygate", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "cases.a.path" in done.stderr and "not a regular file (a FIFO)" in done.stderr
    assert "Traceback" not in done.stderr and time.monotonic() - started < 120


# --------------------------------------------------------------------------------------------
# Subprocess runners whose children escape

ESCAPING = """
import subprocess
import sys

import numpy as np

case, out = sys.argv[1], sys.argv[2]
x = np.load(case, allow_pickle=False)["x"]
W = np.random.default_rng(0).standard_normal((8, 4))
# A child in a session of its own that keeps the inherited stderr open for a minute.
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
if "hang" in sys.argv[3:]:
    import time
    time.sleep(60)
np.savez(out, y=np.tanh(x @ W), logits=x @ W)
"""


# (mode, the runner's timeout): the command that exits gets a timeout that starting Python,
# numpy and a child cannot reach on a loaded machine (4 s could), yet below the child's 60 s, so
# a runner that waited for the child still fails; the hanging one a short timeout, to stay short
@pytest.mark.parametrize(("mode", "timeout"), [("exits", 30), ("hang", 4)])
def test_timeout_holds_when_the_runner_leaves_a_child_in_its_own_session(tmp_path, mode, timeout):
    spec_text = TINY_SPEC + (
        '\n[runners.cli]\nrole = "candidate"\n'
        f'command = ["{{python}}", "escape.py", "{{case}}", "{{out}}", "{mode}"]\n'
        f'format = "npz"\ntimeout = {timeout}\n'
    )
    spec = load_spec(
        make_project(tmp_path, spec_text, modules={"tiny.py": TINY_MODEL, "escape.py": ESCAPING})
    )
    started = time.monotonic()
    with make_runner(spec.runners["cli"], spec) as runner:
        if mode == "exits":
            outputs = runner.run(spec.cases["a"]).outputs  # the good case: its result
            assert sorted(outputs) == ["logits", "y"]
        else:
            with pytest.raises(RunFailure) as info:
                runner.run(spec.cases["a"])
            assert info.value.kind == "timeout"
    assert time.monotonic() - started < timeout + 10  # not the child's 60 s


# --------------------------------------------------------------------------------------------
# record: the atomic switch, leftovers, permissions, an all-NaN reference


def test_record_switches_by_replacing_the_manifest_and_cleans_leftovers(tmp_path):
    spec = load_spec(make_project(tmp_path))
    record(spec)
    first = json.loads((spec.references / "manifest.json").read_text())
    # What killed records of the former swap and of this one left behind.
    (tmp_path / ".references.tmp-x1").mkdir()
    (tmp_path / ".references.old-x2").mkdir()
    (spec.references / "v-tmp-dead").mkdir()
    (spec.references / "v-tmp-dead" / "junk").write_text("half")
    (spec.references / ".manifest.json.abc.tmp").write_text("{")
    from paritygate.drift import verify

    assert verify(spec).drift == []  # leftovers outside the pointed version are not drift
    record(spec)
    second = json.loads((spec.references / "manifest.json").read_text())
    assert second["files"] == first["files"]  # identical outputs: identical version and bytes
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".references")) == [
        ".references.lock"
    ]
    assert sorted(p.name for p in spec.references.iterdir()) == [
        "manifest.json",
        next(iter(second["files"])).split("/")[0],
    ]


def test_reference_files_have_the_manifests_permissions(tmp_path):
    spec = load_spec(make_project(tmp_path))
    old = os.umask(0o022)
    try:
        record(spec)
    finally:
        os.umask(old)
    manifest_mode = stat.S_IMODE((spec.references / "manifest.json").stat().st_mode)
    output_mode = stat.S_IMODE(recorded_file(spec.references, "a").stat().st_mode)
    assert manifest_mode == output_mode == 0o644


ALL_NAN = (
    TINY_MODEL
    + """

def reference_nan(case):
    out = reference(case)
    out["y"] = np.full_like(out["y"], np.nan)
    return out
"""
)


def test_a_reference_that_is_nan_everywhere_is_warned_at_record(tmp_path, capsys):
    text = TINY_SPEC.replace('callable = "tiny:reference"', 'callable = "tiny:reference_nan"')
    path = make_project(tmp_path, text, modules={"tiny.py": ALL_NAN})
    assert main(["record", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: case a: reference output 'y' is NaN everywhere (12 element(s))" in err
    good = make_project(tmp_path / "good")
    assert main(["record", str(good)]) == 0
    assert "warning" not in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Cross-adapter evidence for NaN

ADAPTER_NAN = (
    TINY_MODEL
    + """

def candidate_nan(case):
    out = reference(case)
    out["y"] = out["y"].copy()
    out["y"][0, 0] = np.nan
    return out
"""
)


def test_cross_adapter_nan_on_one_side_says_nan_not_observed_0(tmp_path):
    spec_text = TINY_SPEC.replace("tiny:candidate32", "tiny:reference") + (
        '\n[runners.cand-api]\nrole = "adapter"\nadapter_of = "cand"\n'
        'callable = "tiny:candidate_nan"\n'
    )
    spec = load_spec(make_project(tmp_path, spec_text, modules={"tiny.py": ADAPTER_NAN}))
    record(spec)
    result = run_gate(spec)
    failing = [v for v in result.verdicts if not v.passed]
    assert [v.claim_id for v in failing] == ["cross-adapter:cand"] * 2
    text = failing[0].failures[0].describe()
    assert "NaN on one side only at 1 of 12 position(s) (cand-api 1 NaN, cand 0 NaN)" in text
    assert "observed 0" not in text and "exceeded by 0" not in text
    # Good case: an adapter that agrees passes.
    good_text = spec_text.replace("tiny:candidate_nan", "tiny:reference")
    good = load_spec(make_project(tmp_path / "good", good_text, modules={"tiny.py": ADAPTER_NAN}))
    record(good)
    assert run_gate(good).passed


# --------------------------------------------------------------------------------------------
# File loaders: sizes checked before allocating, duplicate names, FIFOs


def _npy_claiming(shape: tuple[int, ...]) -> bytes:
    import struct

    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * 16


def test_npy_and_npz_headers_claiming_more_than_the_file_holds_exit_2(tmp_path, capsys):
    import zipfile

    good = tmp_path / "good.npy"
    np.save(good, np.zeros(4, np.float32))
    huge = tmp_path / "huge.npy"
    huge.write_bytes(_npy_claiming((10**12, 10**6)))
    archive = tmp_path / "huge.npz"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("a.npy", _npy_claiming((10**12, 10**6)))
    for path, where in ((huge, "huge.npy"), (archive, "huge.npz[a]")):
        assert main(["compare", str(path), str(good)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and where in err
        assert "header claims shape (1000000000000, 1000000)" in err and "holds 16 bytes" in err
    # Good case: a header that matches its data (4 float32 = 16 bytes) loads and compares.
    fits = tmp_path / "fits.npy"
    fits.write_bytes(_npy_claiming((4,)))
    assert main(["compare", str(fits), str(good)]) == 0


def test_safetensors_with_a_duplicate_tensor_name_is_refused(tmp_path, capsys):
    import struct

    header = (
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        '"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    )
    dup = tmp_path / "dup.safetensors"
    dup.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 4)
    from safetensors.numpy import save_file

    good = tmp_path / "good.safetensors"
    save_file({"a": np.zeros(1, np.float32)}, str(good))
    assert main(["compare", str(dup), str(good)]) == 2
    assert "tensor 'a' appears twice in the header" in capsys.readouterr().err
    assert main(["compare", str(good), str(good)]) == 0


def test_a_fifo_output_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "out.npy"
    os.mkfifo(fifo)
    np.save(tmp_path / "good.npy", np.zeros(3))
    done = subprocess.run(
        [sys.executable, "-m", "paritygate", "compare", str(fifo), str(tmp_path / "good.npy")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "is not a regular file" in done.stderr
    assert "Traceback" not in done.stderr

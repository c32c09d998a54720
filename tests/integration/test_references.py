"""Recorded references: safetensors + manifest, provenance, atomic writes, diffs, format version."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from spec_helpers import TINY_MODEL, TINY_SPEC, TINY_WAIVED, make_project, recorded_file

from paritygate.errors import DriftError, UserError
from paritygate.files import sha256_file
from paritygate.references import (
    FORMAT_VERSION,
    RecordError,
    _lock,
    load_reference,
    manifest_digest,
    record,
)
from paritygate.spec import load_spec


@pytest.fixture()
def tiny(tmp_path):
    return load_spec(make_project(tmp_path))


def test_record_writes_safetensors_manifest_and_provenance(tiny):
    result = record(tiny)
    assert result.written and not result.replaced and result.diff == []
    folder = tiny.references
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format_version"] == FORMAT_VERSION and manifest["digest"] == manifest_digest(
        manifest
    )
    for rel, digest in manifest["files"].items():
        assert rel.endswith(".safetensors") and sha256_file(folder / rel) == digest
    assert manifest["cases"]["a"]["input_sha256"] == tiny.cases["a"].sha256
    assert manifest["cases"]["a"]["outputs"]["y"] == {"dtype": "float64", "shape": [3, 4]}
    prov = manifest["provenance"]
    for key in ("date", "python", "os", "cpu", "gpu", "packages", "threads", "git", "runner"):
        assert key in prov
    assert prov["packages"]["numpy"] == np.__version__
    assert prov["runner"]["name"] == "reference" and prov["runner"]["device"] == "cpu"
    reference = load_reference(tiny)
    x = np.load(tiny.cases["b"].path)["x"]
    w = np.random.default_rng(0).standard_normal((8, 4))
    np.testing.assert_array_equal(reference.outputs("b")["logits"], x @ w)
    # no pickle: the file is a safetensors header (little-endian length + JSON) and raw data
    raw = recorded_file(folder, "a").read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    assert json.loads(raw[8 : 8 + header_len])["logits"]["dtype"] == "F64"


def test_record_does_not_import_frameworks(tiny):
    import subprocess
    import sys

    code = (
        "import sys; from paritygate.spec import load_spec; from paritygate.references import "
        "record;"
        f"record(load_spec({str(tiny.path)!r}));"
        "print(sorted(m for m in ('torch','mlx','jax','onnxruntime','tensorflow') if m in "
        "sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_rerecord_shows_a_diff_before_overwriting(tmp_path):
    path = make_project(tmp_path)
    record(load_spec(path))
    same = record(load_spec(path))
    assert same.replaced and same.diff == []
    (tmp_path / "tiny.py").write_text(
        TINY_MODEL.replace('"logits": logits}', '"logits": logits + 0.25}', 1)
    )
    preview = record(load_spec(path), dry_run=True)
    assert not preview.written
    assert any(
        "case a: output logits: 12 of 12 elements changed" in line and "0.25" in line
        for line in preview.diff
    )
    # the dry run changed nothing on disk
    assert load_reference(load_spec(path)).manifest == same.manifest
    done = record(load_spec(path))
    assert done.written and done.diff == preview.diff


def test_failed_record_leaves_the_old_reference_untouched(tmp_path):
    path = make_project(tmp_path)
    spec = load_spec(path)
    record(spec)
    before = {p.name: p.read_bytes() for p in spec.references.rglob("*") if p.is_file()}
    crash_on_b = (
        TINY_MODEL
        + """

_reference = reference


def reference(case):
    if case.name == "b":
        raise MemoryError("out of memory in layer 2")
    return _reference(case)
"""
    )
    (tmp_path / "tiny.py").write_text(crash_on_b)
    with pytest.raises(RecordError, match="out of memory in layer 2"):
        record(load_spec(path))
    after = {p.name: p.read_bytes() for p in spec.references.rglob("*") if p.is_file()}
    assert after == before
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no half-written leftovers


def test_concurrent_record_is_refused(tiny):
    record(tiny)
    before = (tiny.references / "manifest.json").read_bytes()
    with _lock(tiny.references):
        with pytest.raises(UserError, match="another record"):
            record(tiny)
    assert (tiny.references / "manifest.json").read_bytes() == before


def test_concurrent_records_never_mix(tmp_path):
    spec = load_spec(make_project(tmp_path))
    errors = []

    def run():
        try:
            record(spec)
        except UserError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reference = load_reference(spec)  # whatever won, the reference is whole and consistent
    for rel, digest in reference.files.items():
        assert sha256_file(spec.references / rel) == digest
    assert all("another record" in str(e) for e in errors)


def test_record_refuses_a_case_whose_input_changed(tmp_path):
    path = make_project(tmp_path)
    spec = load_spec(path)
    np.savez(spec.cases["a"].path, x=np.zeros((3, 8)))
    with pytest.raises(DriftError, match="case a: input sha256"):
        record(spec)
    assert not spec.references.exists()


def test_record_refuses_undeclared_outputs(tmp_path):
    spec = load_spec(
        make_project(
            tmp_path,
            TINY_SPEC.replace('outputs = ["y", "logits"]', 'outputs = ["y"]').replace(
                TINY_WAIVED, ""
            ),
        )
    )
    with pytest.raises(RecordError, match="not declared.*logits"):
        record(spec)


def test_other_format_version_is_tainted(tiny):
    record(tiny)
    manifest_path = tiny.references / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["format_version"] = 0
    manifest["digest"] = manifest_digest(manifest)
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(DriftError, match="tainted"):
        load_reference(tiny)


def test_hand_edited_manifest_is_detected(tiny):
    record(tiny)
    manifest_path = tiny.references / "manifest.json"
    text = manifest_path.read_text()
    manifest_path.write_text(text.replace('"runner": "reference"', '"runner": "reference-v2"', 1))
    with pytest.raises(DriftError, match="edited by hand"):
        load_reference(tiny)


def test_truncated_safetensors_is_a_drift_error(tiny):
    record(tiny)
    path = recorded_file(tiny.references, "a")
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(DriftError, match="damaged"):
        load_reference(tiny).outputs("a")


def test_missing_reference_says_how_to_record(tiny):
    with pytest.raises(DriftError) as info:
        load_reference(tiny)
    assert (
        "no reference recorded" in info.value.one_line()
        and "paritygate record" in info.value.one_line()
    )


def test_record_command_prints_the_diff_before_replacing(tmp_path, capsys):
    from paritygate.cli import main

    path = make_project(tmp_path)
    assert main(["record", str(path)]) == 0
    assert "recorded 2 cases of runner reference" in capsys.readouterr().out
    (tmp_path / "tiny.py").write_text(
        TINY_MODEL.replace('"logits": logits}', '"logits": logits * 2}', 1)
    )
    assert main(["record", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "difference against the previous reference" in out and "case b: output logits" in out
    assert "nothing written" in out
    assert main(["record", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.index("difference against the previous reference") < out.index("re-recorded 2 cases")


def test_recording_identical_outputs_twice_gives_identical_bytes(tmp_path):
    """References are fingerprinted by sha256: the same outputs must give the same files."""
    import json as _json

    from spec_helpers import make_project

    from paritygate.references import record
    from paritygate.spec import load_spec

    spec_path = make_project(tmp_path)
    first = record(load_spec(spec_path))
    hashes = _json.loads((first.folder / "manifest.json").read_text())["files"]
    for _ in range(3):
        again = record(load_spec(spec_path), before_replace=lambda diff: True)
        assert _json.loads((again.folder / "manifest.json").read_text())["files"] == hashes


def test_provenance_records_the_thread_pools_of_loaded_runtimes(tmp_path, monkeypatch):
    """Thread counts per runtime: the environment's variables, numba's and the native pools
    (numpy's BLAS) when loaded — and nothing for a runtime that is not loaded."""
    import sys

    import numba  # noqa: F401  (loaded, so its thread count is part of the provenance)
    from threadpoolctl import threadpool_info

    from paritygate.provenance import capture

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    threads = capture(root=tmp_path)["threads"]
    assert threads["OMP_NUM_THREADS"] == "3" and threads["numba"] == numba.get_num_threads()
    assert {p["api"] for p in threads["native_pools"]} == {
        p["internal_api"] for p in threadpool_info()
    }
    assert all(isinstance(p["threads"], int) and p["threads"] >= 1 for p in threads["native_pools"])
    monkeypatch.delitem(sys.modules, "numba")
    assert "numba" not in capture(root=tmp_path)["threads"]


def test_provenance_records_the_git_revision_and_dirty_flag_of_the_project(tmp_path):
    import subprocess

    from paritygate.drift import verify

    path = make_project(tmp_path)
    git = [
        "git",
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.org",
        "-c",
        "commit.gpgsign=false",
    ]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "project"], cwd=tmp_path, check=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.strip()
    spec = load_spec(path)
    record(spec)
    recorded = json.loads((spec.references / "manifest.json").read_text())["provenance"]["git"]
    assert recorded["revision"] == head and recorded["dirty"] is False
    assert verify(spec).info == []
    (tmp_path / "tiny.py").write_text((tmp_path / "tiny.py").read_text() + "\n# edited\n")
    checked = verify(spec)
    assert not checked.drift  # unpinned: information, not drift
    assert checked.info == [f"git: recorded {head}, now {head} (dirty) (not pinned)"]


def test_recorded_outputs_of_a_case_by_name_case_or_input_file(tiny):
    from paritygate import recorded_outputs

    record(tiny)
    case = tiny.cases["b"]
    expected = load_reference(tiny).outputs("b")
    for key in ("b", case, case.path):
        got = recorded_outputs(tiny.path, key)
        assert set(got) == set(expected)
        for name in expected:
            np.testing.assert_array_equal(got[name], expected[name])


def test_recorded_outputs_refuse_a_shifted_input_and_an_unknown_case(tiny, tmp_path):
    from paritygate import InputError, recorded_outputs

    record(tiny)
    case = tiny.cases["b"]
    with pytest.raises(InputError, match="no case 'nope'"):
        recorded_outputs(tiny, "nope")
    stranger = tmp_path / "stranger.npz"
    np.savez(stranger, x=np.zeros(3))
    with pytest.raises(InputError, match="no case of the spec is pinned to this file"):
        recorded_outputs(tiny, stranger)
    # The case file changed after recording: drift, named, never the stale outputs.
    np.savez(case.path, x=np.ones((3, 8)))
    with pytest.raises(DriftError, match="case b: input differs from its pin") as caught:
        recorded_outputs(tiny, "b")
    assert "paritygate record" in caught.value.hint
    # Re-pinned by hand without re-recording: the reference was recorded from another input.
    from dataclasses import replace

    repinned = replace(
        tiny, cases={**tiny.cases, "b": replace(case, sha256=sha256_file(case.path))}
    )
    with pytest.raises(DriftError, match="case b: the reference was recorded from another input"):
        recorded_outputs(repinned, "b")

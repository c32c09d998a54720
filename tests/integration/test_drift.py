"""verify: the drift oracle. Exit 3 with the list of what shifted; unpinned differences are info."""

from __future__ import annotations

import json

import numpy as np
import pytest
from spec_helpers import TINY_SPEC, make_project, recorded_file

from paritygate.cli import main
from paritygate.drift import verify
from paritygate.references import manifest_digest, record
from paritygate.spec import load_spec


@pytest.fixture()
def recorded(tmp_path):
    path = make_project(tmp_path)
    record(load_spec(path))
    return path


def _edit_manifest(spec, change):
    path = spec.references / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    manifest["digest"] = manifest_digest(
        manifest
    )  # a consistent manifest, as another machine writes it
    path.write_text(json.dumps(manifest))


def test_clean_reference_has_no_drift(recorded, capsys):
    result = verify(load_spec(recorded))
    assert result.passed and result.drift == [] and result.exit_code == 0
    assert main(["verify", str(recorded)]) == 0
    assert "no drift" in capsys.readouterr().out


def test_tampered_reference_file_is_drift_exit_3(recorded, capsys):
    spec = load_spec(recorded)
    path = recorded_file(spec.references, "a")
    rel = path.relative_to(spec.references).as_posix()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # one bit of one stored number
    path.write_bytes(bytes(data))
    result = verify(spec)
    assert [(d.kind, d.subject) for d in result.drift] == [("reference-file", rel)]
    assert main(["verify", str(recorded)]) == 3
    out = capsys.readouterr().out
    assert "DRIFT" in out and rel in out and "does not say the candidate is wrong" in out
    # the gate stops at drift: exit 3, not 1, and no claim is judged
    assert main(["gate", str(recorded)]) == 3
    assert "not run: drift" in capsys.readouterr().out


def test_truncated_safetensors_gives_exit_3(recorded):
    spec = load_spec(recorded)
    path = recorded_file(spec.references, "b")
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    assert main(["gate", str(recorded)]) == 3
    assert main(["verify", str(recorded)]) == 3


def test_hand_edited_manifest_gives_exit_3(recorded, capsys):
    path = load_spec(recorded).references / "manifest.json"
    path.write_text(path.read_text().replace('"seconds": ', '"seconds": 1', 1))
    assert main(["verify", str(recorded)]) == 3
    assert "edited by hand" in capsys.readouterr().out


def test_unlisted_file_in_the_reference_is_drift(recorded):
    spec = load_spec(recorded)
    (recorded_file(spec.references, "a").parent / "c.safetensors").write_bytes(b"stray")
    (item,) = verify(spec).drift
    assert item.detail.startswith("file is not in the manifest")
    assert f"move it out of {spec.references}" in item.detail


def test_changed_case_input_is_drift(recorded):
    spec = load_spec(recorded)
    np.savez(spec.cases["b"].path, x=np.ones((3, 8)))
    items = verify(spec).drift
    assert [(d.kind, d.subject, d.expected) for d in items] == [
        ("case-input", "b", spec.cases["b"].sha256)
    ]


def test_reference_pins_are_checked_against_what_was_recorded(tmp_path):
    spec_text = (
        TINY_SPEC + '\n[runners.reference.pins]\nmodel = "tiny"\npreprocess = { scale = 1.0 }\n'
    )
    path = make_project(tmp_path, spec_text)
    record(load_spec(path))
    assert verify(load_spec(path)).passed
    path.write_text(path.read_text().replace("scale = 1.0", "scale = 0.5"))
    items = verify(load_spec(path)).drift
    assert [(d.kind, d.subject, d.expected, d.observed) for d in items] == [
        ("pin", "runner reference: preprocess.scale", "0.5", "1.0")
    ]


def test_stored_reference_framework_need_not_be_installed(tmp_path):
    """A reference recorded elsewhere with a framework absent here: its pins are checked against
    its recorded provenance, not against this environment."""
    path = make_project(tmp_path)
    spec = load_spec(path)
    record(spec)
    pins = {"packages": {"coremltools": "8.1"}}

    def recorded_on_a_mac(manifest):
        manifest["pins"]["runner"] = pins
        manifest["provenance"]["packages"]["coremltools"] = "8.1"

    _edit_manifest(spec, recorded_on_a_mac)
    path.write_text(path.read_text() + '\n[runners.reference.pins.packages]\ncoremltools = "8.1"\n')
    assert verify(load_spec(path)).drift == []
    path.write_text(path.read_text().replace('coremltools = "8.1"', 'coremltools = "8.2"'))
    subjects = [d.subject for d in verify(load_spec(path)).drift]
    assert "runner reference: packages.coremltools" in subjects
    assert "runner reference: package coremltools (recorded)" in subjects


def test_candidate_pins_are_checked_against_this_environment(tmp_path):
    path = make_project(tmp_path, TINY_SPEC + '\n[runners.cand.pins.packages]\nnumpy = "==1.0.0"\n')
    record(load_spec(path))
    items = verify(load_spec(path)).drift
    assert [(d.kind, d.subject, d.expected, d.observed) for d in items] == [
        ("environment", "runner cand: package numpy", "==1.0.0", np.__version__)
    ]
    assert main(["gate", str(path)]) == 3


def test_candidate_file_pin(tmp_path):
    (tmp_path / "weights.bin").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "weights.bin").write_bytes(b"v1")
    import hashlib

    digest = hashlib.sha256(b"v1").hexdigest()
    path = make_project(
        tmp_path, TINY_SPEC + f'\n[runners.cand.pins.files]\n"weights.bin" = "{digest}"\n'
    )
    record(load_spec(path))
    assert verify(load_spec(path)).passed
    (tmp_path / "weights.bin").write_bytes(b"v2")
    assert [d.subject for d in verify(load_spec(path)).drift] == ["runner cand: file weights.bin"]


def test_unpinned_provenance_differences_are_information_not_drift(recorded):
    spec = load_spec(recorded)

    def older_numpy(manifest):
        manifest["provenance"]["packages"]["numpy"] = "1.26.0"
        manifest["provenance"]["cpu"] = "Apple M2 Max"
        manifest["provenance"]["cpu_info"] = {"vendor": "Apple", "model": "Apple M2 Max"}

    _edit_manifest(spec, older_numpy)
    result = verify(spec)
    assert result.passed
    assert any(
        "package numpy: recorded 1.26.0" in line and "not pinned" in line for line in result.info
    )
    assert any(line.startswith("cpu: recorded on Apple M2 Max") for line in result.info)


def test_missing_reference_is_an_input_error_with_the_way_out(tmp_path, capsys):
    """Never recorded is not drift (nothing pinned shifted): exit 2 naming the command."""
    path = make_project(tmp_path)
    assert main(["verify", str(path)]) == 2
    assert "no reference recorded yet" in capsys.readouterr().err
    # the library's verify still lists it, for callers that want every finding
    assert [d.kind for d in verify(load_spec(path)).drift] == ["reference-missing"]


def test_free_form_pins_of_the_runners_that_ran_travel_with_the_gate_result(tmp_path):
    from paritygate.gate import run_gate

    path = make_project(
        tmp_path,
        TINY_SPEC
        + '\n[runners.cand.pins]\nmodel = "tiny-32"\npreprocess = { dtype = "float32" }\n',
    )
    record(load_spec(path))
    result = run_gate(load_spec(path))
    assert result.passed
    assert result.provenance["runner_pins"] == {
        "cand": {"model": "tiny-32", "preprocess": {"dtype": "float32"}}
    }

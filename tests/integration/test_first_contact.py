"""Errors a new user meets first: one line, exit 2, naming what to type next."""

from __future__ import annotations

import hashlib

import pytest
from spec_helpers import TINY_SPEC, make_project

from paritygate.cli import main
from paritygate.references import record
from paritygate.spec import load_spec


def _err(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("command", ["gate", "verify"])
def test_a_spec_never_recorded_is_an_input_error_naming_record(tmp_path, capsys, command):
    path = make_project(tmp_path)
    assert main([command, str(path)]) == 2
    err = _err(capsys)
    assert err.startswith("paritygate: error:") and f"run `paritygate record {path}` first" in err
    assert "DRIFT" not in capsys.readouterr().out
    # once recorded, the same command passes
    record(load_spec(path))
    assert main([command, str(path)]) == 0


def test_a_case_file_that_never_existed_is_an_input_error(tmp_path, capsys):
    path = make_project(tmp_path)
    record(load_spec(path))
    text = path.read_text() + '\n[cases.c]\npath = "cases/c.npz"\nsha256 = "' + "0" * 64 + '"\n'
    path.write_text(text)
    assert main(["gate", str(path)]) == 2
    err = _err(capsys)
    assert "cases.c: input file" in err and "c.npz does not exist" in err
    assert f"`paritygate record {path}`" in err


def test_a_pinned_file_that_disappears_after_recording_stays_drift(tmp_path, capsys):
    path = make_project(tmp_path)
    record(load_spec(path))
    (tmp_path / "cases" / "b.npz").unlink()
    assert main(["gate", str(path)]) == 3
    out = " ".join(capsys.readouterr().out.split())
    assert "DRIFT" in out and "input file" in out and "b.npz is missing" in out


def test_a_missing_sha256_prints_the_hash_to_pin(tmp_path, capsys):
    path = make_project(tmp_path, TINY_SPEC.replace('sha256 = "{sha:b}"\n', ""))
    assert main(["gate", str(path)]) == 2
    err = _err(capsys)
    digest = hashlib.sha256((tmp_path / "cases" / "b.npz").read_bytes()).hexdigest()
    assert (
        "cases.b.sha256: required key is missing; pin the file as it is now with sha256 = "
        f'"{digest}"' in err
    )
    # the printed pin is the right one: pasted in, the spec loads
    path.write_text(
        path.read_text().replace(
            'path = "cases/b.npz"', f'path = "cases/b.npz"\nsha256 = "{digest}"'
        )
    )
    assert load_spec(path).cases["b"].sha256 == digest


def test_did_you_mean_for_keys_claims_and_cases(tmp_path, capsys):
    path = make_project(tmp_path, TINY_SPEC.replace('metric = "max_abs"', 'metrc = "max_abs"'))
    assert main(["gate", str(path)]) == 2
    assert "claims.y-close.metrc: unknown key (did you mean 'metric'?)" in _err(capsys)
    path = make_project(tmp_path / "ok")
    record(load_spec(path))
    assert main(["gate", str(path), "--claim", "y-clos"]) == 2
    assert "no claim 'y-clos' (did you mean 'y-close'?)" in _err(capsys)
    assert main(["gate", str(path), "--case", "bb"]) == 2
    assert "no case 'bb' (did you mean 'b'?)" in _err(capsys)
    # nothing close: no guess
    assert main(["gate", str(path), "--claim", "throughput"]) == 2
    assert "did you mean" not in _err(capsys)


def test_cli_hints_name_cli_options_not_python_arguments(tmp_path, capsys):
    path = make_project(tmp_path)
    record(load_spec(path))
    assert main(["calibrate", str(path), "--claim", "y-close"]) == 2
    err = _err(capsys)
    assert "--min-cases" in err and "min_cases=" not in err


def test_a_claim_gated_in_another_mode_than_its_basis_warns(tmp_path, capsys):
    basis = '\n[claims.y-close.basis]\nmode = "{}"\nn = 20\n'
    path = make_project(tmp_path, TINY_SPEC + basis.format("paired"))
    record(load_spec(path))
    assert main(["gate", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "warning: claims.y-close: gated in stored mode, but its bound was calibrated in paired "
        "mode (basis.mode)" in out
    )
    path.write_text(path.read_text().replace('mode = "paired"', 'mode = "stored"'))
    assert main(["gate", str(path)]) == 0
    assert "warning" not in capsys.readouterr().out

"""File pins inside installed packages: a model shipped in a wheel is pinned by its
package-relative path (package:<import name>/<path>) and checked like any file pin."""

from __future__ import annotations

import hashlib
from pathlib import Path

import click
import pytest
from spec_helpers import TINY_SPEC, make_project

from paritygate.drift import verify
from paritygate.errors import SpecError
from paritygate.references import record
from paritygate.spec import load_spec

CLICK_FILE = Path(click.__file__).parent / "core.py"


def _spec(tmp_path, key: str, digest: str):
    text = TINY_SPEC.replace(
        'callable = "tiny:candidate32"',
        f'callable = "tiny:candidate32"\n\n[runners.cand.pins.files]\n"{key}" = "{digest}"',
    )
    spec = load_spec(make_project(tmp_path, text))
    record(spec)
    return spec


def test_a_file_inside_an_installed_package_is_pinned_both_directions(tmp_path):
    digest = hashlib.sha256(CLICK_FILE.read_bytes()).hexdigest()
    spec = _spec(tmp_path / "ok", "package:click/core.py", digest)
    assert verify(spec).drift == []
    wrong = _spec(tmp_path / "wrong", "package:click/core.py", "0" * 64)
    drift = verify(wrong).drift
    assert any("package:click/core.py" in d.subject for d in drift), drift


def test_a_pin_in_a_package_that_is_not_installed_is_drift(tmp_path):
    spec = _spec(tmp_path, "package:no_such_package_xyz/model.onnx", "0" * 64)
    drift = verify(spec).drift
    assert any("package:no_such_package_xyz/model.onnx" in d.subject for d in drift), drift


@pytest.mark.parametrize("key", ["package:click/../setup.py", "package:/core.py", "package:click"])
def test_malformed_package_pins_are_spec_errors(tmp_path, key):
    text = TINY_SPEC.replace(
        'callable = "tiny:candidate32"',
        f'callable = "tiny:candidate32"\n\n[runners.cand.pins.files]\n"{key}" = "{"0" * 64}"',
    )
    with pytest.raises(SpecError, match="package:<import name>/<path inside the package>"):
        load_spec(make_project(tmp_path, text))

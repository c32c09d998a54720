"""``paritygate bootstrap`` used for real: a clean copy of the installed mlx-vlm source with the
seed's bug planted (make_upstream.py), the patch the example ships, the fix line required, then
the gate on the checkout's command line; an incomplete patch stops at the required lines with
the seed's message, and the unpatched checkout fails the gate."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from paritygate.cli import main

EXAMPLE = Path(__file__).resolve().parents[1]
FIX = 'mlx_vlm/prompt_utils.py:"qwen2_5_vl": MessageFormat.LIST_WITH_IMAGE_FIRST,'


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_upstream", EXAMPLE / "make_upstream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dest = tmp_path_factory.mktemp("upstream")
    return dest, module.make_upstream(dest)


@pytest.fixture
def example(tmp_path):
    target = tmp_path / "vlm_port"
    shutil.copytree(
        EXAMPLE,
        target,
        ignore=shutil.ignore_patterns("parity-reports", "tests", "__pycache__", "calibration"),
    )
    return target


def _bootstrap(example: Path, upstream, tmp_path: Path, patch: Path | None) -> int:
    dest, commit = upstream
    args = ["bootstrap", "--upstream", str(dest), "--commit", commit]
    args += ["--workdir", str(tmp_path / "checkout"), "--require", FIX]
    if patch is not None:
        args += ["--patch", str(patch)]
    return main([*args, "--gate", str(example / "parity-bootstrap.toml")])


def test_the_shipped_patch_lands_its_fix_line_and_the_checkout_passes_the_gate(
    example, upstream, tmp_path, capsys
):
    patch = example / "patches" / "qwen2_5_vl-image-first.patch"
    assert _bootstrap(example, upstream, tmp_path, patch) == 0
    out = capsys.readouterr().out
    assert "required-lines  ok" in out and "1/1 claims hold" in out


def test_a_patch_without_its_fix_line_stops_before_the_gate(example, upstream, tmp_path, capsys):
    # the patch applies cleanly (it adds a comment) but was derived without the fix line
    shipped = (example / "patches" / "qwen2_5_vl-image-first.patch").read_text()
    incomplete = example / "patches" / "incomplete.patch"
    incomplete.write_text(
        shipped.replace(
            '+    "qwen2_5_vl": MessageFormat.LIST_WITH_IMAGE_FIRST,\n',
            '+    "qwen2_5_vl": MessageFormat.LIST_WITH_IMAGE,  # image first\n',
        )
    )
    assert _bootstrap(example, upstream, tmp_path, incomplete) == 13
    err = capsys.readouterr().err
    assert "the patched tree lacks required fix lines (the patch applied but is incomplete)" in err
    assert "mlx_vlm/prompt_utils.py: missing required line" in err
    assert "re-derive the patch from the working tree that holds the fix" in err
    # and without the required line the unpatched checkout reaches the gate, which fails it
    dest, commit = upstream
    args = ["bootstrap", "--upstream", str(dest), "--commit", commit]
    args += ["--workdir", str(tmp_path / "checkout")]
    assert main([*args, "--gate", str(example / "parity-bootstrap.toml")]) == 1

"""What a first port through the docs ran into: a spec that cannot run on this machine's
hardware, several candidates in one spec, reports per spec, unmarked published numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from spec_helpers import TINY_SPEC, make_project

from paritygate.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENCODER = ROOT / "examples" / "encoder_mlx"


def test_the_encoder_gpu_spec_on_a_cpu_machine_cannot_run_here(capsys, monkeypatch):
    # This machine as a CPU machine: the spec's claims all hold for class h200 only.
    monkeypatch.setenv("PARITYGATE_HARDWARE", "any")
    assert main(["gate", str(ENCODER / "parity-gpu.toml")]) == 4
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("paritygate: cannot run here: ")
    assert "parity-gpu.toml" in err and "hardware class 'h200' (system Linux, gpu *H200*)" in err
    assert "this machine is in no declared class" in err and "violated" not in err
    assert "FAIL" not in captured.out


def test_a_spec_with_a_claim_for_this_machine_still_gates(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PARITYGATE_HARDWARE", raising=False)
    spec = TINY_SPEC + (
        '\n[hardware.gpu-box]\ngpu = "*H200*"\nsystem = "Plan9"\n\n'
        '[claims.on-gpu]\noutputs = ["y"]\nmetric = "max_abs"\nbound = 0\n'
        'oracle = "equivalence"\nstatus = "provisional"\nhardware = "gpu-box"\n'
    )
    path = make_project(tmp_path, spec)
    assert main(["record", str(path)]) == 0
    capsys.readouterr()
    assert main(["gate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "on-gpu (holds for hardware class 'gpu-box'" in out

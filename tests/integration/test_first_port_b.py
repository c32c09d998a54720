"""What a first port through the docs ran into: a spec that cannot run on this machine's
hardware, several candidates in one spec, reports per spec, unmarked published numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spec_helpers import TINY_SPEC, make_project

from paritygate.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENCODER = ROOT / "examples" / "encoder_mlx"


def test_the_encoder_gpu_spec_on_a_cpu_machine_cannot_run_here(capsys, monkeypatch):
    # This machine as a CPU machine: the spec's claims all hold for class hopper only.
    monkeypatch.setenv("PARITYGATE_HARDWARE", "any")
    assert main(["gate", str(ENCODER / "parity-gpu.toml")]) == 4
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("paritygate: cannot run here: ")
    assert "parity-gpu.toml" in err
    assert "hardware class 'hopper' (system Linux, gpu *H[12]00*)" in err
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


MODEL = """
import numpy as np

W = np.random.default_rng(7).standard_normal((8, 4))


def _softmax(logits):
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sklearn_predict(case):
    return {"probabilities": _softmax(case.load()["x"] @ W)}


def onnx_fp32(case):
    x = case.load()["x"].astype(np.float32)
    return {"probabilities": _softmax(x @ W.astype(np.float32))}


def onnx_int8(case):
    probabilities = np.round(sklearn_predict(case)["probabilities"], 2)
    if BUG and case.name == "b":
        probabilities[0] = probabilities[0][::-1]  # the planted bug: one row's classes reversed
    return {"probabilities": probabilities}


BUG = False
"""


def _multi_candidate_project(root: Path, *, bug: bool) -> Path:
    """The example of docs/spec.md's "Several candidates" section, run as written."""
    page = (ROOT / "docs" / "spec.md").read_text()
    section = page.split("## Several candidates of one reference: one spec", 1)[1]
    runners_and_claims = section.split("```toml\n", 1)[1].split("```", 1)[0]
    header = (
        'format_version = 5\noutputs = ["probabilities"]\n\n'
        '[cases.a]\npath = "cases/a.npz"\nsha256 = "{sha:a}"\n\n'
        '[cases.b]\npath = "cases/b.npz"\nsha256 = "{sha:b}"\n\n'
    )
    model = MODEL.replace("BUG = False", f"BUG = {bug}")
    return make_project(root, header + runners_and_claims, modules={"model.py": model})


def test_two_candidates_in_one_spec_each_held_to_its_claims(tmp_path, capsys):
    path = _multi_candidate_project(tmp_path, bug=False)
    assert main(["record", str(path)]) == 0
    capsys.readouterr()
    assert main(["gate", str(path)]) == 0, capsys.readouterr()
    result = json.loads((tmp_path / "parity-reports" / "parity" / "result.json").read_text())
    pairs = {(v["claim_id"], v["candidate"]) for v in result["verdicts"]}
    assert pairs == {
        ("proba-close", "onnx-fp32"),
        ("labels-agree", "onnx-fp32"),
        ("labels-agree", "onnx-int8"),
    }
    summary = (tmp_path / "parity-reports" / "parity" / "summary.md").read_text()
    assert "| ✅ | `labels-agree` | onnx-int8 | agreement | dataset | agreement 100% |" in summary


def test_a_bug_in_the_second_candidate_fails_the_spec_naming_it(tmp_path, capsys):
    path = _multi_candidate_project(tmp_path, bug=True)
    assert main(["record", str(path)]) == 0
    capsys.readouterr()
    assert main(["gate", str(path)]) == 1
    summary = (tmp_path / "parity-reports" / "parity" / "summary.md").read_text()
    rows = [line for line in summary.splitlines() if line.startswith(("| ✅", "| ❌"))]
    assert rows[0].startswith("| ❌ | `labels-agree` | onnx-int8 | agreement | dataset |")
    assert "bound ≥ 99%" in rows[0]
    assert all(row.startswith("| ✅") for row in rows[1:]) and len(rows) == 3


def test_two_specs_of_one_folder_write_their_own_report_folders(tmp_path, capsys):
    path = _multi_candidate_project(tmp_path, bug=False)
    second = path.with_name("parity-int8.toml")
    second.write_text(path.read_text())
    for spec in (path, second):
        assert main(["record", str(spec)]) == 0
        assert main(["gate", str(spec)]) == 0
    out = capsys.readouterr().out
    first_report = tmp_path / "parity-reports" / "parity" / "result.json"
    second_report = tmp_path / "parity-reports" / "parity-int8" / "result.json"
    assert json.loads(first_report.read_text())["spec"] == str(path)
    assert json.loads(second_report.read_text())["spec"] == str(second)
    assert f"report: {tmp_path / 'parity-reports' / 'parity-int8' / 'report.html'}" in out
    assert not (tmp_path / "parity-reports" / "result.json").exists()


def test_a_spec_naming_its_reports_folder_keeps_it(tmp_path, capsys):
    path = _multi_candidate_project(tmp_path, bug=False)
    path.write_text('reports = "parity-reports"\n' + path.read_text())
    assert main(["record", str(path)]) == 0
    assert main(["gate", str(path)]) == 0
    assert (tmp_path / "parity-reports" / "result.json").is_file()

"""The demo that ``make demo`` runs: it must catch its planted bug, and only that one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import paritygate
from paritygate import demo
from paritygate.files import load_outputs, save_outputs
from paritygate.outputs import flatten_outputs

SRC = Path(paritygate.__file__).resolve().parents[1]


def test_demo_prints_the_report_and_writes_json(tmp_path, capsys):
    code = demo.main(["--out", str(tmp_path / "reports")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "output logits: PASS" in out and "output embedding: PASS" in out
    assert "edge_delta at editor.x2" in out
    # The numeric claim's PASS is named as one claim of three, the expected FAIL announced
    # first, and the demo's own outcome said plainly after the gate's verdict.
    lines = out.splitlines()
    assert "expected gate verdict is FAIL, on exactly that edge" in lines[0]
    assert not any(line.startswith("paritygate comparison") for line in lines)
    assert "claim 1 of 3, logits and embedding" in out and "2 of 2 outputs within bounds" in out
    assert "claim 3 of 3, box edges (every edge within 2 px): keyed-boxes boxes: FAIL" in out
    assert "gate verdict: FAIL — 1 of 3 claims violated (box edges)" in out
    assert "demo: OK — the FAIL above is the expected outcome" in out
    assert "caught the planted bug" in out
    report_path = tmp_path / "reports" / "demo-report.json"
    assert f"JSON report: {report_path.resolve()}" in out
    report = json.loads(report_path.read_text())
    assert report["passed"] is False
    boxes = next(r for r in report["structured"] if r["kind"] == "keyed-boxes")
    assert [f["where"] for f in boxes["failures"]] == ["editor.x2"]
    assert boxes["failures"][0]["observed"] > 8.5
    assert report["comparison"]["passed"] is True
    assert len(report["files"]["reference"]["sha256"]) == 64


def test_bundled_files_are_what_make_fixtures_writes(tmp_path):
    reference, candidate = demo.make_fixtures(tmp_path)
    for made in (reference, candidate):
        # safetensors orders header metadata freely, so compare the arrays, not the bytes
        bundled = flatten_outputs(load_outputs(demo._bundled(made.name)))
        fresh = flatten_outputs(load_outputs(made))
        assert (
            sorted(bundled)
            == sorted(fresh)
            == [
                "boxes/editor",
                "boxes/sidebar",
                "boxes/statusbar",
                "boxes/toolbar",
                "embedding",
                "logits",
            ]
        )
        for name, array in fresh.items():
            assert bundled[name].dtype == array.dtype and bundled[name].tobytes() == array.tobytes()


def test_demo_fails_when_the_planted_bug_goes_missing(tmp_path, monkeypatch, capsys):
    # Swap the candidate for a copy of the reference: nothing to catch, so the demo must say so.
    reference = demo._bundled(demo.REFERENCE_FILE)
    monkeypatch.setattr(demo, "_bundled", lambda name: reference)
    code = demo.main(["--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "demo: UNEXPECTED" in out and "gate verdict: PASS — 3 of 3 claims hold" in out
    assert "demo: OK" not in out


def test_demo_fails_when_another_output_drifts(tmp_path, monkeypatch, capsys):
    candidate = load_outputs(demo._bundled(demo.CANDIDATE_FILE))
    candidate["logits"] = candidate["logits"].copy()
    candidate["logits"][5, 2] += np.float16(0.5)
    drifted = save_outputs(tmp_path / "drifted.safetensors", candidate)
    outcome = demo.run_demo(demo._bundled(demo.REFERENCE_FILE), drifted)
    assert not outcome["numeric"]
    assert outcome["numeric"]["logits"].worst[0].index == (5, 2)
    assert not demo._caught_exactly_the_planted_bug(outcome)


def test_demo_imports_no_framework(tmp_path):
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['paritygate.demo', '--out', {str(tmp_path)!r}]\n"
        "try:\n"
        "    runpy.run_module('paritygate.demo', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "loaded = [m for m in ('torch', 'mlx', 'jax', 'onnxruntime', 'pytest') if m in "
        "sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "demo-report.json").exists()

"""`paritygate gate parity.toml` on this example, stored mode: the committed references against
the port (Python API and CLI adapter), ONNX Runtime and the post-processor; and the same gate
with a planted port bug."""

from __future__ import annotations

import pytest


def test_gate_passes_every_claim_on_every_case(spec):
    from paritygate import run_gate

    result = run_gate(spec)
    assert result.passed, [
        f.describe() for v in result.verdicts for f in v.failures
    ] + result.errors
    assert result.exit_code == 0 and not result.drift and not result.errors
    claims = {v.claim_id for v in result.verdicts}
    assert {
        "probability-max-abs",
        "probability-cosine",
        "onnx-probability-max-abs",
        "onnx-probability-cosine",
        "segment-edges",
        "timestamps-exact",
        "onnx-timestamps-exact",
        "postprocessor-exact",
    } <= claims
    assert any(c.startswith("cross-adapter") for c in claims)
    # The 8 canonical cases and the 12 further recordings the bounds were calibrated on, the
    # three minimum-silence boundary cases (tests/test_silero_boundaries.py) and the ten
    # boundary lengths of short_pauses (`paritygate cases add --sweep`).
    assert len(spec.cases) == 33
    for claim_id, candidate in (
        ("probability-max-abs", "mlx"),
        ("onnx-probability-max-abs", "onnxruntime"),
    ):
        per_case = [v for v in result.verdicts if v.claim_id == claim_id]
        assert {v.candidate for v in per_case} == {candidate}
        assert [v.case for v in per_case] == list(spec.cases)
        assert all(0 <= v.observed <= spec.claims[claim_id].bound for v in per_case)
    edges = [v for v in result.verdicts if v.claim_id == "segment-edges"]
    assert len(edges) == 2 * len(spec.cases)


def test_every_claim_is_calibrated_on_the_spec_cases_with_its_basis(spec):
    # The bounds come from `paritygate calibrate --write` over the spec's own cases (and the
    # segment-edge basis from segment_edges_basis.py): each basis names n >= 16 cases of this
    # spec, and each tolerance sits between the largest noise and the smallest bug it measured.
    for claim_id, claim in spec.claims.items():
        basis = claim.basis
        assert claim.status == "calibrated" and basis, claim_id
        assert basis["n"] >= 16, claim_id
        cases = basis.get("cases", list(spec.cases))
        assert len(cases) == basis["n"] and set(cases) <= set(spec.cases), claim_id
        if claim.metric == "max_abs":
            assert basis["largest_noise"] <= claim.bound < basis["smallest_bug"], claim_id
        elif claim.metric == "cosine":
            assert basis["largest_noise"] >= claim.bound > basis["smallest_bug"], claim_id
        else:
            assert claim.bound == 0 and basis["largest_noise"] == 0, claim_id


def copy_example(spec, target):
    import shutil

    shutil.copytree(
        spec.root, target, ignore=shutil.ignore_patterns("parity-reports", "tests", "__pycache__")
    )
    return target


def test_gate_fails_a_planted_context_bug_naming_claim_case_and_excess(spec, tmp_path):
    from paritygate import load_spec, run_gate

    example = copy_example(spec, tmp_path / "example")
    text = (example / "parity.toml").read_text()
    faithful = 'callable = "runners:mlx_outputs"'
    assert faithful in text
    (example / "parity.toml").write_text(
        text.replace(faithful, 'factory = "runners:mlx_runner"\noptions = { context_lag = 2 }')
    )
    result = run_gate(load_spec(example / "parity.toml"), cases=["short_pauses", "silence"])
    assert not result.passed and result.exit_code == 1
    failing = {(v.claim_id, v.candidate, v.case) for v in result.verdicts if not v.passed}
    assert ("probability-max-abs", "mlx", "short_pauses") in failing
    assert ("segment-edges", "mlx", "short_pauses") in failing
    assert ("timestamps-exact", "mlx", "short_pauses") in failing
    # The CLI adapter still runs the faithful port: the two entry points disagree.
    assert any(c.startswith("cross-adapter") and case == "short_pauses" for c, _, case in failing)
    # ONNX Runtime and the post-processor are untouched; silence carries no context signal.
    assert not any(cand in ("onnxruntime", "postprocessor") for _, cand, _ in failing)
    assert not any(
        case == "silence" and not c.startswith("cross-adapter") for c, _, case in failing
    )
    (verdict,) = [
        v
        for v in result.verdicts
        if not v.passed and v.case == "short_pauses" and v.claim_id == "probability-max-abs"
    ]
    assert verdict.observed > verdict.bound
    assert verdict.excess == pytest.approx(verdict.observed - verdict.bound)
    edge = next(
        v
        for v in result.verdicts
        if not v.passed and v.case == "short_pauses" and v.claim_id == "segment-edges"
    )
    assert any("element segments/" in f.where and "chunks" in f.detail for f in edge.failures)


def test_changed_weights_are_drift(spec, tmp_path):
    from paritygate import load_spec, run_gate

    copy = copy_example(spec, tmp_path / "example")
    weights = copy / "weights" / "silero_vad_16k_mlx.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    result = run_gate(load_spec(copy / "parity.toml"), cases=["silence"])
    assert result.exit_code == 3
    assert any("silero_vad_16k_mlx.safetensors" in d.subject for d in result.drift)


def test_stored_gate_runs_without_torch(example_folder):
    # What `make demo` relies on: the recorded references stand in for the TorchScript model,
    # so the gate imports no torch (blocked here as if it were not installed).
    import json
    import subprocess
    import sys

    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('torch is not installed')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from paritygate import run_gate\n"
        "from paritygate import load_spec\n"
        "result = run_gate(load_spec('parity.toml'), cases=['short_pauses'])\n"
        "print(json.dumps({'passed': result.passed, 'errors': result.errors,\n"
        "                  'verdicts': len(result.verdicts), 'torch': 'torch' in sys.modules}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", "import json\n" + script],
        cwd=example_folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"passed": True, "errors": [], "verdicts": 11, "torch": False}


def test_readme_publishes_the_numbers_the_gate_enforces(example_folder, tmp_path):
    import shutil

    from paritygate.cli import main

    assert (
        main(
            [
                "claims",
                "check",
                str(example_folder / "README.md"),
                "--spec",
                str(example_folder / "parity.toml"),
            ]
        )
        == 0
    )
    # A README publishing a tighter number than the gate enforces (the gate is looser) fails.
    copy = tmp_path / "example"
    copy.mkdir()
    for name in ("parity.toml", "README.md"):
        shutil.copy(example_folder / name, copy / name)
    for folder in ("cases", "references", "results", "calibration", "bench-results", "weights"):
        shutil.copytree(example_folder / folder, copy / folder)
    text = (copy / "README.md").read_text()
    assert "≤ 1.9e-5 <!-- claim: probability-max-abs -->" in text
    (copy / "README.md").write_text(
        text.replace(
            "≤ 1.9e-5 <!-- claim: probability-max-abs -->",
            "≤ 1e-5 <!-- claim: probability-max-abs -->",
        )
    )
    assert (
        main(["claims", "check", str(copy / "README.md"), "--spec", str(copy / "parity.toml")]) == 1
    )


RECORDED_POSTPROCESSOR = 'options = { probabilities = "recorded" }'
LIVE_POSTPROCESSOR = 'options = { probabilities = "live" }'


def paired_copy(spec, target, *, postprocessor: str = LIVE_POSTPROCESSOR):
    """The example with every claim in paired mode and the post-processor fed as given."""
    from paritygate import update_claim

    example = copy_example(spec, target)
    text = (example / "parity.toml").read_text()
    assert RECORDED_POSTPROCESSOR in text
    (example / "parity.toml").write_text(text.replace(RECORDED_POSTPROCESSOR, postprocessor))
    for claim_id in spec.claims:
        update_claim(example / "parity.toml", claim_id, mode="paired")
    return example


def test_paired_mode_runs_the_reference_live(spec, tmp_path):
    # The same claims in paired mode: the TorchScript model runs in this process, back to back
    # with each candidate on the same case (torch is installed in the test environment), and the
    # post-processor is fed that live model's probabilities.
    from paritygate import load_spec, run_gate

    paired_spec = load_spec(paired_copy(spec, tmp_path / "example") / "parity.toml")
    assert {c.mode for c in paired_spec.claims.values()} == {"paired"}
    cases = ["noisy_near_threshold", "clean_speech_8k", "speech_32k"]
    result = run_gate(paired_spec, cases=cases)
    assert result.passed, [
        f.describe() for v in result.verdicts for f in v.failures
    ] + result.errors
    live = [
        v
        for v in result.verdicts
        if v.claim_id in ("probability-max-abs", "onnx-probability-max-abs")
    ]
    assert len(live) == 2 * len(cases) and all(0 < v.observed <= v.bound for v in live)
    post = [v for v in result.verdicts if v.claim_id == "postprocessor-exact"]
    assert [v.case for v in post] == cases and all(v.passed and v.observed == 0 for v in post)


# Run in a subprocess with torch's ATen kernels forced to their unvectorized variant: another
# dispatch than the one that recorded references/, as on another CPU family (measured: up to
# 2.7e-6 apart on an AMD EPYC; an Intel Xeon's AVX-512 / oneDNN / MKL paths differ by up to 7.7e-6).
_OTHER_DISPATCH = """
import json, sys
import numpy as np
from paritygate import load_spec, recorded_outputs, run_gate
sys.path.insert(0, sys.argv[1])
import runners
out = {}
for name in sys.argv[2:]:
    spec = load_spec(name + "/parity.toml")
    case = spec.cases["speech_32k"]
    rate, samples = runners.read_wav(case.path)
    live = runners.reference_probabilities(samples, rate)
    out["live_differs"] = bool(np.any(live != recorded_outputs(spec, case)["probabilities"]))
    result = run_gate(spec, claims=["postprocessor-exact"], cases=["speech_32k"])
    out[name] = {
        "passed": result.passed,
        "errors": result.errors,
        "failures": [f.describe() for v in result.verdicts for f in v.failures],
    }
print(json.dumps(out))
"""


def test_paired_post_processor_is_exact_only_fed_the_live_reference(spec, tmp_path):
    # Both directions of the paired post-processor claim on a kernel dispatch other than the
    # recording's: fed the recording it compares the live model against the recorded one and
    # fails naming the probabilities; fed the live model it is one numerical path and holds.
    import json
    import os
    import subprocess
    import sys

    recorded = paired_copy(spec, tmp_path / "recorded", postprocessor=RECORDED_POSTPROCESSOR)
    live = paired_copy(spec, tmp_path / "live")
    proc = subprocess.run(
        [sys.executable, "-c", _OTHER_DISPATCH, str(live), str(recorded), str(live)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ATEN_CPU_CAPABILITY": "default"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["live_differs"], "the forced dispatch no longer changes the reference model"
    assert not out[str(recorded)]["passed"] and not out[str(recorded)]["errors"]
    assert any("exact" in f and "probabilities" in f for f in out[str(recorded)]["failures"]), out[
        str(recorded)
    ]
    assert out[str(live)] == {"passed": True, "errors": [], "failures": []}

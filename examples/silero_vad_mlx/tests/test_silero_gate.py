"""`paritygate gate parity.toml` on this example, stored mode: the committed references against
the port (Python API and CLI adapter), ONNX Runtime and the post-processor; and the same gate
with a planted port bug."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def spec(example_on_path):
    from paritygate.spec import load_spec

    return load_spec(example_on_path / "parity.toml")


def test_gate_passes_every_claim_on_every_case(spec):
    from paritygate.gate import run_gate

    result = run_gate(spec)
    assert result.passed, [f.describe() for v in result.verdicts for f in v.failures] + result.errors
    assert result.exit_code == 0 and not result.drift and not result.errors
    claims = {v.claim_id for v in result.verdicts}
    assert {"probability-max-abs", "probability-cosine", "segment-edges", "timestamps-exact",
            "postprocessor-exact"} <= claims
    assert any(c.startswith("cross-adapter") for c in claims)
    per_case = [v for v in result.verdicts if v.claim_id == "probability-max-abs"]
    assert {v.candidate for v in per_case} == {"mlx", "onnxruntime"}
    assert len(per_case) == 2 * len(spec.cases) == 16
    assert all(0 <= v.observed <= spec.claims["probability-max-abs"].bound for v in per_case)


def copy_example(spec, target):
    import shutil

    shutil.copytree(spec.root, target, ignore=shutil.ignore_patterns("parity-reports", "tests",
                                                                     "__pycache__"))
    return target


def test_gate_fails_a_planted_context_bug_naming_claim_case_and_excess(spec, tmp_path):
    from paritygate.gate import run_gate
    from paritygate.spec import load_spec

    example = copy_example(spec, tmp_path / "example")
    text = (example / "parity.toml").read_text()
    faithful = 'callable = "runners:mlx_outputs"'
    assert faithful in text
    (example / "parity.toml").write_text(text.replace(
        faithful, 'factory = "runners:mlx_runner"\noptions = { context_lag = 2 }'))
    result = run_gate(load_spec(example / "parity.toml"), cases=["short_pauses", "silence"])
    assert not result.passed and result.exit_code == 1
    failing = {(v.claim_id, v.candidate, v.case) for v in result.verdicts if not v.passed}
    assert ("probability-max-abs", "mlx", "short_pauses") in failing
    assert ("segment-edges", "mlx", "short_pauses") in failing
    assert ("timestamps-exact", "mlx", "short_pauses") in failing
    # The CLI adapter still runs the faithful port: the two entry points disagree.
    assert any(c.startswith("cross-adapter") and case == "short_pauses"
               for c, _, case in failing)
    # ONNX Runtime and the post-processor are untouched; silence carries no context signal.
    assert not any(cand in ("onnxruntime", "postprocessor") for _, cand, _ in failing)
    assert not any(case == "silence" and not c.startswith("cross-adapter")
                   for c, _, case in failing)
    (verdict,) = [v for v in result.verdicts if not v.passed and v.case == "short_pauses"
                  and v.claim_id == "probability-max-abs"]
    assert verdict.observed > verdict.bound
    assert verdict.excess == pytest.approx(verdict.observed - verdict.bound)
    edge = next(v for v in result.verdicts if not v.passed and v.case == "short_pauses"
                and v.claim_id == "segment-edges")
    assert any("element segments/" in f.where and "chunks" in f.detail for f in edge.failures)


def test_changed_weights_are_drift(spec, tmp_path):
    from paritygate.gate import run_gate
    from paritygate.spec import load_spec

    copy = copy_example(spec, tmp_path / "example")
    weights = copy / "weights" / "silero_vad_16k_mlx.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    result = run_gate(load_spec(copy / "parity.toml"), cases=["silence"])
    assert result.exit_code == 3
    assert any("silero_vad_16k_mlx.safetensors" in d.subject for d in result.drift)

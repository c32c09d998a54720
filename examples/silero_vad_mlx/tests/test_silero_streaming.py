"""The streaming entry point (``vad(chunk, rate)`` with state carried between calls) is gated
as an adapter of the whole-waveform one: every output must agree at zero tolerance."""

from __future__ import annotations

from pathlib import Path

from paritygate import load_spec, run_gate

EXAMPLE = Path(__file__).resolve().parents[1]


def _streaming_verdicts(spec):
    result = run_gate(spec, claims=["probability-max-abs"], cases=["clipping"])
    return result, [v for v in result.verdicts if v.candidate == "mlx-stream"]


def test_the_streaming_entry_point_is_gated_and_agrees_exactly(tmp_path):
    spec = load_spec(EXAMPLE / "parity.toml")
    assert spec.runners["mlx-stream"].adapter_of == "mlx"
    result, verdicts = _streaming_verdicts(spec)
    assert [(v.claim_id, v.case, v.passed) for v in verdicts] == [
        ("cross-adapter:mlx", "clipping", True)
    ], [f.describe() for v in verdicts for f in v.failures]
    assert verdicts[0].observed == 0


def test_a_streaming_port_that_drops_its_state_fails_the_gate(tmp_path):
    import shutil

    project = tmp_path / "silero"
    shutil.copytree(
        EXAMPLE,
        project,
        ignore=shutil.ignore_patterns("tests", "parity-reports", "__pycache__", "bench-results"),
    )
    path = project / "parity.toml"
    path.write_text(
        path.read_text().replace(
            'callable = "runners:mlx_streaming_outputs"',
            'callable = "runners:mlx_streaming_state_dropped"',
        )
    )
    result, verdicts = _streaming_verdicts(load_spec(path))
    assert not result.passed
    assert [v.passed for v in verdicts] == [False]
    assert any("probabilities" in (f.where or "") for f in verdicts[0].failures)

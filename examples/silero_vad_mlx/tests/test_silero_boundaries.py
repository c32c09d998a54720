"""Cases on each post-processing parameter's boundary: synthetic probability traces whose speech
or silence lasts one chunk less than, exactly, and one chunk more than the parameter, fed to the
port's post-processor and to silero-vad's get_speech_timestamps (through a stub model). Each
sweep must change the reference's answer (the boundary is exercised) and the port must agree with
it exactly on every trace."""

from __future__ import annotations

import numpy as np
import pytest
from test_silero_postprocess import reference_timestamps

LOW, HIGH = 0.1, 0.9  # clearly below neg_threshold / clearly above threshold
CHUNK_MS = 32  # 512 samples at 16 kHz


def _trace(*runs: tuple[float, int]) -> np.ndarray:
    return np.concatenate([np.full(n, p, dtype=np.float32) for p, n in runs])


def _sweep(build, lengths):
    return [build(n) for n in lengths]


SWEEPS = {
    # speech shorter than, equal to, longer than min_speech_duration_ms (8 chunks)
    "min_speech_duration_ms": (
        {"min_speech_duration_ms": 8 * CHUNK_MS},
        _sweep(lambda n: _trace((LOW, 10), (HIGH, n), (LOW, 20)), range(6, 11)),
    ),
    # a pause shorter than, equal to, longer than min_silence_duration_ms (4 chunks)
    "min_silence_duration_ms": (
        {"min_silence_duration_ms": 4 * CHUNK_MS},
        _sweep(
            lambda n: _trace((LOW, 5), (HIGH, 20), (LOW, n), (HIGH, 20), (LOW, 20)), range(2, 7)
        ),
    ),
    # padding that reaches, and does not reach, the start and the end of the audio (2 chunks)
    "speech_pad_ms": (
        {"speech_pad_ms": 2 * CHUNK_MS, "min_speech_duration_ms": 0},
        _sweep(lambda n: _trace((LOW, n), (HIGH, 12), (LOW, n)), range(0, 5)),
    ),
    # speech around max_speech_duration_s: with 1.024 s the reference splits speech from 39
    # chunks on (the cut waits for the min-silence window after the limit)
    "max_speech_duration_s": (
        {"max_speech_duration_s": 1.024},
        _sweep(lambda n: _trace((LOW, 5), (HIGH, n), (LOW, 20)), range(36, 42)),
    ),
    # a pause inside over-long speech around min_silence_at_max_speech (98 ms: ~3 chunks)
    "min_silence_at_max_speech": (
        {"max_speech_duration_s": 1.5, "min_silence_duration_ms": 300},
        _sweep(
            lambda n: _trace((LOW, 5), (HIGH, 20), (0.3, n), (HIGH, 30), (LOW, 20)), range(1, 6)
        ),
    ),
    # probabilities exactly at threshold and at neg_threshold (0.5 and 0.35 by default)
    "threshold and neg_threshold": (
        {"min_speech_duration_ms": 0},
        [
            _trace((LOW, 5), (p_in, 10), (p_out, 6), (LOW, 10))
            for p_in in (np.nextafter(np.float32(0.5), 0), 0.5)
            for p_out in (0.35, np.nextafter(np.float32(0.35), 0))
        ],
    ),
}


@pytest.mark.parametrize("parameter", list(SWEEPS))
def test_the_port_agrees_on_each_post_processing_boundary(parameter, postprocess):
    options, traces = SWEEPS[parameter]
    answers = []
    for probs in traces:
        expected = reference_timestamps(probs, 16000, probs.size * 512, **options)
        actual = postprocess.get_speech_timestamps(
            probs, sampling_rate=16000, audio_length_samples=probs.size * 512, **options
        )
        assert actual == expected, (parameter, probs.tolist())
        answers.append(repr(expected))
    # The sweep crosses the boundary: the reference's answer changes along it.
    assert len(set(answers)) > 1, (parameter, answers)


def test_a_post_processor_off_by_one_chunk_on_min_silence_is_caught(postprocess):
    options, traces = SWEEPS["min_silence_duration_ms"]
    shifted = dict(options, min_silence_duration_ms=options["min_silence_duration_ms"] + CHUNK_MS)
    differs = [
        postprocess.get_speech_timestamps(probs, **shifted)
        != reference_timestamps(probs, 16000, probs.size * 512, **options)
        for probs in traces
    ]
    assert any(differs)  # the boundary cases catch a post-processor one chunk off


PAUSE_CASES = ["pause_2_chunks", "pause_3_chunks", "pause_4_chunks"]
MIN_SILENCE = "min_silence_samples = sampling_rate * min_silence_duration_ms / 1000"


@pytest.mark.parametrize(
    ("planted", "caught_on"),
    [(None, None), ("+ window", "pause_3_chunks"), ("- window", "pause_2_chunks")],
    ids=["faithful", "one-chunk-longer", "one-chunk-shorter"],
)
def test_the_gate_catches_a_minimum_silence_one_chunk_off(spec, tmp_path, planted, caught_on):
    """The post-processor's minimum silence one chunk (512 samples) too long or too short, planted
    in postprocess.py, fails the gate itself on the pause case at the boundary: the exact claims
    of every candidate, the post-processor's first (it reads the recorded reference
    probabilities, so nothing else differs); the faithful post-processor passes the same cases."""
    from test_silero_gate import copy_example

    from paritygate import load_spec, run_gate

    example = copy_example(spec, tmp_path / "example")
    source = (example / "postprocess.py").read_text()
    assert source.count(MIN_SILENCE) == 1
    if planted:
        (example / "postprocess.py").write_text(
            source.replace(MIN_SILENCE, f"{MIN_SILENCE} {planted}")
        )
    result = run_gate(load_spec(example / "parity.toml"), cases=PAUSE_CASES)
    failing = {(v.claim_id, v.candidate, v.case) for v in result.verdicts if not v.passed}
    if planted is None:
        assert result.exit_code == 0 and not failing, failing
        return
    assert result.exit_code == 1
    assert {case for _, _, case in failing} == {caught_on}
    for claim, candidate in (
        ("postprocessor-exact", "postprocessor"),
        ("timestamps-exact", "mlx"),
        ("onnx-timestamps-exact", "onnxruntime"),
        ("segment-edges", "mlx"),
    ):
        assert (claim, candidate, caught_on) in failing, failing
    # the probabilities are untouched: only the post-processing claims fail
    assert not any(c.startswith(("probability", "onnx-probability")) for c, _, _ in failing)

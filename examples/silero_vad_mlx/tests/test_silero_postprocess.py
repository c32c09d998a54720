"""The numpy post-processor against silero-vad's get_speech_timestamps at zero tolerance, fed
identical probabilities through a stub model."""

from __future__ import annotations

import numpy as np
import pytest


class StubModel:
    """Returns the given probabilities in sequence, as the model would, one per chunk."""

    def __init__(self, probabilities):
        self.probabilities = [float(p) for p in probabilities]
        self.calls = 0

    def reset_states(self):
        self.calls = 0

    def __call__(self, chunk, sampling_rate):
        import torch

        value = self.probabilities[self.calls]
        self.calls += 1
        return torch.tensor([[value]], dtype=torch.float32)


def reference_timestamps(probs, sampling_rate, audio_length, **options):
    import silero_vad
    import torch

    stub = StubModel(probs)
    out = silero_vad.get_speech_timestamps(
        torch.zeros(audio_length), stub, sampling_rate=sampling_rate, **options
    )
    assert stub.calls == len(probs)  # the stub was asked for exactly one value per chunk
    return out


OPTION_GRID = [
    {},
    {"threshold": 0.3, "min_speech_duration_ms": 0, "speech_pad_ms": 0},
    {"threshold": 0.7, "neg_threshold": 0.6, "min_silence_duration_ms": 300},
    {"max_speech_duration_s": 1.0, "speech_pad_ms": 100},
    {
        "max_speech_duration_s": 1.5,
        "use_max_poss_sil_at_max_speech": False,
        "min_silence_duration_ms": 50,
    },
    {"return_seconds": True, "time_resolution": 2},
]


def random_probabilities(rng, n):
    walk = np.abs(np.cumsum(rng.normal(0.0, 0.18, n))) % 1.3
    return np.clip(walk, 0.0, 1.0).astype(np.float32)


@pytest.mark.parametrize("options", OPTION_GRID, ids=lambda o: ",".join(o) or "defaults")
def test_equals_reference_on_random_sequences(options, postprocess):
    rng = np.random.default_rng(len(options))
    for trial in range(40):
        rate = (16000, 8000)[trial % 2]
        window = 512 if rate == 16000 else 256
        n = int(rng.integers(1, 300))
        probs = random_probabilities(rng, n)
        audio_length = n * window - int(rng.integers(0, window))
        expected = reference_timestamps(probs, rate, audio_length, **options)
        actual = postprocess.get_speech_timestamps(
            probs, sampling_rate=rate, audio_length_samples=audio_length, **options
        )
        assert actual == expected, (trial, rate, options)


def test_equals_reference_on_values_at_the_thresholds(postprocess):
    # Probabilities exactly at threshold / neg_threshold decide ">=" versus ">" and "<".
    probs = np.array(
        [0.5, 0.5, 0.35, 0.34999, 0.5, 0.2, 0.2, 0.2, 0.2, 0.2, 0.5] * 8, dtype=np.float32
    )
    options = {"min_speech_duration_ms": 0, "min_silence_duration_ms": 64}
    expected = reference_timestamps(probs, 16000, probs.size * 512, **options)
    assert expected  # the sequence produces segments
    assert postprocess.get_speech_timestamps(probs, **options) == expected


def timestamps_tree(timestamps: list[dict]) -> dict:
    """Timestamps keyed by segment index: a missing or extra segment is a missing/extra output."""
    return {
        "timestamps": {
            str(i): np.array([t["start"], t["end"]], dtype=np.int64)
            for i, t in enumerate(timestamps)
        }
    }


def test_a_planted_off_by_one_is_caught(postprocess):
    # Both directions: a post-processor that compares with ">" instead of ">=" differs from the
    # reference on a sequence that touches the threshold, and the exact comparison says so.
    import paritygate

    probs = np.array([0.1] * 5 + [0.5] * 12 + [0.1] * 10, dtype=np.float32)
    expected = reference_timestamps(probs, 16000, probs.size * 512)
    strict = postprocess.get_speech_timestamps(probs, threshold=float(np.nextafter(0.5, 1.0)))
    faithful = postprocess.get_speech_timestamps(probs)
    tree = timestamps_tree
    assert expected and paritygate.compare(tree(faithful), tree(expected))
    caught = paritygate.compare(tree(strict), tree(expected))
    assert not caught
    assert caught.missing == ["timestamps/0"]


def test_stored_case_timestamps_are_reproduced_exactly(cases, runners, spec):
    # The postprocessor-exact claim of parity.toml, case by case: the port's post-processor fed
    # the recorded reference probabilities reproduces the recorded segments and silero-vad's
    # timestamps exactly.
    from paritygate import check_equivalence

    claim = spec.claims["postprocessor-exact"]
    for case in cases:
        ours = runners.postprocessor_outputs(str(case.path))
        verdict = check_equivalence(claim, ours, case.recorded, case=case.name)
        assert verdict, [f.describe() for f in verdict.failures]
        assert verdict.observed == 0
    assert sum(len(c.reference_timestamps) for c in cases) >= 8  # the cases do have speech


def test_decimated_rate_maps_back_to_input_samples(postprocess):
    probs = np.array([0.0] * 4 + [0.9] * 20 + [0.0] * 10, dtype=np.float32)
    plain = postprocess.get_speech_timestamps(probs)
    doubled = postprocess.get_speech_timestamps(probs, step=2)
    assert [{k: 2 * v for k, v in t.items()} for t in plain] == doubled


def test_segments_report_edges_and_margins(postprocess):
    probs = np.array([0.1] * 4 + [0.62] + [0.9] * 15 + [0.3] * 10, dtype=np.float32)
    (segment,) = postprocess.speech_segments(probs)
    assert segment.start.chunk == 4
    assert segment.start.margin == pytest.approx(0.12, abs=1e-6)
    assert segment.end.chunk == 20
    assert segment.end.margin == pytest.approx(0.35 - 0.3, abs=1e-6)
    with pytest.raises(TypeError, match="unknown options"):
        postprocess.speech_segments(probs, speech_pad=3)

"""Speech timestamps from per-chunk speech probabilities (numpy only, no torch).

Equivalent to ``silero_vad.get_speech_timestamps`` (silero-vad 6.2.3) from the point where it
has collected the per-chunk probabilities: the same hysteresis (``threshold`` to enter speech,
``neg_threshold`` to leave it), minimum speech and silence durations, maximum speech duration
with its choice of cut, padding and merging. Checked at zero tolerance against the reference
utility fed the same probabilities.

``speech_segments`` additionally returns the unpadded edges in chunk units with the probability
of the chunk that decided each edge and its margin from the threshold it crossed, which is what
the timestamp-edge claim reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Edge", "Segment", "get_speech_timestamps", "speech_segments", "window_size"]


def window_size(sampling_rate: int) -> int:
    return 512 if sampling_rate == 16000 else 256


@dataclass(frozen=True)
class Edge:
    """One unpadded segment edge: its chunk, the deciding probability and its threshold margin."""

    chunk: int
    probability: float | None  # None when the edge is the end of the audio
    margin: float | None  # distance of that probability from the threshold it crossed


@dataclass(frozen=True)
class Segment:
    start: Edge
    end: Edge


def _raw_segments(
    probs,
    sampling_rate,
    threshold,
    min_speech_duration_ms,
    max_speech_duration_s,
    min_silence_duration_ms,
    speech_pad_ms,
    neg_threshold,
    min_silence_at_max_speech,
    use_max_poss_sil_at_max_speech,
    audio_length_samples,
):
    """The reference's state machine, before padding. Sample positions, as floats and ints."""
    window = window_size(sampling_rate)
    min_speech_samples = sampling_rate * min_speech_duration_ms / 1000
    speech_pad_samples = sampling_rate * speech_pad_ms / 1000
    max_speech_samples = sampling_rate * max_speech_duration_s - window - 2 * speech_pad_samples
    min_silence_samples = sampling_rate * min_silence_duration_ms / 1000
    min_silence_samples_at_max_speech = sampling_rate * min_silence_at_max_speech / 1000

    triggered = False
    speeches: list[dict] = []
    current: dict = {}
    temp_end = 0
    prev_end = next_start = 0
    possible_ends: list[tuple[int, int]] = []

    for i, prob in enumerate(probs):
        cur_sample = window * i

        if prob >= threshold and temp_end:
            sil_dur = cur_sample - temp_end
            if sil_dur > min_silence_samples_at_max_speech:
                possible_ends.append((temp_end, sil_dur))
            temp_end = 0
            if next_start < prev_end:
                next_start = cur_sample

        if prob >= threshold and not triggered:
            triggered = True
            current["start"] = cur_sample
            continue

        if triggered and cur_sample - current["start"] > max_speech_samples:
            if use_max_poss_sil_at_max_speech and possible_ends:
                # The longest silence inside the current segment (first one on ties, like max()).
                prev_end, dur = max(possible_ends, key=lambda end: end[1])
                current["end"] = prev_end
                speeches.append(current)
                current = {}
                next_start = prev_end + dur
                if next_start < prev_end + cur_sample:
                    current["start"] = next_start
                else:
                    triggered = False
                prev_end = next_start = temp_end = 0
                possible_ends = []
            else:
                if prev_end:
                    current["end"] = prev_end
                    speeches.append(current)
                    current = {}
                    if next_start < prev_end:
                        triggered = False
                    else:
                        current["start"] = next_start
                    prev_end = next_start = temp_end = 0
                    possible_ends = []
                else:
                    current["end"] = cur_sample
                    speeches.append(current)
                    current = {}
                    prev_end = next_start = temp_end = 0
                    triggered = False
                    possible_ends = []
                    continue

        if prob < neg_threshold and triggered:
            if not temp_end:
                temp_end = cur_sample
            sil_dur_now = cur_sample - temp_end
            if (
                not use_max_poss_sil_at_max_speech
                and sil_dur_now > min_silence_samples_at_max_speech
            ):
                prev_end = temp_end
            if sil_dur_now < min_silence_samples:
                continue
            current["end"] = temp_end
            if current["end"] - current["start"] > min_speech_samples:
                speeches.append(current)
            current = {}
            prev_end = next_start = temp_end = 0
            triggered = False
            possible_ends = []
            continue

    if current and audio_length_samples - current["start"] > min_speech_samples:
        current["end"] = audio_length_samples
        speeches.append(current)
    return speeches, speech_pad_samples


def _options(probs, sampling_rate, threshold, neg_threshold, audio_length_samples):
    if sampling_rate not in (8000, 16000):
        raise ValueError(
            f"sampling_rate must be 8000 or 16000 (after decimation), got {sampling_rate}"
        )
    probs = [float(p) for p in np.asarray(probs, dtype=np.float64).reshape(-1)]
    if audio_length_samples is None:
        audio_length_samples = len(probs) * window_size(sampling_rate)
    if neg_threshold is None:
        neg_threshold = max(threshold - 0.15, 0.01)
    return probs, neg_threshold, audio_length_samples


def get_speech_timestamps(
    speech_probs,
    sampling_rate: int = 16000,
    threshold: float = 0.5,
    min_speech_duration_ms: int = 250,
    max_speech_duration_s: float = float("inf"),
    min_silence_duration_ms: int = 100,
    speech_pad_ms: int = 30,
    return_seconds: bool = False,
    time_resolution: int = 1,
    neg_threshold: float | None = None,
    min_silence_at_max_speech: int = 98,
    use_max_poss_sil_at_max_speech: bool = True,
    audio_length_samples: int | None = None,
    step: int = 1,
) -> list[dict]:
    """Speech segments as ``[{"start": s, "end": e}, ...]`` in samples (or seconds).

    Same parameters and defaults as ``silero_vad.get_speech_timestamps`` minus the model:
    ``speech_probs`` holds one probability per chunk, ``audio_length_samples`` the length of the
    (decimated) audio and ``step`` the decimation step applied before chunking.
    """
    probs, neg_threshold, audio_length_samples = _options(
        speech_probs, sampling_rate, threshold, neg_threshold, audio_length_samples
    )
    speeches, speech_pad_samples = _raw_segments(
        probs,
        sampling_rate,
        threshold,
        min_speech_duration_ms,
        max_speech_duration_s,
        min_silence_duration_ms,
        speech_pad_ms,
        neg_threshold,
        min_silence_at_max_speech,
        use_max_poss_sil_at_max_speech,
        audio_length_samples,
    )

    for i, speech in enumerate(speeches):
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - speech_pad_samples))
        if i != len(speeches) - 1:
            silence = speeches[i + 1]["start"] - speech["end"]
            if silence < 2 * speech_pad_samples:
                speech["end"] += int(silence // 2)
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - silence // 2))
            else:
                speech["end"] = int(min(audio_length_samples, speech["end"] + speech_pad_samples))
                speeches[i + 1]["start"] = int(
                    max(0, speeches[i + 1]["start"] - speech_pad_samples)
                )
        else:
            speech["end"] = int(min(audio_length_samples, speech["end"] + speech_pad_samples))

    if return_seconds:
        audio_length_seconds = audio_length_samples / sampling_rate
        for speech in speeches:
            speech["start"] = max(round(speech["start"] / sampling_rate, time_resolution), 0)
            speech["end"] = min(
                round(speech["end"] / sampling_rate, time_resolution), audio_length_seconds
            )
    elif step > 1:
        for speech in speeches:
            speech["start"] *= step
            speech["end"] *= step
    return speeches


def speech_segments(
    speech_probs,
    sampling_rate: int = 16000,
    threshold: float = 0.5,
    neg_threshold: float | None = None,
    audio_length_samples: int | None = None,
    **options,
) -> list[Segment]:
    """Unpadded segments with edges in chunk units and each edge's margin from its threshold.

    A start edge is the chunk whose probability reached ``threshold`` (margin ``p - threshold``);
    an end edge is the first chunk of the silence that closed the segment (margin
    ``neg_threshold - p``), or the end of the audio. Options are those of
    :func:`get_speech_timestamps` that shape segments (durations, max speech settings).
    """
    probs, neg_threshold, audio_length_samples = _options(
        speech_probs, sampling_rate, threshold, neg_threshold, audio_length_samples
    )
    window = window_size(sampling_rate)
    keys = (
        "min_speech_duration_ms",
        "max_speech_duration_s",
        "min_silence_duration_ms",
        "speech_pad_ms",
        "min_silence_at_max_speech",
        "use_max_poss_sil_at_max_speech",
    )
    unknown = sorted(set(options) - set(keys))
    if unknown:
        raise TypeError(f"unknown options {unknown}; accepted: {list(keys)}")
    defaults = dict(
        min_speech_duration_ms=250,
        max_speech_duration_s=float("inf"),
        min_silence_duration_ms=100,
        speech_pad_ms=30,
        min_silence_at_max_speech=98,
        use_max_poss_sil_at_max_speech=True,
    )
    defaults.update(options)
    speeches, _ = _raw_segments(
        probs,
        sampling_rate,
        threshold,
        neg_threshold=neg_threshold,
        audio_length_samples=audio_length_samples,
        **{k: defaults[k] for k in keys},
    )

    def edge(sample, limit: float, is_start: bool) -> Edge:
        chunk = int(math.ceil(sample / window))
        if chunk >= len(probs):
            return Edge(chunk, None, None)
        p = probs[chunk]
        return Edge(chunk, p, (p - limit) if is_start else (limit - p))

    return [
        Segment(edge(s["start"], threshold, True), edge(s["end"], neg_threshold, False))
        for s in speeches
    ]

"""The claims of this port, evaluated case by case.

Three kinds of outputs are gated:

- ``probabilities``: the per-chunk speech probabilities, held to a max-abs bound per chunk and a
  minimum cosine per case (:func:`check_probabilities`, built on :func:`paritygate.compare`);
- ``segments``: the speech segments the post-processor derives from those probabilities, edges
  measured in chunks (:func:`check_segments`). A missing or extra segment fails; every edge
  reports the reference probability of the chunk that decided it and its margin from the
  threshold it crossed, which says how close the edge was to moving;
- the post-processor itself, fed identical probabilities, at zero tolerance against the reference
  utility's timestamps (:func:`check_postprocessor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import postprocess
from vad_mlx import resolve_rate

import paritygate
from paritygate import Failure

__all__ = [
    "claim_bound",
    "CaseData",
    "SegmentCheck",
    "load_cases",
    "check_probabilities",
    "check_segments",
    "check_postprocessor",
    "segments_of",
    "timestamps_tree",
]

HERE = Path(__file__).resolve().parent
SPEC_PATH = HERE / "parity.toml"


def claim_bound(claim_id: str) -> float:
    """The bound of a claim in parity.toml: the one place the published numbers live."""
    import tomllib

    claims = tomllib.loads(SPEC_PATH.read_text())["claims"]
    if claim_id not in claims:
        raise paritygate.SpecError(
            f"{SPEC_PATH}: no [claims.{claim_id}] (claims: {', '.join(claims)})"
        )
    return claims[claim_id]["bound"]


@dataclass
class CaseData:
    """One canonical case with its stored reference."""

    name: str
    path: Path
    rate: int
    samples: np.ndarray
    reference: np.ndarray | None  # stored reference probabilities (None: the rate is rejected)
    reference_timestamps: list[dict] | None  # silero-vad's get_speech_timestamps, recorded

    @property
    def model_rate(self) -> int:
        return resolve_rate(self.rate)[0]

    @property
    def audio_length(self) -> int:
        """Length after decimation, as the reference's post-processing counts it."""
        step = resolve_rate(self.rate)[1]
        return -(-self.samples.size // step)

    @property
    def step(self) -> int:
        return resolve_rate(self.rate)[1]


def load_cases(include_rejected: bool = False) -> list[CaseData]:
    """The committed cases (sha256 checked) with their recorded references (``references/``,
    written by ``paritygate record parity.toml``)."""
    from make_cases import CASES_DIR, check, load_pins
    from runners import read_wav

    from paritygate import load_reference, load_spec

    bad = check()
    if bad:
        raise paritygate.DriftError(
            f"cases {bad} differ from their sha256 pins in "
            f"{CASES_DIR / 'cases.json'}; regenerate deliberately"
        )
    reference = load_reference(load_spec(SPEC_PATH))
    cases = []
    for name, pin in load_pins()["cases"].items():
        rate, samples = read_wav(CASES_DIR / pin["file"])
        entry = reference.cases.get(name)
        if entry is None:
            if include_rejected:
                cases.append(CaseData(name, CASES_DIR / pin["file"], rate, samples, None, None))
            continue
        if entry["input_sha256"] != pin["sha256"]:
            raise paritygate.DriftError(
                f"references/ were recorded for another version of case "
                f"{name!r}: re-record with paritygate record parity.toml"
            )
        outputs = reference.outputs(name)
        stamps = [{"start": int(a), "end": int(b)} for a, b in outputs["timestamps"]]
        cases.append(
            CaseData(name, CASES_DIR / pin["file"], rate, samples, outputs["probabilities"], stamps)
        )
    return cases


def check_probabilities(
    actual: np.ndarray, expected: np.ndarray, *, max_abs: float, min_cosine: float | None, case: str
) -> paritygate.Comparison:
    """Per-chunk probabilities: every chunk within ``max_abs``, the case's cosine >= bound.

    The cosine is skipped where the reference is all zeros (undefined); a zero-length case
    compares shapes only.
    """
    return paritygate.compare(
        {"probabilities": np.asarray(actual, dtype=np.float32)},
        {"probabilities": np.asarray(expected, dtype=np.float32)},
        atol=max_abs,
        min_cosine=min_cosine,
        label=case,
    )


def segments_of(
    probs: np.ndarray, case: CaseData, threshold: float = 0.5
) -> list[postprocess.Segment]:
    return postprocess.speech_segments(
        probs,
        sampling_rate=case.model_rate,
        threshold=threshold,
        audio_length_samples=case.audio_length,
    )


@dataclass
class EdgeReport:
    segment: int
    edge: str  # "start" or "end"
    expected_chunk: int
    actual_chunk: int | None
    delta: int | None
    reference_probability: float | None
    margin: float | None  # reference probability's distance from the threshold it crossed


@dataclass
class SegmentCheck:
    """Segment edges of one case, in chunks. Truthy when every edge is within the bound."""

    case: str
    passed: bool
    max_edge_delta: int
    observed_max_delta: int
    segments_expected: int
    segments_actual: int
    edges: list[EdgeReport] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def smallest_margin(self) -> float | None:
        margins = [e.margin for e in self.edges if e.margin is not None]
        return min(margins) if margins else None

    def describe(self) -> str:
        head = (
            f"{self.case}: segment edges {'pass' if self.passed else 'FAIL'} "
            f"(max delta {self.observed_max_delta} chunk(s), bound {self.max_edge_delta}; "
            f"{self.segments_actual} segment(s) vs {self.segments_expected} expected)"
        )
        return "\n".join([head] + [f"  {f.describe()}" for f in self.failures])


def check_segments(
    actual_probs: np.ndarray,
    reference_probs: np.ndarray,
    case: CaseData,
    *,
    max_edge_delta: int,
    threshold: float = 0.5,
) -> SegmentCheck:
    """Compare segment edges (in chunks) derived from candidate and reference probabilities.

    Segments are matched in order; a segment present on one side only is a failure (a missing
    or extra segment cannot be excused by any edge bound).
    """
    expected = segments_of(reference_probs, case, threshold)
    actual = segments_of(actual_probs, case, threshold)
    edges: list[EdgeReport] = []
    failures: list[Failure] = []
    worst = 0
    for i, ref_seg in enumerate(expected):
        cand = actual[i] if i < len(actual) else None
        for name in ("start", "end"):
            ref_edge = getattr(ref_seg, name)
            cand_chunk = getattr(cand, name).chunk if cand is not None else None
            delta = abs(cand_chunk - ref_edge.chunk) if cand_chunk is not None else None
            edges.append(
                EdgeReport(
                    i,
                    name,
                    ref_edge.chunk,
                    cand_chunk,
                    delta,
                    ref_edge.probability,
                    ref_edge.margin,
                )
            )
            if delta is not None:
                worst = max(worst, delta)
                if delta > max_edge_delta:
                    failures.append(
                        Failure(
                            metric="edge_delta_chunks",
                            bound=max_edge_delta,
                            observed=delta,
                            excess=delta - max_edge_delta,
                            where=f"segment {i}.{name}",
                            detail=f"chunk {cand_chunk}, reference chunk {ref_edge.chunk}; "
                            f"reference margin {_fmt(ref_edge.margin)}",
                        )
                    )
        if cand is None:
            failures.append(
                Failure(
                    metric="missing_segment",
                    bound=None,
                    observed=None,
                    where=f"segment {i}",
                    detail=f"reference chunks {ref_seg.start.chunk}-{ref_seg.end.chunk} "
                    "absent in the candidate",
                )
            )
    for i in range(len(expected), len(actual)):
        failures.append(
            Failure(
                metric="extra_segment",
                bound=None,
                observed=None,
                where=f"segment {i}",
                detail=f"candidate chunks {actual[i].start.chunk}-{actual[i].end.chunk} "
                "absent in the reference",
            )
        )
    return SegmentCheck(
        case.name, not failures, max_edge_delta, worst, len(expected), len(actual), edges, failures
    )


def check_postprocessor(case: CaseData) -> paritygate.Comparison:
    """The port's post-processor fed the stored reference probabilities must reproduce the
    reference utility's timestamps exactly (zero tolerance)."""
    ours = postprocess.get_speech_timestamps(
        case.reference,
        sampling_rate=case.model_rate,
        audio_length_samples=case.audio_length,
        step=case.step,
    )
    return paritygate.compare(
        timestamps_tree(ours),
        timestamps_tree(case.reference_timestamps),
        label=f"{case.name} post-processor",
    )


def timestamps_tree(timestamps: list[dict]) -> dict:
    """Timestamps keyed by segment index: a missing or extra segment is a missing/extra output."""
    return {
        "timestamps": {
            str(i): np.array([t["start"], t["end"]], dtype=np.int64)
            for i, t in enumerate(timestamps)
        }
    }


def _fmt(value: float | None) -> str:
    return "n/a (end of audio)" if value is None else f"{value:+.4f}"

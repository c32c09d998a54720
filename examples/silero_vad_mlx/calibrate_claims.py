"""Calibrate the probability claims with paritygate.calibration and write the bounds into
parity.toml (needs torch, silero-vad and espeak-ng; run once, deliberately).

Calibration set: the cases of cases/ plus extra speech recordings synthesized here the same way
as make_cases.py (other sentences, voices, speech gains and noise levels, seeded), so that
n >= 16. The max-abs claim is calibrated on the speech recordings only: on silence a state kept
in float16 moves probabilities by ~5e-6, inside the float32 noise of loud speech (~9e-6), so
max-abs cannot separate it there. The cosine claim, which does (the probabilities of silence are
tiny, so relative changes show), is calibrated on every case with more than one chunk (the
cosine of a one-element vector is 1 whatever its value, so that case carries no signal), and
without a margin: silence's own noise (1 - 6.8e-10) leaves no room for one below the float16
state's smallest signal (1 - 9.6e-10). The max-abs claim is the primary one.

For each case the baseline is the TorchScript reference and the candidates are the MLX port and
ONNX Runtime (outputs ``mlx/probabilities`` and ``onnxruntime/probabilities``; the worst of the
two per case is the noise). Model-level mutations are the planted port bugs of
``vad_mlx.PortVariant``; paritygate's output-level mutations run as well.

    python calibrate_claims.py            # print the calibration summaries
    python calibrate_claims.py --write    # also write bounds and basis into parity.toml
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_cases  # noqa: E402
import runners  # noqa: E402
from vad_mlx import PortVariant  # noqa: E402

MUTATIONS = {
    "stft-zero-padding": PortVariant(stft_zero_padding=True),
    "lstm-gates-ifog": PortVariant(lstm_gate_order="ifog"),
    "context-two-chunks-back": PortVariant(context_lag=2),
    "context-from-the-chunk-itself": PortVariant(context_lag=0),
    "state-in-float16": PortVariant(state_dtype="float16"),
}
EDGE_CASES = {"silence", "shorter_than_chunk"}

EXTRA_TEXTS = [
    "Turn left at the next corner and keep going.",
    "The meeting starts at nine thirty tomorrow morning.",
    "Numbers like three hundred and twelve are easy to say.",
    "She sells sea shells by the sea shore.",
]


@dataclass(frozen=True)
class CalibrationCase:
    name: str
    rate: int
    samples: np.ndarray


def extra_cases() -> list[CalibrationCase]:
    from scipy.signal import resample_poly

    out = []
    voices = ["en", "en-us", "en-gb", "en"]
    for i in range(12):
        text = EXTRA_TEXTS[i % len(EXTRA_TEXTS)]
        gain = (0.5, 0.2, 0.1)[i % 3]
        noise = (0.002, 0.02, 0.04, 0.06)[i % 4]
        audio = make_cases.layout([("gap", 0.3 + 0.1 * (i % 3)), ("say", text), ("gap", 0.4)],
                                  voices[i % 4], 140 + 10 * (i % 5), gain)
        audio = audio + noise * make_cases.pink_noise(np.random.default_rng(100 + i), audio.size)
        audio = np.clip(audio, -1.0, 32767 / 32768)
        # Quantize like the committed WAVs.
        audio = (np.round(audio * 32768.0) / 32768.0).astype(np.float32)
        if i % 6 == 5:
            audio8 = resample_poly(audio.astype(np.float64), 1, 2).astype(np.float32)
            out.append(CalibrationCase(f"extra_{i:02d}_8k", 8000, audio8))
        else:
            out.append(CalibrationCase(f"extra_{i:02d}", 16000, audio))
    return out


def canonical_cases() -> list[CalibrationCase]:
    out = []
    for name, pin in make_cases.load_pins()["cases"].items():
        rate, samples = runners.read_wav(make_cases.CASES_DIR / pin["file"])
        if rate == 22050:
            continue
        out.append(CalibrationCase(name, rate, samples))
    return out


_REFERENCE: dict[str, np.ndarray] = {}


def reference(case: CalibrationCase) -> np.ndarray:
    if case.name not in _REFERENCE:
        _REFERENCE[case.name] = runners.reference_probabilities(case.samples, case.rate)
    return _REFERENCE[case.name]


def run_pair(case: CalibrationCase):
    ref = reference(case)
    baseline = {"mlx": {"probabilities": ref}, "onnxruntime": {"probabilities": ref}}
    candidate = {"mlx": {"probabilities": runners.mlx_probabilities(case.samples, case.rate)},
                 "onnxruntime": {"probabilities": runners.onnx_probabilities(case.samples,
                                                                             case.rate)}}
    return baseline, candidate


def model_mutation(variant: PortVariant):
    def mutated(case: CalibrationCase):
        return {"mlx": {"probabilities": runners.mlx_probabilities(case.samples, case.rate,
                                                                   variant)},
                "onnxruntime": {"probabilities": runners.onnx_probabilities(case.samples,
                                                                            case.rate)}}
    return mutated


def segment_edge_basis(cases: list[CalibrationCase]) -> dict:
    """Edge deltas (chunks) of both candidates and of each planted bug, and the smallest margin
    of a reference edge from its threshold, over the calibration set."""
    import datetime as dt

    import vad_gate

    def check(case, probs):
        data = vad_gate.CaseData(case.name, Path(case.name), case.rate, case.samples,
                                 reference(case), None)
        return vad_gate.check_segments(probs, reference(case), data, max_edge_delta=0)

    worst, margins, segments = 0, [], 0
    for case in cases:
        for probs in (runners.mlx_probabilities(case.samples, case.rate),
                      runners.onnx_probabilities(case.samples, case.rate)):
            result = check(case, probs)
            worst = max(worst, result.observed_max_delta)
            if not result.passed:
                worst = max(worst, 10**6)  # a missing or extra segment
            if result.smallest_margin is not None:
                margins.append(result.smallest_margin)
        segments += result.segments_expected
    caught = {}
    for name, variant in MUTATIONS.items():
        caught[name] = sum(not check(c, runners.mlx_probabilities(c.samples, c.rate, variant))
                           for c in cases)
    return {"metric": "max_edge_delta", "unit": "chunks", "n": len(cases),
            "segments": segments, "largest_noise": worst,
            "smallest_reference_margin": min(margins) if margins else None,
            "mutation_cases_caught": caught,
            "cases": [c.name for c in cases],
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def main(argv: list[str] | None = None) -> int:
    from paritygate.calibration import calibrate, write_bound
    from paritygate.spec import update_claim

    parser = argparse.ArgumentParser(description="Calibrate the probability claims.")
    parser.add_argument("--write", action="store_true", help="write bounds into parity.toml")
    parser.add_argument("--json", type=Path, help="also save the calibration results as JSON")
    args = parser.parse_args(argv)
    extra = extra_cases()
    model_mutations = {name: model_mutation(v) for name, v in MUTATIONS.items()}
    results = {}
    plans = (("probability-max-abs", "max_abs", EDGE_CASES, {"another CPU or BLAS build": 2.0}),
             ("probability-cosine", "cosine", {"shorter_than_chunk"}, None))
    for claim_id, metric, excluded, margin in plans:
        cases = [c for c in canonical_cases() + extra if c.name not in excluded]
        result = calibrate(run_pair, cases, metric=metric, model_mutations=model_mutations,
                           margin_for=margin, mode="stored", claim_id=claim_id)
        print(result.summary())
        print()
        results[claim_id] = result
        if args.write:
            fields = write_bound(HERE / "parity.toml", claim_id, result)
            update_claim(HERE / "parity.toml", claim_id, basis={
                **fields["basis"], "cases": [c.name for c in cases],
                "evidence": "calibration/probability-claims.json"})
            print(f"wrote [claims.{claim_id}] bound = {fields.get('bound')}")
    edges = segment_edge_basis(canonical_cases() + extra)
    print(json.dumps(edges, indent=1))
    if args.write:
        update_claim(HERE / "parity.toml", "segment-edges", bound=0, status="calibrated",
                     basis=edges)
    if args.json:
        args.json.write_text(json.dumps({k: r.to_dict() for k, r in results.items()}, indent=1))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

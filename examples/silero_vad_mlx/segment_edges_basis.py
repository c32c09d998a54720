"""The basis of the ``segment-edges`` claim, written into parity.toml (run once, deliberately).

``paritygate calibrate`` measures claims on output pairs (max-abs, cosine, exact ...); the
segment-edge claim is measured in chunks on segments matched in order (the claim's own verdict,
:func:`paritygate.check_equivalence`), so its bound, 0 chunks, rests on this script instead: over
every gated case of the spec with its recorded reference, both candidates' edge deltas (the
noise), each reference edge's probability margin from the threshold it crossed and the smallest
of them (how close an edge was to moving), and how many cases each planted port bug of
``vad_mlx.PortVariant`` moves, drops or adds a segment in (the signal).

    python segment_edges_basis.py            # print the basis
    python segment_edges_basis.py --write    # also write it into [claims.segment-edges]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import runners  # noqa: E402
from vad_mlx import PortVariant  # noqa: E402

from paritygate import check_equivalence, load_spec  # noqa: E402

MUTATIONS = {
    "stft-zero-padding": PortVariant(stft_zero_padding=True),
    "lstm-gates-ifog": PortVariant(lstm_gate_order="ifog"),
    "context-two-chunks-back": PortVariant(context_lag=2),
    "context-from-the-chunk-itself": PortVariant(context_lag=0),
    "state-in-float16": PortVariant(state_dtype="float16"),
}


def segment_edge_basis(cases: list[runners.VadCase]) -> dict:
    # The claim as parity.toml states it, at the bound this basis is for: 0 chunks.
    claim = replace(load_spec(runners.SPEC_PATH).claims["segment-edges"], bound=0)

    def check(case, probs):
        mine = runners.gate_outputs(probs, case.rate, case.samples.size)
        return check_equivalence(claim, mine, case.recorded, case=case.name)

    worst, margins, segments, edges = 0, [], 0, {}
    for case in cases:
        reference = runners.speech_segments(case.reference, case.rate, case.samples.size)
        edges[case.name] = [
            {
                "segment": i,
                "edge": name,
                "chunk": edge.chunk,
                "reference_probability": edge.probability,
                "margin": edge.margin,
            }
            for i, segment in enumerate(reference)
            for name, edge in (("start", segment.start), ("end", segment.end))
        ]
        margins += [e["margin"] for e in edges[case.name] if e["margin"] is not None]
        segments += len(reference)
        for probs in (
            runners.mlx_probabilities(case.samples, case.rate),
            runners.onnx_probabilities(case.samples, case.rate),
        ):
            verdict = check(case, probs)
            if not verdict:
                raise SystemExit(
                    "\n".join(f.describe() for f in verdict.failures)
                    + "\nthe candidates do not meet a 0-chunk bound: the claim cannot be "
                    "written as it stands"
                )
            worst = max(worst, verdict.observed or 0)
    caught = {
        name: sum(
            not check(c, runners.mlx_probabilities(c.samples, c.rate, variant)) for c in cases
        )
        for name, variant in MUTATIONS.items()
    }
    return {
        "metric": "max_edge_delta",
        "unit": "chunks",
        "n": len(cases),
        "segments": segments,
        "largest_noise": worst,
        "smallest_reference_margin": min(margins) if margins else None,
        "mutation_cases_caught": caught,
        "cases": [c.name for c in cases],
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "edges": edges,
    }


def main(argv: list[str] | None = None) -> int:
    from paritygate import update_claim

    parser = argparse.ArgumentParser(description="Measure the segment-edges claim's basis.")
    parser.add_argument(
        "--write",
        action="store_true",
        help="write the basis into parity.toml and, with every reference edge's "
        "margin, into calibration/segment-edges.json",
    )
    args = parser.parse_args(argv)
    basis = segment_edge_basis(runners.gated_cases())
    print(json.dumps(basis, indent=1))
    if args.write:
        (HERE / "calibration" / "segment-edges.json").write_text(json.dumps(basis, indent=1) + "\n")
        edges = basis.pop("edges")
        count = sum(map(len, edges.values()))
        basis["edges"] = f"{count} edges with their margins in calibration/segment-edges.json"
        update_claim(
            HERE / "parity.toml", "segment-edges", bound=0, status="calibrated", basis=basis
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The claims' basis: the segment-edge basis script (what `paritygate calibrate` cannot measure)
and the committed calibration evidence the spec and README cite."""

from __future__ import annotations

import json

import pytest


def test_segment_edge_basis_reports_margins_and_the_bugs_it_catches(segment_edges_basis, cases):
    chosen = [c for c in cases if c.name in ("noisy_near_threshold", "short_pauses")]
    basis = segment_edges_basis.segment_edge_basis(chosen)
    assert basis["largest_noise"] == 0 and basis["n"] == 2
    assert basis["cases"] == ["noisy_near_threshold", "short_pauses"]
    edges = [e for case_edges in basis["edges"].values() for e in case_edges]
    assert len(edges) == 2 * basis["segments"] and {e["edge"] for e in edges} == {"start", "end"}
    assert all(e["margin"] > 0 and 0 <= e["reference_probability"] <= 1 for e in edges)
    assert basis["smallest_reference_margin"] == min(e["margin"] for e in edges)
    # The context bug drops the segment of noisy_near_threshold; the gate-order bug moves edges.
    assert basis["mutation_cases_caught"]["context-two-chunks-back"] >= 1
    assert basis["mutation_cases_caught"]["lstm-gates-ifog"] >= 1


def test_committed_evidence_is_what_the_spec_basis_says(example_folder):
    from paritygate import load_spec

    spec = load_spec(example_folder / "parity.toml")
    edges = json.loads((example_folder / "calibration" / "segment-edges.json").read_text())
    basis = spec.claims["segment-edges"].basis
    assert edges["smallest_reference_margin"] == basis["smallest_reference_margin"]
    # the 20 recordings; the boundary cases came after the calibration
    recordings = [n for n in spec.cases if not n.startswith(("pause_", "short_pauses_edges."))]
    assert edges["cases"] == basis["cases"] == recordings
    assert edges["mutation_cases_caught"] == basis["mutation_cases_caught"]
    for claim_id, claim in spec.claims.items():
        if claim_id == "segment-edges":
            continue
        evidence = json.loads((example_folder / "calibration" / f"{claim_id}.json").read_text())
        assert evidence["claim_id"] == claim_id and not evidence["refused"]
        assert evidence["cases"] == claim.basis.get("cases", list(spec.cases)), claim_id
        assert evidence["basis"]["largest_noise"] == pytest.approx(claim.basis["largest_noise"])

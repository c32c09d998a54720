"""The dataset oracle: a claim over every case at once (agreement with the reference's
decisions, accuracy against the cases' labels, calibration error), measured by the claim-metric
registry on the score rows of the covered outputs. The gate and the calibration of dataset
claims both judge through :func:`dataset_verdict`."""

from __future__ import annotations

from typing import Any

from .claim_metrics import Rows
from .equivalence import structure_failures
from .results import ClaimVerdict, Failure
from .spec import Claim, Spec
from .structured import score_rows

__all__ = ["dataset_verdict"]


def dataset_verdict(
    claim: Claim,
    candidate: str,
    spec: Spec,
    cases: list[str],
    actual: dict[str, dict[str, Any]],
    expected: dict[str, dict[str, Any]] | None,
) -> ClaimVerdict:
    """A dataset claim's verdict for one candidate: the claim's metric (its registry entry's
    measure) over the score rows of every covered output of every case, pooled; labels and the
    reference's rows where the metric needs them. The calibration of dataset claims measures
    through this same function."""
    import numpy as np

    entry = claim.metric_entry
    failures: list[Failure] = []
    data = Rows([], [], [], [], claim.params, tuple(claim.outputs), bound=claim.bound)
    label_key = claim.params.get("label", "label")
    for case in cases:
        out = actual.get(case)
        if out is None:
            failures.append(
                Failure(
                    "missing_case",
                    None,
                    None,
                    where=case,
                    detail="the candidate produced no outputs (its run error says why)",
                )
            )
            continue
        covered = claim.covered(out)
        reference = claim.covered(expected.get(case, {})) if expected is not None else {}
        failures.extend(
            Failure(f.metric, None, None, where=f"case {case}: {f.where}", detail=f.detail)
            for f in (structure_failures(covered, reference) if expected is not None else [])
        )
        for name in sorted(covered):
            scores = score_rows(covered[name])
            data.rows.append(scores)
            suffix = f"/{name}" if len(covered) > 1 else ""
            data.origins.extend(
                f"{case}{suffix}" + (f"[{i}]" if len(scores) > 1 else "")
                for i in range(len(scores))
            )
            if "reference" in entry.needs and name in reference:
                data.reference.append(score_rows(reference[name]))
            if "labels" in entry.needs:
                label = np.asarray(spec.cases[case].labels[label_key]).reshape(-1)
                if len(label) != len(scores):
                    failures.append(
                        Failure(
                            "labels",
                            len(scores),
                            len(label),
                            where=f"case {case}: {name}",
                            detail="one label per row of scores",
                        )
                    )
                    label = np.resize(label, len(scores))
                data.labels.append(label)
    evidence: dict[str, Any] = {"cases": len(cases)}
    observed: float | None = None
    if data.rows:
        evidence["rows"] = int(len(data.decided))
        observed = entry.measure(data)
        evidence.update(data.evidence)
        failures.extend(Failure(claim.metric, None, None, detail=d) for d in data.problems)
    if observed is None:
        detail = "nothing to measure"
        if not data.rows:
            detail += (
                f": no candidate output matches {', '.join(claim.outputs)}"
                f" (claims.{claim.id}.outputs)"
            )
        failures.append(Failure(claim.metric, claim.bound, None, detail=detail))
    elif not claim.holds(observed):
        failures.append(
            Failure(
                claim.metric,
                claim.bound,
                observed,
                claim.excess(observed),
                where=f"over {len(cases)} cases",
                detail=_ids_detail(evidence),
            )
        )
    return ClaimVerdict(
        claim_id=claim.id,
        candidate=candidate,
        case=None,
        passed=not failures,
        oracle=claim.oracle,
        metric=claim.metric,
        bound=claim.bound,
        unit=claim.unit,
        observed=observed,
        excess=None if observed is None or claim.holds(observed) else claim.excess(observed),
        failures=failures,
        evidence=evidence,
    )


def _ids_detail(evidence: dict[str, Any]) -> str:
    """The failure's detail: the measure's own summary (a non-inferiority claim's difference and
    confidence bound) where it wrote one, then the first rows that missed."""
    summary = evidence.get("summary", "")
    ids = evidence.get("disagreeing") or []
    if not ids:
        return summary
    more = evidence.get("disagreeing_count", len(ids)) - len(ids)
    text = f"{evidence.get('disagreeing_word', 'disagreeing')}: {', '.join(ids)}"
    text += f" and {more} more" if more > 0 else ""
    return f"{summary}; {text}" if summary else text

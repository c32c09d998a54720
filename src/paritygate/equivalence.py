"""The equivalence oracle: a changed numerical path (a re-walked forward pass, a compiled graph,
another runtime) held to a measured tolerance on the claim's metric.

Per-case claim evaluation lives here, below the gate: :func:`evaluate_claim` turns one case's
flattened outputs into a claim verdict, reading the metric, its tolerance and its comparison from
the claim-metric registry (:mod:`paritygate.claim_metrics`); an approximation claim's activity
band is checked with :func:`paritygate.approximation.check_activity`. The gate, the paired oracle
and a project's own tests share it: :func:`check_equivalence` holds in-process outputs (framework
arrays included, evaluated first) to a claim of its spec, with the same verdict the gate gives.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from ._host import flatten, synchronize_tree, to_numpy
from .approximation import CALLS_PREFIX, check_activity
from .claim_metrics import Pair
from .errors import InputError
from .results import ClaimVerdict, Failure
from .spec import Claim, load_spec

__all__ = ["check_equivalence", "evaluate_claim", "structure_failures"]


def check_equivalence(
    claim: Any,
    actual: Any,
    expected: Any,
    *,
    spec: str | Path | None = None,
    candidate: str = "candidate",
    case: str | None = None,
) -> ClaimVerdict:
    """The claim's verdict on one pair of output trees (``actual`` = candidate, ``expected`` =
    baseline). ``claim`` is a :class:`~paritygate.spec.Claim`, or a claim id with ``spec``."""
    if not isinstance(claim, Claim):
        if spec is None:
            raise InputError(f"claim {claim!r} is an id: pass spec= to look it up")
        loaded = load_spec(spec)
        if claim not in loaded.claims:
            raise InputError(
                f"no claim {claim!r} (claims: {', '.join(loaded.claims) or 'none'})",
                where=str(spec),
            )
        claim = loaded.claims[claim]
    if claim.oracle != "equivalence":
        raise InputError(
            f"claim {claim.id!r} answers the {claim.oracle} question, not equivalence",
            hint="no-op claims run through paritygate.paired; approximation claims through the "
            "gate",
        )
    return evaluate_claim(
        claim, candidate, case, _host(actual, "actual"), _host(expected, "expected")
    )


def _host(tree: Any, side: str) -> dict[str, Any]:
    leaves = flatten(tree)
    synchronize_tree(leaves)
    host = {}
    for path, value in leaves.items():
        array = to_numpy(value, path=f"{side}: {path}")
        host[path] = value if array is None else array
    return host


# --------------------------------------------------------------------------------------------
# Per-case claim evaluation


def structure_failures(
    actual: dict[str, Any],
    expected: dict[str, Any],
    actual_side: str = "the candidate",
    expected_side: str = "the reference",
) -> list[Failure]:
    """A failure for every output the expected side holds and the actual side lacks
    (``missing_output``), and back (``extra_output``), each naming both sides."""
    failures = []
    for name in sorted(set(expected) - set(actual)):
        failures.append(
            Failure(
                "missing_output",
                None,
                None,
                where=name,
                detail=f"in {expected_side}, not produced by {actual_side}",
            )
        )
    for name in sorted(set(actual) - set(expected)):
        failures.append(
            Failure(
                "extra_output",
                None,
                None,
                where=name,
                detail=f"produced by {actual_side}, not in {expected_side}",
            )
        )
    return failures


def _element(
    claim: Claim, actual: dict[str, Any], expected: dict[str, Any]
) -> tuple[float | None, list[Failure], dict[str, Any]]:
    metric = claim.metric
    entry = claim.metric_entry
    tol = entry.tolerance(claim.bound, claim.params)
    failures: list[Failure] = []
    evidence: dict[str, Any] = {}
    # None when no output was compared (both missing): no observed value, not an exact 0
    worst: float | None = None
    for name in sorted(set(actual) & set(expected)):
        a, e = actual[name], expected[name]
        pair = Pair(a, e, name, claim.params, tol)
        try:
            oc = pair.compared
        except InputError as exc:
            failures.append(
                Failure(
                    "shape" if "shape" in exc.message else "input",
                    None,
                    None,
                    where=name,
                    detail=exc.message,
                )
            )
            worst = math.inf
            continue
        # An output with a different number of elements (an empty candidate against a non-empty
        # reference: a port that found no segments) differs whatever the bound; its max-abs over
        # no element reads 0 and must not pass.
        sized = [f for f in oc.failures if f.metric == "size"]
        if sized:
            failures.extend(replace(f, where=name) for f in sized)
            worst = math.inf
            continue
        observed = entry.measure(pair)
        if observed is None:  # e.g. no ULP distance between integer outputs: equal or not
            observed = 0 if oc.max_abs == 0 else math.inf
        nonfinite = [f for f in oc.failures if f.metric in ("nan", "inf")]
        if nonfinite:
            observed = math.inf
        evidence[name] = {
            "max_abs": oc.max_abs,
            "mean_abs": oc.mean_abs,
            "max_rel": oc.max_rel,
            "cosine": oc.cosine,
            "one_minus_cosine": oc.one_minus_cosine,
            "ulp_max": oc.ulp_max,
            "mismatches": oc.mismatches,
            "size": oc.size,
            "compared_as": oc.compared_as,
            "promotion": oc.promotion,
            "atol_needed": oc.atol_needed,
            "worst": [
                {
                    "index": list(el.index),
                    "actual": el.actual,
                    "expected": el.expected,
                    "abs_diff": el.abs_diff,
                }
                for el in oc.worst[:5]
            ],
        }
        if metric == "exact" and (getattr(a, "dtype", None) != getattr(e, "dtype", None)):
            failures.append(
                Failure(
                    "dtype",
                    str(getattr(e, "dtype", "")),
                    str(getattr(a, "dtype", "")),
                    where=name,
                    detail="byte equality needs the same dtype",
                )
            )
        worst = observed if worst is None or observed > worst else worst
        if not claim.holds(observed):
            where = name
            if oc.worst:
                where += " at index " + ",".join(str(i) for i in oc.worst[0].index)
            detail = "; ".join(f.describe() for f in nonfinite)
            if oc.worst and not nonfinite:
                el = oc.worst[0]
                detail = (
                    f"actual {el.actual}, expected {el.expected}; {oc.mismatches} of {oc.size} "
                    "elements beyond the bound"
                )
            failures.append(
                Failure(
                    metric,
                    claim.bound,
                    observed,
                    claim.excess(observed),
                    where=where,
                    detail=detail,
                )
            )
    return worst, failures, evidence


def _byte_equal(actual: dict[str, Any], expected: dict[str, Any]) -> bool:
    import numpy as np

    if set(actual) != set(expected):
        return False
    for name, value in actual.items():
        a, e = np.asarray(value), np.asarray(expected[name])
        if a.dtype != e.dtype or a.shape != e.shape or a.tobytes() != e.tobytes():
            return False
    return True


def _boxes(tree: dict[str, Any]) -> dict[str, Any]:
    """Covered outputs as boxes keyed by label: the output names without their common folder
    ('boxes/editor' -> 'editor'); an (N, 4) output contributes 'name/0' ... 'name/N-1'."""
    import numpy as np

    names = sorted(tree)
    parts = [n.split("/") for n in names]
    common = 0
    while all(len(p) > common + 1 for p in parts) and len({p[common] for p in parts}) == 1:
        common += 1
    labels: dict[str, Any] = {}
    for name, split in zip(names, parts):
        label = "/".join(split[common:])
        array = np.asarray(tree[name])
        if array.ndim == 2:
            for i, row in enumerate(array):
                labels[f"{label}/{i}"] = row
        else:
            labels[label] = array
    return labels


def _edge(
    claim: Claim, actual: dict[str, Any], expected: dict[str, Any]
) -> tuple[float | None, list[Failure], dict[str, Any]]:
    from .structured import BOX_EDGES, compare_keyed_boxes

    common = sorted(set(actual) & set(expected))
    if not common:
        return None, [], {}
    if claim.params.get("match") == "iou":
        return _iou_edges(claim, actual, expected, common)
    edge_names = tuple(claim.params.get("edges", BOX_EDGES))
    kind = "box" if edge_names == BOX_EDGES else "element"
    try:
        result = compare_keyed_boxes(
            _boxes({k: actual[k] for k in common}),
            _boxes({k: expected[k] for k in common}),
            max_edge_delta=claim.bound,
            edge_names=edge_names,
        )
    except InputError as exc:
        return math.inf, [Failure("input", None, None, detail=exc.message)], {}
    unit = f" {claim.unit}" if claim.unit else ""
    failures = []
    for f in result.failures:
        if f.metric == "edge_delta":
            label, edge = f.where.rsplit(".", 1)
            failures.append(
                Failure(
                    "edge_delta",
                    f.bound,
                    f.observed,
                    f.excess,
                    where=f"{kind} {label}, edge {edge}",
                    detail=f"{f.detail}{unit}",
                )
            )
        else:
            failures.append(f)
    evidence = {
        "edge_deltas": result.edge_deltas,
        "worst": result.worst,
        "bound_that_passes": result.bound_that_passes,
    }
    return result.observed_max_delta, failures, evidence


def _iou_edges(
    claim: Claim, actual: dict[str, Any], expected: dict[str, Any], common: list[str]
) -> tuple[float | None, list[Failure], dict[str, Any]]:
    """Unlabelled boxes (each covered output an (n, 4) array): paired by an optimal IoU
    assignment, per-edge deltas of every matched pair against the bound; an unmatched box on
    either side is a failure (its worst value is infinite)."""
    from .structured import match_boxes

    min_iou = float(claim.params.get("min_iou", 0.5))
    unit = f" {claim.unit}" if claim.unit else ""
    failures: list[Failure] = []
    evidence: dict[str, Any] = {}
    worst: float | None = None
    for name in common:
        try:
            result = match_boxes(
                actual[name], expected[name], min_iou=min_iou, max_edge_delta=claim.bound, path=name
            )
        except InputError as exc:
            failures.append(Failure("input", None, None, where=name, detail=exc.message))
            worst = math.inf
            continue
        observed = result.observed_max_delta
        if result.unmatched_actual or result.unmatched_expected:
            observed = math.inf
        if observed is not None:
            worst = observed if worst is None else max(worst, observed)
        for f in result.failures:
            detail = f"{f.detail}{unit}" if f.metric == "edge_delta" else f.detail
            failures.append(replace(f, where=f"{name} {f.where}", detail=detail))
        evidence[name] = {
            "pairs": result.pairs,
            "min_iou": min_iou,
            "observed_min_iou": result.observed_min_iou,
            "unmatched_actual": result.unmatched_actual,
            "unmatched_expected": result.unmatched_expected,
        }
    return worst, failures, evidence


def _output(
    claim: Claim,
    actual: dict[str, Any],
    expected: dict[str, Any],
    trees: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> tuple[float | None, list[Failure], dict[str, Any]]:
    entry = claim.metric_entry
    failures: list[Failure] = []
    evidence: dict[str, Any] = {}
    observed_all: list[float] = []
    for name in sorted(set(actual) & set(expected)):
        pair = Pair(
            actual[name], expected[name], name, claim.params, bound=claim.bound, trees=trees
        )
        try:
            if entry.judge is not None:
                # A sequence metric judges the pair itself: its failures name the position
                # (token, step) and the decoded pieces there.
                judged = entry.judge(pair)
                value = judged.value
                evidence[name] = dict(judged.evidence)
                evidence[name].setdefault(claim.metric, value)
                failures.extend(
                    replace(f, where=f"{name} {f.where}".strip()) for f in judged.failures
                )
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    observed_all.append(value)
                if not claim.holds(value) and not judged.failures:
                    failures.append(
                        Failure(
                            claim.metric,
                            claim.bound,
                            value,
                            None if value is None else claim.excess(value),
                            where=name,
                        )
                    )
                continue
            if entry.comparison == "compare":
                oc = pair.compared
                value = entry.measure(pair)
                evidence[name] = {
                    "cosine": oc.cosine,
                    "one_minus_cosine": oc.one_minus_cosine,
                    "mean_abs": oc.mean_abs,
                    "max_abs": oc.max_abs,
                    "cosine_undefined": oc.cosine_undefined,
                }
                evidence[name].setdefault(claim.metric, value)
                detail = f"undefined: {oc.cosine_undefined}" if value is None else ""
                # A different element count, or NaN / an infinity on one side only: the sums run
                # over positions both sides hold finite values, so the metric alone would read
                # as if they matched.
                broken = [f for f in oc.failures if f.metric in ("size", "nan", "inf")]
                if broken and value is not None:
                    value = math.inf if claim.direction == "max" else None
                    detail = "; ".join(f.describe() for f in broken)
                elif broken:
                    detail = "; ".join(
                        [detail] + [f.describe() for f in broken if f.metric == "size"]
                    )
            else:
                res = pair.images
                value = entry.measure(pair)
                evidence[name] = {
                    "ssim": res.ssim,
                    "psnr": res.psnr,
                    "mse": res.mse,
                    "max_abs": res.max_abs,
                }
                detail = ""
        except InputError as exc:
            failures.append(Failure("input", None, None, where=name, detail=exc.message))
            observed_all.append(math.inf if claim.direction == "max" else -math.inf)
            continue
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            observed_all.append(value)
        if not claim.holds(value):
            failures.append(
                Failure(
                    claim.metric,
                    claim.bound,
                    value,
                    None if value is None else claim.excess(value),
                    where=name,
                    detail=detail,
                )
            )
    if not observed_all:
        return None, failures, evidence
    worst = max(observed_all) if claim.direction == "max" else min(observed_all)
    return worst, failures, evidence


# Failures that no bound of the claim's metric can fix (``bound_that_passes`` is then absent).
STRUCTURAL_FAILURES = ("missing_output", "extra_output", "no_output", "shape", "size", "dtype")


def _no_bound_fixes(failure: Failure) -> bool:
    return failure.metric in STRUCTURAL_FAILURES or failure.metric.startswith(("activity", "input"))


def evaluate_claim(
    claim: Claim, candidate: str, case: str | None, actual: dict[str, Any], expected: dict[str, Any]
) -> ClaimVerdict:
    """One per-case verdict (element, edge or output scope) of ``claim`` on flattened outputs.

    A claim with an activity band also requires the candidate's counter output (e.g. skipped
    steps) to lie in the band, so that an optimization that does nothing cannot pass."""
    counters = {}
    reference_counts = None
    if claim.activity is not None and claim.activity.counter in actual:
        counters[claim.activity.counter] = actual[claim.activity.counter]
    if claim.activity is not None and claim.activity.counter in expected:
        reference_counts = {claim.activity.counter: expected[claim.activity.counter]}
    # Sequence metrics read other outputs of the case beside the covered ones (greedy_divergence
    # the per-step logits, delta_ppl the target ids).
    trees = (dict(actual), dict(expected))
    # Calls paritygate counted travel as outputs of their own; they are activity evidence only.
    actual = {
        k: v
        for k, v in claim.covered(actual).items()
        if not k.startswith(CALLS_PREFIX) and (k not in counters or k in expected)
    }
    expected = {k: v for k, v in claim.covered(expected).items() if not k.startswith(CALLS_PREFIX)}
    failures = structure_failures(actual, expected)
    if claim.activity is not None:
        activity_failure = check_activity(counters, claim.activity, reference_counts)
        if activity_failure is not None:
            failures.append(activity_failure)
        if claim.activity.differ and actual and _byte_equal(actual, expected):
            failures.append(
                Failure(
                    "activity:differ",
                    "differs from the reference",
                    "byte-equal",
                    detail="the candidate's outputs are byte-equal to the reference's: the "
                    "approximation did not act (the claim requires a measurable difference)",
                )
            )
    if claim.scope == "element":
        observed, more, evidence = _element(claim, actual, expected)
    elif claim.scope == "edge":
        observed, more, evidence = _edge(claim, actual, expected)
    elif claim.scope == "output":
        observed, more, evidence = _output(claim, actual, expected, trees)
    else:
        raise ValueError(f"claim scope {claim.scope} is not evaluated per case")
    failures.extend(more)
    if not expected:
        failures.append(
            Failure(
                "no_output",
                None,
                None,
                detail="the reference holds no output this claim covers "
                f"({', '.join(claim.outputs)})",
            )
        )
    excess = None
    if observed is not None and not claim.holds(observed):
        excess = claim.excess(observed)
    if any(_no_bound_fixes(f) for f in failures):
        # A missing output, a failed activity band, a shape or dtype mismatch: no bound of the
        # claim's metric would have held, whatever the observed value of what was compared.
        evidence.pop("bound_that_passes", None)
    elif (
        observed is not None
        and "bound_that_passes" not in evidence
        and isinstance(observed, (int, float))
        and math.isfinite(observed)
    ):
        # One documented key for every claim kind: the tightest bound this case would meet.
        evidence["bound_that_passes"] = observed
    return ClaimVerdict(
        claim_id=claim.id,
        candidate=candidate,
        case=case,
        passed=not failures,
        oracle=claim.oracle,
        metric=claim.metric,
        bound=claim.bound,
        unit=claim.unit,
        observed=observed,
        excess=excess,
        failures=failures,
        evidence=evidence,
    )

"""The speed oracle: a speed claim (latency percentiles, speedup over the reference) measured as
an experiment through :mod:`paritygate.bench`, on the code the other claims checked."""

from __future__ import annotations

import math
from typing import Any

from .bench import min_samples_for, percentile, run_bench, time_side
from .claim_metrics import unit_of
from .compare import compare
from .errors import RunFailure, SpecError, UserError
from .results import ClaimVerdict, Failure
from .runners import make_runner
from .spec import Claim, Spec

__all__ = ["speed_verdict", "SPEED_QUANTILES"]

SPEED_QUANTILES = {"p50_ms": 0.5, "p90_ms": 0.9, "p95_ms": 0.95}


def speed_verdict(
    spec: Spec,
    claim: Claim,
    candidate: str,
    case_names: list[str],
    produced: dict[str, dict[str, Any]],
) -> ClaimVerdict:
    """A speed claim, measured as an experiment (paritygate.bench), never from gate wall times;
    ``produced`` holds the candidate's outputs per case that the other claims were checked on.

    Latency claims (p50/p90/p95) time the candidate alone: cold call apart, warm-up uncounted, at
    least as many samples as the percentile needs. ``speedup`` runs the reference live and the
    candidate in interleaved blocks and holds only when the paired ratio clears the baseline's own
    run-to-run variability *and* reaches the bound. In both, the output while timing must equal
    the output the other claims were checked on: the code timed is the code gated.
    """
    params = claim.params
    case_name = params.get("case") or (case_names[0] if case_names else None)

    def verdict(observed: Any, failures: list[Failure], evidence: dict[str, Any]) -> ClaimVerdict:
        passed = not failures and claim.holds(observed)
        if not failures and not passed:
            failures = [
                Failure(
                    claim.metric,
                    claim.bound,
                    observed,
                    claim.excess(observed),
                    where=f"case {case_name}",
                )
            ]
        return ClaimVerdict(
            claim_id=claim.id,
            candidate=candidate,
            case=case_name,
            passed=passed,
            oracle=claim.oracle,
            metric=claim.metric,
            bound=claim.bound,
            unit=unit_of(claim.metric, claim.unit),
            observed=observed,
            excess=None if passed or observed is None else claim.excess(observed),
            failures=failures,
            evidence=evidence,
        )

    if case_name not in spec.cases:
        raise SpecError(
            f"speed claim {claim.id!r} times case {case_name!r}, which the spec does not have",
            where=str(spec.path),
        )
    gated = produced.get(case_name)
    if gated is None:
        return verdict(
            None,
            [
                Failure(
                    "run",
                    None,
                    None,
                    detail=f"runner {candidate} produced no checked outputs for case {case_name} "
                    "(its run error says why)",
                )
            ],
            {},
        )

    def same_as_gated(outputs: Any) -> bool:
        return bool(compare(outputs, gated))

    case = spec.cases[case_name]
    blocks = int(params["blocks"]) if "blocks" in params else None
    budget = float(params["budget"]) if "budget" in params else (None if blocks else 10.0)
    block_size = int(params.get("block_size", 20))
    warmup = int(params.get("warmup", 5))
    cand = make_runner(spec.runners[candidate], spec)
    ref = make_runner(spec.reference, spec) if "reference" in claim.metric_entry.needs else None
    try:
        cand.activate()
        if ref is not None:
            ref.activate()
        if ref is None:
            q = SPEED_QUANTILES[claim.metric]
            side = time_side(
                lambda: cand.run(case).outputs,
                name=candidate,
                iterations=max((blocks or 10) * block_size, min_samples_for(q)),
                warmup=warmup,
                sync=lambda _: None,
                check_output=same_as_gated,
            )
            observed = percentile(side.end_to_end_s, q) * 1000.0
            return verdict(
                observed,
                [],
                {
                    "samples_ms": [s * 1000.0 for s in side.end_to_end_s],
                    "cold_ms": side.cold_s * 1000.0,
                    "warmup": warmup,
                },
            )
        # The claim is the threshold: it holds when the whole interval of the speedup clears
        # the bound (the bench rule's "faster" against that bound), stopping once decided.
        bound = float(claim.bound)
        threshold = params.get("threshold") or (abs(bound - 1.0) if bound != 1.0 else None)
        bench = run_bench(
            lambda: ref.run(case).outputs,
            lambda: cand.run(case).outputs,
            workload=f"{claim.id}:{case_name}",
            budget=budget,
            blocks=blocks,
            threshold=threshold,
            block_size=int(params["block_size"]) if "block_size" in params else None,
            sync=lambda _: None,
            check_outputs=lambda _, out: same_as_gated(out),
            names=(spec.reference.name, candidate),
        )
        failures = []
        speedup_low = 1.0 / bench.ratio_ci[1] if bench.ratio_ci[1] > 0 else math.inf
        if not speedup_low >= bound:
            failures.append(
                Failure(
                    "speedup",
                    claim.bound,
                    speedup_low,  # the interval's pessimistic end is what is judged
                    claim.bound - speedup_low,
                    where=f"case {case_name}",
                    detail=f"the speedup's interval does not clear the bound: {bench.describe()}",
                )
            )
        return verdict(bench.speedup, failures, bench.to_dict())
    except RunFailure as exc:
        return verdict(None, [Failure("run", None, None, detail=exc.describe())], {})
    except UserError as exc:
        return verdict(
            None,
            [Failure("speed", claim.bound, None, where=f"case {case_name}", detail=exc.one_line())],
            {},
        )
    finally:
        cand.deactivate()
        if ref is not None:
            ref.deactivate()

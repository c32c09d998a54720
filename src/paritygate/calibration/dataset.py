"""Dataset claims (agreement, accuracy, ECE) calibrated from the gate's own dataset metric over
resampled cases."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import claim_metrics
from ..errors import InputError
from ..execution import mutated_runner

# --------------------------------------------------------------------------------------------
# Measurement
from .result import (
    NO_GAP_REASON,
    _g,
)

# --------------------------------------------------------------------------------------------
# Dataset claims: agreement, accuracy, ECE over the cases


@dataclass
class DatasetCalibration:
    """A dataset claim calibrated from per-case contributions with a bootstrap over cases.

    ``observed`` is the gate's own dataset metric over the cases; ``interval`` the one-sided
    bootstrap confidence bound on it (resampling cases, scipy.stats.bootstrap, percentile
    method): the value a fresh draw of cases stays on the right side of with probability
    ``confidence``. Each model mutation's dataset metric must lie beyond the proposed bound."""

    claim_id: str
    metric: str
    direction: str
    cases: list[str]
    observed: float
    interval: float
    confidence: float
    resamples: int
    mutations: dict[str, float]
    proposed_bound: float | None
    refused: bool
    reason: str
    unit: str = "cases"  # what the bootstrap resamples: "cases", or "rows" of the cases
    units: int = 0  # how many of them

    def __bool__(self) -> bool:
        return not self.refused

    def summary(self) -> str:
        sign = "<=" if self.direction == "max" else ">="
        lines = [
            f"calibration of {self.claim_id} on {self.metric} (dataset claim), "
            f"{len(self.cases)} cases",
            f"observed {self.metric} over the cases: {_g(self.observed)}; one-sided "
            f"{self.confidence:.0%} bootstrap bound over {self._over()} "
            f"({self.resamples} resamples): {_g(self.interval)}",
        ]
        for name, value in self.mutations.items():
            beyond = value > self.interval if self.direction == "max" else value < self.interval
            lines.append(
                f"  mutation {name}: {self.metric} {_g(value)} "
                f"({'caught' if beyond else 'NOT caught: inside the sampling noise'})"
            )
        if self.refused:
            lines.append(f"REFUSED: {self.reason}")
        else:
            lines.append(
                f"proposal: {self.metric} {sign} {_g(self.proposed_bound)} ({self.reason})"
            )
        return "\n".join(lines)

    def _over(self) -> str:
        return "cases" if self.unit == "cases" else f"{self.units} rows of the cases"

    def basis(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "n": len(self.cases) if self.unit == "cases" else self.units,
            "observed": self.observed,
            "bootstrap": f"one-sided {self.confidence:.0%} percentile bound over "
            f"{self._over()}, {self.resamples} resamples (scipy.stats.bootstrap)",
            "mutations": dict(self.mutations),
            "cases": list(self.cases),
        }


def calibrate_dataset_claim(
    spec: Any,
    claim_id: str,
    *,
    candidate: str | None = None,
    cases: Sequence[str] | None = None,
    model_mutations: Mapping[str, str] | None = None,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    unit: str = "cases",
) -> DatasetCalibration:
    """Calibrate an agreement / accuracy / ECE claim: the gate's dataset metric on the
    candidate's outputs, its sampling noise by a bootstrap over cases, and model mutations that
    must fall beyond the proposed bound (the bootstrap bound, rounded outwards).

    ``unit="rows"`` resamples the rows (items) of the cases instead of the cases themselves: for
    held-out sets stored as a few cases of many independent items each, where ten cases would
    give a coarse bootstrap. One resampled index picks the same row of every covered output;
    every case must give each covered output the same number of rows. The metric of a resample
    is still the gate's own, computed over one case holding the chosen rows."""

    from scipy.stats import bootstrap

    from ..dataset import dataset_verdict
    from ..runners import make_runner
    from ..spec import Spec, load_spec

    loaded: Spec = spec if isinstance(spec, Spec) else load_spec(spec)
    claim = loaded.claims[claim_id]
    where = f"{loaded.path}: {loaded.key('claims', claim_id)}"
    if claim.scope != "dataset":
        raise InputError(f"{claim_id} is not a dataset claim", where=where)
    if unit not in ("cases", "rows"):
        raise InputError(f"unit must be 'cases' or 'rows', got {unit!r}", where=where)
    candidate = candidate or claim.candidates[0]
    names = list(cases) if cases else list(loaded.cases)
    expected: dict[str, dict[str, Any]] | None = None
    if "reference" in claim.metric_entry.needs:
        from ..references import load_reference

        reference = load_reference(loaded)
        expected = {c: reference.outputs(c) for c in names}

    def outputs_of(runner_spec: Any) -> dict[str, dict[str, Any]]:
        active = make_runner(runner_spec, loaded)
        active.activate()
        try:
            return {c: active.run(loaded.cases[c]).outputs for c in names}
        finally:
            active.deactivate()

    base = loaded.runners[candidate]
    produced = outputs_of(base)

    def metric_over(indices: Any, outputs: dict[str, dict[str, Any]]) -> float:
        chosen = [names[int(i)] for i in np.asarray(indices).reshape(-1)]
        verdict = dataset_verdict(claim, candidate, loaded, chosen, outputs, expected)
        return float(verdict.observed) if verdict.observed is not None else math.nan

    observed = metric_over(np.arange(len(names)), produced)
    direction = DIRECTIONS_DATASET[claim.metric]
    statistic = lambda idx: metric_over(idx, produced)  # noqa: E731
    units = len(names)
    if unit == "rows":
        pooled = _Pooled(claim, loaded, names, produced, expected, where)
        units = pooled.rows

        def statistic(idx: Any) -> float:
            spec_r, out_r, ref_r = pooled.select(np.asarray(idx).reshape(-1))
            verdict = dataset_verdict(claim, candidate, spec_r, [_POOLED], out_r, ref_r)
            return float(verdict.observed) if verdict.observed is not None else math.nan

        every = statistic(np.arange(units))
        if not (every == observed or (math.isnan(every) and math.isnan(observed))):
            raise InputError(  # the pooled rows must be the cases' rows, in the gate's metric
                f"the pooled rows give {claim.metric} {every}, the cases {observed}",
                where=where,
            )
    result = bootstrap(
        (np.arange(units),),
        statistic,
        vectorized=False,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        alternative="greater" if direction == "min" else "less",
        random_state=np.random.default_rng(seed),
    )
    interval = float(
        result.confidence_interval.low if direction == "min" else result.confidence_interval.high
    )
    if not math.isfinite(interval):  # every resample gave the same value (e.g. 100 % agreement)
        interval = (
            float(np.nanmin(result.bootstrap_distribution))
            if direction == "min"
            else float(np.nanmax(result.bootstrap_distribution))
        )
    mutated: dict[str, float] = {}
    for name, target in (model_mutations or {}).items():
        runner = mutated_runner(base, candidate, name, target)
        mutated[name] = metric_over(np.arange(len(names)), outputs_of(runner))
    if direction == "min":
        bound = math.floor(interval * 1000) / 1000  # outwards, to a number one can publish
        inside = [n for n, v in mutated.items() if not v < bound]
    else:
        bound = math.ceil(interval * 1000) / 1000
        inside = [n for n, v in mutated.items() if not v > bound]
    refused, reason = (
        False,
        (
            f"the one-sided {confidence:.0%} bootstrap bound over {len(names)} cases, "
            "rounded outwards"
        ),
    )
    if not mutated:
        refused, reason = True, "no model mutation given: nothing shows the bound catches a bug"
    elif inside:
        refused = True
        reason = (
            f"{NO_GAP_REASON}: {', '.join(inside)} stays inside the sampling noise of "
            f"{claim.metric} over these cases (bound {_g(bound)})"
        )
    if unit == "rows":
        reason = reason.replace(
            f"over {len(names)} cases", f"over {units} rows of {len(names)} cases"
        )
    return DatasetCalibration(
        claim_id=claim_id,
        metric=claim.metric,
        direction=direction,
        cases=names,
        unit=unit,
        units=units,
        observed=observed,
        interval=interval,
        confidence=confidence,
        resamples=resamples,
        mutations=mutated,
        proposed_bound=None if refused else bound,
        refused=refused,
        reason=reason,
    )


_POOLED = "pooled rows"


class _Pooled:
    """The rows of several cases as one case, so that a resample of rows is judged by the gate's
    own dataset metric (labels and reference rows travel with their rows)."""

    def __init__(self, claim: Any, spec: Any, names: list[str], outputs: dict, expected, where):
        self.spec, self.claim = spec, claim
        self.label_key = claim.params.get("label", "label")
        self.labels = "labels" in claim.metric_entry.needs
        parts: dict[str, list[np.ndarray]] = {}
        refs: dict[str, list[np.ndarray]] = {}
        labels: list[np.ndarray] = []
        self.rows = 0
        for case in names:
            covered = claim.covered(outputs.get(case) or {})
            if not covered:
                raise InputError(
                    f"case {case}: no output the claim covers, nothing to pool", where=where
                )
            counts = set()
            for key, value in covered.items():
                rows = _as_rows(value)
                counts.add(len(rows))
                parts.setdefault(key, []).append(rows)
                if expected is not None and key in claim.covered(expected.get(case, {})):
                    refs.setdefault(key, []).append(_as_rows(expected[case][key]))
            if len(counts) != 1:
                raise InputError(
                    f"case {case}: the covered outputs hold {sorted(counts)} rows: resampling "
                    "rows needs one row per item in every covered output",
                    where=where,
                    hint="resample cases (unit='cases'), or one claim per output",
                )
            if self.labels:
                label = np.asarray(spec.cases[case].labels[self.label_key]).reshape(-1)
                labels.append(label)
            self.rows += counts.pop()
        self.parts = {k: np.concatenate(v) for k, v in parts.items()}
        self.refs = {k: np.concatenate(v) for k, v in refs.items()}
        self.label = np.concatenate(labels) if labels else None
        self.first = spec.cases[names[0]]

    def select(self, idx: np.ndarray) -> tuple[Any, dict, dict | None]:
        import dataclasses

        labels = dict(self.first.labels)
        if self.label is not None:
            labels[self.label_key] = self.label[idx]
        case = dataclasses.replace(self.first, name=_POOLED, labels=labels)
        spec = dataclasses.replace(self.spec, cases={_POOLED: case})
        out = {_POOLED: {k: v[idx] for k, v in self.parts.items()}}
        ref = {_POOLED: {k: v[idx] for k, v in self.refs.items()}} if self.refs else None
        return spec, out, ref


def _as_rows(value: Any) -> np.ndarray:
    array = np.asarray(value, dtype=np.float64)
    return array.reshape(-1, array.shape[-1]) if array.ndim else array.reshape(1, 1)


# Directions of the dataset metrics, from the claim-metric registry.
DIRECTIONS_DATASET = {
    n: m.direction for n, m in claim_metrics.METRICS.items() if m.scope == "dataset"
}

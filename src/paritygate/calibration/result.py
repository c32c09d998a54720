"""What a calibration found: the distributions, the mutations' signals, the gap and the
proposal."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import claim_metrics
from .._format import format_number
from ..results import to_jsonable

# metric -> direction of every metric calibration measures, read live from the claim-metric
# registry: "max" means a claim holds when observed <= bound (lower is better), "min" when
# observed >= bound (higher is better, at most 1).
DIRECTIONS: Mapping[str, str] = claim_metrics.MetricView(
    lambda m: m.direction, lambda m: m.calibration == "measured"
)
DEFAULT_METRICS = ("max_abs", "mean_abs", "max_rel", "cosine")
NO_GAP_REASON = "no gap between noise and the smallest bug: change the comparison, not the constant"


# --------------------------------------------------------------------------------------------
# Results


@dataclass
class MetricDistribution:
    """Raw values of one metric: noise per (case, repeat), signal per mutation and case.

    Values are the worst over the claim's outputs in each run; ``noise_by_output`` keeps them per
    output. ``gap`` is positive when every bug signal lies beyond the largest noise (oriented by
    ``direction``: for cosine and SSIM, lower is worse).
    """

    metric: str
    direction: str
    noise: list[float]
    noise_by_output: dict[str, list[float]]
    bugs: dict[str, list[float]]
    largest_noise: float | None
    smallest_bug: float | None
    smallest_bug_mutation: str | None
    gap: float | None

    @property
    def separated(self) -> bool:
        return self.gap is not None and self.gap > 0


@dataclass
class MutationSummary:
    name: str
    kind: str  # "output" | "model"
    description: str
    cases: int  # cases where the mutation changed the candidate's outputs
    smallest_signal: float | None  # on the claim's metric, least detectable case
    caught: int | None = None  # cases the proposed bound catches (None without a proposal)
    caught_by: str = ""  # set when the claim's activity band, not its metric, rejects it
    # per case where a model mutation changed the outputs' structure: "case c: structure changed:
    # ..."
    structure_changed: list[str] = field(default_factory=list)
    changed_cases: list[str] = field(default_factory=list)  # the cases it changed

    @property
    def uncovered(self) -> bool:
        """Changed no output on any case: the cases do not exercise what it mutates (one rule
        for output and model mutations; never counted as noise, never a bug signal)."""
        return self.cases == 0


@dataclass
class CalibrationResult:
    """Distributions, gap, risk and the proposal. Truthy when a bound (or exact claim) is
    proposed."""

    metric: str
    direction: str
    mode: str
    cases: list[str]
    repeats: int
    reorder: bool
    outputs: list[str]
    by_metric: dict[str, MetricDistribution]  # every recorded metric's distribution
    mutations: list[MutationSummary]
    noise_exactly_zero: bool
    proposal: str  # "tolerance" | "exact" | "none"
    proposed_bound: float | None
    bound_before_margin: float | None
    margins: dict[str, float]
    refused: bool
    reason: str
    risk: float
    repeat_spread: float | None
    environment: dict[str, Any] = field(default_factory=dict)
    claim_id: str = ""
    # counter -> "candidate" (every noise run) or a model mutation's name -> values per run
    activity: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # mutation -> metric -> signals, for mutations the activity band catches (kept out of the gap)
    band_caught_signals: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    label: str = ""
    # The default margin (no named spread): the spread of the noise's upper tail, added to the
    # largest noise (to its deficit 1 - x for cosine and SSIM); None when margins were named.
    tail_margin: float | None = None
    # The claim's own metric when it is measured through another (max_edge_delta through the
    # per-coordinate |a - e| of labelled boxes): write_bound keeps it.
    claim_metric_name: str | None = None

    def __bool__(self) -> bool:
        return not self.refused

    @property
    def n(self) -> int:
        return len(self.cases)

    @property
    def claim_metric(self) -> MetricDistribution:
        return self.by_metric[self.metric]

    def exact_claim(self) -> dict[str, Any] | None:
        """The exact claim proposed when the noise is zero (None otherwise)."""
        if self.proposal != "exact":
            return None
        kind = "no-op" if self.mode == "paired" else "exact-equivalence"
        return {"metric": "exact", "bound": 0, "mode": self.mode, "kind": kind}

    def basis(self) -> dict[str, Any]:
        """What the bound rests on: written beside the constant by :func:`write_bound`."""
        dist = self.claim_metric
        basis: dict[str, Any] = {
            "metric": self.metric,
            "mode": self.mode,
            "n": self.n,
            "repeats": self.repeats,
            "outputs": list(self.outputs),
            "largest_noise": dist.largest_noise,
            "smallest_bug": dist.smallest_bug,
            "smallest_bug_mutation": dist.smallest_bug_mutation or "",
            "risk": self.risk,
            "margins": dict(self.margins),
            "hardware": self.environment.get("hardware", ""),
            "date": self.environment.get("date", ""),
            "versions": dict(self.environment.get("versions", {})),
        }
        if self.tail_margin is not None and self.proposal == "tolerance":
            basis["tail_margin"] = self.tail_margin
        if self.proposal == "exact":
            basis["noise"] = "exactly zero"
        return {k: v for k, v in basis.items() if v is not None}

    def summary(self) -> str:
        """A plain-text account: distributions, gap, risk and the proposal."""
        lines = [
            f"calibration of {self.claim_id or self.label or 'claim'} on {self.metric} "
            f"({'lower' if self.direction == 'max' else 'higher'} is better), {self.mode} mode, "
            f"{self.n} cases x {self.repeats} repeat(s){', reordered' if self.reorder else ''}",
            f"outputs: {', '.join(self.outputs)}",
            "",
            f"{'metric':<10} {'noise min':>10} {'median':>10} {'max':>10}  {'smallest bug':>12}  "
            "gap",
        ]
        undefined_notes = []
        for name, dist in self.by_metric.items():
            noise = [v for v in dist.noise if not math.isnan(v)]
            # A metric undefined on a run (a cosine where a side has zero norm, or a NaN on one
            # side) carries its worst value, which the gate fails: say so, not "-inf".
            undefined = sum(1 for v in noise if math.isinf(v))
            if undefined and claim_metrics.get(name).undefined_is_worst:
                undefined_notes.append(
                    f"{name}: undefined on {undefined} of {len(noise)} noise runs (a side with "
                    "zero norm or a NaN): a claim on it fails there"
                )
            cells = (
                [_shown(name, v) for v in (min(noise), float(np.median(noise)), max(noise))]
                if noise
                else ["-"] * 3
            )
            bug = _shown(name, dist.smallest_bug) if dist.smallest_bug is not None else "-"
            where = f" ({dist.smallest_bug_mutation})" if dist.smallest_bug_mutation else ""
            gap = ("separated" if dist.separated else "NO GAP") if dist.gap is not None else "-"
            lines.append(
                f"{name:<10} {cells[0]:>10} {cells[1]:>10} {cells[2]:>10}  {bug:>12}  {gap}{where}"
            )
        lines += undefined_notes
        lines.append("")
        lines.append(self.gap_line())
        lines.append("")
        lines.append(f"mutations (signal on {self.metric}, least detectable case):")
        for m in self.mutations:
            caught = f", caught in {m.caught}/{m.cases} cases" if m.caught is not None else ""
            if m.caught_by:
                caught += f" by the {m.caught_by}, not by the metric"
            signal = (
                _shown(self.metric, m.smallest_signal)
                if m.smallest_signal is not None
                else "not applicable"
            )
            lines.append(f"  {m.name:<20} {m.kind:<6} {signal:>10}  ({m.cases} cases{caught})")
            if m.structure_changed:
                more = len(m.structure_changed) - 1
                lines.append(
                    f"    {m.structure_changed[0]}"
                    + (f" (and {more} more case{'s' if more > 1 else ''})" if more else "")
                )
        for line in self.coverage_lines():
            lines.append(line)
        lines.append("")
        lines.append(
            f"risk: with n = {self.n} cases the next case exceeds the largest observed noise with "
            f"probability about 1/(n+1) = {self.risk:.1%}"
        )
        for counter, series in self.activity.items():
            parts = [
                f"{name} {_g(min(values))}..{_g(max(values))}"
                for name, values in series.items()
                if values
            ]
            lines.append(f"activity {counter} (min..max over runs): {'; '.join(parts)}")
        if self.repeat_spread is not None and self.repeats > 1:
            lines.append(f"spread across repeats of one case: {_g(self.repeat_spread)}")
        if self.refused:
            lines.append(f"REFUSED: {self.reason}")
        elif self.proposal == "exact":
            lines.append(f"proposal: {self.reason}")
        else:
            margin = ", ".join(f"{name} x{factor:g}" for name, factor in self.margins.items())
            if not margin:
                k = math.ceil(math.sqrt(self.n)) if self.n > 1 else 0
                margin = (
                    f"noise tail +{_g(self.tail_margin or 0.0)} (default: the spread of the top "
                    f"{k} of {self.n} noise values, at most halfway into the gap; --margin "
                    "NAME=FACTOR names a spread instead)"
                )
            # The bound on a line of its own: what a user copies, short enough for any terminal.
            lines.append(
                f"proposal: {self.metric} {'<=' if self.direction == 'max' else '>='} "
                f"{_g(self.proposed_bound)}"
            )
            lines.append(
                f"  largest noise {_g(self.claim_metric.largest_noise)}, smallest bug "
                f"{_g(self.claim_metric.smallest_bug)}; margin: {margin}"
            )
        return "\n".join(lines)

    def judge_bound(self, metric: str, bound: float) -> str:
        """How an existing bound on ``metric`` fares on these distributions, in one line."""
        exact = metric == "exact"
        if exact:
            metric, bound = "max_abs", 0.0
        entry = claim_metrics.METRICS.get(metric)
        if entry is not None and entry.calibrated_through:  # per-edge claims: through max_abs
            metric = entry.calibrated_through
        dist = self.by_metric.get(metric)
        if dist is None:
            return f"{metric} was not measured"
        holds = (lambda v: v <= bound) if dist.direction == "max" else (lambda v: v >= bound)
        failing = sum(1 for v in dist.noise if not holds(v))
        if exact and not failing and not self.noise_exactly_zero:
            # Zero in value is not byte equality (signed zeros, NaN payloads, dtypes).
            return "the noise is zero in value but not byte for byte: byte equality fails"
        missed = sorted(name for name, values in dist.bugs.items() if any(holds(v) for v in values))
        text = f"noise fails it in {failing} of {len(dist.noise)} runs"
        text += (
            f"; it lets through {', '.join(missed)}"
            if missed
            else "; it catches every mutation in every case"
        )
        return text

    def judge_activity(self, counter: str, low: float, high: float) -> str:
        """How an activity band fares: candidate runs inside it, model mutations it rejects."""
        series = self.activity.get(counter, {})
        runs = series.get("candidate", [])
        inside = sum(1 for v in runs if low <= v <= high)
        text = f"the candidate is inside it in {inside} of {len(runs)} runs"
        rejected = sorted(
            name
            for name, values in series.items()
            if name != "candidate" and values and any(not low <= v <= high for v in values)
        )
        if rejected:
            text += f"; it rejects {', '.join(rejected)}"
        return text

    def gap_line(self) -> str:
        """The gap on the claim's metric in words: its width and how far apart noise and bug are."""
        dist = self.claim_metric
        if dist.gap is None or dist.largest_noise is None or dist.smallest_bug is None:
            return f"gap on {self.metric}: not measured (no noise or no bug signal)"
        head = (
            f"gap on {self.metric}: largest noise {_shown(self.metric, dist.largest_noise)}, "
            f"smallest bug {_shown(self.metric, dist.smallest_bug)} "
            f"({dist.smallest_bug_mutation})"
        )
        if not dist.separated:
            return f"{head}: NO GAP, the bug hides inside the noise"
        # Distance from perfect agreement: the value itself for errors, 1 - value for similarities.
        noise = dist.largest_noise if dist.direction == "max" else 1.0 - dist.largest_noise
        bug = dist.smallest_bug if dist.direction == "max" else 1.0 - dist.smallest_bug
        if noise <= 0:
            return f"{head}: width {_g(dist.gap)}; the noise is exactly zero"
        return (
            f"{head}: width {_g(dist.gap)}, the bug {bug / noise:.3g}x the noise's distance "
            "from agreement"
        )

    def coverage(self) -> dict[str, Any]:
        """Which mutations the cases exercise, and which cases no mutation changed."""
        covered_cases = {c for m in self.mutations for c in m.changed_cases}
        return {
            "mutations": len(self.mutations),
            "covered": [m.name for m in self.mutations if not m.uncovered],
            "uncovered": [m.name for m in self.mutations if m.uncovered],
            "cases_no_mutation_changed": [c for c in self.cases if c not in covered_cases],
        }

    def coverage_lines(self) -> list[str]:
        if not self.mutations:
            return []
        cov = self.coverage()
        lines = [
            f"coverage: {len(cov['covered'])} of {cov['mutations']} mutations changed the outputs "
            f"on at least one of {self.n} cases"
            + (f"; uncovered: {', '.join(cov['uncovered'])}" if cov["uncovered"] else "")
        ]
        for m in self.mutations:
            if m.uncovered:
                lines.append(
                    f"  mutation {m.name} changed nothing on any of {self.n} cases: the cases do "
                    "not cover it (counted as uncovered, not as noise)"
                )
        if cov["cases_no_mutation_changed"]:
            lines.append(
                f"  cases no mutation changed: {', '.join(cov['cases_no_mutation_changed'])}"
            )
        return lines

    def to_dict(self) -> dict[str, Any]:
        data = to_jsonable(self)
        data["coverage"] = self.coverage()
        data["n"] = self.n
        data["exact_claim"] = self.exact_claim()
        data["basis"] = to_jsonable(self.basis())
        # The claim metric's series as the reports read them: noise and each mutation's signal.
        dist = self.claim_metric
        data["calibration"] = to_jsonable({"noise": dist.noise, **dist.bugs})
        data["bound"] = to_jsonable(self.proposed_bound)
        data["format"] = "paritygate-calibration"
        data["format_version"] = 1
        return data


def _shown(metric: str, value: float) -> str:
    """A value of ``metric`` in the account: its worst value, which stands for a metric the
    comparison cannot define (a cosine where a side has zero norm), as "undefined"."""
    if math.isinf(value) and claim_metrics.get(metric).undefined_is_worst:
        return "undefined"
    return _g(value)


def _g(value: float | None) -> str:
    """Four significant digits; values just below 1 (cosine, SSIM) as ``1-d`` so they stay
    legible."""
    return format_number(value, digits=4, near_one=True)

"""Tolerance calibration: measure the noise, inject bugs, check the gap, propose a bound.

A tolerance is a meaningful test only when the measured noise of the comparison and the smallest
bug worth catching lie on either side of it. :func:`calibrate` therefore

1. runs the comparison over many cases (16 at least by default), optionally repeated and in a
   shuffled order, and records the raw distribution of every metric (no pass/fail);
2. injects bugs: output-level mutations of the candidate's outputs (additive noise, a single-element
   spike, an off-by-one shift, a swapped channel pair, a drop to float16 / bfloat16) and
   model-level mutations the caller supplies as callables, and measures each one's signal on the
   same metrics;
3. reports the gap between the largest noise and the smallest bug signal, and the risk that comes
   with n cases (the next case exceeds the largest of n observed values with probability about
   1/(n+1));
4. proposes a bound just past the noise, widened only by the spread the caller names (another
   machine, another library version), or an exact claim when the noise is exactly zero, or
   refuses when no gap exists: then the comparison must change, not the constant.

:func:`write_bound` stores the bound, ``status = "calibrated"`` and the basis beside the constant
in the spec, keeping the file's comments and layout.
"""

from __future__ import annotations

import fnmatch
import math
import platform
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any

import numpy as np

from . import claim_metrics
from ._dtypes import is_float
from ._format import format_number
from ._host import flatten, synchronize_tree, to_numpy
from .errors import InputError
from .results import Tolerance, to_jsonable

__all__ = [
    "calibrate",
    "calibrate_claim",
    "write_bound",
    "calibration_plot",
    "CalibrationResult",
    "MetricDistribution",
    "MutationSummary",
    "Mutation",
    "additive_noise",
    "spike",
    "shift",
    "swap_channels",
    "reduced_precision",
    "DEFAULT_MUTATIONS",
    "BUILTIN_MUTATIONS",
    "DEFAULT_METRICS",
    "DIRECTIONS",
    "NO_GAP_REASON",
]

# metric -> direction of every metric calibration measures, read live from the claim-metric
# registry: "max" means a claim holds when observed <= bound (lower is better), "min" when
# observed >= bound (higher is better, at most 1).
DIRECTIONS: Mapping[str, str] = claim_metrics.MetricView(
    lambda m: m.direction, lambda m: m.calibration == "measured"
)
DEFAULT_METRICS = ("max_abs", "mean_abs", "max_rel", "cosine")
NO_GAP_REASON = "no gap between noise and the smallest bug: change the comparison, not the constant"


# --------------------------------------------------------------------------------------------
# Output-level mutations


@dataclass(frozen=True)
class Mutation:
    """A bug injected into one output array. ``apply`` returns the mutated copy, or None where the
    mutation does not apply (an integer output for additive noise, an axis too short to swap)."""

    name: str
    description: str
    apply: Callable[[np.ndarray, np.random.Generator], np.ndarray | None]


def _is_float(array: np.ndarray) -> bool:
    return is_float(array.dtype)


def _finite64(array: np.ndarray) -> np.ndarray:
    values = array.astype(np.float64).reshape(-1)
    return values[np.isfinite(values)]


def additive_noise(rel: float = 1e-2) -> Mutation:
    """Gaussian noise with standard deviation ``rel`` times the output's root mean square."""

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        finite = _finite64(x)
        if not _is_float(x) or finite.size == 0:
            return None
        rms = float(np.sqrt(np.mean(finite**2)))
        if rms == 0:
            return None
        noise = rng.standard_normal(x.shape) * (rel * rms)
        return (x.astype(np.float64) + noise).astype(x.dtype)

    return Mutation(
        f"noise({rel:g})", f"additive Gaussian noise, {rel:g} x the output's RMS", apply
    )


def spike(scale: float = 0.1) -> Mutation:
    """One element moved by ``scale`` times the output's range (max - min)."""

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        finite = _finite64(x)
        if not _is_float(x) or finite.size == 0:
            return None
        span = float(finite.max() - finite.min()) or float(np.abs(finite).max()) or 1.0
        out = x.astype(np.float64).reshape(-1)
        out[int(rng.integers(out.size))] += scale * span
        return out.reshape(x.shape).astype(x.dtype)

    return Mutation(
        f"spike({scale:g})", f"one element moved by {scale:g} x the output's range", apply
    )


def shift(axis: int = -1, by: int = 1) -> Mutation:
    """An off-by-``by`` shift along ``axis`` (a misaligned index, a wrong padding offset)."""

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        if x.ndim == 0 or x.shape[axis] < 2:
            return None
        return np.roll(x, by, axis=axis)

    return Mutation(f"shift(axis={axis},by={by})", f"off-by-{by} shift along axis {axis}", apply)


def swap_channels(axis: int = -1, i: int = 0, j: int = 1) -> Mutation:
    """Two entries along ``axis`` swapped (RGB read as BGR, a transposed head order)."""

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        if x.ndim == 0 or x.shape[axis] <= max(i, j):
            return None
        out = np.array(x, copy=True)
        first, second = np.take(x, i, axis=axis), np.take(x, j, axis=axis)
        index_i = [slice(None)] * x.ndim
        index_j = [slice(None)] * x.ndim
        index_i[axis], index_j[axis] = i, j
        out[tuple(index_i)], out[tuple(index_j)] = second, first
        return out

    return Mutation(
        f"swap(axis={axis},{i}<->{j})", f"entries {i} and {j} swapped along axis {axis}", apply
    )


def reduced_precision(dtype: str = "float16") -> Mutation:
    """The output rounded through a less precise float (a silent float16 / bfloat16 drop)."""
    import ml_dtypes

    target = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}.get(dtype)
    if target is None:
        raise InputError(f"reduced_precision supports float16 and bfloat16, got {dtype!r}")

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        if not _is_float(x) or np.dtype(target).itemsize >= x.dtype.itemsize:
            return None
        with np.errstate(over="ignore"):
            return x.astype(target).astype(x.dtype)

    return Mutation(f"{dtype}", f"rounded through {dtype}", apply)


DEFAULT_MUTATIONS: tuple[Mutation, ...] = (
    additive_noise(1e-2),
    spike(0.1),
    shift(-1),
    swap_channels(-1),
    reduced_precision("float16"),
    reduced_precision("bfloat16"),
)
# Short names of the built-ins (the command line selects them with --mutations).
BUILTIN_MUTATIONS: dict[str, Mutation] = dict(
    zip(("noise", "spike", "shift", "swap", "float16", "bfloat16"), DEFAULT_MUTATIONS)
)


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
    # per case where a model mutation changed the outputs' structure: "case c: structure changed: ..."
    structure_changed: list[str] = field(default_factory=list)
    changed_cases: list[str] = field(default_factory=list)  # the cases it changed

    @property
    def uncovered(self) -> bool:
        """Changed no output on any case: the cases do not exercise what it mutates (one rule
        for output and model mutations; never counted as noise, never a bug signal)."""
        return self.cases == 0


@dataclass
class CalibrationResult:
    """Distributions, gap, risk and the proposal. Truthy when a bound (or exact claim) is proposed."""

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
            f"{'metric':<10} {'noise min':>11} {'median':>11} {'max':>11}   {'smallest bug':>12}  gap",
        ]
        for name, dist in self.by_metric.items():
            noise = [v for v in dist.noise if not math.isnan(v)]
            cells = (
                [_g(min(noise)), _g(float(np.median(noise))), _g(max(noise))]
                if noise
                else ["-"] * 3
            )
            bug = _g(dist.smallest_bug) if dist.smallest_bug is not None else "-"
            where = f" ({dist.smallest_bug_mutation})" if dist.smallest_bug_mutation else ""
            gap = ("separated" if dist.separated else "NO GAP") if dist.gap is not None else "-"
            lines.append(
                f"{name:<10} {cells[0]:>11} {cells[1]:>11} {cells[2]:>11}   {bug:>12}  {gap}{where}"
            )
        lines.append("")
        lines.append(self.gap_line())
        lines.append("")
        lines.append(f"mutations (signal on {self.metric}, least detectable case):")
        for m in self.mutations:
            caught = f", caught in {m.caught}/{m.cases} cases" if m.caught is not None else ""
            if m.caught_by:
                caught += f" by the {m.caught_by}, not by the metric"
            signal = _g(m.smallest_signal) if m.smallest_signal is not None else "not applicable"
            lines.append(f"  {m.name:<24} {m.kind:<6} {signal:>12}  ({m.cases} cases{caught})")
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
            lines.append(
                f"proposal: {self.metric} {'<=' if self.direction == 'max' else '>='} "
                f"{_g(self.proposed_bound)} (largest noise {_g(self.claim_metric.largest_noise)}, "
                f"smallest bug {_g(self.claim_metric.smallest_bug)}; margin: {margin})"
            )
        return "\n".join(lines)

    def judge_bound(self, metric: str, bound: float) -> str:
        """How an existing bound on ``metric`` fares on these distributions, in one line."""
        exact = metric == "exact"
        if exact:
            metric, bound = "max_abs", 0.0
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
            f"gap on {self.metric}: largest noise {_g(dist.largest_noise)}, smallest bug "
            f"{_g(dist.smallest_bug)} ({dist.smallest_bug_mutation})"
        )
        if not dist.separated:
            return f"{head}: NO GAP, the bug hides inside the noise"
        # Distance from perfect agreement: the value itself for errors, 1 - value for similarities.
        noise = dist.largest_noise if dist.direction == "max" else 1.0 - dist.largest_noise
        bug = dist.smallest_bug if dist.direction == "max" else 1.0 - dist.smallest_bug
        if noise <= 0:
            return f"{head}: width {_g(dist.gap)}; the noise is exactly zero"
        return f"{head}: width {_g(dist.gap)}, the bug {bug / noise:.3g}x the noise's distance from agreement"

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


def _g(value: float | None) -> str:
    """Four significant digits; values just below 1 (cosine, SSIM) as ``1-d`` so they stay legible."""
    return format_number(value, digits=4, near_one=True)


# --------------------------------------------------------------------------------------------
# Measurement


Tree = Any
RunPair = Callable[[Any], "tuple[Tree, Tree]"]


def calibrate(
    run_pair: RunPair,
    cases: Sequence[Any] | int,
    *,
    metric: str = "max_abs",
    metrics: Iterable[str] = DEFAULT_METRICS,
    outputs: Sequence[str] | None = None,
    repeats: int = 1,
    reorder: bool = False,
    mutations: Sequence[Mutation] = DEFAULT_MUTATIONS,
    model_mutations: Mapping[str, Callable[[Any], Tree]] | None = None,
    margin_for: Mapping[str, float] | None = None,
    mode: str = "paired",
    min_cases: int = 16,
    rel_eps: float = 1e-12,
    ssim_data_range: float | None = None,
    ssim_channel_axis: int | None = None,
    seed: int = 0,
    claim_id: str = "",
    label: str = "",
    counters: Sequence[str] = (),
    activity_band: tuple[str, float, float] | None = None,
) -> CalibrationResult:
    """Measure the noise of a comparison and the signal of injected bugs; propose a bound.

    ``run_pair(case)`` returns ``(baseline_outputs, candidate_outputs)`` measured the way the gate
    will measure the claim: back to back in one process for a paired claim, the recorded
    reference against a fresh candidate run for a stored one (``mode`` only labels the result and
    chooses the form of an exact claim). ``cases`` is a sequence of case objects (or a count, for
    ``range(n)``). ``metric`` is the claim's metric, the one the bound is proposed for; every
    metric in ``metrics`` is recorded. ``outputs`` are glob patterns selecting the claim's outputs
    (all by default). ``model_mutations`` maps a name to a callable returning a mutated
    candidate's outputs for a case (a zeroed block, a scaled residual). ``margin_for`` names the
    spread a bound must absorb beyond this machine's noise, as factors (``{"other machine": 2}``).
    SSIM (for image outputs) needs ``ssim_data_range`` and, for colour images, ``ssim_channel_axis``.
    ``counters`` names activity counters the candidate reports (``skipped_steps``): their values
    are recorded per run, and per model mutation, so an activity band can be read off them.
    ``activity_band`` is the claim's band ``(counter, min, max)``: a model mutation whose counter
    leaves the band in every case is caught by the band, so it is reported but kept out of the
    metric's gap (the claim is the metric and the band together).
    """
    if metric not in DIRECTIONS:
        raise InputError(
            f"cannot calibrate metric {metric!r}", hint=f"use one of {', '.join(DIRECTIONS)}"
        )
    recorded = list(dict.fromkeys([metric, *metrics]))
    for name in recorded:
        if name not in DIRECTIONS:
            raise InputError(f"unknown metric {name!r}", hint=f"use {', '.join(DIRECTIONS)}")
    if isinstance(cases, int):
        cases = list(range(cases))
    cases = list(cases)
    if not cases:
        raise InputError("calibration needs cases: got none")
    if len(cases) < min_cases:
        raise InputError(
            f"calibration needs at least {min_cases} cases, got {len(cases)}: with n cases the next "
            f"case exceeds the largest observed noise with probability about 1/(n+1)",
            hint="add cases, or pass min_cases= to accept the larger risk knowingly",
        )
    if not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"repeats must be a whole number >= 1, got {repeats!r}")
    if mode not in ("paired", "stored"):
        raise InputError(f"mode must be 'paired' or 'stored', got {mode!r}")
    margins = _margins(margin_for)
    model_mutations = dict(model_mutations or {})
    names = [m.name for m in mutations] + list(model_mutations)
    if len(set(names)) != len(names):
        raise InputError(f"mutation names must be unique, got {names}")

    rng = np.random.default_rng(seed)
    measure = _Measure(recorded, rel_eps, ssim_data_range, ssim_channel_axis)
    case_names = [_case_name(c) for c in cases]
    noise: dict[str, list[float]] = {m: [] for m in recorded}
    noise_by_output: dict[str, dict[str, list[float]]] = {m: {} for m in recorded}
    per_case_claim: dict[int, list[float]] = {}
    exactly_zero = True
    baselines: dict[int, dict[str, np.ndarray]] = {}
    candidates: dict[int, dict[str, np.ndarray]] = {}
    candidate_paths: dict[int, set[str]] = {}  # every output the unmutated candidate reported
    covered: list[str] | None = None
    counters = list(counters)
    if activity_band is not None and activity_band[0] not in counters:
        counters.append(activity_band[0])
    activity: dict[str, dict[str, list[float]]] = {c: {"candidate": []} for c in counters}
    for repeat in range(repeats):
        order = list(range(len(cases)))
        if reorder and repeat > 0:
            order = [int(i) for i in rng.permutation(len(cases))]
        for index in order:
            where = f"case {case_names[index]}"
            baseline_tree, candidate_tree = _pair(run_pair(cases[index]), where)
            baseline = _host_tree(baseline_tree, where + " (baseline)", outputs)
            candidate = _host_tree(candidate_tree, where + " (candidate)", outputs)
            if covered is None:
                covered = _select(baseline, outputs, baseline_tree)
            _same_outputs(baseline, candidate, covered, where)
            values, zero = measure(candidate, baseline, covered)
            exactly_zero &= zero
            for name in recorded:
                noise[name].append(_worst(name, [values[path][name] for path in covered]))
                for path in covered:
                    noise_by_output[name].setdefault(path, []).append(values[path][name])
            per_case_claim.setdefault(index, []).append(noise[metric][-1])
            for counter in counters:
                activity[counter]["candidate"].append(_counter(candidate_tree, counter, where))
            if repeat == 0:
                baselines[index] = {p: baseline[p] for p in covered}
                candidates[index] = {p: candidate[p] for p in covered}
                candidate_paths[index] = set(candidate)
    assert covered is not None  # at least one case ran

    bugs: dict[str, dict[str, list[float]]] = {m: {} for m in recorded}
    summaries: list[MutationSummary] = []
    for mi, mutation in enumerate(mutations):
        applied = 0
        changed_cases: list[str] = []
        for index in range(len(cases)):
            mutated, changed = {}, False
            case_rng = np.random.default_rng([seed, mi, index])
            for path in covered:
                original = candidates[index][path]
                result = mutation.apply(original, case_rng)
                if result is None:
                    mutated[path] = original
                    continue
                changed |= not _bytes_equal(result, original)
                mutated[path] = result
            if not changed:
                continue  # the mutation injected nothing here: no bug to measure
            applied += 1
            changed_cases.append(case_names[index])
            values, _ = measure(mutated, baselines[index], covered)
            for name in recorded:
                bugs[name].setdefault(mutation.name, []).append(
                    _worst(name, [values[p][name] for p in covered])
                )
        summaries.append(
            MutationSummary(
                mutation.name,
                "output",
                mutation.description,
                applied,
                None,
                changed_cases=changed_cases,
            )
        )
    for name_m, make in model_mutations.items():
        applied = 0
        changed_cases = []
        structure_changed: list[str] = []
        for index in range(len(cases)):
            where = f"model mutation {name_m!r}, case {case_names[index]}"
            try:
                mutated_tree = make(cases[index])
            except Exception as exc:
                exc.add_note(f"paritygate.calibrate: raised by {where}")
                raise
            mutated = _host_tree(mutated_tree, where, outputs)
            for counter in counters:
                activity[counter].setdefault(name_m, []).append(
                    _counter(mutated_tree, counter, where)
                )
            changes = _structure_changes(baselines[index], mutated, covered, candidate_paths[index])
            if changes:
                # A mutated model that changes an output's structure fails the claim in the most
                # obvious way: caught in this case, at the metric's worst value, never noise.
                applied += 1
                changed_cases.append(case_names[index])
                structure_changed.append(
                    f"case {case_names[index]}: structure changed: {'; '.join(changes)}"
                )
                for name in recorded:
                    bugs[name].setdefault(name_m, []).append(claim_metrics.get(name).worst)
                continue
            if all(_bytes_equal(mutated[p], candidates[index][p]) for p in covered):
                continue  # the same rule as output mutations: nothing injected in this case
            applied += 1
            changed_cases.append(case_names[index])
            values, _ = measure(mutated, baselines[index], covered)
            for name in recorded:
                bugs[name].setdefault(name_m, []).append(
                    _worst(name, [values[p][name] for p in covered])
                )
        description = (getattr(make, "__doc__", None) or "").strip().splitlines()
        summaries.append(
            MutationSummary(
                name_m,
                "model",
                description[0] if description else "",
                applied,
                None,
                structure_changed=structure_changed,
                changed_cases=changed_cases,
            )
        )

    band_caught: dict[str, int] = {}
    if activity_band is not None:
        counter, low, high = activity_band
        for name_m in model_mutations:
            values = activity[counter].get(name_m, [])
            if values and all(not low <= v <= high for v in values):
                band_caught[name_m] = len(values)
    outside_gap = {
        name_m: {m: bugs[m].pop(name_m) for m in recorded if name_m in bugs[m]}
        for name_m in band_caught
    }
    distributions = {
        name: _distribution(name, noise[name], noise_by_output[name], bugs[name])
        for name in recorded
    }
    claim = distributions[metric]
    for summary in summaries:
        signals = claim.bugs.get(summary.name, outside_gap.get(summary.name, {}).get(metric, []))
        summary.smallest_signal = _least_detectable(metric, signals) if signals else None
        if summary.name in band_caught:
            counter, low, high = activity_band
            summary.caught_by = f"activity band {counter} in {_g(low)}..{_g(high)}"

    spread = None
    if repeats > 1:
        spread = max(max(v) - min(v) for v in per_case_claim.values())
    result = CalibrationResult(
        metric=metric,
        direction=DIRECTIONS[metric],
        mode=mode,
        cases=case_names,
        repeats=repeats,
        reorder=reorder,
        outputs=covered,
        by_metric=distributions,
        mutations=summaries,
        noise_exactly_zero=exactly_zero,
        proposal="none",
        proposed_bound=None,
        bound_before_margin=None,
        margins=margins,
        refused=False,
        reason="",
        risk=1.0 / (len(cases) + 1),
        repeat_spread=spread,
        environment=_environment(),
        activity=activity,
        band_caught_signals=outside_gap,
        claim_id=claim_id,
        label=label,
    )
    _propose(result)
    for summary in summaries:
        if summary.caught_by:
            summary.caught = band_caught[summary.name]
    return result


def _pair(value: Any, where: str) -> tuple[Any, Any]:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise InputError(
            f"run_pair must return (baseline_outputs, candidate_outputs), got {type(value).__name__}",
            where=where,
        )
    return value


def _counter(tree: Any, name: str, where: str) -> float:
    """An activity counter the run reported, as a number."""
    leaves = flatten(tree)
    if name not in leaves:
        raise InputError(f"{where}: the run reports no activity counter {name!r}", where=name)
    value = leaves[name]
    array = to_numpy(value, path=name)
    array = np.asarray(value if array is None else array)
    if array.size != 1 or array.dtype.kind not in "biuf":
        raise InputError(
            f"{where}: activity counter {name!r} is not one number ({array.dtype}, shape {array.shape})"
        )
    return float(array.reshape(()))


def _case_name(case: Any) -> str:
    name = getattr(case, "name", None)
    return str(name) if isinstance(name, str) else str(case)


def _host_tree(tree: Any, where: str, patterns: Sequence[str] | None = None) -> dict[str, Any]:
    """The leaves a claim covers (all without patterns), evaluated and copied to the host."""
    leaves = flatten(tree)
    if patterns is not None:
        leaves = {
            p: v
            for p, v in leaves.items()
            if p in patterns or any(fnmatch.fnmatchcase(p, pat) for pat in patterns)
        }
    synchronize_tree(leaves)
    host = {}
    for path, value in leaves.items():
        array = to_numpy(value, path=f"{where}: {path or 'output'}")
        if array is None:
            raise InputError(
                f"output {path!r} is not numeric ({type(value).__name__})", where=where
            )
        host[path] = array
    return host


def _select(baseline: Mapping[str, Any], patterns: Sequence[str] | None, tree: Any) -> list[str]:
    if baseline:
        return list(baseline)
    names = ", ".join(flatten(tree)) or "none"
    raise InputError(f"output patterns {list(patterns or [])} match none of the outputs ({names})")


def _same_outputs(
    baseline: Mapping[str, Any], other: Mapping[str, Any], covered: Sequence[str], where: str
) -> None:
    # The unmutated candidate against the baseline: a change of structure here is an error of the
    # measurement itself (there is no noise to calibrate), unlike a mutated model's, which is caught.
    why = "the unmutated candidate must report the baseline's outputs in the baseline's shapes"
    missing = [p for p in covered if p not in other]
    if missing:
        raise InputError(
            f"outputs {missing} missing from the unmutated candidate", where=where, hint=why
        )
    for path in covered:
        if path not in baseline:
            raise InputError(
                f"output {path!r} missing from the baseline side", where=where, hint=why
            )
        if baseline[path].shape != other[path].shape:
            raise InputError(
                f"output {path!r} of the unmutated candidate: shape {other[path].shape} against the "
                f"baseline's {baseline[path].shape}",
                where=where,
                hint=why,
            )


def _structure_changes(
    baseline: Mapping[str, Any],
    mutated: Mapping[str, Any],
    covered: Sequence[str],
    unmutated: set[str],
) -> list[str]:
    """How a mutated model's outputs differ in structure from the baseline: missing, extra (an
    output the unmutated candidate does not report either), reshaped."""
    changes = [f"output {p!r} missing" for p in covered if p not in mutated]
    changes += [f"extra output {p!r}" for p in mutated if p not in covered and p not in unmutated]
    changes += [
        f"output {p!r} shape {mutated[p].shape} against {baseline[p].shape}"
        for p in covered
        if p in mutated and mutated[p].shape != baseline[p].shape
    ]
    return changes


def _bytes_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _worst(metric: str, values: list[float]) -> float:
    return max(values) if DIRECTIONS[metric] == "max" else min(values)


def _least_detectable(metric: str, values: list[float]) -> float:
    return min(values) if DIRECTIONS[metric] == "max" else max(values)


class _Measure:
    """Metric values per output for one (actual, expected) pair, through the shared comparison."""

    def __init__(
        self,
        metrics: list[str],
        rel_eps: float,
        ssim_data_range: float | None,
        ssim_channel_axis: int | None,
    ):
        images = [m for m in metrics if claim_metrics.get(m).comparison == "images"]
        if images and ssim_data_range is None:
            raise InputError(
                f"{images[0]} needs the images' data range (ssim_data_range=): 255 for uint8 "
                "pixels, 1.0 for [0, 1], 2.0 for [-1, 1]; it is never guessed"
            )
        self.metrics = metrics
        self.tolerance = Tolerance(rel_eps=rel_eps, worst_k=0)
        self.ssim_data_range = ssim_data_range
        self.ssim_channel_axis = ssim_channel_axis

    def __call__(
        self,
        actual: Mapping[str, np.ndarray],
        expected: Mapping[str, np.ndarray],
        paths: Sequence[str],
    ) -> tuple[dict[str, dict[str, float]], bool]:
        from .compare import compare_output

        values: dict[str, dict[str, float]] = {}
        zero = True
        for path in paths:
            a, e = actual[path], expected[path]
            out = compare_output(a, e, self.tolerance, path)
            nf = out.nonfinite
            nonfinite = bool(nf.nan_one_side or nf.inf_mismatch)
            # An exact claim is byte equality: a zero difference in value with other bytes
            # (a signed zero, a NaN payload, another dtype) is not exactly zero noise.
            zero &= out.max_abs == 0 and not nonfinite and _bytes_equal(a, e)
            row: dict[str, float] = {}
            for name in self.metrics:
                entry = claim_metrics.get(name)
                if entry.comparison == "images":
                    value = entry.read(
                        _images(a, e, self.ssim_data_range, self.ssim_channel_axis, path)
                    )
                elif nonfinite:  # NaN or an infinity on one side: the metric's worst value
                    value = entry.worst
                else:
                    value = entry.read(out)
                if value is None or math.isnan(value):
                    # Undefined: the worst value where that is a failure (a zero-norm side's
                    # cosine), else left out (the ULP distance of integer outputs).
                    value = entry.worst if entry.undefined_is_worst else math.nan
                row[name] = float(value)
            values[path] = row
        return values, zero


def _images(
    actual: np.ndarray, expected: np.ndarray, data_range: float, channel_axis: int | None, path: str
) -> Any:
    from .structured import compare_images

    return compare_images(
        actual, expected, data_range=data_range, channel_axis=channel_axis, path=path
    )


def _distribution(
    metric: str, noise: list[float], by_output: dict[str, list[float]], bugs: dict[str, list[float]]
) -> MetricDistribution:
    direction = DIRECTIONS[metric]
    clean = [v for v in noise if not math.isnan(v)]
    largest = (max(clean) if direction == "max" else min(clean)) if clean else None
    smallest, where = None, None
    for name, signals in bugs.items():
        values = [v for v in signals if not math.isnan(v)]
        if not values:
            continue
        least = _least_detectable(metric, values)
        if smallest is None or (least < smallest if direction == "max" else least > smallest):
            smallest, where = least, name
    gap = None
    if largest is not None and smallest is not None:
        gap = smallest - largest if direction == "max" else largest - smallest
    return MetricDistribution(
        metric, direction, noise, by_output, bugs, largest, smallest, where, gap
    )


def _margins(margin_for: Mapping[str, float] | None) -> dict[str, float]:
    margins = {}
    for name, factor in (margin_for or {}).items():
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"a margin needs a name saying which spread it covers, got {name!r}")
        if not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor < 1:
            raise InputError(f"margin for {name!r} must be a factor >= 1, got {factor!r}")
        margins[name] = float(factor)
    return margins


def _round_up(value: float, digits: int = 2) -> float:
    """``value`` rounded up to ``digits`` significant digits (a constant one can publish)."""
    if value <= 0 or not math.isfinite(value):
        return value
    exact = Decimal(repr(value))
    step = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    rounded = float(exact.quantize(step, rounding=ROUND_CEILING))
    return rounded if rounded >= value else math.nextafter(rounded, math.inf)


def _tail_spread(noise: list[float], direction: str) -> float:
    """The spread of the noise's upper tail (for "min" metrics, of the deficits 1 - x): the
    largest value less the k-th largest, k = ceil(sqrt(n))."""
    values = sorted(v if direction == "max" else 1.0 - v for v in noise if math.isfinite(v))
    n = len(values)
    if n < 2:
        return 0.0
    k = min(n - 1, math.ceil(math.sqrt(n)))
    return max(0.0, values[-1] - values[-1 - k])


def _propose(result: CalibrationResult) -> None:
    dist = result.claim_metric
    metric, direction = result.metric, result.direction
    if result.noise_exactly_zero:
        result.proposal = "exact"
        result.proposed_bound = 0.0
        result.bound_before_margin = 0.0
        kind = (
            "a no-op claim (byte equality, paired in one process)"
            if result.mode == "paired"
            else "an exact-equivalence claim (holds only while nothing else shifts)"
        )
        result.reason = (
            f"the measured noise is exactly zero over {result.n} cases: propose an exact claim "
            f'(metric = "exact", bound = 0), {kind}, instead of a tolerance'
        )
        for summary in result.mutations:
            summary.caught = summary.cases  # every applied mutation changed the bytes
        return
    if dist.largest_noise is None or math.isinf(dist.largest_noise):
        result.refused = True
        result.reason = (
            f"{NO_GAP_REASON} (the noise itself holds non-finite mismatches or undefined values)"
        )
        return
    if dist.smallest_bug is None:
        result.refused = True
        result.reason = (
            f"no mutation changed the candidate's outputs on any of {result.n} cases, so no bug "
            "signal was measured: the cases do not cover what the mutations change; add cases "
            "that exercise it, or mutations that apply to these outputs"
        )
        return
    if not dist.separated:
        result.refused = True
        result.reason = (
            f"{NO_GAP_REASON}: the largest noise on {metric} is {_g(dist.largest_noise)} and "
            f"{dist.smallest_bug_mutation} gives only {_g(dist.smallest_bug)}"
        )
        separating = [n for n, d in result.by_metric.items() if d.separated and n != metric]
        if separating:
            result.reason += f" ({', '.join(separating)} separates them)"
        hidden, beyond = _split_by_noise(result)
        result.reason += f"; inside the noise: {', '.join(hidden)}"
        if beyond:
            result.reason += f"; beyond it: {', '.join(beyond)}"
        return
    factor = math.prod(result.margins.values()) if result.margins else 1.0
    # Without a named spread, the default margin comes from the noise distribution's own upper
    # tail: the largest noise plus the spread of its top k = ceil(sqrt(n)) values, so that the
    # bound does not sit exactly on the largest value seen; never past halfway into the gap.
    tail = 0.0 if result.margins else _tail_spread(dist.noise, direction)
    result.tail_margin = tail if not result.margins else None
    if direction == "max":
        before = dist.largest_noise
        raw = before * factor + tail
        if tail:
            raw = min(raw, before + (dist.smallest_bug - before) / 2)
        bound = _round_up(raw)
        if bound >= dist.smallest_bug:
            bound = raw
        if metric == "ulp":
            bound = float(math.ceil(raw))
    else:  # higher is better, at most 1: widen the deficit 1 - value
        before = dist.largest_noise
        deficit = (1.0 - before) * factor + tail
        if tail:
            deficit = min(deficit, (1.0 - before) + (before - dist.smallest_bug) / 2)
        bound = 1.0 - _round_up(deficit)
        if bound <= dist.smallest_bug:
            bound = 1.0 - deficit
        while bound > before:  # 1 - deficit rounds in floating point; stay at or below the noise
            bound = math.nextafter(bound, -math.inf)
    result.bound_before_margin = before
    reaches = bound >= dist.smallest_bug if direction == "max" else bound <= dist.smallest_bug
    if reaches:
        result.refused = True
        named = ", ".join(f"{n} x{f:g}" for n, f in result.margins.items())
        result.reason = (
            f"{NO_GAP_REASON}: with the margin for {named} the bound {_g(bound)} reaches the smallest "
            f"bug signal {_g(dist.smallest_bug)} ({dist.smallest_bug_mutation})"
        )
        return
    result.proposal = "tolerance"
    result.proposed_bound = bound
    margin = ", ".join(f"{n} x{f:g}" for n, f in result.margins.items()) or "none"
    result.reason = (
        f"bound just past the largest noise {_g(before)}; margin for named spread: {margin}"
    )
    for summary in result.mutations:
        signals = dist.bugs.get(summary.name, [])
        summary.caught = sum(1 for v in signals if (v > bound if direction == "max" else v < bound))


def _split_by_noise(result: CalibrationResult) -> tuple[list[str], list[str]]:
    """Mutations whose least detectable signal lies inside the noise, and those beyond it."""
    dist = result.claim_metric
    hidden, beyond = [], []
    for summary in result.mutations:
        if summary.smallest_signal is None or summary.caught_by:
            continue
        worse = (
            summary.smallest_signal > dist.largest_noise
            if result.direction == "max"
            else summary.smallest_signal < dist.largest_noise
        )
        (beyond if worse else hidden).append(summary.name)
    return hidden, beyond


def _environment() -> dict[str, Any]:
    from .provenance import machine_facts, package_versions, utc_now

    facts = machine_facts()
    hardware = facts.get("cpu") or facts.get("machine") or platform.machine()
    gpus = facts.get("gpu") or []
    if gpus:
        hardware = f"{hardware}; {', '.join(map(str, gpus))}"
    # Versions of the libraries this process actually loaded: those that moved the numbers.
    loaded = {
        name: version
        for name, version in package_versions().items()
        if _MODULE_OF.get(name, name.replace("-", "_")) in sys.modules
    }
    return {
        # The SIMD level too: framework kernels round by it (an AVX2 and an AVX-512 CPU differ).
        "hardware": f"{hardware} ({facts.get('system')} {facts.get('machine')}"
        + (f", {facts['cpu_isa']})" if facts.get("cpu_isa") else ")"),
        "date": utc_now(),
        "versions": loaded,
    }


_MODULE_OF = {
    "scikit-image": "skimage",
    "scikit-learn": "sklearn",
    "pillow": "PIL",
    "opencv-python": "cv2",
    "opencv-python-headless": "cv2",
    "mlx-metal": "mlx",
    "onnxruntime-gpu": "onnxruntime",
}


# --------------------------------------------------------------------------------------------
# A claim of a spec, measured the way the gate measures it


def calibrate_claim(
    spec: Any,
    claim_id: str,
    *,
    candidate: str | None = None,
    cases: int | Sequence[str] | None = None,
    repeats: int = 1,
    reorder: bool = False,
    margin_for: Mapping[str, float] | None = None,
    mutations: Sequence[Mutation] = DEFAULT_MUTATIONS,
    model_mutations: Mapping[str, str] | None = None,
    min_cases: int = 16,
    seed: int = 0,
) -> CalibrationResult:
    """Calibrate ``[claims.<claim_id>]`` of a spec (a path or a loaded Spec) in the claim's mode.

    A paired claim runs the reference runner and the candidate back to back in this process for
    every case; a stored claim compares the candidate against the recorded reference. ``cases``
    is a count (the first n cases of the spec) or case names; all cases by default.
    ``model_mutations`` maps a name to a ``module:function`` (resolved from the spec's folder, like
    a runner's callable) that stands in for the candidate: a mutated model.
    """
    import dataclasses

    from .runners import make_runner
    from .spec import Spec, load_spec

    loaded: Spec = spec if isinstance(spec, Spec) else load_spec(spec)
    claim = loaded.claims.get(claim_id)
    where = f"{loaded.path}: {loaded.key('claims', claim_id)}"
    if claim is None:
        known = ", ".join(loaded.claims) or "none"
        raise InputError(f"no claim {claim_id!r} (claims: {known})", where=str(loaded.path))
    # Some claims are calibrated through another metric's distribution (the registry's
    # calibrated_through): an exact claim (byte equality) through max_abs, where zero noise
    # proposes it; labelled boxes and segments too, every edge delta being |a - e| of one
    # coordinate of one covered output.
    metric = claim.metric_entry.calibrated_through or claim.metric
    if claim.metric == "max_edge_delta" and claim.params.get("match") == "iou":
        raise InputError(
            "IoU-matched boxes cannot be calibrated from output pairs yet: the pairing "
            "itself changes with the noise",
            where=where,
            hint="calibrate labelled boxes (one output per box) or segments",
        )
    if metric not in DIRECTIONS:
        raise InputError(
            f"metric {claim.metric!r} cannot be calibrated from output pairs",
            where=where,
            hint=f"calibration measures {', '.join(DIRECTIONS)} (and exact claims through max_abs)",
        )
    if candidate is None:
        if len(claim.candidates) != 1:
            raise InputError(
                f"the claim covers candidates {', '.join(claim.candidates)}: name one with --candidate",
                where=where,
            )
        candidate = claim.candidates[0]
    elif candidate not in claim.candidates:
        raise InputError(
            f"{candidate!r} is not a candidate of this claim ({', '.join(claim.candidates)})",
            where=where,
        )
    chosen = _spec_cases(loaded, cases, where)
    params = claim.params
    if metric == "ssim" and "data_range" not in params:
        raise InputError("an ssim claim needs params.data_range to be calibrated", where=where)

    reference_runner = make_runner(loaded.reference, loaded) if claim.mode == "paired" else None
    recorded = None
    if claim.mode == "stored":
        from .references import load_reference

        recorded = load_reference(loaded)
    base = loaded.runners[candidate]
    candidate_runner = make_runner(base, loaded)
    mutants = {}
    for name, target in (model_mutations or {}).items():
        if ":" not in target:
            raise InputError(f"model mutation {name!r}: expected module:function, got {target!r}")
        if base.factory:
            # Called like the runner it replaces: a factory built with the candidate's options,
            # whose callable then runs every case.
            mutated = dataclasses.replace(base, name=f"{candidate}[{name}]", factory=target)
        else:
            mutated = dataclasses.replace(
                base,
                name=f"{candidate}[{name}]",
                kind="python",
                callable=target,
                factory=None,
                options={},
                command=None,
            )
        mutants[name] = make_runner(mutated, loaded)
        # A mutated model's activity is counted like the candidate's it stands in for.
        mutants[name].count = getattr(candidate_runner, "count", ())
    active = [r for r in (reference_runner, candidate_runner, *mutants.values()) if r is not None]
    band = claim.activity
    skipped = band is not None and band.calls is not None and band.measure == "skipped"
    reference_calls: dict[str, Any] = {}

    def as_skipped(case: Any, outputs: dict[str, Any]) -> dict[str, Any]:
        # measure = "skipped": the reference's counted calls on this case less the run's own.
        if skipped and band.counter in outputs and case.name in reference_calls:
            outputs = dict(outputs)
            outputs[band.counter] = reference_calls[case.name] - outputs[band.counter]
        return outputs

    try:
        for runner in active:
            runner.activate()

        def run_pair(case: Any) -> tuple[Any, Any]:
            if reference_runner is not None:
                baseline = reference_runner.run(case).outputs
                if skipped and band.counter in baseline:
                    reference_calls[case.name] = baseline[band.counter]
            else:
                baseline = recorded.outputs(case.name)
            return baseline, as_skipped(case, candidate_runner.run(case).outputs)

        def mutant(runner: Any) -> Callable[[Any], Any]:
            return lambda case: as_skipped(case, runner.run(case).outputs)

        result = calibrate(
            run_pair,
            chosen,
            metric=metric,
            outputs=list(claim.outputs),
            repeats=repeats,
            reorder=reorder,
            mutations=mutations,
            model_mutations={name: mutant(runner) for name, runner in mutants.items()},
            margin_for=margin_for,
            mode=claim.mode,
            min_cases=min_cases,
            rel_eps=float(params.get("rel_eps", 1e-12)),
            ssim_data_range=params.get("data_range"),
            seed=seed,
            claim_id=claim_id,
            activity_band=(
                (claim.activity.counter, claim.activity.low, claim.activity.high)
                if claim.activity
                else None
            ),
            label=f"{candidate} against {'the recorded reference' if recorded else loaded.reference.name}",
        )
        if claim.metric == "max_edge_delta":
            result.claim_metric_name = "max_edge_delta"
            result.label += " (max_edge_delta: the per-edge deltas, measured as max_abs)"
            if result.proposal == "exact":
                result.reason = (
                    f"the measured noise is exactly zero over {result.n} cases: propose bound 0 "
                    "on every edge (max_edge_delta = 0)"
                )
        hidden = (
            _split_by_noise(result)[0]
            if result.refused and result.claim_metric.gap is not None
            else []
        )
        if claim.oracle == "approximation" and any(
            m.kind == "output" and m.name in hidden for m in result.mutations
        ):
            # An approximation changes the output on purpose, by more than a float16 drop or 1 %
            # noise may: those output-level mutations measure numerical noise, not its bugs.
            result.reason += (
                "; an approximation claim is calibrated against the bugs it must catch: model-level "
                "mutations of the approximation (--model-mutation) with --mutations none, unless "
                "the output-level ones inside the noise are bugs this claim must catch"
            )
        return result
    finally:
        for runner in reversed(active):
            if runner.active:
                runner.deactivate()


def _spec_cases(spec: Any, cases: int | Sequence[str] | None, where: str) -> list[Any]:
    every = list(spec.cases.values())
    if cases is None:
        return every
    if isinstance(cases, int):
        if cases < 1 or cases > len(every):
            raise InputError(
                f"asked for {cases} cases, the spec has {len(every)}", where=str(spec.path)
            )
        return every[:cases]
    unknown = [c for c in cases if c not in spec.cases]
    if unknown:
        raise InputError(f"unknown case(s) {', '.join(unknown)}", where=str(spec.path))
    return [spec.cases[c] for c in cases]


# --------------------------------------------------------------------------------------------
# Writing the bound, plotting


def write_bound(spec_path: str | Path, claim_id: str, result: CalibrationResult) -> dict[str, Any]:
    """Store the proposal in ``[claims.<claim_id>]``: bound, status = "calibrated" and the basis.

    Comments and layout of the spec are kept. Refuses (InputError) when the calibration refused.
    Returns the fields written.
    """
    if result.refused:
        raise InputError(
            f"calibration refused, nothing written: {result.reason}", where=str(spec_path)
        )
    if result.claim_id and result.claim_id != claim_id:
        raise InputError(
            f"this calibration measured claim {result.claim_id!r}, not {claim_id!r}",
            where=str(spec_path),
        )
    fields: dict[str, Any] = {"status": "calibrated", "basis": _toml_basis(result.basis())}
    if result.claim_metric_name:
        # max_edge_delta keeps its metric and scope; zero noise gives bound 0 on every edge.
        bound = 0 if result.proposal == "exact" else result.proposed_bound
        fields.update(metric=result.claim_metric_name, bound=bound, mode=result.mode)
    elif result.proposal == "exact":
        fields.update(metric="exact", bound=0, mode=result.mode)
    else:
        fields.update(metric=result.metric, bound=result.proposed_bound, mode=result.mode)
    from .spec import load_spec, update_claim

    claim = load_spec(spec_path).claims.get(claim_id)
    if claim is not None and claim.oracle == "no-op" and result.proposal == "tolerance":
        # Measured noise is not zero: the candidate is not a no-op; its claim is a tolerance.
        fields["oracle"] = "equivalence"
    if (
        claim is not None
        and claim.oracle == "equivalence"
        and result.proposal == "exact"
        and result.mode == "paired"
    ):
        # Zero noise in paired mode: the strongest oracle the boundary allows is the no-op one
        # (both orders, leaked state caught by check (b)), not a single byte comparison.
        fields["oracle"] = "no-op"

    update_claim(spec_path, claim_id, **fields)
    return {**fields, "basis": result.basis()}  # plain data for the caller


def _toml_basis(basis: dict[str, Any]) -> Any:
    """The basis as a TOML table: nested maps inline, one blank line after it so the next table
    keeps its spacing. TOML has no null, so absent values are left out."""
    import tomlkit

    table = tomlkit.table()
    for key, value in basis.items():
        if value is None or (isinstance(value, dict) and not value):
            continue
        if isinstance(value, dict):
            inline = tomlkit.inline_table()
            inline.update(value)
            value = inline
        table.add(key, value)
    table.add(tomlkit.nl())
    return table


def calibration_plot(result: CalibrationResult, path: str | Path) -> Path:
    """Histograms of the noise and of each mutation's signal on the claim's metric, with the bound."""
    # A bare Figure (no pyplot): no global backend or figure state is touched.
    from matplotlib.figure import Figure

    dist = result.claim_metric
    log = dist.direction == "max"

    def transform(values: list[float]) -> list[float]:
        out = []
        for v in values:
            if not math.isfinite(v):
                continue
            x = v if log else 1.0 - v
            out.append(max(x, 1e-300))
        return out

    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    series = [("noise", transform(dist.noise))] + [(n, transform(v)) for n, v in dist.bugs.items()]
    finite = [x for _, values in series for x in values if x > 1e-300]
    low, high = (min(finite), max(finite)) if finite else (1e-12, 1.0)
    bins = np.geomspace(low / 2, high * 2, 40)
    for name, values in series:
        clipped = [max(v, low / 2) for v in values]
        ax.hist(
            clipped,
            bins=bins,
            alpha=0.55 if name == "noise" else 0.4,
            label=name,
            color="black" if name == "noise" else None,
        )
    if result.proposed_bound is not None and result.proposal == "tolerance":
        x = result.proposed_bound if log else 1.0 - result.proposed_bound
        ax.axvline(
            max(x, low / 2), color="red", linestyle="--", label=f"bound {_g(result.proposed_bound)}"
        )
    ax.set_xscale("log")
    ax.set_xlabel(dist.metric if log else f"1 - {dist.metric}")
    ax.set_ylabel("cases")
    title = f"{result.claim_id or result.label or 'calibration'}: noise vs injected bugs"
    if result.refused:
        title += " (refused: no gap)"
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    return out


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

    def __bool__(self) -> bool:
        return not self.refused

    def summary(self) -> str:
        sign = "<=" if self.direction == "max" else ">="
        lines = [
            f"calibration of {self.claim_id} on {self.metric} (dataset claim), "
            f"{len(self.cases)} cases",
            f"observed {self.metric} over the cases: {_g(self.observed)}; one-sided "
            f"{self.confidence:.0%} bootstrap bound over cases ({self.resamples} resamples): "
            f"{_g(self.interval)}",
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

    def basis(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "n": len(self.cases),
            "observed": self.observed,
            "bootstrap": f"one-sided {self.confidence:.0%} percentile bound over cases, "
            f"{self.resamples} resamples (scipy.stats.bootstrap)",
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
) -> DatasetCalibration:
    """Calibrate an agreement / accuracy / ECE claim: the gate's dataset metric on the
    candidate's outputs, its sampling noise by a bootstrap over cases, and model mutations that
    must fall beyond the proposed bound (the bootstrap bound, rounded outwards)."""
    import dataclasses

    from scipy.stats import bootstrap

    from .gate import _dataset
    from .runners import make_runner
    from .spec import Spec, load_spec

    loaded: Spec = spec if isinstance(spec, Spec) else load_spec(spec)
    claim = loaded.claims[claim_id]
    where = f"{loaded.path}: {loaded.key('claims', claim_id)}"
    if claim.scope != "dataset":
        raise InputError(f"{claim_id} is not a dataset claim", where=where)
    candidate = candidate or claim.candidates[0]
    names = list(cases) if cases else list(loaded.cases)
    expected: dict[str, dict[str, Any]] | None = None
    if claim.metric == "agreement":
        from .references import load_reference

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
        verdict = _dataset(claim, candidate, loaded, chosen, outputs, expected)
        return float(verdict.observed) if verdict.observed is not None else math.nan

    observed = metric_over(np.arange(len(names)), produced)
    direction = DIRECTIONS_DATASET[claim.metric]
    result = bootstrap(
        (np.arange(len(names)),),
        lambda idx: metric_over(idx, produced),
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
        if base.factory:
            runner = dataclasses.replace(base, name=f"{candidate}[{name}]", factory=target)
        else:
            runner = dataclasses.replace(
                base,
                name=f"{candidate}[{name}]",
                kind="python",
                callable=target,
                factory=None,
                options={},
                command=None,
            )
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
            f"the one-sided {confidence:.0%} bootstrap bound over {len(names)} cases, rounded outwards"
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
    return DatasetCalibration(
        claim_id=claim_id,
        metric=claim.metric,
        direction=direction,
        cases=names,
        observed=observed,
        interval=interval,
        confidence=confidence,
        resamples=resamples,
        mutations=mutated,
        proposed_bound=None if refused else bound,
        refused=refused,
        reason=reason,
    )


DIRECTIONS_DATASET = {"agreement": "min", "accuracy": "min", "ece": "max"}

"""The proposal: a bound just past the measured noise, widened only by the spread named, or a
refusal when no gap separates the noise from the smallest bug."""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal

from ..errors import InputError
from .result import NO_GAP_REASON, CalibrationResult, _g


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
            f"{NO_GAP_REASON}: with the margin for {named} the bound {_g(bound)} reaches the "
            "smallest "
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

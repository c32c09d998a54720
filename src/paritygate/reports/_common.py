"""Helpers shared by the report renderers: number formatting and views of a result dict.

Renderers work on the JSON form of a :class:`~paritygate.results.GateResult` (``to_dict()``), so
an earlier run re-renders from its file alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from .. import claim_metrics
from .._format import format_number

FORMAT = "paritygate-gate-result"
FORMAT_VERSION = 1


def fmt(value: Any, *, compact: bool = False) -> str:
    """A number as a short human string (``compact``: at most ~8 characters, for a terminal's
    cells); other values as text; None as an empty string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(fmt(v, compact=compact) for v in value) + "]"
    return format_number(value, compact=compact)


def unit_of(verdict: dict[str, Any]) -> str:
    """The unit of a verdict's values: its claim's, else its metric's in the claim-metric
    registry (:func:`paritygate.claim_metrics.unit_of`)."""
    return claim_metrics.unit_of(str(verdict.get("metric", "")), verdict.get("unit"))


def metric_value(metric: Any, value: Any) -> str:
    """A value of ``metric`` in its registry display form (a cosine just below 1 as ``1-d``, an
    agreement as a percentage)."""
    if value is None:
        return ""
    if claim_metrics.percent(str(metric)):
        return format_number(value, percent=True)
    return format_number(value, near_one=claim_metrics.near_one(str(metric)))


def is_latency(verdict: dict[str, Any]) -> bool:
    """A speed verdict measured in milliseconds (a latency percentile), by the registry."""
    entry = claim_metrics.METRICS.get(str(verdict.get("metric", "")))
    return entry is not None and entry.scope == "speed" and entry.unit == "ms"


def as_float(value: Any) -> float | None:
    """A plottable float, or None (strings such as "nan" included)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def verdict_word(result: dict[str, Any]) -> str:
    code = exit_code(result)
    if code == 0:
        return "PASS"
    if code == 3:
        return "DRIFT"
    return "FAIL"


def exit_code(result: dict[str, Any]) -> int:
    code = result.get("exit_code")
    if isinstance(code, int):
        return code
    if result.get("drift"):
        return 3
    return 0 if passed(result) else 1


def passed(result: dict[str, Any]) -> bool:
    if "passed" in result:
        return bool(result["passed"])
    verdicts = result.get("verdicts") or []
    return (
        bool(verdicts)
        and not result.get("drift")
        and not result.get("errors")
        and all(v.get("passed") for v in verdicts)
    )


def verdicts(result: dict[str, Any]) -> list[dict[str, Any]]:
    return list(result.get("verdicts") or [])


def case_label(verdict: dict[str, Any]) -> str:
    case = verdict.get("case")
    return "(dataset)" if case is None else str(case)


def summary_counts(result: dict[str, Any]) -> dict[str, int]:
    items = verdicts(result)
    return {
        "verdicts": len(items),
        "passed": sum(1 for v in items if v.get("passed")),
        "failed": sum(1 for v in items if not v.get("passed")),
        "not_evaluated": len(result.get("not_evaluated") or []),
        "drift": len(result.get("drift") or []),
        "errors": len(result.get("errors") or []),
    }


def held_count(result: dict[str, Any]) -> tuple[int, int, str]:
    """(held, total, what is counted): claims, or, where a spec gates several candidates, the
    claim × candidate pairs (a claim holds for one candidate and may fail for another)."""
    groups = claim_groups(result)
    held = sum(1 for group in groups.values() if all(v.get("passed") for v in group))
    candidates = {candidate for _, candidate in groups}
    if len(candidates) > 1:
        claims = {claim for claim, _ in groups}
        plural = "" if len(claims) == 1 else "s"
        what = (
            f"claim × candidate pairs ({len(claims)} claim{plural}, {len(candidates)} candidates)"
        )
        return held, len(groups), what
    return held, len(groups), "claims"


def claim_groups(result: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Verdicts grouped by (claim id, candidate), in the order they first appear."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for verdict in verdicts(result):
        key = (str(verdict.get("claim_id", "")), str(verdict.get("candidate", "")))
        groups.setdefault(key, []).append(verdict)
    return groups


def failure_text(
    failure: dict[str, Any], number: Any = fmt, over: str = "exceeded by", excess: Any = None
) -> str:
    """One failure in words: metric, where, observed, bound and by how much it missed (values
    written by ``number``, the excess by ``excess`` or else ``number``; a ceiling's excess
    introduced by ``over``)."""
    parts = [str(failure.get("metric", ""))]
    if failure.get("where"):
        parts.append(f"at {failure['where']}")
    if failure.get("observed") is not None:
        parts.append(f"observed {number(failure['observed'])}")
    if failure.get("bound") is not None:
        parts.append(f"bound {number(failure['bound'])}")
    if failure.get("excess") is not None:
        word = excess_word(failure.get("observed"), failure.get("bound"), failure.get("metric"))
        by = (excess or number)(failure["excess"])
        parts.append(f"{over if word == 'exceeded by' else word} {by}")
    text = " ".join(p for p in parts if p)
    if failure.get("detail"):
        text += f" ({failure['detail']})"
    return text


def verdict_message(verdict: dict[str, Any]) -> str:
    """The reason a verdict failed, in one paragraph: every failure, not just the first."""
    failures = verdict.get("failures") or []
    if failures:
        return "; ".join(failure_text(f) for f in failures)
    unit = f" {unit_of(verdict)}" if unit_of(verdict) else ""
    metric = verdict.get("metric", "")
    text = f"{metric} observed {metric_value(metric, verdict.get('observed'))}{unit}"
    text += f", bound {metric_value(metric, verdict.get('bound'))}{unit}"
    if verdict.get("excess") is not None:
        word = excess_word(verdict.get("observed"), verdict.get("bound"), metric)
        text += f", {word} {fmt(verdict.get('excess'))}"
    return text


# An activity band as approximation.ActivityBand.text writes it: "6..9", "0.5..inf".
_BAND = re.compile(r"^(-?(?:inf|[\d.]+(?:e[-+]?\d+)?))\.\.(-?(?:inf|[\d.]+(?:e[-+]?\d+)?))$")


def excess_word(observed: Any, bound: Any, metric: Any = None) -> str:
    """How a value missed its bound: a band is missed "under by" or "exceeded by"; a floor
    (cosine, accuracy, speedup) is fallen "short by"; a ceiling is "exceeded by". The registry
    says which a metric is; an unregistered one is judged by its values."""
    o = as_float(observed)
    band = _BAND.match(bound) if isinstance(bound, str) else None
    if band is not None and o is not None:
        return "under by" if o < float(band.group(1)) else "exceeded by"
    direction = claim_metrics.direction_of(str(metric)) if metric is not None else None
    if direction is not None:
        return "short by" if direction == "min" else "exceeded by"
    b = as_float(bound)
    return "short by" if o is not None and b is not None and o < b else "exceeded by"


def _ms(seconds: Any) -> str:
    value = as_float(seconds)
    return "?" if value is None else f"{fmt(value * 1000.0)} ms"


def speed_evidence(verdict: dict[str, Any]) -> str:
    """What a speed verdict measured, in one line (empty when the verdict is not a speed claim).

    speedup: both sides' medians and sample counts, the paired ratios' median and 95 % interval,
    the baseline's run-to-run variability and the design; latency: the percentile among its
    samples, their range, the cold call and the uncounted warm-up."""
    import statistics

    evidence = verdict.get("evidence")
    if not isinstance(evidence, dict):
        return ""
    if evidence.get("format") == "paritygate-bench-result":
        base, cand = evidence.get("baseline") or {}, evidence.get("candidate") or {}
        b, c = base.get("end_to_end_s") or [], cand.get("end_to_end_s") or []
        ratios = [as_float(r) for r in evidence.get("pair_ratios") or []]
        ci = [as_float(x) for x in evidence.get("ratio_ci") or []]
        parts = []
        if b and c:
            parts.append(
                f"{base.get('name', 'baseline')} median {_ms(statistics.median(b))} (n={len(b)}), "
                f"{cand.get('name', 'candidate')} median {_ms(statistics.median(c))} (n={len(c)})"
            )
        if ratios and all(r for r in ratios):
            per_pair = [1.0 / r for r in ratios]  # type: ignore[operator]
            text = (
                f"speedup per block pair median {fmt(statistics.median(per_pair))} over "
                f"{len(per_pair)} pairs (range {fmt(min(per_pair))}–{fmt(max(per_pair))})"
            )
            level = as_float(evidence.get("confidence"))
            if len(ci) == 2 and all(ci) and level:
                text += f"; {100 * level:.4g}% interval {fmt(1.0 / ci[1])}–{fmt(1.0 / ci[0])} x"  # type: ignore[operator]
            parts.append(text)
        if as_float(evidence.get("threshold")) is not None:
            parts.append(
                f"threshold {100.0 * evidence['threshold']:.2f}% "
                f"{evidence.get('threshold_source', '')}".rstrip()
            )
        design = (evidence.get("provenance") or {}).get("design")
        if isinstance(design, dict):
            parts.append(
                f"{design.get('block_pairs')} block pairs x {design.get('samples_per_block')} "
                f"samples x {design.get('loops_per_sample')} calls"
            )
        elif design:
            parts.append(str(design))
        if evidence.get("output_check"):
            parts.append(f"output {evidence['output_check']}")
        if evidence.get("summary") or evidence.get("verdict"):
            parts.append(f"bench: {evidence.get('summary') or evidence['verdict']}")
        return "; ".join(parts)
    samples = [x for x in (as_float(v) for v in evidence.get("samples_ms") or []) if x is not None]
    if samples and is_latency(verdict):
        text = (
            f"{verdict.get('metric')} {fmt(verdict.get('observed'))} {unit_of(verdict)} of "
            f"{len(samples)} samples "
            f"(min {fmt(min(samples))}, median {fmt(statistics.median(samples))}, max "
            f"{fmt(max(samples))} ms)"
        )
        if as_float(evidence.get("cold_ms")) is not None:
            text += f"; cold call {fmt(evidence['cold_ms'])} ms"
        if evidence.get("warmup") is not None:
            text += f"; {evidence['warmup']} warm-up calls uncounted"
        return text
    return ""


def speed_series(verdict: dict[str, Any]) -> tuple[str, dict[str, list[float]], list[float]] | None:
    """Samples to plot for a speed verdict: (x label, {series: values}, lines to draw)."""
    evidence = verdict.get("evidence")
    if not isinstance(evidence, dict):
        return None
    if evidence.get("format") == "paritygate-bench-result":
        series = {}
        for side in ("baseline", "candidate"):
            data = evidence.get(side) or {}
            values = _samples(data.get("end_to_end_s") or [])
            if values:
                series[str(data.get("name", side))] = [v * 1000.0 for v in values]
        return ("end-to-end time per call (ms)", series, []) if series else None
    samples = _samples(evidence.get("samples_ms") or [])
    if samples and is_latency(verdict):
        bound = as_float(verdict.get("bound"))
        return (
            "time per call (ms)",
            {str(verdict.get("candidate", "samples")): samples},
            [] if bound is None else [bound],
        )
    return None


def edge_deltas(evidence: Any) -> dict[str, float]:
    """Per-edge deltas held in a verdict's evidence, as {"label.edge": delta}.

    Recognized shapes (any key containing "edge"): a mapping of edge name to a number, a mapping
    of label to a mapping of edge name to a number, or a list of records with a name ("where",
    "edge" or "label") and a number ("delta", "abs_diff" or "observed").
    """
    found: dict[str, float] = {}
    if not isinstance(evidence, dict):
        return found
    for key, value in evidence.items():
        if "edge" not in str(key).lower():
            continue
        if isinstance(value, dict):
            for name, item in value.items():
                if isinstance(item, dict):
                    for edge, number in item.items():
                        if as_float(number) is not None:
                            found[f"{name}.{edge}"] = as_float(number)  # type: ignore[assignment]
                elif as_float(item) is not None:
                    found[str(name)] = as_float(item)  # type: ignore[assignment]
        elif isinstance(value, list):
            for record in value:
                if not isinstance(record, dict):
                    continue
                name = _record_name(record)
                number = next(
                    (as_float(record[k]) for k in ("delta", "abs_diff", "observed") if k in record),
                    None,
                )
                if name and number is not None:
                    found[name] = number
    return found


def _record_name(record: dict[str, Any]) -> str:
    parts = [str(record[k]) for k in ("label", "box", "edge") if record.get(k) not in (None, "")]
    if parts:
        return ".".join(parts)
    return str(record.get("where", ""))


def distributions(result: dict[str, Any]) -> list[tuple[str, dict[str, list[float]]]]:
    """Calibration distributions present in the data: [(title, {series name: samples})].

    Looked up in every verdict's evidence and in the result's top level under the key
    "calibration" (or "distribution"): either a list of samples or a mapping of series name
    (e.g. "noise", mutation names) to a list of samples.
    """
    found: list[tuple[str, dict[str, list[float]]]] = []

    def collect(title: str, holder: Any) -> None:
        if not isinstance(holder, dict):
            return
        for key in ("calibration", "distribution", "distributions"):
            value = holder.get(key)
            series = _series(value)
            if series:
                found.append((title, series))

    collect("run", result)
    for verdict in verdicts(result):
        title = f"{verdict.get('claim_id')} / {verdict.get('candidate')} / {case_label(verdict)}"
        collect(title, verdict.get("evidence"))
    return found


def _series(value: Any) -> dict[str, list[float]]:
    if isinstance(value, list):
        samples = _samples(value)
        return {"samples": samples} if samples else {}
    if isinstance(value, dict):
        out: dict[str, list[float]] = {}
        for name, item in value.items():
            if isinstance(item, list):
                samples = _samples(item)
                if samples:
                    out[str(name)] = samples
            elif isinstance(item, dict):
                for sub, inner in item.items():
                    if isinstance(inner, list):
                        samples = _samples(inner)
                        if samples:
                            out[f"{name}.{sub}"] = samples
        return out
    return {}


def _samples(values: Iterable[Any]) -> list[float]:
    numbers = [as_float(v) for v in values]
    clean = [n for n in numbers if n is not None]
    return clean if len(clean) >= 2 else []

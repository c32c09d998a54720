"""Structured comparators: outputs whose meaning is not "an array of numbers".

- :func:`compare_keyed_boxes`: boxes or segments keyed by label, every edge checked against a
  bound (the "<= 2 px on every box edge" claim); missing and extra labels fail.
- :func:`match_boxes`: unlabelled boxes paired by IoU with an optimal assignment
  (:func:`scipy.optimize.linear_sum_assignment`); unmatched boxes fail.
- :func:`compare_sequences`: token ids or strings, exact, with the first divergence and the
  context around it on both sides.
- :func:`compare_class_decisions`: logits or probabilities judged as decisions: argmax and top-k
  agreement, probability drift, KL divergence, expected calibration error.
- :func:`compare_images`: SSIM and PSNR from scikit-image with an explicit data range.

Each returns a small dataclass that is truthy when it passes, lists *every* violated bound as
:class:`~paritygate.results.Failure` objects (``where`` names the label and edge, box index, token
position or row) and carries JSON-serializable evidence (``to_dict``). These are small host-side
computations: inputs are turned into numpy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ._format import format_number
from .errors import InputError, UserError
from .results import Failure, to_jsonable

__all__ = [
    "KeyedBoxesResult",
    "MatchedBoxesResult",
    "SequenceResult",
    "ClassDecisionResult",
    "ImageResult",
    "compare_keyed_boxes",
    "match_boxes",
    "box_iou",
    "compare_sequences",
    "compare_class_decisions",
    "expected_calibration_error",
    "compare_images",
]

BOX_EDGES = ("x1", "y1", "x2", "y2")


class _Verdict:
    """Shared behaviour: truthy when passing, JSON form through results.to_jsonable."""

    passed: bool
    failures: list[Failure]

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    def summary(self) -> str:
        """The headline metrics, one line."""
        return ""

    def describe(self) -> str:
        """A headline with the key metrics, then one line per failure, for messages and reports."""
        head = f"{self.kind} {self.path or '(output)'}: {'PASS' if self.passed else 'FAIL'}"
        summary = self.summary()
        if summary:
            head += f" — {summary}"
        return "\n".join([head] + [f"  {f.describe()}" for f in self.failures])


def _where_label(path: str) -> str:
    return path or "output"


def _input_error(path: str, message: str) -> InputError:
    """An InputError naming the output (``path``, else "output")."""
    return InputError(message, where=_where_label(path))


def _bound(
    name: str, value: Any, *, low: float = 0.0, high: float = math.inf, path: str = ""
) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise _input_error(path, f"{name} must be a number, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and low <= value <= high):
        span = f"[{low:g}, {high:g}]" if math.isfinite(high) else f">= {low:g}"
        raise _input_error(path, f"{name} must be a finite number {span}, got {value!r}")
    return value


def _edge_delta(actual: float, expected: float) -> float:
    """|a - e|; a non-finite coordinate differs infinitely unless both sides hold the same inf."""
    if math.isfinite(actual) and math.isfinite(expected):
        return abs(actual - expected)
    return 0.0 if actual == expected else math.inf


# ---------------------------------------------------------------------------------------------
# (a) keyed boxes / segments


@dataclass(kw_only=True)
class KeyedBoxesResult(_Verdict):
    """Boxes (or segments) keyed by label, compared edge by edge."""

    kind: str = "keyed-boxes"
    path: str = ""
    passed: bool
    edge_names: list[str]
    max_edge_delta: float | dict[str, float]  # the bound (one number, or one per edge)
    observed_max_delta: float  # the largest delta over every edge of every common label
    worst: str | None  # "label.edge" of that delta
    bound_that_passes: float  # the smallest single bound every common edge meets
    edge_deltas: dict[str, dict[str, float]]  # label -> edge -> |actual - expected|
    missing: list[str]  # labels in expected, absent in actual
    extra: list[str]  # labels in actual, absent in expected
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        n_edges = sum(len(d) for d in self.edge_deltas.values())
        text = (
            f"{len(self.edge_deltas)} labels, {n_edges} edges, max delta "
            f"{format_number(self.observed_max_delta)}"
        )
        if self.worst:
            text += f" at {self.worst}"
        return text + f" (bound {self.max_edge_delta})"


def _label_map(
    boxes: Mapping[Any, Any], side: str, edge_names: tuple[str, ...], path: str
) -> dict[str, list[float]]:
    if not isinstance(boxes, Mapping):
        raise _input_error(
            path, f"{side} boxes must be a mapping label -> edges, got {type(boxes).__name__}"
        )
    out: dict[str, list[float]] = {}
    for label, value in boxes.items():
        key = str(label)
        if key in out:
            raise _input_error(path, f"{side} labels {label!r} collide once written as text")
        if isinstance(value, Mapping):
            absent = [e for e in edge_names if e not in value]
            if absent:
                raise _input_error(path, f"{side} box {key!r} lacks edges {absent}")
            coords = [value[e] for e in edge_names]
        else:
            coords = np.asarray(value).reshape(-1).tolist() if not isinstance(value, str) else None
            if coords is None or len(coords) != len(edge_names):
                raise _input_error(
                    path,
                    f"{side} box {key!r} has {len(coords) if coords is not None else 'no'} "
                    f"coordinates, expected {len(edge_names)} ({', '.join(edge_names)})",
                )
        try:
            out[key] = [float(c) for c in coords]
        except (TypeError, ValueError):
            raise _input_error(
                path, f"{side} box {key!r} holds non-numeric coordinates {coords!r}"
            ) from None
    return out


def compare_keyed_boxes(
    actual: Mapping[Any, Any],
    expected: Mapping[Any, Any],
    *,
    max_edge_delta: float | Mapping[str, float],
    edge_names: Sequence[str] = BOX_EDGES,
    path: str = "",
) -> KeyedBoxesResult:
    """Compare boxes keyed by label, every edge of every box against ``max_edge_delta``.

    ``actual`` and ``expected`` map a label to its coordinates: a sequence in the order of
    ``edge_names`` (``("x1", "y1", "x2", "y2")`` by default; ``("start", "end")`` for segments)
    or a mapping edge -> value. Labels are matched exactly; a label on one side only fails.
    ``max_edge_delta`` is one bound for every edge or a mapping edge -> bound. An edge fails when
    ``|actual - expected| > bound``; a NaN coordinate always fails. Every failing edge is listed.
    """
    edge_names = tuple(str(e) for e in edge_names)
    if not edge_names or len(set(edge_names)) != len(edge_names):
        raise _input_error(
            path, f"edge_names must be distinct and non-empty, got {list(edge_names)}"
        )
    if isinstance(max_edge_delta, Mapping):
        unknown = sorted(set(map(str, max_edge_delta)) - set(edge_names))
        absent = [e for e in edge_names if e not in max_edge_delta]
        if unknown or absent:
            raise _input_error(
                path,
                f"max_edge_delta per edge must name exactly {list(edge_names)} "
                f"(unknown {unknown}, absent {absent})",
            )
        bounds = {
            e: _bound(f"max_edge_delta[{e}]", max_edge_delta[e], path=path) for e in edge_names
        }
        bound_record: float | dict[str, float] = dict(bounds)
    else:
        single = _bound("max_edge_delta", max_edge_delta, path=path)
        if single is None:
            raise _input_error(path, "max_edge_delta is required")
        bounds = {e: single for e in edge_names}
        bound_record = single
    act = _label_map(actual, "actual", edge_names, path)
    exp = _label_map(expected, "expected", edge_names, path)

    failures: list[Failure] = []
    missing = [label for label in exp if label not in act]
    extra = [label for label in act if label not in exp]
    edge_deltas: dict[str, dict[str, float]] = {}
    worst, worst_delta = None, 0.0
    for label, exp_coords in exp.items():
        if label not in act:
            continue
        deltas = {}
        for edge, a, e in zip(edge_names, act[label], exp_coords):
            delta = _edge_delta(a, e)
            deltas[edge] = delta
            if worst is None or delta > worst_delta:
                worst, worst_delta = f"{label}.{edge}", delta
            if not delta <= bounds[edge]:
                failures.append(
                    Failure(
                        metric="edge_delta",
                        bound=bounds[edge],
                        observed=delta,
                        excess=delta - bounds[edge],
                        where=f"{label}.{edge}",
                        detail=f"actual {format_number(a)}, expected {format_number(e)}",
                    )
                )
        edge_deltas[label] = deltas
    for label in missing:
        failures.append(
            Failure(
                metric="missing_label",
                bound=None,
                observed=None,
                where=label,
                detail="in expected, absent in actual",
            )
        )
    for label in extra:
        failures.append(
            Failure(
                metric="extra_label",
                bound=None,
                observed=None,
                where=label,
                detail="in actual, absent in expected",
            )
        )
    return KeyedBoxesResult(
        path=path,
        passed=not failures,
        edge_names=list(edge_names),
        max_edge_delta=bound_record,
        observed_max_delta=worst_delta,
        worst=worst,
        bound_that_passes=worst_delta,
        edge_deltas=edge_deltas,
        missing=missing,
        extra=extra,
        failures=failures,
    )


# ---------------------------------------------------------------------------------------------
# (b) unlabelled boxes matched by IoU


def box_iou(a: Any, b: Any) -> np.ndarray:
    """IoU matrix of boxes ``a`` (N, 4) and ``b`` (M, 4) in (x1, y1, x2, y2) form.

    An inverted box has zero area. Two identical zero-area boxes have IoU 1 (they coincide);
    a box with a non-finite coordinate overlaps nothing (IoU 0).
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    finite_a = np.isfinite(a).all(axis=1)
    finite_b = np.isfinite(b).all(axis=1)
    a = np.where(finite_a[:, None], a, 0.0)
    b = np.where(finite_b[:, None], b, 0.0)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    iw = np.clip(
        np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None
    )
    ih = np.clip(
        np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None
    )
    inter = iw * ih
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)
    same = (a[:, None, :] == b[None, :, :]).all(axis=2) & (union == 0)
    iou = np.where(same, 1.0, iou)
    return np.where(finite_a[:, None] & finite_b[None, :], iou, 0.0)


@dataclass(kw_only=True)
class MatchedBoxesResult(_Verdict):
    """Unlabelled boxes paired by an optimal IoU assignment."""

    kind: str = "matched-boxes"
    path: str = ""
    passed: bool
    min_iou: float  # the bound: a pair below it does not match
    max_edge_delta: float | None  # optional bound on every edge of every matched pair
    n_actual: int
    n_expected: int
    pairs: list[dict[str, Any]]  # {"actual", "expected", "iou", "edge_deltas"}
    observed_min_iou: float | None  # the lowest IoU among matched pairs
    observed_max_delta: float | None  # the largest edge delta among matched pairs
    unmatched_actual: list[int]
    unmatched_expected: list[int]
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        text = (
            f"{len(self.pairs)} pairs of {self.n_actual} actual / {self.n_expected} expected "
            f"boxes at IoU >= {format_number(self.min_iou)}"
        )
        if self.observed_min_iou is not None:
            text += f", lowest IoU {format_number(self.observed_min_iou)}"
        if self.observed_max_delta is not None:
            text += f", max edge delta {format_number(self.observed_max_delta)}"
        return text


def _boxes_array(boxes: Any, side: str, path: str) -> np.ndarray:
    array = np.asarray(boxes, dtype=np.float64) if not isinstance(boxes, np.ndarray) else boxes
    if array.dtype.kind not in "biuf":
        raise _input_error(path, f"{side} boxes must be numeric, got dtype {array.dtype}")
    if array.size == 0:
        return np.zeros((0, 4))
    if array.ndim != 2 or array.shape[1] != 4:
        raise _input_error(
            path, f"{side} boxes must have shape (n, 4) as x1, y1, x2, y2; got {tuple(array.shape)}"
        )
    return array.astype(np.float64)


def match_boxes(
    actual: Any,
    expected: Any,
    *,
    min_iou: float,
    max_edge_delta: float | None = None,
    actual_classes: Sequence[Any] | None = None,
    expected_classes: Sequence[Any] | None = None,
    path: str = "",
) -> MatchedBoxesResult:
    """Pair unlabelled boxes (n, 4) by IoU and check every pair; unmatched boxes fail.

    The pairing maximizes the total IoU over pairs that reach ``min_iou`` (Hungarian assignment,
    :func:`scipy.optimize.linear_sum_assignment`); pairs below ``min_iou`` are not matches. With
    ``actual_classes`` / ``expected_classes`` only boxes of the same class pair. With
    ``max_edge_delta`` every edge of every matched pair must also lie within that many units.
    Each unmatched box is a failure that names its best overlap on the other side.
    """
    from scipy.optimize import linear_sum_assignment

    threshold = _bound("min_iou", min_iou, high=1.0, path=path)
    if threshold is None:
        raise _input_error(path, "min_iou is required")
    edge_bound = _bound("max_edge_delta", max_edge_delta, path=path)
    a = _boxes_array(actual, "actual", path)
    e = _boxes_array(expected, "expected", path)
    iou = box_iou(a, e)
    allowed = np.ones_like(iou, dtype=bool)
    if (actual_classes is None) != (expected_classes is None):
        raise _input_error(path, "give classes for both sides or for neither")
    if actual_classes is not None:
        ca, ce = np.asarray(actual_classes), np.asarray(expected_classes)
        if ca.shape != (len(a),) or ce.shape != (len(e),):
            raise _input_error(
                path,
                f"classes must hold one entry per box: actual {ca.shape} for "
                f"{len(a)} boxes, expected {ce.shape} for {len(e)} boxes",
            )
        allowed = ca[:, None] == ce[None, :]
    # Pairs below the threshold cannot match, so they carry no weight in the assignment.
    weight = np.where(allowed & (iou >= threshold), iou, 0.0)
    if threshold == 0.0:
        weight = np.where(allowed, iou + 1.0, 0.0)  # every allowed pair matches; prefer overlap
    rows, cols = linear_sum_assignment(weight, maximize=True) if iou.size else ([], [])

    failures: list[Failure] = []
    pairs: list[dict[str, Any]] = []
    matched_a: set[int] = set()
    matched_e: set[int] = set()
    for i, j in sorted(zip((int(r) for r in rows), (int(c) for c in cols)), key=lambda p: p[1]):
        if not (allowed[i, j] and iou[i, j] >= threshold):
            continue
        matched_a.add(i)
        matched_e.add(j)
        deltas = {
            edge: _edge_delta(float(a[i, k]), float(e[j, k])) for k, edge in enumerate(BOX_EDGES)
        }
        pairs.append({"actual": i, "expected": j, "iou": float(iou[i, j]), "edge_deltas": deltas})
        if edge_bound is not None:
            for edge, delta in deltas.items():
                if not delta <= edge_bound:
                    failures.append(
                        Failure(
                            metric="edge_delta",
                            bound=edge_bound,
                            observed=delta,
                            excess=delta - edge_bound,
                            where=f"expected[{j}].{edge}",
                            detail=f"matched to actual[{i}], IoU {format_number(float(iou[i, j]))}",
                        )
                    )
    unmatched_e = [j for j in range(len(e)) if j not in matched_e]
    unmatched_a = [i for i in range(len(a)) if i not in matched_a]
    for j in unmatched_e:
        failures.append(
            _unmatched_failure(
                "unmatched_expected",
                f"expected[{j}]",
                "actual",
                iou[:, j] if len(a) else np.zeros(0),
                allowed[:, j] if len(a) else np.zeros(0, bool),
                threshold,
            )
        )
    for i in unmatched_a:
        failures.append(
            _unmatched_failure(
                "unmatched_actual",
                f"actual[{i}]",
                "expected",
                iou[i, :] if len(e) else np.zeros(0),
                allowed[i, :] if len(e) else np.zeros(0, bool),
                threshold,
            )
        )
    ious = [p["iou"] for p in pairs]
    deltas_all = [d for p in pairs for d in p["edge_deltas"].values()]
    return MatchedBoxesResult(
        path=path,
        passed=not failures,
        min_iou=threshold,
        max_edge_delta=edge_bound,
        n_actual=len(a),
        n_expected=len(e),
        pairs=pairs,
        observed_min_iou=min(ious) if ious else None,
        observed_max_delta=max(deltas_all) if deltas_all else None,
        unmatched_actual=unmatched_a,
        unmatched_expected=unmatched_e,
        failures=failures,
    )


def _unmatched_failure(
    metric: str, where: str, other: str, overlaps: np.ndarray, allowed: np.ndarray, threshold: float
) -> Failure:
    if overlaps.size == 0:
        return Failure(
            metric=metric,
            bound=threshold,
            observed=None,
            where=where,
            detail=f"no {other} boxes at all",
        )
    candidates = np.where(allowed, overlaps, -1.0)
    best = int(np.argmax(candidates))
    if candidates[best] < 0:
        return Failure(
            metric=metric,
            bound=threshold,
            observed=None,
            where=where,
            detail=f"no {other} box of the same class",
        )
    best_iou = float(overlaps[best])
    detail = f"best overlap {other}[{best}] IoU {format_number(best_iou)}"
    if best_iou >= threshold:
        detail += ", which pairs better with another box"
    return Failure(
        metric=metric,
        bound=threshold,
        observed=best_iou,
        excess=max(threshold - best_iou, 0.0),
        where=where,
        detail=detail,
    )


# ---------------------------------------------------------------------------------------------
# (c) sequences


@dataclass(kw_only=True)
class SequenceResult(_Verdict):
    """Two sequences (token ids or text) compared exactly."""

    kind: str = "sequence"
    path: str = ""
    passed: bool
    length_actual: int
    length_expected: int
    first_divergence: int | None  # first position where the sides differ (or one ends)
    mismatched_positions: int  # differing positions within the common length
    context_start: int | None  # where the context windows below begin
    actual_context: list[Any] | str | None
    expected_context: list[Any] | str | None
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        text = f"lengths {self.length_actual} / {self.length_expected}"
        if self.first_divergence is None:
            return text + ", identical"
        return text + (
            f", first divergence at {self.first_divergence}, "
            f"{self.mismatched_positions} differing positions"
        )


def _sequence(value: Any, side: str, path: str) -> str | np.ndarray:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        raise _input_error(path, f"{side} sequence is bytes; decode it to text first")
    array = np.asarray(value)
    if array.ndim != 1:
        raise _input_error(
            path, f"{side} sequence must be one-dimensional, got shape {tuple(array.shape)}"
        )
    if array.size and array.dtype.kind not in "biuU":
        raise _input_error(
            path,
            f"{side} sequence must hold token ids (integers) or strings, got dtype {array.dtype}",
        )
    return array


def compare_sequences(
    actual: Any, expected: Any, *, context: int = 8, path: str = ""
) -> SequenceResult:
    """Compare two sequences exactly: token id arrays / lists, lists of strings, or text.

    Reports the first divergence (the first differing position, or the end of the shorter side),
    the count of differing positions within the common length, a length difference, and
    ``context`` items before and after the divergence on both sides.
    """
    if not isinstance(context, int) or context < 0:
        raise _input_error(path, f"context must be a whole number >= 0, got {context!r}")
    a = _sequence(actual, "actual", path)
    e = _sequence(expected, "expected", path)
    if isinstance(a, str) != isinstance(e, str):
        raise _input_error(
            path,
            "cannot compare text with a token sequence "
            f"(actual {'text' if isinstance(a, str) else 'tokens'}, expected "
            f"{'text' if isinstance(e, str) else 'tokens'})",
        )
    if (
        not isinstance(a, str)
        and a.size
        and e.size
        and (a.dtype.kind == "U") != (e.dtype.kind == "U")
    ):
        raise _input_error(
            path,
            f"cannot compare token ids with strings (actual dtype {a.dtype}, "
            f"expected dtype {e.dtype})",
        )
    common = min(len(a), len(e))
    if isinstance(a, str):
        differs = np.array([x != y for x, y in zip(a[:common], e[:common])], dtype=bool)
    else:
        differs = np.asarray(a[:common] != e[:common], dtype=bool).reshape(-1)
    positions = np.flatnonzero(differs)
    mismatched = int(positions.size)
    if positions.size:
        first: int | None = int(positions[0])
    elif len(a) != len(e):
        first = common
    else:
        first = None

    failures: list[Failure] = []
    start = None
    a_ctx = e_ctx = None
    if first is not None:
        start = max(first - context, 0)
        stop = first + context + 1
        a_ctx = a[start:stop] if isinstance(a, str) else a[start:stop].tolist()
        e_ctx = e[start:stop] if isinstance(e, str) else e[start:stop].tolist()
        if mismatched:
            a_item = a[first] if isinstance(a, str) else a[first].item()
            e_item = e[first] if isinstance(e, str) else e[first].item()
            failures.append(
                Failure(
                    metric="sequence_mismatch",
                    bound=0,
                    observed=mismatched,
                    excess=float(mismatched),
                    where=f"position {first}",
                    detail=(
                        f"actual {a_item!r} vs expected {e_item!r}; from position {start}: "
                        f"actual {a_ctx!r}, expected {e_ctx!r}"
                    ),
                )
            )
        if len(a) != len(e):
            longer = "actual" if len(a) > len(e) else "expected"
            failures.append(
                Failure(
                    metric="length",
                    bound=len(e),
                    observed=len(a),
                    excess=float(abs(len(a) - len(e))),
                    where=f"position {common}",
                    detail=f"{longer} is {abs(len(a) - len(e))} longer",
                )
            )
    return SequenceResult(
        path=path,
        passed=not failures,
        length_actual=len(a),
        length_expected=len(e),
        first_divergence=first,
        mismatched_positions=mismatched,
        context_start=start,
        actual_context=a_ctx,
        expected_context=e_ctx,
        failures=failures,
    )


# ---------------------------------------------------------------------------------------------
# (d) class decisions


@dataclass(kw_only=True)
class ClassDecisionResult(_Verdict):
    """Logits or probabilities judged as class decisions."""

    kind: str = "class-decisions"
    path: str = ""
    passed: bool
    n_rows: int
    n_classes: int
    bounds: dict[str, float | int | None]
    argmax_agreement: float  # fraction of rows whose argmax agrees
    argmax_disagreements: int
    disagreeing_rows: list[dict[str, Any]]  # up to worst_k rows: index, both classes and probs
    top_k: int | None
    topk_agreement: float | None  # fraction of rows whose top-k class *sets* agree
    max_prob_drift: float  # max |p_actual - p_expected| over every row and class
    max_prob_drift_at: dict[str, Any] | None  # {"row", "class"}
    kl_mean: float  # KL(expected || actual) per row, mean over rows
    kl_max: float
    kl_max_row: Any
    ece_actual: float | None  # expected calibration error against ``labels``
    ece_expected: float | None
    ece_increase: float | None  # ece_actual - ece_expected
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        agree = self.n_rows - self.argmax_disagreements
        text = (
            f"argmax agrees on {agree}/{self.n_rows} rows, max prob drift "
            f"{format_number(self.max_prob_drift)}, KL max {format_number(self.kl_max)}"
        )
        if self.topk_agreement is not None:
            text += f", top-{self.top_k} agreement {format_number(self.topk_agreement)}"
        if self.ece_actual is not None:
            text += f", ECE {format_number(self.ece_actual)} vs {format_number(self.ece_expected)}"
        return text


def expected_calibration_error(probabilities: Any, labels: Any, *, n_bins: int = 15) -> float:
    """ECE of probabilities (rows, classes) against integer labels, equal-width confidence bins.

    ``sum_b |accuracy_b - confidence_b| * n_b / n`` with confidence the top probability; bin b
    holds confidences in ((b-1)/n_bins, b/n_bins] (a confidence of 0 falls into the first bin).
    """
    probs = np.asarray(probabilities, dtype=np.float64)
    probs = probs.reshape(-1, probs.shape[-1])
    labels = np.asarray(labels).reshape(-1)
    if not n_bins >= 1:
        raise InputError(f"n_bins must be >= 1, got {n_bins!r}")
    if len(probs) == 0:
        return 0.0
    confidence = probs.max(axis=1)
    correct = (probs.argmax(axis=1) == labels).astype(np.float64)
    bins = np.clip(np.ceil(confidence * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
    acc_sum = np.bincount(bins, weights=correct, minlength=n_bins)
    conf_sum = np.bincount(bins, weights=confidence, minlength=n_bins)
    return float(np.abs(acc_sum - conf_sum).sum() / len(probs))


def score_rows(value: Any) -> np.ndarray:
    """An output of scores as 2-D float64 rows, class axis last (a scalar is one row of one
    class): the rows a dataset claim decides on."""
    scores = np.asarray(value, dtype=np.float64)
    return scores.reshape(-1, scores.shape[-1]) if scores.ndim else scores.reshape(1, 1)


def class_probabilities(rows: Any, inputs: str) -> np.ndarray:
    """Rows of scores as probabilities: a softmax over the last axis (float64, the maximum
    subtracted first) for ``"logits"``, the rows as they are for ``"probabilities"``."""
    if inputs == "logits":
        from scipy.special import softmax

        return softmax(np.asarray(rows, dtype=np.float64), axis=-1)
    return np.asarray(rows)


def _as_rows(value: Any, side: str, axis: int, path: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "biuf" and array.dtype.name not in ("bfloat16", "float16"):
        raise _input_error(path, f"{side} scores must be numeric, got dtype {array.dtype}")
    if array.ndim == 0:
        raise _input_error(path, f"{side} scores must have a class axis, got a scalar")
    return np.moveaxis(array.astype(np.float64), axis, -1)


def compare_class_decisions(
    actual: Any,
    expected: Any,
    *,
    inputs: Literal["logits", "probabilities"] = "logits",
    axis: int = -1,
    labels: Any = None,
    min_argmax_agreement: float | None = 1.0,
    top_k: int | None = None,
    min_topk_agreement: float | None = None,
    max_prob_drift: float | None = None,
    max_kl: float | None = None,
    max_ece_increase: float | None = None,
    n_bins: int = 15,
    worst_k: int = 10,
    path: str = "",
) -> ClassDecisionResult:
    """Compare two score arrays (..., classes) as decisions, each metric against its own bound.

    ``inputs="logits"`` applies a softmax (in float64); ``"probabilities"`` requires rows of
    non-negative values summing to 1 (within 1e-3). Metrics, per row of the class axis ``axis``:

    - argmax agreement: the fraction of rows with the same top class (bound
      ``min_argmax_agreement``, 1.0 by default: every decision must agree);
    - top-k agreement: the fraction of rows whose sets of ``top_k`` classes are equal
      (``min_topk_agreement``);
    - probability drift: ``max |p_actual - p_expected|`` (``max_prob_drift``);
    - KL divergence ``KL(p_expected || p_actual)``, bounded on its maximum over rows (``max_kl``);
    - expected calibration error against ``labels`` (``max_ece_increase`` bounds
      ``ECE(actual) - ECE(expected)``; both ECEs are reported whenever labels are given).

    A bound left at None is measured and reported but not enforced.
    """
    from scipy.special import log_softmax, rel_entr

    if inputs not in ("logits", "probabilities"):
        raise _input_error(path, f"inputs must be 'logits' or 'probabilities', got {inputs!r}")
    bounds = {
        "min_argmax_agreement": _bound(
            "min_argmax_agreement", min_argmax_agreement, high=1.0, path=path
        ),
        "min_topk_agreement": _bound("min_topk_agreement", min_topk_agreement, high=1.0, path=path),
        "max_prob_drift": _bound("max_prob_drift", max_prob_drift, high=1.0, path=path),
        "max_kl": _bound("max_kl", max_kl, path=path),
        "max_ece_increase": _bound(
            "max_ece_increase", max_ece_increase, low=-1.0, high=1.0, path=path
        ),
    }
    a = _as_rows(actual, "actual", axis, path)
    e = _as_rows(expected, "expected", axis, path)
    if a.shape != e.shape:
        raise _input_error(
            path,
            f"shape mismatch: actual {tuple(a.shape)} vs expected {tuple(e.shape)} "
            "(class axis last)",
        )
    batch_shape, n_classes = a.shape[:-1], a.shape[-1]
    if n_classes < 1:
        raise _input_error(path, "the class axis is empty")
    for side, array in (("actual", a), ("expected", e)):
        if not np.isfinite(array).all():
            raise _input_error(
                path, f"{side} {inputs} hold NaN or infinite values; decisions are undefined"
            )
    a2, e2 = a.reshape(-1, n_classes), e.reshape(-1, n_classes)
    n_rows = len(a2)
    if top_k is not None and not (isinstance(top_k, int) and 1 <= top_k <= n_classes):
        raise _input_error(path, f"top_k must be a whole number in [1, {n_classes}], got {top_k!r}")
    if bounds["min_topk_agreement"] is not None and top_k is None:
        raise _input_error(path, "min_topk_agreement needs top_k")

    if inputs == "logits":
        pa, pe = class_probabilities(a2, inputs), class_probabilities(e2, inputs)
        log_pa, log_pe = log_softmax(a2, axis=1), log_softmax(e2, axis=1)
        kl_rows = np.where(pe > 0, pe * (log_pe - log_pa), 0.0).sum(axis=1)
    else:
        for side, p in (("actual", a2), ("expected", e2)):
            sums = p.sum(axis=1)
            if (p < 0).any() or (p > 1).any() or (n_rows and np.abs(sums - 1).max() > 1e-3):
                raise _input_error(
                    path,
                    f"{side} probabilities must lie in [0, 1] and sum to 1 per row "
                    f"(row sums span {sums.min():.6g}..{sums.max():.6g})",
                )
        pa, pe = a2, e2
        kl_rows = rel_entr(pe, pa).sum(axis=1)
    kl_rows = np.maximum(kl_rows, 0.0)  # rounding can leave -1e-17 on identical rows

    def row_index(flat: int) -> Any:
        return (
            int(flat)
            if len(batch_shape) <= 1
            else [int(i) for i in np.unravel_index(flat, batch_shape)]
        )

    failures: list[Failure] = []
    arg_a, arg_e = pa.argmax(axis=1), pe.argmax(axis=1)
    disagree = np.flatnonzero(arg_a != arg_e)
    agreement = 1.0 - len(disagree) / n_rows if n_rows else 1.0
    rows_listed = [
        {
            "row": row_index(r),
            "actual_class": int(arg_a[r]),
            "expected_class": int(arg_e[r]),
            "actual_prob": float(pa[r, arg_a[r]]),
            "expected_prob": float(pe[r, arg_e[r]]),
        }
        for r in disagree[: max(worst_k, 0)]
    ]
    bound = bounds["min_argmax_agreement"]
    if bound is not None and agreement < bound:
        shown = ", ".join(
            f"row {d['row']}: {d['actual_class']} vs {d['expected_class']}" for d in rows_listed[:5]
        )
        failures.append(
            Failure(
                metric="argmax_agreement",
                bound=bound,
                observed=agreement,
                excess=bound - agreement,
                where=f"{len(disagree)} of {n_rows} rows",
                detail=f"actual vs expected class: {shown}" + (" ..." if len(disagree) > 5 else ""),
            )
        )

    topk_agreement = None
    if top_k is not None:
        top_a = np.sort(np.argsort(-pa, axis=1, kind="stable")[:, :top_k], axis=1)
        top_e = np.sort(np.argsort(-pe, axis=1, kind="stable")[:, :top_k], axis=1)
        same = (top_a == top_e).all(axis=1)
        topk_agreement = float(same.mean()) if n_rows else 1.0
        bound = bounds["min_topk_agreement"]
        if bound is not None and topk_agreement < bound:
            bad = np.flatnonzero(~same)
            failures.append(
                Failure(
                    metric=f"top{top_k}_agreement",
                    bound=bound,
                    observed=topk_agreement,
                    excess=bound - topk_agreement,
                    where=f"{len(bad)} of {n_rows} rows",
                    detail="first differing rows " + ", ".join(str(row_index(r)) for r in bad[:5]),
                )
            )

    drift = np.abs(pa - pe)
    drift_max = float(drift.max()) if drift.size else 0.0
    drift_at = None
    if drift.size:
        r, c = np.unravel_index(int(drift.argmax()), drift.shape)
        drift_at = {"row": row_index(r), "class": int(c)}
    bound = bounds["max_prob_drift"]
    if bound is not None and drift_max > bound:
        n_over = int((drift > bound).sum())
        failures.append(
            Failure(
                metric="prob_drift",
                bound=bound,
                observed=drift_max,
                excess=drift_max - bound,
                where=f"row {drift_at['row']} class {drift_at['class']}",
                detail=f"{n_over} probabilities beyond the bound",
            )
        )

    kl_mean = float(kl_rows.mean()) if n_rows else 0.0
    kl_max = float(kl_rows.max()) if n_rows else 0.0
    kl_row = row_index(int(kl_rows.argmax())) if n_rows else None
    bound = bounds["max_kl"]
    if bound is not None and not kl_max <= bound:
        n_over = int((~(kl_rows <= bound)).sum())
        failures.append(
            Failure(
                metric="kl_divergence",
                bound=bound,
                observed=kl_max,
                excess=kl_max - bound,
                where=f"row {kl_row}",
                detail=f"KL(expected || actual); {n_over} of {n_rows} rows "
                f"beyond the bound, mean {format_number(kl_mean)}",
            )
        )

    ece_a = ece_e = ece_inc = None
    if labels is not None:
        lab = np.asarray(labels)
        if lab.shape != batch_shape or (lab.size and lab.dtype.kind not in "iu"):
            raise _input_error(
                path,
                f"labels must be integers of shape {tuple(batch_shape)}, got "
                f"{tuple(lab.shape)} {lab.dtype}",
            )
        if lab.size and (lab.min() < 0 or lab.max() >= n_classes):
            raise _input_error(path, f"labels must lie in [0, {n_classes - 1}]")
        ece_a = expected_calibration_error(pa, lab, n_bins=n_bins)
        ece_e = expected_calibration_error(pe, lab, n_bins=n_bins)
        ece_inc = ece_a - ece_e
        bound = bounds["max_ece_increase"]
        if bound is not None and ece_inc > bound:
            failures.append(
                Failure(
                    metric="ece_increase",
                    bound=bound,
                    observed=ece_inc,
                    excess=ece_inc - bound,
                    where=f"{n_rows} rows",
                    detail=f"ECE actual {format_number(ece_a)}, expected "
                    f"{format_number(ece_e)} ({n_bins} bins)",
                )
            )
    elif bounds["max_ece_increase"] is not None:
        raise _input_error(path, "max_ece_increase needs labels")

    return ClassDecisionResult(
        path=path,
        passed=not failures,
        n_rows=n_rows,
        n_classes=n_classes,
        bounds=bounds,
        argmax_agreement=agreement,
        argmax_disagreements=int(len(disagree)),
        disagreeing_rows=rows_listed,
        top_k=top_k,
        topk_agreement=topk_agreement,
        max_prob_drift=drift_max,
        max_prob_drift_at=drift_at,
        kl_mean=kl_mean,
        kl_max=kl_max,
        kl_max_row=kl_row,
        ece_actual=ece_a,
        ece_expected=ece_e,
        ece_increase=ece_inc,
        failures=failures,
    )


# ---------------------------------------------------------------------------------------------
# (e) images


@dataclass(kw_only=True)
class ImageResult(_Verdict):
    """Two images compared by SSIM and PSNR (scikit-image) over an explicit data range."""

    kind: str = "image"
    path: str = ""
    passed: bool
    shape: list[int]
    data_range: float
    channel_axis: int | None
    min_ssim: float | None
    min_psnr: float | None
    ssim: float
    psnr: float  # dB; inf for identical images
    mse: float
    max_abs: float
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"SSIM {format_number(self.ssim)}, PSNR {format_number(self.psnr)} dB, "
            f"data range {format_number(self.data_range)}"
        )


def compare_images(
    actual: Any,
    expected: Any,
    *,
    data_range: float,
    min_ssim: float | None = None,
    min_psnr: float | None = None,
    channel_axis: int | None = None,
    win_size: int | None = None,
    path: str = "",
) -> ImageResult:
    """SSIM and PSNR of ``actual`` against ``expected`` (scikit-image, extra ``images``).

    ``data_range`` is required and never guessed: 255 for uint8 pixels, 1.0 for images in [0, 1],
    2.0 for [-1, 1]. ``channel_axis`` names the colour axis of multichannel images. A failure is
    reported for each bound given (``min_ssim``, ``min_psnr`` in dB); NaN pixels fail every bound.
    """
    try:
        from skimage.metrics import peak_signal_noise_ratio, structural_similarity
    except ImportError:
        raise UserError(
            "image metrics need scikit-image", hint="pip install 'paritygate[images]'"
        ) from None
    rng = _bound("data_range", data_range, path=path)
    if rng is None or rng <= 0:
        raise _input_error(path, f"data_range must be a finite number > 0, got {data_range!r}")
    lower_ssim = _bound("min_ssim", min_ssim, low=-1.0, high=1.0, path=path)
    lower_psnr = (
        _bound("min_psnr", min_psnr, low=-math.inf, path=path) if min_psnr is not None else None
    )
    a, e = np.asarray(actual), np.asarray(expected)
    for side, img in (("actual", a), ("expected", e)):
        if img.dtype.kind not in "biuf":
            raise _input_error(path, f"{side} image must be numeric, got dtype {img.dtype}")
    if a.shape != e.shape:
        raise _input_error(
            path, f"shape mismatch: actual {tuple(a.shape)} vs expected {tuple(e.shape)}"
        )
    if a.ndim < 2:
        raise _input_error(path, f"images need at least 2 dimensions, got shape {tuple(a.shape)}")
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    diff = np.abs(a64 - e64)
    finite = bool(np.isfinite(a64).all() and np.isfinite(e64).all())
    mse = float(np.mean(diff**2)) if finite else math.nan
    max_abs = float(diff.max()) if finite else math.nan
    if finite:
        try:
            ssim = float(
                structural_similarity(
                    a64, e64, data_range=rng, channel_axis=channel_axis, win_size=win_size
                )
            )
        except ValueError as exc:
            raise _input_error(path, f"SSIM cannot be computed: {exc}") from None
        with np.errstate(divide="ignore"):
            psnr = (
                math.inf if mse == 0 else float(peak_signal_noise_ratio(e64, a64, data_range=rng))
            )
    else:
        ssim = psnr = math.nan
    failures: list[Failure] = []
    nan_detail = "" if finite else "NaN or infinite pixels"
    if lower_ssim is not None and not ssim >= lower_ssim:
        failures.append(
            Failure(
                metric="ssim",
                bound=lower_ssim,
                observed=ssim,
                excess=lower_ssim - ssim if finite else None,
                detail=nan_detail,
            )
        )
    if lower_psnr is not None and not psnr >= lower_psnr:
        failures.append(
            Failure(
                metric="psnr",
                bound=lower_psnr,
                observed=psnr,
                excess=lower_psnr - psnr if finite else None,
                detail=nan_detail or f"mse {format_number(mse)}",
            )
        )
    return ImageResult(
        path=path,
        passed=not failures,
        shape=list(a.shape),
        data_range=rng,
        channel_axis=channel_axis,
        min_ssim=lower_ssim,
        min_psnr=lower_psnr,
        ssim=ssim,
        psnr=psnr,
        mse=mse,
        max_abs=max_abs,
        failures=failures,
    )

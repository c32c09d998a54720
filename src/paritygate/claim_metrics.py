"""The registry of claim metrics: one entry per metric a claim can name.

Each :class:`ClaimMetric` says everything the rest of paritygate needs to know about a metric:

- its **scope** (per element, per edge, per output per case, over the dataset, speed) and its
  **direction** (``"max"``: a claim holds when observed <= bound; ``"min"``: observed >= bound);
- which **comparison** it is measured on (``"compare"``: :func:`paritygate.compare.compare_output`;
  ``"images"``: :func:`paritygate.structured.compare_images`; ``"dataset"``: the rows of every
  case; ``"boxes"`` and ``"speed"`` are measured by their own oracles) and its **measure**
  function: a per-output metric's takes a :class:`Pair` (the output pair, whose comparisons are
  made once, on first use, and shared by every metric), a dataset metric's takes :class:`Rows`;
- what else it **needs** (``"labels"``: the cases' labels; ``"reference"``: the reference's
  outputs or runs);
- for element metrics, how the claim's **bound becomes the comparison's tolerance** (so that
  mismatches and worst elements are counted against the claim);
- whether and how it is **calibrated** (``"measured"``: calibration records its distribution;
  ``"exact"``: byte equality; ``calibrated_through`` names the metric whose distribution
  calibrates it instead, e.g. max_abs for exact and per-edge claims);
- the spec **params** it accepts and requires, its natural **unit** and its **display** form
  (``near_one``: values close to 1 are shown as ``1-d``; ``percent``: a fraction of rows is
  shown as a percentage).

The spec validates claims against it, the equivalence oracle evaluates per-case claims through
it, calibration measures and proposes bounds with it, the claims check and the reports read
directions and display forms from it, and docs/spec.md has one table row per entry (a test keeps
them in step).

Adding a metric is one measure function, one entry here and its row in docs/spec.md::

    register(
        ClaimMetric(
            "one_minus_cosine", scope="output", direction="max", comparison="compare",
            measure=lambda pair: pair.compared.one_minus_cosine,
            calibration="measured", summary="1 - cosine similarity per output per case",
        )
    )

A statistic the streaming kernels do not compute is measured on the host arrays
(:meth:`Pair.host`), as ``median_abs`` is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .errors import InputError
from .results import OutputComparison, Tolerance

__all__ = [
    "ClaimMetric",
    "Pair",
    "Rows",
    "METRICS",
    "SCOPES",
    "COMPARISONS",
    "register",
    "get",
    "names",
    "directions",
    "calibrated",
    "worst_value",
    "MetricView",
    "unit_of",
    "near_one",
    "percent",
    "direction_of",
]

SCOPES = ("element", "edge", "output", "dataset", "speed")
COMPARISONS = ("compare", "images", "boxes", "dataset", "speed")
DIRECTIONS = ("max", "min")
CALIBRATIONS = ("measured", "exact")
NEEDS = frozenset({"labels", "reference"})
# Speed claims: which case is timed, and the experiment's shape (see paritygate.bench).
SPEED_PARAMS = frozenset({"case", "blocks", "block_size", "warmup", "budget", "threshold"})


@dataclass(frozen=True)
class ClaimMetric:
    """One claim metric. See the module docstring for what each field is read by."""

    name: str
    scope: str
    direction: str
    comparison: str
    summary: str
    measure: Callable[[Any], float | None] | None = None
    needs: frozenset[str] = field(default_factory=frozenset)
    tolerance: Callable[[float, Mapping[str, Any]], Tolerance] | None = None
    calibration: str | None = None
    # The metric whose distribution calibrates this one, where that is another (exact claims and
    # per-edge claims through max_abs).
    calibrated_through: str | None = None
    params: frozenset[str] = field(default_factory=frozenset)
    required_params: frozenset[str] = field(default_factory=frozenset)
    unit: str = ""
    near_one: bool = False
    # A fraction of rows (agreement, accuracy): shown as a percentage in reports, "agreement 100%
    # (bound >= 100%)", never by its distance from 1.
    percent: bool = False
    # A value the comparison cannot define (a zero-norm side's cosine) counts as the worst value
    # in calibration; otherwise it is left out (a ULP distance of integer outputs).
    undefined_is_worst: bool = False

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"metric {self.name}: scope {self.scope!r} not in {SCOPES}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name}: direction {self.direction!r}")
        if self.comparison not in COMPARISONS:
            raise ValueError(f"metric {self.name}: comparison {self.comparison!r}")
        if self.calibration is not None and self.calibration not in CALIBRATIONS:
            raise ValueError(f"metric {self.name}: calibration {self.calibration!r}")
        if self.comparison in ("compare", "images", "dataset") and self.measure is None:
            raise ValueError(f"metric {self.name}: a {self.comparison} metric needs measure")
        if not self.needs <= NEEDS:
            raise ValueError(f"metric {self.name}: needs {sorted(self.needs)} not in {NEEDS}")
        if self.scope == "element" and self.tolerance is None:
            raise ValueError(f"metric {self.name}: an element metric needs tolerance")
        if not self.required_params <= self.params:
            raise ValueError(f"metric {self.name}: required params must be accepted params")

    @property
    def worst(self) -> float:
        """The metric's worst value: +inf for an upper bound, -inf for a lower one."""
        return worst_value(self.direction)

    def holds(self, observed: float | None, bound: float) -> bool:
        if observed is None or (isinstance(observed, float) and math.isnan(observed)):
            return False
        return observed <= bound if self.direction == "max" else observed >= bound

    def excess(self, observed: float, bound: float) -> float:
        """How far ``observed`` is past ``bound``, positive when the claim fails."""
        return observed - bound if self.direction == "max" else bound - observed


def worst_value(direction: str) -> float:
    return math.inf if direction == "max" else -math.inf


METRICS: dict[str, ClaimMetric] = {}


def register(metric: ClaimMetric) -> ClaimMetric:
    """Add ``metric`` to the registry (a name can be registered once)."""
    if metric.name in METRICS:
        raise ValueError(f"claim metric {metric.name!r} is already registered")
    METRICS[metric.name] = metric
    return metric


def get(name: str) -> ClaimMetric:
    return METRICS[name]


def names() -> tuple[str, ...]:
    return tuple(METRICS)


def directions() -> dict[str, str]:
    """metric -> direction, for every registered metric."""
    return {name: m.direction for name, m in METRICS.items()}


def calibrated() -> dict[str, ClaimMetric]:
    """The metrics calibration measures (their distributions, gap and proposed bound)."""
    return {name: m for name, m in METRICS.items() if m.calibration == "measured"}


def unit_of(metric: str, claim_unit: str | None = "") -> str:
    """The unit a value of ``metric`` is shown in: the claim's own when it names one, else the
    registry entry's (``""`` for an unregistered metric)."""
    if claim_unit:
        return claim_unit
    entry = METRICS.get(str(metric))
    return entry.unit if entry is not None else ""


def near_one(metric: str) -> bool:
    """Whether values of ``metric`` are shown by their distance from 1 (a cosine, an SSIM)."""
    entry = METRICS.get(str(metric))
    return entry is not None and entry.near_one


def percent(metric: str) -> bool:
    """Whether values of ``metric`` are fractions shown as percentages (agreement, accuracy)."""
    entry = METRICS.get(str(metric))
    return entry is not None and entry.percent


def direction_of(metric: str) -> str | None:
    """``"max"`` (a ceiling) or ``"min"`` (a floor); None for an unregistered metric."""
    entry = METRICS.get(str(metric))
    return entry.direction if entry is not None else None


class MetricView(Mapping[str, Any]):
    """A live, read-only view of the registry: ``name -> project(metric)`` for the metrics
    ``keep`` accepts, so that a metric registered later shows up in every view."""

    def __init__(
        self,
        project: Callable[[ClaimMetric], Any],
        keep: Callable[[ClaimMetric], bool] = lambda m: True,
    ):
        self._project = project
        self._keep = keep

    def __getitem__(self, name: str) -> Any:
        metric = METRICS.get(name)
        if metric is None or not self._keep(metric):
            raise KeyError(name)
        return self._project(metric)

    def __iter__(self) -> Iterator[str]:
        return (name for name, m in METRICS.items() if self._keep(m))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


class Pair:
    """One output pair as a per-output metric sees it: the arrays, the claim's params and the
    comparison's tolerance; each comparison of the pair is made once, on first use, and shared by
    every metric measured on it."""

    def __init__(
        self,
        actual: Any,
        expected: Any,
        path: str,
        params: Mapping[str, Any] | None = None,
        tolerance: Tolerance | None = None,
    ):
        self.actual, self.expected, self.path = actual, expected, path
        self.params = params or {}
        self.tolerance = tolerance if tolerance is not None else Tolerance()

    @cached_property
    def compared(self) -> OutputComparison:
        from .compare import compare_output

        return compare_output(self.actual, self.expected, self.tolerance, self.path)

    @cached_property
    def images(self) -> Any:
        from .structured import compare_images

        return compare_images(
            self.actual,
            self.expected,
            data_range=float(self.params["data_range"]),
            channel_axis=self.params.get("channel_axis"),
            path=self.path,
        )

    def host(self, metric: str) -> tuple[Any, Any]:
        """Both sides as flat float64 (complex128) numpy arrays, at the positions where both are
        finite: what a statistic the streaming kernels do not compute is measured on."""
        import numpy as np

        from ._host import to_numpy

        sides = [to_numpy(v, path=self.path) for v in (self.actual, self.expected)]
        if any(v is None or v.dtype.kind not in "biufc" for v in sides):
            raise InputError(f"{metric} needs numeric outputs", where=self.path or None)
        kind = np.complex128 if any(v.dtype.kind == "c" for v in sides) else np.float64
        a, e = (np.asarray(v, dtype=kind).reshape(-1) for v in sides)
        both = np.isfinite(a) & np.isfinite(e)
        return a[both], e[both]


@dataclass
class Rows:
    """A dataset metric's input: the candidate's score rows (one 2-D array per covered output and
    case), the labels and the reference's rows where the metric needs them, each row's origin
    ("case[row]"), the claim's params; a measure adds evidence and says why it measures nothing
    (:meth:`fail`)."""

    rows: list[Any]
    labels: list[Any]
    reference: list[Any]
    origins: list[str]
    params: Mapping[str, Any]
    outputs: tuple[str, ...] = ()  # the claim's output patterns, for messages
    evidence: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def fail(self, detail: str) -> None:
        self.problems.append(detail)

    @cached_property
    def decided(self) -> Any:
        """Every row's argmax, pooled: outputs of one claim may differ in class count (an action
        head and a choice head), so decisions are taken per output, then pooled row by row."""
        import numpy as np

        return np.concatenate([r.argmax(axis=1) for r in self.rows])

    def hit_rate(self, hits: Any, word: str) -> float:
        """The fraction of rows that hit, and the first DISAGREEING_K that miss as evidence."""
        misses = self.origins if len(self.origins) == len(hits) else []
        misses = [misses[i] for i in range(len(misses)) if not hits[i]]
        self.evidence["disagreeing"] = misses[:DISAGREEING_K]
        self.evidence["disagreeing_count"] = int(len(hits) - int(hits.sum()))
        self.evidence["disagreeing_word"] = word
        return float(hits.mean())


DISAGREEING_K = 10  # row ids kept as evidence of a decision claim


# --------------------------------------------------------------------------------------------
# The registry


def _atol(bound: float, params: Mapping[str, Any]) -> Tolerance:
    return Tolerance(atol=bound)


def _rtol(bound: float, params: Mapping[str, Any]) -> Tolerance:
    return Tolerance(rtol=bound, rel_eps=float(params.get("rel_eps", 1e-12)))


def _ulps(bound: float, params: Mapping[str, Any]) -> Tolerance:
    return Tolerance(max_ulp=int(bound))


def _median_abs(pair: Pair) -> float:
    """median |a - e| over the positions where both sides are finite (0 for none)."""
    import numpy as np

    a, e = pair.host("median_abs")
    return float(np.median(np.abs(a - e))) if a.size else 0.0


def _accuracy(data: Rows) -> float:
    import numpy as np

    return data.hit_rate(data.decided == np.concatenate(data.labels), "wrong")


def _ece(data: Rows) -> float | None:
    import numpy as np

    from .structured import class_probabilities, expected_calibration_error

    widths = sorted({r.shape[1] for r in data.rows})
    if len(widths) > 1:
        data.fail(
            f"outputs {', '.join(data.outputs)} hold {widths} classes: one calibration error "
            "pools one class count (one ece claim per output)"
        )
        return None
    scores = class_probabilities(
        np.concatenate(data.rows), data.params.get("inputs", "probabilities")
    )
    bins = int(data.params.get("bins", 15))
    return expected_calibration_error(scores, np.concatenate(data.labels), n_bins=bins)


def _agreement(data: Rows) -> float | None:
    import numpy as np

    if not data.reference or sum(len(r) for r in data.reference) != len(data.decided):
        data.fail("reference and candidate rows differ in number")
        return None
    reference = np.concatenate([r.argmax(axis=1) for r in data.reference])
    return data.hit_rate(data.decided == reference, "disagreeing")


register(
    ClaimMetric(
        "exact",
        scope="element",
        direction="max",
        comparison="compare",
        measure=lambda p: p.compared.max_abs,
        tolerance=_atol,
        calibration="exact",
        calibrated_through="max_abs",
        summary="byte equality: same dtype, every element equal (bound 0)",
    )
)
register(
    ClaimMetric(
        "max_abs",
        scope="element",
        direction="max",
        comparison="compare",
        measure=lambda p: p.compared.max_abs,
        tolerance=_atol,
        calibration="measured",
        summary="max |a - e| per output per case",
    )
)
register(
    ClaimMetric(
        "max_rel",
        scope="element",
        direction="max",
        comparison="compare",
        measure=lambda p: p.compared.max_rel,
        tolerance=_rtol,
        calibration="measured",
        params=frozenset({"rel_eps"}),
        summary="max |a - e| / (|e| + rel_eps)",
    )
)
register(
    ClaimMetric(
        "ulp",
        scope="element",
        direction="max",
        comparison="compare",
        measure=lambda p: p.compared.ulp_max,
        tolerance=_ulps,
        calibration="measured",
        unit="ULP",
        summary="ULP distance in the coarser float dtype",
    )
)
register(
    ClaimMetric(
        "max_edge_delta",
        scope="edge",
        direction="max",
        comparison="boxes",
        calibrated_through="max_abs",
        params=frozenset({"edges", "match", "min_iou"}),
        summary="every edge of every box (or segment), keyed by label or matched by IoU",
    )
)
register(
    ClaimMetric(
        "cosine",
        scope="output",
        direction="min",
        comparison="compare",
        measure=lambda p: p.compared.cosine,
        calibration="measured",
        near_one=True,
        undefined_is_worst=True,
        summary="cosine similarity per output per case",
    )
)
register(
    ClaimMetric(
        "mean_abs",
        scope="output",
        direction="max",
        comparison="compare",
        measure=lambda p: p.compared.mean_abs,
        calibration="measured",
        summary="mean |a - e| per output per case",
    )
)
register(
    ClaimMetric(
        "median_abs",
        scope="output",
        direction="max",
        comparison="compare",
        measure=_median_abs,
        calibration="measured",
        summary="median |a - e| per output per case (measured on the host)",
    )
)
register(
    ClaimMetric(
        "ssim",
        scope="output",
        direction="min",
        comparison="images",
        measure=lambda p: p.images.ssim,
        calibration="measured",
        params=frozenset({"data_range"}),
        required_params=frozenset({"data_range"}),
        near_one=True,
        undefined_is_worst=True,
        summary="structural similarity of images",
    )
)
register(
    ClaimMetric(
        "psnr",
        scope="output",
        direction="min",
        comparison="images",
        measure=lambda p: p.images.psnr,
        params=frozenset({"data_range"}),
        required_params=frozenset({"data_range"}),
        unit="dB",
        summary="peak signal-to-noise ratio of images",
    )
)
register(
    ClaimMetric(
        "accuracy",
        scope="dataset",
        direction="min",
        comparison="dataset",
        measure=_accuracy,
        needs=frozenset({"labels"}),
        params=frozenset({"label"}),
        near_one=True,
        percent=True,
        summary="argmax of the output against the cases' label",
    )
)
register(
    ClaimMetric(
        "ece",
        scope="dataset",
        direction="max",
        comparison="dataset",
        measure=_ece,
        needs=frozenset({"labels"}),
        params=frozenset({"bins", "label", "inputs"}),
        summary="expected calibration error",
    )
)
register(
    ClaimMetric(
        "agreement",
        scope="dataset",
        direction="min",
        comparison="dataset",
        measure=_agreement,
        needs=frozenset({"reference"}),
        near_one=True,
        percent=True,
        summary="fraction of rows whose argmax agrees with the reference's",
    )
)
for _percentile in ("p50_ms", "p90_ms", "p95_ms"):
    register(
        ClaimMetric(
            _percentile,
            scope="speed",
            direction="max",
            comparison="speed",
            params=SPEED_PARAMS,
            unit="ms",
            summary="the candidate's warm latency percentile on one case",
        )
    )
register(
    ClaimMetric(
        "speedup",
        scope="speed",
        direction="min",
        comparison="speed",
        needs=frozenset({"reference"}),
        params=SPEED_PARAMS,
        unit="x",
        summary="reference time / candidate time, paired interleaved blocks",
    )
)

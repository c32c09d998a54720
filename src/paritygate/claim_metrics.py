"""The registry of claim metrics: one entry per metric a claim can name.

Each :class:`ClaimMetric` says everything the rest of paritygate needs to know about a metric:

- its **scope** (per element, per edge, per output per case, over the dataset, speed) and its
  **direction** (``"max"``: a claim holds when observed <= bound; ``"min"``: observed >= bound);
- which **comparison** produces it (``"compare"``: :func:`paritygate.compare.compare_output`;
  ``"images"``: :func:`paritygate.structured.compare_images`; ``"boxes"``, ``"dataset"`` and
  ``"speed"`` are measured by their own oracles) and how to **read** it off that comparison;
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

Adding a metric over an existing statistic is one entry here plus its row in docs/spec.md::

    register(
        ClaimMetric(
            "one_minus_cosine", scope="output", direction="max", comparison="compare",
            read=lambda oc: oc.one_minus_cosine,
            calibration="measured", summary="1 - cosine similarity per output per case",
        )
    )
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .results import Tolerance

__all__ = [
    "ClaimMetric",
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
    read: Callable[[Any], float | None] | None = None
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
        if self.comparison in ("compare", "images") and self.read is None:
            raise ValueError(f"metric {self.name}: a {self.comparison} metric needs read")
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


# --------------------------------------------------------------------------------------------
# The registry


def _atol(bound: float, params: Mapping[str, Any]) -> Tolerance:
    return Tolerance(atol=bound)


def _rtol(bound: float, params: Mapping[str, Any]) -> Tolerance:
    return Tolerance(rtol=bound, rel_eps=float(params.get("rel_eps", 1e-12)))


def _ulps(bound: float, params: Mapping[str, Any]) -> Tolerance:
    return Tolerance(max_ulp=int(bound))


register(
    ClaimMetric(
        "exact",
        scope="element",
        direction="max",
        comparison="compare",
        read=lambda oc: oc.max_abs,
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
        read=lambda oc: oc.max_abs,
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
        read=lambda oc: oc.max_rel,
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
        read=lambda oc: oc.ulp_max,
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
        read=lambda oc: oc.cosine,
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
        read=lambda oc: oc.mean_abs,
        calibration="measured",
        summary="mean |a - e| per output per case",
    )
)
register(
    ClaimMetric(
        "ssim",
        scope="output",
        direction="min",
        comparison="images",
        read=lambda res: res.ssim,
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
        read=lambda res: res.psnr,
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
        params=SPEED_PARAMS,
        unit="x",
        summary="reference time / candidate time, paired interleaved blocks",
    )
)

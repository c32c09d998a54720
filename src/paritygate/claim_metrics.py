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

    _metric(
        "one_minus_cosine", scope="output", direction="max", comparison="compare",
        measure=lambda pair: pair.compared.one_minus_cosine,
        calibration="measured", summary="1 - cosine similarity per output per case",
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
    "Judged",
]

SCOPES = ("element", "edge", "output", "dataset", "speed")
COMPARISONS = ("compare", "images", "boxes", "dataset", "speed", "sequence")
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
    # A sequence metric's verdict on one output pair (:class:`Judged`: the value, the failures
    # with their positions and decoded pieces, the evidence), with the claim's bound in
    # ``pair.bound``; ``measure`` is its value.
    judge: Callable[[Any], Judged] | None = None
    # The only bound a claim may state (exact equality: 0), and the range a bound must lie in.
    fixed_bound: float | None = None
    bound_range: tuple[float, float] | None = None
    # Other outputs of the same case the metric reads (param -> default output name), e.g. the
    # per-step logits beside greedy ids.
    siblings: Mapping[str, str] = field(default_factory=dict)

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
        if self.comparison == "sequence" and self.judge is None:
            raise ValueError(f"metric {self.name}: a sequence metric needs judge")
        if not set(self.siblings) <= self.params:
            raise ValueError(f"metric {self.name}: sibling params must be accepted params")

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
        *,
        bound: float | None = None,
        trees: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
    ):
        self.actual, self.expected, self.path = actual, expected, path
        self.params = params or {}
        self.tolerance = tolerance if tolerance is not None else Tolerance()
        # The claim's bound (None in calibration) and the case's whole output trees (actual,
        # expected): what a sequence metric's judge reads besides the pair.
        self.bound = bound
        self.trees = trees
        self.cache: dict[str, Any] = {}

    def sibling(self, metric: str, param: str) -> tuple[Any, Any]:
        """Both sides of the output a metric reads beside this pair (its name in the claim's
        ``params[param]``, else the metric's default); InputError where the reference lacks
        it, None for a candidate that lacks it."""
        name = str(self.params.get(param, get(metric).siblings[param]))
        actual, expected = self.trees or ({}, {})
        if name not in expected:
            raise InputError(
                f"{metric} reads output {name!r} beside {self.path!r} (params.{param}); the "
                "reference holds no such output",
                where=self.path or None,
            )
        return actual.get(name), expected[name]

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
class Judged:
    """A sequence metric's verdict on one output pair: the value, the failures (each naming its
    position, and the decoded pieces where a vocabulary is known) and the evidence."""

    value: float | None
    failures: list[Any] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)


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
    bound: float | None = None  # the claim's bound, for a measure whose summary names it

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


def _metric(name: str, **fields: Any) -> None:
    register(ClaimMetric(name, **fields))


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


def _noninferiority(data: Rows) -> float | None:
    """The one-sided lower confidence bound of the paired accuracy difference, candidate minus
    reference, both against the cases' labels on the same rows: a paired bootstrap of the
    per-row differences (``scipy.stats.bootstrap``, percentile, seeded), with McNemar's exact
    test of the discordant rows as evidence. The claim's bound is minus the margin."""
    import numpy as np
    from scipy.stats import binomtest, bootstrap

    if not data.reference or sum(len(r) for r in data.reference) != len(data.decided):
        data.fail("reference and candidate rows differ in number (the difference is paired)")
        return None
    labels = np.concatenate(data.labels)
    reference = np.concatenate([r.argmax(axis=1) for r in data.reference])
    cand_right = data.decided == labels
    ref_right = reference == labels
    diff = cand_right.astype(np.float64) - ref_right.astype(np.float64)
    confidence = float(data.params.get("confidence", 0.95))
    resamples = int(data.params.get("resamples", 2000))
    if np.all(diff == diff[0]):
        lower = float(diff[0])  # no discordant row (or all alike): no sampling spread
    else:
        res = bootstrap(
            (diff,),
            np.mean,
            confidence_level=confidence,
            n_resamples=resamples,
            method="percentile",
            alternative="greater",
            random_state=np.random.default_rng(int(data.params.get("seed", 0))),
        )
        lower = float(res.confidence_interval.low)
    only_cand = int(np.sum(cand_right & ~ref_right))
    only_ref = int(np.sum(ref_right & ~cand_right))
    discordant = only_cand + only_ref
    p_value = float(binomtest(only_cand, discordant, 0.5).pvalue) if discordant else 1.0
    data.hit_rate(~(ref_right & ~cand_right), "right only in the reference")
    observed = float(diff.mean())
    data.evidence.update(
        {
            "candidate_accuracy": float(cand_right.mean()),
            "reference_accuracy": float(ref_right.mean()),
            "difference": observed,
            "lower_bound": lower,
            "confidence": confidence,
            "only_candidate_right": only_cand,
            "only_reference_right": only_ref,
            "mcnemar_exact_p": p_value,
            "method": f"paired bootstrap of per-row differences, {resamples} resamples, percentile",
            "summary": (
                f"accuracy difference {observed:+.4f} (candidate {cand_right.mean():.4f} - "
                f"reference {ref_right.mean():.4f}, paired over {len(diff)} rows: {only_cand} "
                f"right only in the candidate, {only_ref} only in the reference; McNemar exact "
                f"p = {p_value:.3g}), one-sided {100 * confidence:g} % lower confidence bound "
                f"{lower:+.4f}"
                + ("" if data.bound is None else f" against the margin {-data.bound:.4g}")
            ),
        }
    )
    return lower


_metric(
    "exact",
    scope="element",
    direction="max",
    comparison="compare",
    measure=lambda p: p.compared.max_abs,
    tolerance=_atol,
    calibration="exact",
    calibrated_through="max_abs",
    fixed_bound=0.0,
    summary="byte equality: same dtype, every element equal (bound 0)",
)
_metric(
    "max_abs",
    scope="element",
    direction="max",
    comparison="compare",
    measure=lambda p: p.compared.max_abs,
    tolerance=_atol,
    calibration="measured",
    summary="max |a - e| per output per case",
)
_metric(
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
_metric(
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
_metric(
    "max_edge_delta",
    scope="edge",
    direction="max",
    comparison="boxes",
    calibrated_through="max_abs",
    params=frozenset({"edges", "match", "min_iou"}),
    summary="every edge of every box (or segment), keyed by label or matched by IoU",
)
_metric(
    "cosine",
    scope="output",
    direction="min",
    comparison="compare",
    measure=lambda p: p.compared.cosine,
    calibration="measured",
    bound_range=(-1.0, 1.0),
    near_one=True,
    undefined_is_worst=True,
    summary="cosine similarity per output per case",
)
_metric(
    "mean_abs",
    scope="output",
    direction="max",
    comparison="compare",
    measure=lambda p: p.compared.mean_abs,
    calibration="measured",
    summary="mean |a - e| per output per case",
)
_metric(
    "median_abs",
    scope="output",
    direction="max",
    comparison="compare",
    measure=_median_abs,
    calibration="measured",
    summary="median |a - e| per output per case (measured on the host)",
)
_metric(
    "ssim",
    scope="output",
    direction="min",
    comparison="images",
    measure=lambda p: p.images.ssim,
    calibration="measured",
    bound_range=(-1.0, 1.0),
    params=frozenset({"data_range"}),
    required_params=frozenset({"data_range"}),
    near_one=True,
    undefined_is_worst=True,
    summary="structural similarity of images",
)
_metric(
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
_metric(
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
_metric(
    "ece",
    scope="dataset",
    direction="max",
    comparison="dataset",
    measure=_ece,
    needs=frozenset({"labels"}),
    params=frozenset({"bins", "label", "inputs"}),
    summary="expected calibration error",
)
_metric(
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
_metric(
    "accuracy_noninferiority",
    scope="dataset",
    direction="min",
    comparison="dataset",
    measure=_noninferiority,
    needs=frozenset({"labels", "reference"}),
    params=frozenset({"label", "confidence", "resamples", "seed"}),
    bound_range=(-1.0, 0.0),
    summary="non-inferiority: the one-sided lower confidence bound of the paired accuracy "
    "difference (candidate - reference) against the cases' label; the bound is minus the "
    "margin",
)
for _percentile in ("p50_ms", "p90_ms", "p95_ms"):
    _metric(
        _percentile,
        scope="speed",
        direction="max",
        comparison="speed",
        params=SPEED_PARAMS,
        unit="ms",
        summary="the candidate's warm latency percentile on one case",
    )
_metric(
    "speedup",
    scope="speed",
    direction="min",
    comparison="speed",
    needs=frozenset({"reference"}),
    params=SPEED_PARAMS,
    unit="x",
    summary="reference time / candidate time, paired interleaved blocks",
)


# --------------------------------------------------------------------------------------------
# Sequence metrics (language models): through paritygate.sequence. Outputs follow the runner
# conventions of docs/spec.md: token ids as 1-D integer arrays, logits as [positions, vocab]
# float arrays (row i: the next-token logits after position i).

_VOCABULARIES: dict[str, list[str]] = {}


def _decoder(pair: Pair) -> list[str] | None:
    """The vocabulary named by ``params.tokenizer`` (a tokenizer.json, resolved against the
    spec's folder by the spec), read once per process; None without one."""
    path = pair.params.get("tokenizer")
    if not path:
        return None
    if path not in _VOCABULARIES:
        from .sequence import vocabulary

        _VOCABULARIES[str(path)] = vocabulary(path)
    return _VOCABULARIES[str(path)]


def _pieces(pair: Pair, ids: Any) -> str:
    vocab = _decoder(pair)
    if vocab is None:
        return ""
    return " " + repr("".join(vocab[int(t)] if 0 <= int(t) < len(vocab) else "?" for t in ids))


def _int_ids(value: Any, side: str, pair: Pair) -> Any:
    import numpy as np

    from ._host import to_numpy

    array = to_numpy(value, path=pair.path)
    if array is None or (array.size and array.dtype.kind not in "iu") or array.ndim > 1:
        raise InputError(
            f"{side} token ids must be a 1-D integer array, got "
            f"{getattr(array, 'dtype', type(value).__name__)} {getattr(array, 'shape', '')}",
            where=pair.path or None,
        )
    return np.asarray(array, dtype=np.int64).reshape(-1)


def _fmt_g(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _token_ids(pair: Pair) -> Judged:
    from .results import Failure
    from .sequence import compare_token_ids

    a = _int_ids(pair.actual, "actual", pair)
    e = _int_ids(pair.expected, "expected", pair)
    context = int(pair.params.get("context", 4))
    res = compare_token_ids(a, e, decode=_decoder(pair), context=context, path=pair.path)
    differing = sum(1 for x, y in zip(a.tolist(), e.tolist()) if x != y) + abs(len(a) - len(e))
    evidence = {
        "length_actual": res.length_actual,
        "length_expected": res.length_expected,
        "first_divergence": res.first_divergence,
        "differing_positions": differing,
    }
    if res.first_divergence is None:
        return Judged(0.0, [], evidence)
    first = res.first_divergence
    evidence.update(
        actual_token=res.actual_token,
        expected_token=res.expected_token,
        actual_piece=res.actual_piece,
        expected_piece=res.expected_piece,
        context_start=res.context_start,
        actual_context=res.actual_context,
        expected_context=res.expected_context,
        actual_context_text=res.actual_context_text,
        expected_context_text=res.expected_context_text,
    )

    def side(token: int | None, piece: str | None) -> str:
        if token is None:
            return "(ended)"
        return f"{token}" + (f" {piece!r}" if piece is not None else "")

    detail = (
        f"actual {side(res.actual_token, res.actual_piece)} vs expected "
        f"{side(res.expected_token, res.expected_piece)}; context from position "
        f"{res.context_start}: actual "
        + (
            repr(res.actual_context_text)
            if res.actual_context_text is not None
            else str(res.actual_context)
        )
        + ", expected "
        + (
            repr(res.expected_context_text)
            if res.expected_context_text is not None
            else str(res.expected_context)
        )
        + f"; lengths {res.length_actual} / {res.length_expected}"
    )
    failure = Failure(
        "token_ids_equal", 0, differing, float(differing), f"position {first}", detail
    )
    return Judged(float(differing), [failure], evidence)


def _teacher_forced(pair: Pair) -> Any:
    """The accumulator over both sides' [positions, vocab] logits (reference first), made once
    per pair and shared by every teacher-forced metric."""
    if "teacher_forced" not in pair.cache:
        from .sequence import TeacherForcedAccumulator

        top_k = int(pair.params.get("top_k", 5))
        acc = TeacherForcedAccumulator(top_k=top_k, path=pair.path)
        acc.add(pair.expected, pair.actual)
        pair.cache["teacher_forced"] = (acc, acc.result())
    return pair.cache["teacher_forced"]


def _tf_evidence(res: Any) -> dict[str, Any]:
    return {
        "positions": res.n_positions,
        "vocab": res.vocab,
        "top_k": res.top_k,
        "max_abs": res.max_abs,
        "kl_mean": res.kl_mean,
        "kl_p99": res.kl_p99,
        "kl_max": res.kl_max,
        "kl_max_position": res.kl_max_position,
        "top1_agreement": res.top1_agreement,
        "top1_disagreeing_positions": res.top1_disagreeing_positions,
        "topk_overlap": res.topk_overlap,
    }


def _tf_judge(
    statistic: str, explain: Callable[[Pair, Any, Any, str], tuple[str, str]]
) -> Callable[[Pair], Judged]:
    """A teacher-forced metric's judge: its value, and past the claim's bound one failure whose
    place and detail ``explain(pair, accumulator, result, statistic)`` gives."""

    def judge(pair: Pair) -> Judged:
        from .results import Failure

        acc, res = _teacher_forced(pair)
        value = float(getattr(res, statistic))
        failures = []
        excess = None if pair.bound is None else get(statistic).excess(value, pair.bound)
        if excess is not None and excess > 0:
            where, detail = explain(pair, acc, res, statistic)
            failures.append(Failure(statistic, pair.bound, value, excess, where, detail))
        return Judged(value, failures, _tf_evidence(res))

    return judge


def _kl_failure(pair: Pair, acc: Any, res: Any, statistic: str) -> tuple[str, str]:
    kl = acc.kl
    top_r, top_c = acc.top1
    at = int(kl.argmax())
    detail = (
        f"KL(reference || candidate) over {len(kl)} positions; "
        f"{int((kl > pair.bound).sum())} beyond the bound; worst at position {at} "
        f"({_fmt_g(float(kl[at]))}): reference top-1 {int(top_r[at])}"
        f"{_pieces(pair, [top_r[at]])}, candidate top-1 {int(top_c[at])}"
        f"{_pieces(pair, [top_c[at]])}"
    )
    return (f"position {at}" if statistic == "kl_max" else f"{len(kl)} positions"), detail


def _top1_failure(pair: Pair, acc: Any, res: Any, statistic: str) -> tuple[str, str]:
    top_r, top_c = acc.top1
    differ = [int(i) for i in (top_r != top_c).nonzero()[0]]
    shown = ", ".join(
        f"{p} (reference {int(top_r[p])}{_pieces(pair, [top_r[p]])}, candidate "
        f"{int(top_c[p])}{_pieces(pair, [top_c[p]])})"
        for p in differ[:3]
    )
    detail = (
        f"top-1 differs at {len(differ)} of {res.n_positions} positions"
        + (f": {shown}" if shown else "")
        + (f"; top-{res.top_k} overlap {_fmt_g(res.topk_overlap)}")
    )
    return f"{res.n_positions} positions", detail


def _greedy(pair: Pair) -> Judged:
    from .results import Failure
    from .sequence import greedy_divergence

    a = _int_ids(pair.actual, "candidate", pair)
    e = _int_ids(pair.expected, "reference", pair)
    cand_logits, ref_logits = pair.sibling("greedy_divergence", "logits")
    top_k = int(pair.params.get("top_k", 5))
    noise = pair.bound if pair.bound is not None else 0.0
    res = greedy_divergence(
        e,
        a,
        ref_logits,
        noise_bound=noise,
        candidate_logits=cand_logits,
        top_k=top_k,
        path=pair.path,
    )
    evidence = {
        "verdict": res.verdict,
        "first_divergence": res.first_divergence,
        "reference_token": res.reference_token,
        "candidate_token": res.candidate_token,
        "reference_margin": res.reference_margin,
        "noise_bound": res.noise_bound,
        "candidate_in_reference_topk": res.candidate_in_reference_topk,
        "reference_in_candidate_topk": res.reference_in_candidate_topk,
        "length_actual": int(len(a)),
        "length_expected": int(len(e)),
    }
    failures: list[Any] = []
    if res.first_divergence is None:
        if len(a) != len(e):
            failures.append(
                Failure(
                    "greedy_divergence",
                    len(e),
                    len(a),
                    float(abs(len(a) - len(e))),
                    f"step {min(len(a), len(e))}",
                    f"the candidate generated {len(a)} tokens, the reference {len(e)}",
                )
            )
        return Judged(0.0, failures, evidence)
    step = res.first_divergence
    margin = float(res.reference_margin or 0.0)
    text = (
        f"{res.verdict}: the reference chose {res.reference_token}"
        f"{_pieces(pair, [res.reference_token])} by a logit margin of {_fmt_g(margin)} over its "
        f"runner-up (noise bound {_fmt_g(noise)}), the candidate chose {res.candidate_token}"
        f"{_pieces(pair, [res.candidate_token])}; common prefix{_pieces(pair, e[:step])}"
    )
    evidence["detail"] = text
    fail_ties = pair.params.get("near_tie", "pass") == "fail"
    if pair.bound is not None and (res.verdict == "diverged" or fail_ties):
        excess = margin - noise if res.verdict == "diverged" else None
        if res.verdict == "near-tie":
            text += " (the claim fails near-ties: params.near_tie = 'fail')"
        failures.append(Failure("greedy_divergence", noise, margin, excess, f"step {step}", text))
    failures += [
        f for f in res.failures if f.metric != "greedy_divergence" and pair.bound is not None
    ]
    return Judged(margin, failures, evidence)


def _delta_ppl(pair: Pair) -> Judged:
    import numpy as np

    from .results import Failure
    from .sequence import delta_perplexity

    cand_targets, ref_targets = pair.sibling("delta_ppl", "targets")
    t = _int_ids(ref_targets, "reference targets", pair)
    if cand_targets is not None and not np.array_equal(
        _int_ids(cand_targets, "candidate targets", pair), t
    ):
        raise InputError(
            "the candidate's targets differ from the reference's: perplexities of different "
            "texts do not compare (see the token-id claim)",
            where=pair.path or None,
        )
    rows = []
    for side, logits in (("reference", pair.expected), ("candidate", pair.actual)):
        x = np.asarray(logits)
        if x.ndim != 2 or x.shape[0] < t.size + 1:
            raise InputError(
                f"{side} logits {tuple(x.shape)} do not cover the {t.size} target tokens and the "
                "position before them",
                where=pair.path or None,
            )
        rows.append(x[-t.size - 1 : -1])
    res = delta_perplexity(rows[0], rows[1], t, path=pair.path)
    value = abs(res.relative_delta)
    evidence = {
        "tokens": res.n_tokens,
        "reference_ppl": res.reference_ppl,
        "candidate_ppl": res.candidate_ppl,
        "relative_delta": res.relative_delta,
    }
    failures = []
    if pair.bound is not None and value > pair.bound:
        failures.append(
            Failure(
                "delta_ppl",
                pair.bound,
                value,
                value - pair.bound,
                f"{res.n_tokens} tokens",
                f"perplexity {_fmt_g(res.candidate_ppl)} vs reference "
                f"{_fmt_g(res.reference_ppl)} ({100 * res.relative_delta:+.3g}%)",
            )
        )
    return Judged(value, failures, evidence)


def _sequence_metric(name: str, judge: Callable[[Pair], Judged], **kwargs: Any) -> None:
    """A sequence metric whose ``judge`` is made once per pair (the value for calibration, the
    failures for the gate)."""

    def judged(pair: Pair) -> Judged:
        key = f"judged:{name}"
        if key not in pair.cache:
            pair.cache[key] = judge(pair)
        return pair.cache[key]

    _metric(
        name,
        scope="output",
        comparison="sequence",
        judge=judged,
        measure=lambda pair: judged(pair).value,
        **kwargs,
    )


_TOKENIZER = frozenset({"tokenizer"})
_sequence_metric(
    "token_ids_equal",
    _token_ids,
    direction="max",
    fixed_bound=0.0,
    params=_TOKENIZER | {"context"},
    summary="token ids equal (bound 0); a failure names the first differing position, both "
    "sides' pieces and context",
)
for _name, _summary in (
    ("kl_mean", "mean over positions of KL(reference || candidate) of next-token distributions"),
    ("kl_p99", "99th percentile over positions of KL(reference || candidate)"),
    ("kl_max", "largest KL(reference || candidate) over positions"),
):
    _sequence_metric(
        _name,
        _tf_judge(_name, _kl_failure),
        direction="max",
        calibration="measured",
        params=_TOKENIZER | {"top_k"},
        summary=_summary,
    )
_sequence_metric(
    "top1_agreement",
    _tf_judge("top1_agreement", _top1_failure),
    direction="min",
    calibration="measured",
    params=_TOKENIZER | {"top_k"},
    near_one=True,
    percent=True,
    bound_range=(0.0, 1.0),
    summary="fraction of positions whose argmax agrees with the reference's",
)
_sequence_metric(
    "topk_overlap",
    _tf_judge("topk_overlap", _top1_failure),
    direction="min",
    calibration="measured",
    params=_TOKENIZER | {"top_k"},
    near_one=True,
    bound_range=(0.0, 1.0),
    summary="mean |top-k(reference) & top-k(candidate)| / k over positions",
)
_sequence_metric(
    "greedy_divergence",
    _greedy,
    direction="max",
    params=_TOKENIZER | {"logits", "near_tie", "top_k"},
    siblings={"logits": "greedy_logits"},
    summary="the reference's top-1/top-2 logit margin where two greedy runs part (0 when "
    "identical); the bound is the logit noise: a larger margin is 'diverged'",
)
_sequence_metric(
    "delta_ppl",
    _delta_ppl,
    direction="max",
    params=frozenset({"targets"}),
    siblings={"targets": "continuation_ids"},
    summary="|ppl(candidate) - ppl(reference)| / ppl(reference) of a fixed continuation",
)

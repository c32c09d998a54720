"""Typed, JSON-serializable results.

Every result is truthy when it passes and carries its evidence: the observed maxima, the worst
elements, and the bound that would have passed (in the spirit of Polygraphy's
OutputCompareResult). Reports render these objects; nothing here prints.

JSON has no NaN or infinity, so non-finite floats are written as the strings ``"nan"``, ``"inf"``
and ``"-inf"`` and read back by :func:`from_jsonable_float`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from ._format import display_text, format_number

__all__ = [
    "Tolerance",
    "Element",
    "Failure",
    "NonFinite",
    "OutputComparison",
    "Comparison",
    "ClaimVerdict",
    "NotEvaluated",
    "DriftItem",
    "GateResult",
    "to_jsonable",
    "from_jsonable_float",
]

RelDenominator = Literal["expected", "symmetric"]


@dataclass(frozen=True)
class Tolerance:
    """Bounds one comparison is held to. The defaults demand exact equality.

    An element passes when ``|actual - expected| <= atol + rtol * |expected|`` (the expected side
    is the reference, as in numpy.testing). ``min_cosine`` and ``max_ulp`` add whole-output
    bounds. ``rel_eps`` is the epsilon added to the denominator of the max-relative metric, whose
    denominator is ``|expected|`` or, with ``rel_denominator="symmetric"``,
    ``max(|actual|, |expected|)``.
    """

    atol: float = 0.0
    rtol: float = 0.0
    min_cosine: float | None = None
    max_ulp: int | None = None
    max_mean_abs: float | None = None
    equal_nan: bool = True
    rel_eps: float = 1e-12
    rel_denominator: RelDenominator = "expected"
    worst_k: int = 10

    def __post_init__(self) -> None:
        from .errors import InputError

        for name in ("atol", "rtol", "rel_eps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise InputError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.min_cosine is not None and not (-1.0 <= self.min_cosine <= 1.0):
            raise InputError(f"min_cosine must lie in [-1, 1], got {self.min_cosine!r}")
        if self.max_ulp is not None and (not isinstance(self.max_ulp, int) or self.max_ulp < 0):
            raise InputError(f"max_ulp must be a whole number >= 0, got {self.max_ulp!r}")
        if self.max_mean_abs is not None and not self.max_mean_abs >= 0:
            raise InputError(f"max_mean_abs must be >= 0, got {self.max_mean_abs!r}")
        if self.rel_denominator not in ("expected", "symmetric"):
            raise InputError(
                f"rel_denominator must be 'expected' or 'symmetric', got {self.rel_denominator!r}"
            )
        if not isinstance(self.worst_k, int) or self.worst_k < 0:
            raise InputError(f"worst_k must be a whole number >= 0, got {self.worst_k!r}")

    @property
    def is_exact(self) -> bool:
        return self.atol == 0 and self.rtol == 0


@dataclass(frozen=True)
class Element:
    """One element of an output: where it is and what each side holds."""

    index: tuple[int, ...]
    actual: float | int | bool | None
    expected: float | int | bool | None
    abs_diff: float
    excess: float  # abs_diff - (atol + rtol*|expected|); > 0 means outside the bound


@dataclass(frozen=True)
class Failure:
    """One violated bound: which metric, the bound, what was observed and by how much it exceeds."""

    metric: str
    bound: float | int | str | None
    observed: float | int | str | None
    excess: float | None = None
    where: str = ""  # element, edge, token position ... inside the output
    detail: str = ""

    def describe(self) -> str:
        parts = [self.metric]
        if self.where:
            parts.append(f"at {self.where}")
        if self.observed is not None:
            parts.append(f"observed {format_number(self.observed)}")
        if self.bound is not None:
            parts.append(f"bound {format_number(self.bound)}")
        if self.excess is not None:
            parts.append(f"exceeded by {format_number(self.excess)}")
        text = " ".join(parts)
        if self.detail:
            text += f" ({self.detail})"
        return text


@dataclass(frozen=True)
class NonFinite:
    """NaN / Inf accounting of one output."""

    actual_nan: int = 0
    expected_nan: int = 0
    nan_both: int = 0  # NaN at the same position on both sides
    nan_one_side: int = 0  # NaN on exactly one side: always a mismatch
    actual_inf: int = 0
    expected_inf: int = 0
    inf_mismatch: int = 0  # an infinity not matched by the same infinity on the other side


@dataclass
class OutputComparison:
    """The comparison of one named output (one leaf of the output tree)."""

    path: str
    passed: bool
    shape: tuple[int, ...] | None
    dtype_actual: str
    dtype_expected: str
    compared_as: str  # dtype the metrics were computed in, after explicit promotion
    promotion: str | None  # e.g. "float16 -> float32 (actual)"; None when no promotion
    size: int
    tolerance: Tolerance
    max_abs: float = 0.0
    mean_abs: float = 0.0
    max_rel: float = 0.0
    max_rel_symmetric: float = 0.0
    cosine: float | None = None
    # 1 - cosine with relative precision near cos = 1 (claims like cosine >= 1 - 6.8e-10 are
    # judged on it); cosine is 1 - one_minus_cosine rounded once.
    one_minus_cosine: float | None = None
    cosine_undefined: str | None = None  # why the cosine is undefined (a zero-norm side)
    ulp_max: int | None = None
    ulp_dtype: str | None = None
    ulp_nonzero: int | None = None  # elements at least 1 ULP apart
    ulp_over: int | None = None  # elements beyond max_ulp
    mismatches: int = 0  # elements outside atol + rtol*|expected| (NaN rules included)
    worst: list[Element] = field(default_factory=list)
    atol_needed: float = 0.0  # smallest atol that passes every element at this rtol
    rtol_needed: float = 0.0  # smallest rtol that passes every element at this atol
    nonfinite: NonFinite = field(default_factory=NonFinite)
    failures: list[Failure] = field(default_factory=list)
    backend: str = "numpy"

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)


@dataclass
class Comparison:
    """The comparison of a whole output tree: every output, missing and extra ones included."""

    outputs: list[OutputComparison]
    missing: list[str]  # present in expected, absent in actual
    extra: list[str]  # present in actual, absent in expected
    tolerance: Tolerance
    label: str = ""

    @property
    def passed(self) -> bool:
        return not self.missing and not self.extra and all(o.passed for o in self.outputs)

    def __bool__(self) -> bool:
        return self.passed

    def __getitem__(self, path: str) -> OutputComparison:
        for output in self.outputs:
            if output.path == path:
                return output
        raise KeyError(path)

    def failing(self) -> Iterator[OutputComparison]:
        return (o for o in self.outputs if not o.passed)

    def to_dict(self) -> dict[str, Any]:
        data = to_jsonable(self)
        data["passed"] = self.passed
        return data


def to_jsonable(value: Any) -> Any:
    """Turn a result (dataclasses, tuples, numpy scalars, non-finite floats) into plain JSON
    data; text that is not UTF-8 (a path of undecodable bytes) as :func:`display_text` shows it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {display_text(str(k)): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, str):
        return display_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    # numpy scalars and similar: duck-typed so that this module imports no numpy
    item = getattr(value, "item", None)
    if callable(item):
        return to_jsonable(item())
    return display_text(str(value))


def from_jsonable_float(value: Any) -> Any:
    if value == "nan":
        return math.nan
    if value == "inf":
        return math.inf
    if value == "-inf":
        return -math.inf
    return value


# --------------------------------------------------------------------------------------------
# Claim verdicts and gate runs. Reports render the JSON form of GateResult (``to_dict``), so that
# ``paritygate report RESULT.json`` re-renders an earlier run from its file alone.

Oracle = Literal["drift", "no-op", "equivalence", "approximation", "cross-adapter", "speed"]


@dataclass
class ClaimVerdict:
    """One claim evaluated for one case (``case`` is None for dataset-level and speed claims)."""

    claim_id: str
    candidate: str
    case: str | None
    passed: bool
    oracle: str
    metric: str
    bound: float | int | str | None
    unit: str = ""
    observed: float | int | str | None = None  # the worst observed value in this scope
    excess: float | None = None  # how far past the bound (None when it holds)
    failures: list[Failure] = field(default_factory=list)  # every failure, not just the first
    evidence: dict[str, Any] = field(
        default_factory=dict
    )  # per-output metrics, per-edge deltas ...

    def __bool__(self) -> bool:
        return self.passed


@dataclass
class NotEvaluated:
    """A claim the run did not evaluate, by name, with the reason (e.g. another hardware class)."""

    claim_id: str
    reason: str


@dataclass
class DriftItem:
    """Something pinned that shifted. Drift says "something changed", never "the candidate is
    wrong"."""

    kind: str  # "reference-file", "case-input", "pin", "format-version", ...
    subject: str  # which file, case, runner or key
    expected: str | None
    observed: str | None
    detail: str = ""


@dataclass
class GateResult:
    """One gate run: every verdict, what was not evaluated, drift and run errors."""

    spec: str
    verdicts: list[ClaimVerdict] = field(default_factory=list)
    not_evaluated: list[NotEvaluated] = field(default_factory=list)
    drift: list[DriftItem] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # runner crash, timeout, unparseable output
    provenance: dict[str, Any] = field(default_factory=dict)
    started: str = ""
    finished: str = ""

    @property
    def passed(self) -> bool:
        # A gate that evaluated nothing fails: an empty run proves nothing.
        return bool(self.verdicts) and not self.drift and not self.errors and all(self.verdicts)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def exit_code(self) -> int:
        if self.drift:
            return 3
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        data = to_jsonable(self)
        data["passed"] = self.passed
        data["exit_code"] = self.exit_code
        data["format"] = "paritygate-gate-result"
        data["format_version"] = 1
        return data

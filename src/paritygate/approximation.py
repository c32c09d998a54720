"""Activity assertions for the approximation oracle.

An intentionally approximate candidate (a step-skipping cache, early exit, pruning) is judged on
output quality, and quality alone rewards doing nothing: a cache that never skips reproduces the
baseline perfectly. An activity band makes the candidate prove it acted, with a counter it
reports (skipped steps, cache hits, pruned heads) lying within the claimed band.

In a spec a claim carries the band as an inline table::

    activity = { counter = "skipped_steps", min = 5, max = 7 }

The candidate reports the counter as a scalar output of that name (``skipped_steps``), so a
subprocess candidate reports it the same way as an in-process one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InputError, SpecError
from .results import Failure

__all__ = ["ActivityBand", "check_activity", "ACTIVITY_KEYS"]

ACTIVITY_KEYS = ("counter", "min", "max")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class ActivityBand:
    """A counter the candidate reports must lie in ``low..high`` (both inclusive)."""

    counter: str
    low: int | float
    high: int | float

    def __post_init__(self) -> None:
        if not isinstance(self.counter, str) or not self.counter:
            raise InputError(f"activity counter must be a non-empty name, got {self.counter!r}")
        for name, key in (("low", "min"), ("high", "max")):
            value = getattr(self, name)
            if not _is_number(value) or math.isnan(value):
                raise InputError(
                    f"activity {key} for '{self.counter}' must be a number, got {value!r}"
                )
        if self.low > self.high:
            raise InputError(
                f"activity band for '{self.counter}' is empty: min {self.low} > max {self.high}"
            )

    @property
    def text(self) -> str:
        return f"{_fmt(self.low)}..{_fmt(self.high)}"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, where: str = "activity") -> ActivityBand:
        """Parse the spec form ``{counter = "...", min = ..., max = ...}`` (SpecError on bad keys)."""
        if not isinstance(data, Mapping):
            raise SpecError(
                f"expected a table {{counter = ..., min = ..., max = ...}}, got {data!r}",
                where=where,
            )
        unknown = sorted(set(data) - set(ACTIVITY_KEYS))
        if unknown:
            raise SpecError(
                f"unknown key(s) {', '.join(unknown)}; expected {', '.join(ACTIVITY_KEYS)}",
                where=where,
            )
        missing = [key for key in ACTIVITY_KEYS if key not in data]
        if missing:
            raise SpecError(f"missing key(s) {', '.join(missing)}", where=where)
        try:
            return cls(str(data["counter"]), data["min"], data["max"])
        except InputError as exc:
            raise SpecError(exc.message, where=where) from None

    def to_mapping(self) -> dict[str, Any]:
        return {"counter": self.counter, "min": self.low, "max": self.high}


def check_activity(counters: Mapping[str, Any], band: ActivityBand) -> Failure | None:
    """None when ``counters[band.counter]`` lies in the band, else a Failure saying by how much.

    A counter that was not reported fails: an optimization that cannot show it acted has not
    shown anything.
    """
    metric = f"activity:{band.counter}"
    if band.counter not in counters:
        reported = ", ".join(sorted(map(str, counters))) or "none"
        return Failure(
            metric,
            band.text,
            None,
            detail=f"counter '{band.counter}' was not reported (reported: {reported}); "
            f"claim requires {band.text}",
        )
    value = _as_number(counters[band.counter])
    if not _is_number(value) or math.isnan(value):
        return Failure(
            metric, band.text, str(value), detail=f"{band.counter} = {value!r} is not a number"
        )
    if value < band.low:
        excess = band.low - value
        why = "the optimization did nothing" if value == 0 else "too little activity"
    elif value > band.high:
        excess = value - band.high
        why = "more activity than claimed"
    else:
        return None
    return Failure(
        metric,
        band.text,
        value,
        excess=float(excess),
        detail=f"{band.counter} = {_fmt(value)}, claim requires {band.text}: {why}",
    )


def _as_number(value: Any) -> Any:
    """Counters arrive as Python numbers, numpy scalars or one-element arrays (a runner output)."""
    size = getattr(value, "size", None)
    item = getattr(value, "item", None)
    if size == 1 and callable(item):
        return item()
    return value


def _fmt(value: int | float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)

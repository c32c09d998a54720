"""Activity assertions for the approximation oracle.

An intentionally approximate candidate (a step-skipping cache, early exit, pruning) is judged on
output quality, and quality alone rewards doing nothing: a cache that never skips reproduces the
baseline perfectly. An activity band makes the candidate prove it acted, and the proof is a count
paritygate measures itself: the spec names a callable inside the candidate (the transformer body
a cache skips), paritygate wraps it while the candidate runs and counts its calls. A count the
candidate reports about itself proves nothing (a cache whose counter says "7 steps skipped" while
its body ran 25 of 25 times) and is refused as activity evidence.

In a spec a claim carries the band as an inline table::

    activity = { calls = "model:DiT.body", measure = "skipped", min = 5, max = 7 }

``calls`` is ``module:attribute.path`` (a module-level function, or a method of a class: every
instance's calls count), imported the way the runner imports its callable. ``measure`` is
``"calls"`` (the candidate's calls per case lie in the band) or ``"skipped"`` (the reference's
calls minus the candidate's on the same case, both counted by paritygate in one process: paired
mode). ``differ = true`` additionally requires the candidate's covered outputs to differ from the
reference's on every case, where a measurable difference from the exact path is the point.
Counting needs an in-process (Python) candidate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._format import format_number
from .errors import InputError, SpecError
from .results import Failure

__all__ = [
    "ActivityBand",
    "check_activity",
    "ACTIVITY_KEYS",
    "CALLS_PREFIX",
    "SELF_REPORTED",
    "count_calls",
]

ACTIVITY_KEYS = ("calls", "measure", "min", "max", "differ")
MEASURES = ("calls", "skipped")
# The output name under which a runner hands on the calls paritygate counted ("@calls:model:f").
CALLS_PREFIX = "@calls:"
SELF_REPORTED = (
    "a count the candidate reports about itself is not activity evidence (a cache can report "
    "7 skipped steps while its body ran 25 of 25 times); name the callable paritygate wraps and "
    'counts instead: calls = "module:Class.method"'
)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class ActivityBand:
    """A counter the candidate reports must lie in ``low..high`` (both inclusive)."""

    counter: str
    low: int | float
    high: int | float
    # The callable paritygate counts ("module:Class.method"); None for a Python-API band over a
    # counter the caller supplies (never from a spec: see SELF_REPORTED).
    calls: str | None = None
    measure: str = "calls"  # "calls" or "skipped" (reference calls - candidate calls)
    differ: bool = False  # the candidate's outputs must differ from the reference's

    def __post_init__(self) -> None:
        if not isinstance(self.counter, str) or not self.counter:
            raise InputError(f"activity counter must be a non-empty name, got {self.counter!r}")
        if self.measure not in MEASURES:
            raise InputError(
                f"activity measure must be one of {', '.join(MEASURES)}, got {self.measure!r}"
            )
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
        return f"{format_number(self.low)}..{format_number(self.high)}"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, where: str = "activity") -> ActivityBand:
        """Parse the spec form ``{calls = "module:attr", min = ..., max = ...}`` (SpecError on
        bad keys; a self-reported ``counter`` is refused)."""
        if not isinstance(data, Mapping):
            raise SpecError(
                f"expected a table {{counter = ..., min = ..., max = ...}}, got {data!r}",
                where=where,
            )
        if "counter" in data:
            raise SpecError(f"counter = {data['counter']!r}: {SELF_REPORTED}", where=where)
        unknown = sorted(set(data) - set(ACTIVITY_KEYS))
        if unknown:
            raise SpecError(
                f"unknown key(s) {', '.join(unknown)}; expected {', '.join(ACTIVITY_KEYS)}",
                where=where,
            )
        missing = [key for key in ("calls", "min", "max") if key not in data]
        if missing:
            raise SpecError(f"missing key(s) {', '.join(missing)}", where=where)
        target = data["calls"]
        if not isinstance(target, str) or target.count(":") != 1 or not all(target.split(":")):
            raise SpecError(
                f"calls must name a callable as 'module:attribute.path', got {target!r}",
                where=where,
            )
        differ = data.get("differ", False)
        if not isinstance(differ, bool):
            raise SpecError(f"differ must be true or false, got {differ!r}", where=where)
        try:
            return cls(
                CALLS_PREFIX + target,
                data["min"],
                data["max"],
                calls=target,
                measure=str(data.get("measure", "calls")),
                differ=differ,
            )
        except InputError as exc:
            raise SpecError(exc.message, where=where) from None

    def to_mapping(self) -> dict[str, Any]:
        if self.calls is None:
            return {"counter": self.counter, "min": self.low, "max": self.high}
        out: dict[str, Any] = {"calls": self.calls, "min": self.low, "max": self.high}
        if self.measure != "calls":
            out["measure"] = self.measure
        if self.differ:
            out["differ"] = True
        return out

    @property
    def what(self) -> str:
        """What the band counts, in words."""
        if self.calls is None:
            return self.counter
        if self.measure == "skipped":
            return f"calls of {self.calls} skipped (reference minus candidate)"
        return f"calls of {self.calls}"


def check_activity(
    counters: Mapping[str, Any], band: ActivityBand, reference: Mapping[str, Any] | None = None
) -> Failure | None:
    """None when ``counters[band.counter]`` lies in the band, else a Failure saying by how much.

    A counter that was not reported fails: an optimization that cannot show it acted has not
    shown anything.
    """
    metric = f"activity:{band.calls or band.counter}"
    if band.calls is not None and band.measure == "skipped":
        # Skipped calls: what the exact path called, less what the candidate called.
        if reference is None or band.counter not in reference:
            return Failure(
                metric,
                band.text,
                None,
                detail=f"the reference's calls of {band.calls} were not counted (measure = "
                "'skipped' needs the reference run in the same process: mode = 'paired')",
            )
        if band.counter in counters:
            counters = {
                band.counter: _as_number(reference[band.counter])
                - _as_number(counters[band.counter])
            }
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
        detail=f"{band.what} = {format_number(value)} (counted by paritygate), claim requires "
        f"{band.text}: {why}"
        if band.calls is not None
        else f"{band.counter} = {format_number(value)}, claim requires {band.text}: {why}",
    )


class _Counted:
    def __init__(self, owner: Any, name: str, original: Any, had: bool):
        self.owner, self.name, self.original, self.had = owner, name, original, had
        self.calls = 0


class count_calls:
    """Context manager: wrap each ``module:attribute.path`` target and count its calls.

    ``counts`` maps each target to its number of calls inside the block. A method of a class is
    wrapped on the class (every instance's calls count); the originals are put back on exit.
    Raises InputError naming a target that cannot be imported or is not callable."""

    def __init__(self, targets: Iterable[str]):
        self.targets = tuple(dict.fromkeys(targets))
        self._wrapped: dict[str, _Counted] = {}

    @property
    def counts(self) -> dict[str, int]:
        return {t: w.calls for t, w in self._wrapped.items()}

    def __enter__(self) -> count_calls:
        try:
            for target in self.targets:
                self._wrap(target)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wrap(self, target: str) -> None:
        import functools
        import importlib

        module_name, _, path = target.partition(":")
        try:
            owner: Any = importlib.import_module(module_name)
        except Exception as exc:
            raise InputError(
                f"cannot import {module_name!r} to count calls of {target!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        *parents, name = path.split(".")
        for part in parents:
            owner = getattr(owner, part, None)
            if owner is None:
                raise InputError(f"{target!r}: {module_name!r} has no attribute {path!r}")
        had = name in getattr(owner, "__dict__", {})
        original = owner.__dict__[name] if had else getattr(owner, name, None)
        function = getattr(owner, name, None)
        if original is None or not callable(function):
            raise InputError(f"{target!r} is not a callable paritygate can count")
        counted = _Counted(owner, name, original, had)
        if isinstance(original, (staticmethod, classmethod)):
            raise InputError(
                f"{target!r} is a {type(original).__name__}; name a function or a method"
            )

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counted.calls += 1
            return original(*args, **kwargs)

        setattr(owner, name, wrapper)
        self._wrapped[target] = counted

    def __exit__(self, *exc: Any) -> None:
        for counted in reversed(list(self._wrapped.values())):
            if counted.had:
                setattr(counted.owner, counted.name, counted.original)
            else:
                try:
                    delattr(counted.owner, counted.name)
                except AttributeError:
                    pass


def _as_number(value: Any) -> Any:
    """Counters arrive as Python numbers, numpy scalars or one-element arrays (a runner output)."""
    size = getattr(value, "size", None)
    item = getattr(value, "item", None)
    if size == 1 and callable(item):
        return item()
    return value

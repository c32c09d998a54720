"""Comparing two saved runs of the same workload: did the measured effect change between them?

Each saved run holds the log time ratios of its block pairs (candidate / baseline, paired, so
the drift within each run is already removed). The two runs are independent samples of those
log-ratios; their difference in location is estimated by the difference of their medians with a
percentile bootstrap interval (``scipy.stats.bootstrap``,
resampling each run on its own). The verdict reads like a run's: ``slower`` means the effect in
the second run is larger (the candidate lost ground), against the larger of the two thresholds.
Runs whose checked provenance differs are refused before any arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import InputError, UserError
from ..results import to_jsonable
from ._run import BenchResult
from ._stats import Verdict, classify, format_ratio

__all__ = ["RunComparison", "compare_runs"]


@dataclass
class RunComparison:
    first: str
    second: str
    verdict: Verdict
    ratio: float  # effect in the second run / effect in the first
    ratio_ci: tuple[float, float]
    confidence: float
    threshold: float
    pairs: tuple[int, int]

    def __bool__(self) -> bool:
        return self.verdict in (Verdict.FASTER, Verdict.EQUIVALENT)

    def describe(self) -> str:
        lo, hi = self.ratio_ci
        return (
            f"{self.verdict.value}: the effect in {self.second} is {format_ratio(self.ratio)} "
            f"than in {self.first} ({self.confidence:.0%} CI {format_ratio(lo)} .. "
            f"{format_ratio(hi)}; threshold {self.threshold:.2%}; "
            f"{self.pairs[0]} and {self.pairs[1]} block pairs)"
        )

    def to_dict(self) -> dict:
        data = to_jsonable(self)
        data["verdict"] = self.verdict.value
        data["summary"] = self.describe()
        return data


def compare_runs(
    first: BenchResult,
    second: BenchResult,
    *,
    names: tuple[str, str] = ("first", "second"),
    alpha: float = 0.05,
    seed: int = 0,
) -> RunComparison:
    import numpy as np
    from scipy.stats import bootstrap

    check_comparable(first.provenance, second.provenance)
    a = np.log(np.asarray(first.pair_ratios, dtype=float))
    b = np.log(np.asarray(second.pair_ratios, dtype=float))
    if a.size < 3 or b.size < 3:
        raise InputError(
            f"comparing runs needs at least 3 block pairs in each, got {a.size} and {b.size}"
        )

    def shift(x, y, axis=-1):
        return np.median(y, axis=axis) - np.median(x, axis=axis)

    estimate = float(shift(a, b))
    res = bootstrap(
        (a, b),
        shift,
        vectorized=True,
        paired=False,
        confidence_level=1 - alpha,
        n_resamples=2000,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    threshold = max(first.threshold, second.threshold)
    verdict = classify(lo, hi, threshold)
    return RunComparison(
        first=names[0],
        second=names[1],
        verdict=verdict,
        ratio=math.exp(estimate),
        ratio_ci=(math.exp(lo), math.exp(hi)),
        confidence=1 - alpha,
        threshold=threshold,
        pairs=(int(a.size), int(b.size)),
    )


# Provenance keys that must match for two benchmark results to be compared at all.
CHECKED_PROVENANCE_KEYS = (
    "source_revision",
    "model_revision",
    "dtype",
    "compile_flags",
    "input_sha256",
    "shapes",
    "batching",
    "sync",
    "device",
    "workload",
)


def check_comparable(a: dict[str, Any], b: dict[str, Any], keys=CHECKED_PROVENANCE_KEYS) -> None:
    """Refuse to compare two benchmark provenances whose checked keys differ."""
    differing = [
        f"{key}: {a.get(key)!r} vs {b.get(key)!r}"
        for key in keys
        if (key in a or key in b) and a.get(key) != b.get(key)
    ]
    if differing:
        raise UserError(
            "benchmark runs are not comparable; checked provenance differs: "
            + "; ".join(differing),
            hint="re-run both sides from the same source revision and workload",
        )

"""The decision rule: paired block log-ratios, Hodges–Lehmann estimate, Wilcoxon signed-rank
interval, an effect threshold, and alpha spent over sequential looks.

Everything here is pure arithmetic on lists of numbers (no timing), so the rule is tested on
synthetic samples whose exact false-alarm rate is known.

Model. Block pair ``i`` gives ``d_i = log(candidate block median / baseline block median)``. The
``d_i`` are assumed independent with a distribution symmetric about ``theta`` (the log of the
true time ratio). The interval for ``theta`` is the set of shifts the Wilcoxon signed-rank test
does not reject: ``[W_(k+1), W_(M-k)]`` over the ``M = n(n+1)/2`` sorted Walsh averages
``(d_i + d_j) / 2``, with ``k`` the largest count whose signed-rank tail probability is at most
``alpha / 2``. Under the model its coverage is exact (distribution-free); the tail probability
comes from ``scipy.stats.wilcoxon`` (exact null distribution) up to 150 pairs and from the normal
approximation with continuity correction beyond.

Verdicts against a threshold ``t`` (the smallest change worth calling, ``delta = log(1 + t)``),
given at least :func:`min_decisive_pairs` pairs (fewer: ``inconclusive``, whatever the interval):

- ``slower``      the whole interval lies above ``+delta``;
- ``faster``      the whole interval lies below ``-delta``;
- ``equivalent``  the whole interval lies inside ``(-delta, +delta)``;
- ``inconclusive`` otherwise.

A false ``slower`` (``faster``) needs the interval to miss ``theta`` on one side, so for any true
effect inside the threshold it happens with probability at most ``alpha / 2`` per look.

Sequential looks. Look ``j`` (0, 1, 2, ...) is analysed at level ``alpha_j = alpha / ((j+1)(j+2))``
(these sum to ``alpha``), so by the union bound the probability that *any* look's interval misses
``theta`` is at most ``alpha``, however many looks the budget allows and whenever the run stops.
Looks are spaced geometrically (each at least 1.5x the blocks of the previous one), so the number
of looks, and with it the price of looking, grows only with the logarithm of the blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from ..errors import InputError

__all__ = [
    "Verdict",
    "Decision",
    "decide",
    "hodges_lehmann_interval",
    "signed_rank_critical",
    "min_pairs",
    "min_decisive_pairs",
    "look_alpha",
    "look_schedule",
    "format_ratio",
    "DEFAULT_ALPHA",
]

DEFAULT_ALPHA = 0.05
_GROWTH = 1.5
_EXACT_UP_TO = 150


class Verdict(StrEnum):
    """What a comparison decided (a field, not a sentence to parse)."""

    FASTER = "faster"
    SLOWER = "slower"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"


def _signed_rank_cdf_exact(k: int, n: int) -> float:
    """P(T+ <= k) under the null, for n pairs, from scipy's exact signed-rank distribution.

    scipy exposes the distribution through the test: a sample whose positive ranks sum to exactly
    ``k`` has the one-sided ("less") p-value ``P(T+ <= k)``."""
    import numpy as np
    from scipy.stats import wilcoxon

    total = n * (n + 1) // 2
    if k < 0:
        return 0.0
    if k >= total:
        return 1.0
    signs = -np.ones(n)
    rest = k
    for rank in range(n, 0, -1):
        if rank <= rest:
            signs[rank - 1] = 1.0
            rest -= rank
    sample = signs * np.arange(1, n + 1, dtype=float)
    return float(wilcoxon(sample, alternative="less", method="exact").pvalue)


def _signed_rank_cdf_normal(k: int, n: int) -> float:
    from scipy.stats import norm

    mean = n * (n + 1) / 4
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return float(norm.cdf((k + 0.5 - mean) / sd))


def signed_rank_cdf(k: int, n: int) -> float:
    """P(T+ <= k) for the Wilcoxon signed-rank statistic of n pairs under the null."""
    if n <= _EXACT_UP_TO:
        return _signed_rank_cdf_exact(k, n)
    return _signed_rank_cdf_normal(k, n)


@lru_cache(maxsize=4096)
def signed_rank_critical(n: int, alpha: float) -> int | None:
    """The largest k with P(T+ <= k) <= alpha / 2, or None when n pairs cannot reach that level."""
    if n < 1 or signed_rank_cdf(0, n) > alpha / 2:
        return None
    lo, hi = 0, n * (n + 1) // 4  # P(T+ <= lo) <= alpha/2 holds; hi is the median
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if signed_rank_cdf(mid, n) <= alpha / 2:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prepare(alpha: float, looks: int = 8) -> None:
    """Import scipy.stats and compute the first looks' critical values ahead of timing."""
    import scipy.stats  # noqa: F401  (its import takes seconds on a busy machine)

    for j, n in enumerate(look_schedule(alpha, 10**9)[:looks]):
        signed_rank_critical(n, look_alpha(alpha, j))
    signed_rank_critical(min_decisive_pairs(alpha), alpha)


def min_pairs(alpha: float) -> int:
    """The fewest pairs whose two-sided interval at level 1 - alpha is finite: 2**-n <= alpha/2."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    return max(1, math.ceil(math.log2(2 / alpha) - 1e-12))


@lru_cache(maxsize=256)
def min_decisive_pairs(alpha: float) -> int:
    """The fewest pairs whose interval at level 1 - alpha no single pair can move at will.

    The ``n`` Walsh averages a pair ``d_i`` takes part in (``(d_i + d_j) / 2`` for every ``j``)
    are the ``n`` most extreme ones when that pair is wild (a preemption landing on one side of
    one block). The interval ``[W_(k+1), W_(M-k)]`` drops ``k`` Walsh averages at each end, so
    it is bounded whatever one pair does exactly when ``k >= n``: fewer pairs give an interval
    that one pair can drag past any threshold, and such a comparison is undecided. At
    ``alpha = 0.05`` this is 12 pairs (``k = 13``); at the first sequential look (0.025) 13."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    n = min_pairs(alpha)
    while True:
        k = signed_rank_critical(n, alpha)
        if k is not None and k >= n:
            return n
        n += 1


def hodges_lehmann_interval(
    diffs: list[float], alpha: float
) -> tuple[float, tuple[float, float] | None]:
    """(Hodges–Lehmann estimate, Wilcoxon interval at level 1 - alpha or None if too few pairs)."""
    import numpy as np

    d = np.asarray(diffs, dtype=float)
    n = d.size
    if n == 0:
        raise ValueError("no pairs")
    walsh = (d[:, None] + d[None, :])[np.triu_indices(n)] / 2.0
    walsh.sort()
    estimate = float(np.median(walsh))
    k = signed_rank_critical(n, alpha)
    if k is None:
        return estimate, None
    return estimate, (float(walsh[k]), float(walsh[walsh.size - 1 - k]))


def look_alpha(alpha: float, look: int) -> float:
    """The level spent at look ``look`` (0-based): alpha / ((look+1)(look+2)), summing to alpha."""
    return alpha / ((look + 1) * (look + 2))


def look_schedule(alpha: float, up_to: int) -> list[int]:
    """Pair counts at which sequential looks happen, up to ``up_to`` pairs."""
    looks = []
    n = min_decisive_pairs(look_alpha(alpha, 0))
    while n <= up_to:
        looks.append(n)
        n = max(n + 1, math.ceil(n * _GROWTH), min_decisive_pairs(look_alpha(alpha, len(looks))))
    return looks


@dataclass(frozen=True)
class Decision:
    """The rule's answer at one look. Ratios are candidate time / baseline time."""

    verdict: Verdict
    ratio: float  # Hodges–Lehmann estimate of the time ratio
    ratio_ci: tuple[float, float]
    confidence: float  # level of this look's interval (1 - alpha_j)
    threshold: float  # relative: ratios inside [1/(1+t), 1+t] are "equivalent"
    pairs: int
    more_pairs: int | None  # for "inconclusive": pairs likely needed in addition; None if unlikely

    @property
    def speedup(self) -> float:
        return 1.0 / self.ratio


def classify(lo: float, hi: float, threshold: float) -> Verdict:
    """The verdict of a log-ratio interval ``[lo, hi]`` against a relative threshold (the rule
    in the module docstring)."""
    delta = math.log1p(threshold)
    if lo > delta:
        return Verdict.SLOWER
    if hi < -delta:
        return Verdict.FASTER
    if -delta < lo and hi < delta:
        return Verdict.EQUIVALENT
    return Verdict.INCONCLUSIVE


def decide(log_ratios: list[float], threshold: float, alpha: float) -> Decision:
    """Apply the rule to the log time ratios of the block pairs, at level 1 - alpha."""
    if not threshold > 0:
        raise ValueError("the threshold must be > 0 (a change of 0 cannot be told from noise)")
    n = len(log_ratios)
    needed = min_pairs(alpha)
    if n < needed:
        raise ValueError(f"{n} block pairs cannot give a {1 - alpha:.4g} interval: need {needed}")
    estimate, ci = hodges_lehmann_interval(log_ratios, alpha)
    assert ci is not None
    lo, hi = ci
    delta = math.log1p(threshold)
    verdict = classify(lo, hi, threshold)
    more = None
    decisive = min_decisive_pairs(alpha)
    if n < decisive:
        # one wild pair could have put the interval where it is: undecided, never a pass
        verdict, more = Verdict.INCONCLUSIVE, decisive - n
    elif verdict is Verdict.INCONCLUSIVE:
        # The interval narrows like 1/sqrt(n) if the spread stays as it is: how many pairs until
        # the side of the interval facing the threshold clears it?
        if estimate > delta:
            half, gap = estimate - lo, estimate - delta
        elif estimate < -delta:
            half, gap = hi - estimate, -delta - estimate
        else:
            half, gap = max(estimate - lo, hi - estimate), delta - abs(estimate)
        if half > 0 and gap > 1e-12:
            total = n * (half / gap) ** 2
            more = max(1, math.ceil(total - n)) if total < 1e9 else None
    return Decision(
        verdict=verdict,
        ratio=math.exp(estimate),
        ratio_ci=(math.exp(lo), math.exp(hi)),
        confidence=1 - alpha,
        threshold=threshold,
        pairs=n,
        more_pairs=more,
    )


def format_ratio(ratio: float) -> str:
    """A time ratio (candidate / baseline) as people read it: '1.19x slower', '1.31x faster'."""
    if not math.isfinite(ratio) or ratio <= 0:
        return f"ratio {ratio}"
    if ratio >= 1:
        return f"{ratio:.2f}x slower" if round(ratio, 2) != 1 else "1.00x (same)"
    speedup = 1 / ratio
    return f"{speedup:.2f}x faster" if round(speedup, 2) != 1 else "1.00x (same)"


def min_samples_for(q: float) -> int:
    """Samples needed before percentile q (in [0, 1)) is more than a guess: 10 / (1 - q)."""
    if not 0 <= q < 1:
        raise InputError(f"percentile must lie in [0, 1), got {q}")
    return math.ceil(10 / (1 - q) - 1e-9)


def percentile(samples: list[float], q: float) -> float:
    """Percentile q of the samples, refusing when there are too few samples for it."""
    needed = min_samples_for(q)
    if len(samples) < needed:
        raise InputError(
            f"p{q * 100:g} needs at least {needed} samples, got {len(samples)}",
            hint="raise blocks x block_size",
        )
    ordered = sorted(samples)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

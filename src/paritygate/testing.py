"""Test helpers: ``assert_parity`` raises AssertionError whose message is the full report.

Importing this module imports no test framework; it works under pytest, unittest or plain asserts.
"""

from __future__ import annotations

from typing import Any

from .compare import compare
from .results import Comparison

__all__ = ["assert_parity"]


def assert_parity(actual: Any, expected: Any, **bounds: Any) -> Comparison:
    """Compare like :func:`paritygate.compare` and raise AssertionError unless every output passes.

    ``bounds`` are the keyword arguments of :func:`~paritygate.compare` (``atol``, ``rtol``,
    ``min_cosine``, ``max_ulp``, ``tolerance``, ``label`` ...). Returns the comparison when it
    passes, so that a test can also inspect the metrics.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    comparison = compare(actual, expected, **bounds)
    if not comparison.passed:
        from .reports.text import format_comparison

        raise AssertionError(format_comparison(comparison))
    return comparison

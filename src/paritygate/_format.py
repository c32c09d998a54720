"""How paritygate writes a number for people: one formatter for reports, results and messages."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["format_number"]


def format_number(
    value: Any, *, digits: int = 6, none: str = "-", near_one: bool = False, percent: bool = False
) -> str:
    """``value`` to ``digits`` significant digits; other values as text.

    ``None`` reads as ``none``; bools as ``True`` / ``False``; integers exactly; NaN and the
    infinities as ``nan`` / ``inf`` / ``-inf``. With ``near_one``, a value just below 1 (a cosine,
    an SSIM) reads as ``1-d`` so that its distance from 1 stays legible. With ``percent``, a
    fraction (an agreement, an accuracy) reads as a percentage: ``1.0`` as ``100%``.
    """
    if value is None:
        return none
    if isinstance(value, (bool, numbers.Integral)) or not isinstance(value, numbers.Real):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if percent:
        return f"{value * 100:.{digits}g}%"
    if near_one and 0.999 < value < 1.0:
        return f"1-{1.0 - value:.{max(digits - 1, 1)}g}"
    return f"{value:.{digits}g}"

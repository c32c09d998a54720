"""How paritygate writes a number (or a name) for people: one formatter for reports, results and
messages."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["format_number", "display_text"]


def format_number(
    value: Any,
    *,
    digits: int = 6,
    none: str = "-",
    near_one: bool = False,
    percent: bool = False,
    compact: bool = False,
) -> str:
    """``value`` to ``digits`` significant digits; other values as text.

    ``None`` reads as ``none``; bools as ``True`` / ``False``; integers exactly; NaN and the
    infinities as ``nan`` / ``inf`` / ``-inf``. With ``near_one``, a value just below 1 (a cosine,
    an SSIM) reads as ``1-d`` so that its distance from 1 stays legible. With ``percent``, a
    fraction (an agreement, an accuracy) reads as a percentage: ``1.0`` as ``100%``. With
    ``compact`` (a terminal's table cell), a number takes at most ~8 characters: whole numbers
    below 10**7 exactly, tiny and huge values to 2 significant digits, the others to 4.
    """
    if value is None:
        return none
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return str(value)
    if isinstance(value, numbers.Integral):
        return f"{value:.3g}" if compact and abs(value) >= 10**7 else str(value)
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if compact:
        if value == int(value) and abs(value) < 10**7:
            return str(int(value))
        return f"{value:.2g}" if abs(value) < 1e-3 or abs(value) >= 1e5 else f"{value:.4g}"
    if percent:
        return f"{value * 100:.{digits}g}%"
    if near_one and 0.999 < value < 1.0:
        return f"1-{1.0 - value:.{max(digits - 1, 1)}g}"
    return f"{value:.{digits}g}"


def display_text(text: str) -> str:
    """``text`` as every report can write it in UTF-8.

    A path whose bytes are not UTF-8 (``b"spec-\\xff.toml"`` on Linux) reaches Python as text
    with surrogate escapes (:func:`os.fsdecode`), which no UTF-8 writer accepts: such bytes
    read as ``\\xff``, any other lone surrogate as ``\\udxxx``. Text that encodes is returned
    as is.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")

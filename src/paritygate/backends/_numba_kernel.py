"""Fused comparison kernel through numba (optional extra ``fast``); filled in below."""

from __future__ import annotations

from typing import Any


def available() -> bool:
    return False


def supports(pair: Any) -> bool:
    return False


def partials(pair: Any, settings: Any, partials_type: Any) -> Any:  # pragma: no cover
    raise NotImplementedError

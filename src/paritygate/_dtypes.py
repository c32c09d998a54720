"""Dtype names numpy knows only through ml_dtypes, and the predicates every module shares.

bfloat16 and the float8 formats report numpy kind ``"V"`` (like record dtypes), so "is this a
number?" and "is this a float?" are answered here once, by name, for files, runners, spec,
calibration, comparison and the backends.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ML_DTYPES_NAMES", "numpy_dtype", "is_ml_float", "is_float", "is_numeric"]

#: Dtypes frameworks hold but numpy knows only through ml_dtypes (read back by name).
ML_DTYPES_NAMES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


def numpy_dtype(name: str) -> Any:
    """The numpy dtype called ``name``: numpy's own, else ml_dtypes' (``"bfloat16"``, the float8,
    float4 and sub-byte integer types); a name neither knows raises TypeError."""
    import numpy as np

    if name not in ML_DTYPES_NAMES:
        try:
            return np.dtype(name)
        except TypeError:
            pass
    import ml_dtypes

    if not hasattr(ml_dtypes, name):
        raise TypeError(f"data type {name!r} not understood")
    return np.dtype(getattr(ml_dtypes, name))


def is_ml_float(dtype: Any) -> bool:
    """bfloat16 or a float8 format (numpy kind ``"V"``, or ``"f"`` in some ml_dtypes versions)."""
    return getattr(dtype, "names", None) is None and dtype.name in ML_DTYPES_NAMES


def is_float(dtype: Any) -> bool:
    """A real floating dtype, ml_dtypes' included."""
    return dtype.kind == "f" or is_ml_float(dtype)


def is_numeric(dtype: Any, kinds: str = "biufc") -> bool:
    """bool, integer, float or complex (``kinds`` narrows it); ml_dtypes' floats included."""
    return dtype.kind in kinds or is_ml_float(dtype)

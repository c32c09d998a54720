"""The block layout the host comparison engine shares with its fused numba kernel.

Both kernels (numpy block by block, numba over threads) fill the same per-block partials, so that
the final reduction is shared and the result does not depend on the kernel or the thread count.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK"]

#: Elements per block: 64 Ki elements keep each float64 temporary at 512 KiB (inside L2).
BLOCK = 1 << 16


class _Partials:
    """Per-block partial results; every field is kept per block so that any kernel (numpy,
    numba over threads) produces the same arrays and the final reduction is shared."""

    FLOAT_FIELDS = (
        "max_abs",
        "sum_abs",
        "max_rel",
        "max_rel_symmetric",
        "dot",
        "norm_actual_sq",
        "norm_expected_sq",
        "diff_norm_sq",  # sum (a - e)^2 and sum (a - e)(a + e): 1 - cosine (metrics.py)
        "norm_sq_gap",
        "max_excess",
        "atol_needed",
        "rtol_needed",
        "key",  # largest excess among elements that differ (inf for a non-finite mismatch)
    )
    # max_excess is also taken over the elements that differ: an equal element is never a
    # mismatch, so the verdict and the reported excess of a failure do not depend on it.
    INT_FIELDS = (
        "n_finite",
        "mismatches",
        "ulp_max",
        "ulp_nonzero",
        "ulp_over",
        "actual_nan",
        "expected_nan",
        "nan_both",
        "nan_one_side",
        "actual_inf",
        "expected_inf",
        "inf_mismatch",
    )

    def __init__(self, n_blocks: int):
        self.f = np.zeros((n_blocks, len(self.FLOAT_FIELDS)), dtype=np.float64)
        self.i = np.zeros((n_blocks, len(self.INT_FIELDS)), dtype=np.uint64)
        self.f[:, self.FLOAT_FIELDS.index("max_excess")] = -np.inf
        self.f[:, self.FLOAT_FIELDS.index("key")] = -np.inf


_F = {name_: i for i, name_ in enumerate(_Partials.FLOAT_FIELDS)}
_I = {name_: i for i, name_ in enumerate(_Partials.INT_FIELDS)}

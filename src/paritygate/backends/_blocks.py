"""The block layout the host comparison engine shares with its fused numba kernel.

Both kernels (numpy block by block, numba over threads) fill the same per-block partials, so that
the final reduction is shared and the result does not depend on the kernel or the thread count.
"""

from __future__ import annotations

from math import inf

import numpy as np

from ..metrics import STATISTICS, Statistic

__all__ = ["BLOCK"]

#: Elements per block: 64 Ki elements keep each float64 temporary at 512 KiB (inside L2).
BLOCK = 1 << 16


class _Partials:
    """Per-block partial results of every statistic of :data:`~paritygate.metrics.STATISTICS`
    (the integer ones in ``i``, uint64, the others in ``f``, float64), plus each block's ``key``:
    the largest excess among its elements that differ (inf for a non-finite mismatch), which
    picks the blocks the worst elements are sought in. ``mismatches`` counts every mismatch of
    the block, non-finite ones included, and max_excess is taken over the elements that differ:
    an equal element is never a mismatch, so neither the verdict nor a failure's excess depends
    on it."""

    FLOAT = tuple(s for s in STATISTICS if not s.integer) + (Statistic("key", "max", empty=-inf),)
    INT = tuple(s for s in STATISTICS if s.integer)
    FLOAT_FIELDS = tuple(s.name for s in FLOAT)
    INT_FIELDS = tuple(s.name for s in INT)

    def __init__(self, n_blocks: int):
        self.f = np.tile(np.array([s.empty for s in self.FLOAT]), (n_blocks, 1))
        self.i = np.zeros((n_blocks, len(self.INT)), dtype=np.uint64)

    def merged(self) -> dict[str, float]:
        """Every statistic merged over the blocks (``key`` left out): sums and counts added,
        maxima taken; the blocks must be at least one."""
        out = {}
        for table, stats in ((self.f, self.FLOAT), (self.i, self.INT)):
            for j, st in enumerate(stats):
                column = table[:, j]
                out[st.name] = column.max() if st.reduce == "max" else column.sum()
        del out["key"]
        return out


_F = {name_: i for i, name_ in enumerate(_Partials.FLOAT_FIELDS)}
_I = {name_: i for i, name_ in enumerate(_Partials.INT_FIELDS)}

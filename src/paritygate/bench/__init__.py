"""Benchmarks designed as experiments, not as loops around a timer.

- Baseline and candidate run in **interleaved blocks** (the order alternating AB, BA, ...) and
  are analysed as **pairs**: each block pair gives one time ratio, so drift of the machine hits
  both sides alike and the pairing removes it.
- The **decision rule** (:mod:`paritygate.bench._stats`): a Hodges–Lehmann estimate of the time
  ratio with its Wilcoxon signed-rank interval, against a threshold that is either stated (the
  smallest change worth calling) or measured by an A/A run on this machine and workload
  (cached). Verdicts are structured: ``faster``, ``slower``, ``equivalent``, ``inconclusive``.
- A **time budget** runs block pairs until a look is decisive; the level is spent over the looks
  (alpha spending) so looking repeatedly does not raise the false-alarm rate.
- **Loops per sample** are calibrated so one sample lasts at least 100x the harness overhead;
  **warm-up** runs until the rolling median settles (at most 10 % of the budget); the default
  **sync** does nothing in the timed region for outputs that need none.
- **Cold** calls are timed apart, **stages** come from the same iterations, **percentiles** need
  enough samples, outputs are **checked while timing**, raw samples and **provenance** (with
  the **noise checks**) are kept; results whose checked provenance differs are not compared.

See docs/bench.md for the statistics and their assumptions.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..errors import InputError
from ._compare import CHECKED_PROVENANCE_KEYS, RunComparison, check_comparable, compare_runs
from ._run import HARNESS_VERSION, BenchResult, SideSamples, run_bench, time_side
from ._stats import Decision, Verdict, decide, format_ratio, min_pairs, min_samples_for, percentile
from ._timing import Iteration

__all__ = [
    "Iteration",
    "SideSamples",
    "BenchResult",
    "Verdict",
    "Decision",
    "run_bench",
    "time_side",
    "compare_runs",
    "RunComparison",
    "decide",
    "format_ratio",
    "min_pairs",
    "amdahl_bound",
    "min_samples_for",
    "percentile",
    "input_fingerprint",
    "check_comparable",
    "CHECKED_PROVENANCE_KEYS",
    "HARNESS_VERSION",
]


def amdahl_bound(fraction: float, speedup: float) -> float:
    """Overall speedup when a part taking ``fraction`` of the time gets ``speedup`` times faster."""
    if not 0 <= fraction <= 1:
        raise InputError(f"fraction must lie in [0, 1], got {fraction}")
    if speedup <= 0:
        raise InputError(f"speedup must be > 0, got {speedup}")
    return 1.0 / (1.0 - fraction + fraction / speedup)


def input_fingerprint(inputs: Any) -> str:
    """sha256 over the actual input arrays (dtype, shape and bytes), not over their description."""
    import numpy as np

    from ..outputs import flatten_outputs

    digest = hashlib.sha256()
    for name, leaf in sorted(flatten_outputs(inputs).items()):
        array = np.ascontiguousarray(np.asarray(leaf))
        digest.update(name.encode())
        digest.update(str(array.dtype).encode())
        digest.update(str(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()

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
- **Cold** calls are timed apart, **stages** come from the same iterations (``stage_amdahl``:
  the Amdahl bound from a stage's measured fraction and its own speedup), **percentiles** need
  enough samples, outputs are **checked while timing**, raw samples (``save_samples``: gzip
  JSON, no pickle) and **provenance** (with the **noise checks**) are kept; results whose
  checked provenance differs are not compared.
- No verdict before ``min_decisive_pairs`` block pairs (12 at 95 %): fewer are undecided.

See docs/bench.md for the statistics and their assumptions.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import statistics
from typing import Any

from ..errors import InputError
from ._compare import CHECKED_PROVENANCE_KEYS, RunComparison, check_comparable, compare_runs
from ._run import HARNESS_VERSION, BenchResult, SideSamples, run_bench, time_side
from ._stats import (
    Decision,
    Verdict,
    decide,
    format_ratio,
    hodges_lehmann_interval,
    min_decisive_pairs,
    min_pairs,
    min_samples_for,
    percentile,
)
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
    "min_decisive_pairs",
    "hodges_lehmann_interval",
    "amdahl_bound",
    "stage_amdahl",
    "save_samples",
    "load_samples",
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


def stage_amdahl(baseline: SideSamples, candidate: SideSamples, stage: str) -> dict[str, float]:
    """The Amdahl bound of an optimization of ``stage``, from measured stage times only.

    ``fraction`` is the baseline's median share of ``stage`` in its calls, ``stage_speedup`` the
    median ``stage`` time of the baseline over the candidate's (the stage's own speedup, not the
    end-to-end one), and ``bound = 1 / (1 - f + f / s)``: what the whole call would gain if
    only that stage changed. A measured end-to-end speedup above the bound means the candidate
    also changed another stage."""
    base = baseline.stages_s.get(stage)
    cand = candidate.stages_s.get(stage)
    if not base or not cand:
        raise InputError(
            f"stage {stage!r} was not timed on both sides",
            hint="time it with `with it.stage(...)` in both callables",
        )
    fraction = baseline.stage_fractions()[stage]
    cand_median = statistics.median(cand)
    if cand_median <= 0:
        raise InputError(f"stage {stage!r} of {candidate.name} took no measurable time")
    speedup = statistics.median(base) / cand_median
    return {
        "fraction": fraction,
        "stage_speedup": speedup,
        "bound": amdahl_bound(fraction, speedup),
    }


SAMPLES_FORMAT = "paritygate-bench-samples"


def save_samples(results: dict[str, BenchResult], path: str | os.PathLike[str]) -> None:
    """Every result's raw samples (``BenchResult.to_dict``: samples per call, block medians,
    stage times, block-pair ratios, looks) as gzip-compressed JSON (no pickle), so a reader can
    recompute every interval; reproducible bytes (no timestamp in the gzip header)."""
    from ..files import atomic_write_bytes

    payload = {
        "format": SAMPLES_FORMAT,
        "format_version": 1,
        "results": {name: result.to_dict() for name, result in results.items()},
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    atomic_write_bytes(path, gzip.compress(text.encode(), mtime=0))


def load_samples(path: str | os.PathLike[str]) -> dict[str, BenchResult]:
    """The results :func:`save_samples` wrote, by name."""
    from ..files import _read_bytes

    where = str(path)
    try:
        data = json.loads(gzip.decompress(_read_bytes(path)))
    except (OSError, EOFError, ValueError) as exc:
        raise InputError(f"not a gzip-compressed JSON samples file ({exc})", where=where) from None
    if not isinstance(data, dict) or data.get("format") != SAMPLES_FORMAT:
        raise InputError("not a paritygate benchmark samples file", where=where)
    return {
        name: BenchResult.from_dict(raw, where=f"{where}#{name}")
        for name, raw in (data.get("results") or {}).items()
    }


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

"""Benchmarks designed as experiments (seed 003), not as loops around a timer.

What this module enforces:

- Baseline and candidate run in **interleaved blocks** (ABAB..., with the order inside each block
  pair alternating: AB, BA, AB, ...) so that drift of the machine (heat, other load) hits both
  sides alike, and the analysis is **paired**: each block pair yields one ratio.
- **Cold** behaviour (load, first call / first compile) is timed apart from **warm** iterations,
  and warm-up iterations are never counted.
- **Stages** (prepare, build, synchronized compute, postprocess) are timed inside the *same*
  iterations as the end-to-end time; stage figures are never added up from independent medians.
  The fraction ``f`` of a stage is measured per iteration, which feeds the Amdahl bound
  ``1 / (1 - f + f / s)``.
- Every iteration ends with a **synchronization** of its output (``mx.eval``,
  ``torch.cuda.synchronize``, ``jax.block_until_ready`` through :mod:`paritygate.backends`), so
  graph building is never mistaken for compute.
- A percentile is only reported when there are enough samples for it (``n >= 10 / (1 - q)``:
  20 for p50, 200 for p95, 1000 for p99).
- An improvement **counts** only when the paired ratio's confidence interval clears the
  run-to-run variability measured on the baseline itself.
- **Raw samples are kept**, outputs are **checked while timing** (an optimization that changes
  the answer is not a speedup), memory is read **after warm-up**, and the **provenance** that was
  held constant (input hashes, shapes, sync method, device, ...) travels with the result.
  Results whose checked provenance keys differ refuse to be compared.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError, UserError
from .results import to_jsonable

__all__ = [
    "Iteration",
    "SideSamples",
    "BenchResult",
    "run_bench",
    "time_side",
    "amdahl_bound",
    "min_samples_for",
    "percentile",
    "input_fingerprint",
    "check_comparable",
    "CHECKED_PROVENANCE_KEYS",
]

# Provenance keys that must match for two benchmark results to be compared at all.
CHECKED_PROVENANCE_KEYS = (
    "source_revision",
    "model_revision",
    "dtype",
    "compile_flags",
    "input_sha256",
    "shapes",
    "batching",
    "sync",
    "device",
    "workload",
)


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


def amdahl_bound(fraction: float, speedup: float) -> float:
    """Overall speedup when a part taking ``fraction`` of the time gets ``speedup`` times faster."""
    if not 0 <= fraction <= 1:
        raise InputError(f"fraction must lie in [0, 1], got {fraction}")
    if speedup <= 0:
        raise InputError(f"speedup must be > 0, got {speedup}")
    return 1.0 / (1.0 - fraction + fraction / speedup)


def input_fingerprint(inputs: Any) -> str:
    """sha256 over the actual input arrays (dtype, shape and bytes), not over their description."""
    from .outputs import flatten_outputs

    digest = hashlib.sha256()
    for name, leaf in sorted(flatten_outputs(inputs).items()):
        import numpy as np

        array = np.ascontiguousarray(np.asarray(leaf))
        digest.update(name.encode())
        digest.update(str(array.dtype).encode())
        digest.update(str(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


class Iteration:
    """Handed to the benchmarked function: mark stages with ``with it.stage("compute"):``."""

    def __init__(self, sync: Callable[[Any], None]):
        self._sync = sync
        self.stages: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str, *, sync_result: Any = None) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            if sync_result is not None:
                self._sync(sync_result)
            self.stages[name] = self.stages.get(name, 0.0) + time.perf_counter() - start

    def sync(self, value: Any) -> Any:
        """Synchronize a lazy or asynchronous result inside a stage; returns it."""
        self._sync(value)
        return value


@dataclass
class SideSamples:
    """Raw samples of one side (baseline or candidate)."""

    name: str
    cold_s: float  # the first call, timed apart (load, first compile)
    end_to_end_s: list[float] = field(default_factory=list)
    stages_s: dict[str, list[float]] = field(default_factory=dict)
    block_medians_s: list[float] = field(default_factory=list)
    memory_after_warmup: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": len(self.end_to_end_s), "cold_s": self.cold_s}
        for q in (0.5, 0.9, 0.95, 0.99):
            if len(self.end_to_end_s) >= min_samples_for(q):
                out[f"p{int(q * 100)}_s"] = percentile(self.end_to_end_s, q)
        fractions = self.stage_fractions()
        if fractions:
            out["stage_fraction"] = fractions
        return out

    def stage_fractions(self) -> dict[str, float]:
        """Median over iterations of stage time / end-to-end time of that same iteration."""
        fractions = {}
        for name, values in self.stages_s.items():
            ratios = [v / e for v, e in zip(values, self.end_to_end_s) if e > 0]
            if ratios:
                fractions[name] = statistics.median(ratios)
        return fractions


@dataclass
class BenchResult:
    workload: str
    baseline: SideSamples
    candidate: SideSamples
    pair_ratios: list[float]  # candidate / baseline block-median ratio, one per block pair
    ratio_median: float
    ratio_ci: tuple[float, float]  # 95 % bootstrap interval of the median paired ratio
    baseline_variability: float  # relative spread of the baseline's own block medians
    speedup: float  # baseline / candidate = 1 / ratio_median
    improvement_counts: bool
    verdict: str
    provenance: dict[str, Any] = field(default_factory=dict)
    output_check: str = "not checked"

    def __bool__(self) -> bool:
        return self.improvement_counts

    def to_dict(self) -> dict[str, Any]:
        data = to_jsonable(self)
        data["baseline_summary"] = to_jsonable(self.baseline.summary())
        data["candidate_summary"] = to_jsonable(self.candidate.summary())
        data["format"] = "paritygate-bench-result"
        data["format_version"] = 1
        return data


def _default_sync(value: Any) -> None:
    from .backends import synchronize
    from .outputs import flatten_outputs

    if value is None:
        return
    try:
        leaves = flatten_outputs(value).values()
    except UserError:
        leaves = [value]
    for leaf in leaves:
        synchronize(leaf)


def _timed(fn: Callable[[Iteration], Any], sync: Callable[[Any], None]) -> tuple[float, dict, Any]:
    it = Iteration(sync)
    start = time.perf_counter()
    out = fn(it)
    sync(out)
    return time.perf_counter() - start, it.stages, out


def _relative_spread(values: list[float]) -> float:
    """(p90 - p10) / median: the run-to-run variability of block medians."""
    if len(values) < 2:
        return math.inf
    ordered = sorted(values)
    lo = ordered[max(0, round(0.1 * (len(ordered) - 1)))]
    hi = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    med = statistics.median(ordered)
    return (hi - lo) / med if med > 0 else math.inf


def _bootstrap_median_ci(values: list[float], seed: int = 0) -> tuple[float, float]:
    if len(values) < 3:
        return (-math.inf, math.inf)
    import numpy as np
    from scipy.stats import bootstrap

    res = bootstrap(
        (np.asarray(values),),
        np.median,
        confidence_level=0.95,
        n_resamples=2000,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def run_bench(
    baseline: Callable[[Iteration], Any],
    candidate: Callable[[Iteration], Any],
    *,
    workload: str,
    blocks: int = 10,
    block_size: int = 20,
    warmup: int = 5,
    sync: Callable[[Any], None] | None = None,
    check_outputs: Callable[[Any, Any], Any] | None = None,
    memory_probe: Callable[[], dict[str, float]] | None = None,
    provenance: dict[str, Any] | None = None,
) -> BenchResult:
    """Time ``candidate`` against ``baseline`` in interleaved blocks and analyse them as pairs.

    Both callables take an :class:`Iteration` (to mark stages) and return their output, which is
    synchronized before the clock stops. ``check_outputs(baseline_out, candidate_out)`` runs on
    the first iteration of every block pair; a falsy result or an exception aborts the bench
    (an optimization that changes the answer is not a speedup).
    """
    if blocks < 2 or block_size < 1 or warmup < 0:
        raise InputError("blocks must be >= 2, block_size >= 1 and warmup >= 0")
    sync = sync or _default_sync
    sides = {}
    for name, fn in (("baseline", baseline), ("candidate", candidate)):
        cold, _, _ = _timed(fn, sync)
        sides[name] = SideSamples(name=name, cold_s=cold)
    for _ in range(warmup):
        _timed(baseline, sync)
        _timed(candidate, sync)
    for name in sides:
        if memory_probe is not None:
            sides[name].memory_after_warmup = dict(memory_probe())
    fns = {"baseline": baseline, "candidate": candidate}
    checked = "not checked"
    for block in range(blocks):
        order = ("baseline", "candidate") if block % 2 == 0 else ("candidate", "baseline")
        first_outputs = {}
        for name in order:
            side = sides[name]
            times = []
            for i in range(block_size):
                elapsed, stages, out = _timed(fns[name], sync)
                times.append(elapsed)
                side.end_to_end_s.append(elapsed)
                for stage, value in stages.items():
                    side.stages_s.setdefault(stage, []).append(value)
                if i == 0:
                    first_outputs[name] = out
            side.block_medians_s.append(statistics.median(times))
        if check_outputs is not None:
            verdict = check_outputs(first_outputs["baseline"], first_outputs["candidate"])
            if not verdict:
                raise UserError(
                    f"bench {workload!r}: candidate output differs from baseline in block {block}",
                    hint="a changed answer is not a speedup; fix the candidate or its claim",
                )
            checked = f"checked in each of {blocks} blocks"
    base, cand = sides["baseline"], sides["candidate"]
    ratios = [c / b for b, c in zip(base.block_medians_s, cand.block_medians_s)]
    ratio_median = statistics.median(ratios)
    ci = _bootstrap_median_ci(ratios)
    variability = _relative_spread(base.block_medians_s)
    # A speedup counts when even the interval's pessimistic end beats the baseline's own spread.
    counts = ci[1] < 1.0 - variability
    regression = ci[0] > 1.0 + variability
    speedup = 1.0 / ratio_median if ratio_median > 0 else math.inf
    if counts:
        verdict = f"faster: {speedup:.3g}x (paired ratio CI {ci[0]:.3g}..{ci[1]:.3g} clears baseline spread {variability:.2%})"
    elif regression:
        verdict = f"slower: {speedup:.3g}x (paired ratio CI {ci[0]:.3g}..{ci[1]:.3g})"
    else:
        verdict = f"no measurable difference: {speedup:.3g}x within run-to-run variability {variability:.2%}"
    prov = dict(provenance or {})
    prov.setdefault("workload", workload)
    prov.setdefault("sync", getattr(sync, "__name__", "custom"))
    prov.setdefault(
        "design", f"{blocks} interleaved blocks x {block_size} iterations, {warmup} warm-up"
    )
    return BenchResult(
        workload=workload,
        baseline=base,
        candidate=cand,
        pair_ratios=ratios,
        ratio_median=ratio_median,
        ratio_ci=ci,
        baseline_variability=variability,
        speedup=speedup,
        improvement_counts=counts,
        verdict=verdict,
        provenance=prov,
        output_check=checked,
    )


def time_side(
    fn: Callable[[Iteration], Any],
    *,
    name: str,
    iterations: int,
    warmup: int = 5,
    sync: Callable[[Any], None] | None = None,
    check_output: Callable[[Any], Any] | None = None,
) -> SideSamples:
    """Time one side alone (a latency claim): cold call apart, warm-up uncounted, raw samples kept.

    ``check_output`` runs on the first warm iteration's output; a falsy result aborts.
    """
    if iterations < 1 or warmup < 0:
        raise InputError("iterations must be >= 1 and warmup >= 0")
    sync = sync or _default_sync
    cold, _, _ = _timed(fn, sync)
    side = SideSamples(name=name, cold_s=cold)
    for _ in range(warmup):
        _timed(fn, sync)
    for i in range(iterations):
        elapsed, stages, out = _timed(fn, sync)
        side.end_to_end_s.append(elapsed)
        for stage, value in stages.items():
            side.stages_s.setdefault(stage, []).append(value)
        if i == 0 and check_output is not None and not check_output(out):
            raise UserError(
                f"{name}: the output while timing differs from the output that was checked",
                hint="the code timed must be the code gated",
            )
    side.block_medians_s.append(statistics.median(side.end_to_end_s))
    return side


def check_comparable(a: dict[str, Any], b: dict[str, Any], keys=CHECKED_PROVENANCE_KEYS) -> None:
    """Refuse to compare two benchmark provenances whose checked keys differ."""
    differing = [
        f"{key}: {a.get(key)!r} vs {b.get(key)!r}"
        for key in keys
        if (key in a or key in b) and a.get(key) != b.get(key)
    ]
    if differing:
        raise UserError(
            "benchmark runs are not comparable; checked provenance differs: "
            + "; ".join(differing),
            hint="re-run both sides from the same source revision and workload",
        )

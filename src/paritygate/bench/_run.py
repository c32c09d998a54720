"""Running a comparison: sides, warm-up, interleaved blocks, sequential looks, the result."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError, UserError
from ..results import to_jsonable
from . import _stats, _timing
from ._stats import Verdict, format_ratio

__all__ = ["SideSamples", "BenchResult", "run_bench", "time_side", "HARNESS_VERSION", "resolve"]

# Bump when the timing loop or the decision rule changes: it keys the cached A/A thresholds.
HARNESS_VERSION = "3.0"  # 3.0: 12 pairs (13 at the first look) before any verdict
RESULT_FORMAT_VERSION = 2  # 1: verdict string, baseline-spread rule; 2: structured verdict
_BLOCK_TARGET_S = 0.02  # one side's block lasts about this long
_FIXED_WARMUP_CAP_S = 2.0  # warm-up bound when no budget is given


@dataclass
class SideSamples:
    """Raw samples of one side (baseline or candidate); times are seconds per call."""

    name: str
    cold_s: float  # the first call, timed apart (load, first compile)
    end_to_end_s: list[float] = field(default_factory=list)
    stages_s: dict[str, list[float]] = field(default_factory=dict)
    block_medians_s: list[float] = field(default_factory=list)
    memory_after_warmup: dict[str, float] = field(default_factory=dict)
    loops: int = 1  # calls per sample
    warmup_samples: int = 0
    device_s: list[float] = field(default_factory=list)  # CUDA event time per call, per sample

    def summary(self) -> dict[str, Any]:
        from ._stats import min_samples_for, percentile

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
    """A paired comparison's answer and its evidence.

    ``verdict`` is a :class:`Verdict`; ``ratio`` is candidate time / baseline time (Hodges–Lehmann
    estimate over the block pairs) with its interval ``ratio_ci`` at level ``confidence``.
    ``bool(result)`` is True when the candidate is shown *not slower* than the threshold allows
    (``faster`` or ``equivalent``); ``slower`` and ``inconclusive`` are False, so
    ``assert run_bench(...)`` is a regression check that never passes on missing evidence."""

    workload: str
    verdict: Verdict
    ratio: float
    ratio_ci: tuple[float, float]
    confidence: float
    threshold: float
    threshold_source: str
    blocks: int  # block pairs used
    more_blocks: int | None  # inconclusive: block pairs likely needed in addition
    stop_reason: str
    baseline: SideSamples
    candidate: SideSamples
    pair_ratios: list[float]  # candidate / baseline block-median ratio, one per block pair
    looks: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    output_check: str = "not checked"

    @property
    def speedup(self) -> float:
        return 1.0 / self.ratio if self.ratio > 0 else math.inf

    @property
    def faster(self) -> bool:
        return self.verdict is Verdict.FASTER

    @property
    def slower(self) -> bool:
        return self.verdict is Verdict.SLOWER

    def __bool__(self) -> bool:
        return self.verdict in (Verdict.FASTER, Verdict.EQUIVALENT)

    def describe(self) -> str:
        """One line: '<verdict>: 1.19x slower (95% CI 1.15x..1.22x slower; threshold ...)'."""
        lo, hi = self.ratio_ci
        interval = (
            f"{self.confidence:.4g} CI {format_ratio(lo)} .. {format_ratio(hi)}"
            if self.confidence > 0
            else "no interval yet"
        )
        text = (
            f"{self.verdict.value}: {format_ratio(self.ratio)} ({interval}; "
            f"threshold {self.threshold:.2%} {self.threshold_source}; "
            f"{self.blocks} block pairs, stopped: {self.stop_reason})"
        )
        if self.verdict is Verdict.INCONCLUSIVE:
            text += (
                f"; about {self.more_blocks} more block pairs would likely decide"
                if self.more_blocks
                else "; more block pairs are unlikely to decide (the estimate is at the threshold)"
            )
        return text

    def to_dict(self) -> dict[str, Any]:
        data = to_jsonable(self)
        data["verdict"] = self.verdict.value
        data["summary"] = self.describe()
        data["baseline_summary"] = to_jsonable(self.baseline.summary())
        data["candidate_summary"] = to_jsonable(self.candidate.summary())
        data["format"] = "paritygate-bench-result"
        data["format_version"] = RESULT_FORMAT_VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "result") -> BenchResult:
        from ..results import from_jsonable_float

        if data.get("format") != "paritygate-bench-result":
            raise InputError("not a paritygate benchmark result", where=where)
        if data.get("format_version") != RESULT_FORMAT_VERSION:
            raise InputError(
                f"benchmark result format version {data.get('format_version')!r} is not "
                f"{RESULT_FORMAT_VERSION} (tainted: re-run it with this version)",
                where=where,
            )
        try:
            sides = {}
            for key in ("baseline", "candidate"):
                raw = dict(data[key])
                sides[key] = SideSamples(**{k: raw[k] for k in raw if k in _SIDE_FIELDS})
            return cls(
                workload=data["workload"],
                verdict=Verdict(data["verdict"]),
                ratio=from_jsonable_float(data["ratio"]),
                ratio_ci=tuple(from_jsonable_float(x) for x in data["ratio_ci"]),
                confidence=data["confidence"],
                threshold=data["threshold"],
                threshold_source=data["threshold_source"],
                blocks=data["blocks"],
                more_blocks=data.get("more_blocks"),
                stop_reason=data["stop_reason"],
                baseline=sides["baseline"],
                candidate=sides["candidate"],
                pair_ratios=[from_jsonable_float(x) for x in data["pair_ratios"]],
                looks=data.get("looks", []),
                warnings=data.get("warnings", []),
                provenance=data.get("provenance", {}),
                output_check=data.get("output_check", "not checked"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"benchmark result is incomplete ({exc})", where=where) from None


_SIDE_FIELDS = set(SideSamples.__dataclass_fields__)


def resolve(target: Any, what: str = "benchmarked callable") -> Callable[..., Any]:
    """A callable, or ``"module:attribute"`` imported by name."""
    if callable(target):
        return target
    if isinstance(target, str) and ":" in target:
        module_name, _, attr = target.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise InputError(f"cannot import {what} {target!r}: {exc}") from None
        if not callable(obj):
            raise InputError(f"{what} {target!r} is not callable")
        return obj
    raise InputError(f"{what} must be a callable or 'module:attribute', got {target!r}")


class _Side:
    """One side timed in this process."""

    def __init__(self, name: str, fn: Callable[..., Any], clock: str = "wall"):
        self.name = name
        self.fn = fn
        self.clock_name = clock
        self.clock = None if clock == "wall" else _timing.CLOCKS[clock]  # None: perf_counter
        self.staged = _timing.takes_iteration(fn)
        self.sync: Callable[[Any], None] | None = None
        self.loops = 1
        self.cuda = False  # torch CUDA outputs: CUDA events next to the wall clock
        self.flush: Callable[[], None] | None = None
        self.device_times: list[float] = []

    def call(self) -> Any:
        return self.fn(_timing.Iteration(self.sync)) if self.staged else self.fn()

    def cold(self, sync: Any) -> tuple[float, Any, str]:
        start = time.perf_counter()
        out = self.call()
        self.sync, how = _timing.plan_sync(out, sync)
        if self.sync is not None:
            self.sync(out)
        elapsed = time.perf_counter() - start
        if self.clock_name == "cpu" and (self.sync is not None or self.staged):
            what = "stage timing" if self.staged else f"outputs synchronized by {how}"
            raise InputError(
                f"clock='cpu' cannot time {self.name}: {what} needs the wall clock "
                "(CPU time does not count waiting for a device or a lazy graph)",
                hint="use clock='wall' for this benchmark",
            )
        self.cuda = "torch.cuda.synchronize" in how and not self.staged
        if self.cuda:
            how += " (CUDA events and wall clock)"
        return elapsed, out, how

    def checked_output(self) -> Any:
        out = self.call()
        if self.sync is not None:
            self.sync(out)
        return out

    def take(self, count: int) -> tuple[list[float], list[dict[str, float]] | None]:
        if self.staged:
            return _timing.sample_stages(self.fn, self.sync, count)
        if self.cuda:
            wall, device = _timing.sample_cuda(self.fn, self.loops, count, self.flush)
            self.device_times.extend(device)
            return wall, None
        if self.flush is not None:
            out: list[float] = []
            for _ in range(count):
                self.flush()
                out.extend(_timing.sample(self.fn, self.sync, self.loops, 1, self.clock))
            return out, None
        return _timing.sample(self.fn, self.sync, self.loops, count, self.clock), None

    def per_call(self) -> float:
        if self.staged:
            return statistics.median(_timing.sample_stages(self.fn, self.sync, 3)[0])
        return statistics.median(_timing.sample(self.fn, self.sync, 1, 5, self.clock))

    def calibrate(self, overhead: float) -> int:
        return _timing.calibrate_loops(self.fn, self.sync, overhead, clock=self.clock)[0]

    def cpu_share(self) -> float:
        return _timing.cpu_share(self.call, self.loops)

    count = 1  # processes this side runs in

    def select(self, index: int) -> None:
        pass

    def set_loops(self, loops: int) -> None:
        self.loops = loops

    def close(self) -> None:
        pass


class _WorkerSide:
    """One side run in ``count`` fresh worker processes; block pairs rotate over them."""

    _MODULE = "paritygate.bench._worker"

    def __init__(self, name: str, target: str, count: int, clock: str = "wall"):
        from concurrent.futures import ThreadPoolExecutor

        from ..workers import Worker

        self.name = name
        self.target = target
        self.count = count
        self.clock_name = clock
        self.loops = 1
        self.sync = None
        self.staged = False
        self._current = 0
        with ThreadPoolExecutor(count) as starter:
            self.workers = list(starter.map(lambda _: Worker(), range(count)))

    def _call(self, fn: str, *args: Any) -> Any:
        return self.workers[self._current].call(f"{self._MODULE}:{fn}", *args)

    def cold(self, sync: Any) -> tuple[float, Any, str]:
        if callable(sync):
            raise InputError("a custom sync callable cannot run in worker processes")
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.count) as pool:
            loaded = list(
                pool.map(
                    lambda w: w.call(
                        f"{self._MODULE}:load", self.name, self.target, sync, self.clock_name
                    ),
                    self.workers,
                )
            )
        self.staged = loaded[0]["staged"]
        return loaded[0]["cold_s"], self.checked_output(), loaded[0]["sync"]

    def checked_output(self) -> Any:
        import base64
        import io

        import numpy as np

        data = base64.b64decode(self._call("output", self.name))
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}

    def take(self, count: int) -> tuple[list[float], list[dict[str, float]] | None]:
        answer = self._call("take", self.name, count)
        return answer["times"], answer["stages"]

    def per_call(self) -> float:
        return self._call("per_call", self.name)

    def calibrate(self, overhead: float) -> int:
        return int(self._call("calibrate", self.name, overhead)[0])

    def cpu_share(self) -> float:
        return float(self._call("cpu_share", self.name))

    def overhead(self) -> float:
        return float(self._call("overhead", self.clock_name))

    def select(self, index: int) -> None:
        self._current = index % self.count

    def set_loops(self, loops: int) -> None:
        self.loops = loops
        for i in range(self.count):
            self.select(i)
            self._call("set_loops", self.name, loops)
        self.select(0)

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


DEFAULT_PROCESSES = 4


def plan_processes(
    baseline: Any, candidate: Any, processes: int | None, sync: Any
) -> tuple[int, str | None, str | None]:
    """(processes per side, baseline name, candidate name): 0 means in this process.

    Default: worker processes when both sides can be imported by name (and no custom sync
    callable is given); in-process otherwise (closures, lambdas, lazy frameworks' objects)."""
    from ..workers import importable_name

    names = importable_name(baseline), importable_name(candidate)
    if processes is None:
        usable = all(names) and not callable(sync)
        return (DEFAULT_PROCESSES if usable else 0), names[0], names[1]
    if processes < 0:
        raise InputError(f"processes must be >= 0, got {processes}")
    if processes and not all(names):
        which = [side for side, n in zip(("baseline", "candidate"), names) if not n]
        raise InputError(
            f"processes={processes}: the {' and '.join(which)} cannot be imported by name in a "
            "fresh process",
            hint="pass 'module:function' or a module-level function, or processes=0",
        )
    return processes, names[0], names[1]


def make_side(name: str, target: Any, processes: int, import_name: str | None, clock: str = "wall"):
    if processes:
        assert import_name is not None
        return _WorkerSide(name, import_name, processes, clock)
    return _Side(name, resolve(target), clock)


def _record(side: SideSamples, times: list[float], stages: list[dict[str, float]] | None) -> None:
    side.end_to_end_s.extend(times)
    if stages:
        for st in stages:
            for name, value in st.items():
                side.stages_s.setdefault(name, []).append(value)
    side.block_medians_s.append(statistics.median(times))


@dataclass
class _Design:
    budget_s: float | None
    blocks: int | None  # fixed number of block pairs (or the cap in budget mode)
    block_size: int | None
    min_warmup: int
    alpha: float


def _check(check_outputs, base_out, cand_out, workload, where: str) -> None:
    if check_outputs is None:
        return
    try:
        ok = check_outputs(base_out, cand_out)
    except Exception as exc:
        raise UserError(
            f"bench {workload!r}: checking the outputs {where} raised {type(exc).__name__}: {exc}",
            hint="a changed answer is not a speedup",
        ) from None
    if not ok:
        raise UserError(
            f"bench {workload!r}: candidate output differs from baseline {where}",
            hint="a changed answer is not a speedup; fix the candidate or its claim",
        )


def _warm_up(sides: list[_Side], cap_s: float, min_samples: int, tolerance: float = 0.02) -> int:
    """Interleaved windows of samples until each side's rolling median settles (or cap_s)."""
    window = 5
    medians: list[list[float]] = [[] for _ in sides]
    start = time.perf_counter()
    taken = 0
    while True:
        for i, side in enumerate(sides):
            times, _ = side.take(window)
            medians[i].append(statistics.median(times))
        taken += window
        done = taken >= min_samples and all(_timing.settled(m, tolerance) for m in medians)
        if done or time.perf_counter() - start > cap_s:
            return taken


def _measure(
    base: _Side,
    cand: _Side,
    *,
    workload: str,
    design: _Design,
    threshold: float | None,
    sync: Any,
    check_outputs: Callable[[Any, Any], Any] | None,
    memory_probe: Callable[[], dict[str, float]] | None,
    flush: Callable[[], None] | bool | None = None,
) -> dict[str, Any]:
    """Time both sides in interleaved blocks; stop on a decisive look, the budget or the blocks.

    The budget covers warm-up and blocks; the cold calls (loading, first compile, starting
    worker processes) and the loop calibration come before it."""
    cold_b, out_b, how_b = base.cold(sync)
    cold_c, out_c, how_c = cand.cold(sync)
    _check(check_outputs, out_b, out_c, workload, "on the first call")
    if flush is not None:
        for side in (base, cand):
            if not isinstance(side, _Side):
                raise InputError("flushing caches between samples needs processes=0")
            if callable(flush):
                side.flush = flush
            elif side.cuda:
                side.flush = _timing.l2_flusher()
            else:
                raise InputError(
                    "flush=True evicts the GPU's L2 cache and needs torch CUDA outputs",
                    hint="pass a callable to flush something else between samples",
                )
    sides = {
        "baseline": SideSamples(name=base.name, cold_s=cold_b),
        "candidate": SideSamples(name=cand.name, cold_s=cold_c),
    }
    clock = getattr(base, "clock_name", "wall")
    if isinstance(base, _Side):
        overhead = _timing.harness_overhead(clock=base.clock)
    else:
        overhead = base.overhead()  # the loop's own cost, read where the samples are taken
    warnings: list[str] = []
    loops = 1
    if not (base.staged or cand.staged):
        for side in (base, cand):
            loops = max(loops, side.calibrate(overhead))
    elif min(base.per_call(), cand.per_call()) < 100 * overhead:
        warnings.append(
            "a call is shorter than 100x the harness overhead, and stage timing needs single calls"
        )
    base.set_loops(loops)
    cand.set_loops(loops)
    shares = {}
    if clock == "cpu":
        for role, side in (("baseline", base), ("candidate", cand)):
            shares[role] = share = side.cpu_share()
            if share > 1.1:
                warnings.append(
                    f"clock='cpu' adds up every thread's CPU time: {side.name} used "
                    f"{share:.2f}x its wall time (several threads), so its ratio is CPU work, "
                    "not latency"
                )
    started = time.perf_counter()
    cap = _FIXED_WARMUP_CAP_S if design.budget_s is None else 0.1 * design.budget_s
    processes = max(base.count, cand.count)
    warm = 0
    for index in range(processes):  # every process warms up (each is fresh)
        base.select(index)
        cand.select(index)
        warm += _warm_up([base, cand], cap / processes, design.min_warmup)
    for side in (base, cand):
        if isinstance(side, _Side):
            side.device_times.clear()  # CUDA event times of the blocks only
    for key in ("baseline", "candidate"):
        sides[key].loops = loops
        sides[key].warmup_samples = warm
        if memory_probe is not None:
            sides[key].memory_after_warmup = dict(memory_probe())
    sample_s = max(base.per_call(), cand.per_call()) * loops
    block_size = design.block_size or min(200, max(5, math.ceil(_BLOCK_TARGET_S / sample_s)))
    pair_s_estimate = 2 * block_size * sample_s
    ratios: list[float] = []
    logs: list[float] = []
    looks: list[dict[str, Any]] = []
    look_index = 0
    schedule = set()
    if design.budget_s is not None:
        schedule = set(_stats.look_schedule(design.alpha, design.blocks or 10**7))
    decision = None
    stop = ""
    checks = 0
    pair = 0
    while True:
        base.select(pair)
        cand.select(pair)
        order = ("baseline", "candidate") if pair % 2 == 0 else ("candidate", "baseline")
        pair_start = time.perf_counter()
        medians = {}
        for key in order:
            side = base if key == "baseline" else cand
            times, stages = side.take(block_size)
            _record(sides[key], times, stages)
            medians[key] = sides[key].block_medians_s[-1]
        pair_s_estimate = time.perf_counter() - pair_start
        if check_outputs is not None:
            _check(
                check_outputs,
                base.checked_output(),
                cand.checked_output(),
                workload,
                f"in block pair {pair}",
            )
            checks += 1
        ratio = medians["candidate"] / medians["baseline"]
        ratios.append(ratio)
        logs.append(math.log(ratio))
        pair += 1
        elapsed = time.perf_counter() - started
        if design.budget_s is None:
            if pair >= (design.blocks or 0):
                stop = f"the {pair} block pairs asked for ran"
                break
            continue
        out_of_budget = elapsed + pair_s_estimate > design.budget_s
        capped = design.blocks is not None and pair >= design.blocks
        if threshold is not None and (pair in schedule or out_of_budget or capped):
            alpha_j = _stats.look_alpha(design.alpha, look_index)
            if pair >= _stats.min_decisive_pairs(alpha_j):
                decision = _stats.decide(logs, threshold, alpha_j)
                looks.append(
                    {
                        "pairs": pair,
                        "alpha": alpha_j,
                        "verdict": decision.verdict.value,
                        "ratio": decision.ratio,
                        "ratio_ci": list(decision.ratio_ci),
                        "elapsed_s": elapsed,
                    }
                )
                look_index += 1
                if decision.verdict is not Verdict.INCONCLUSIVE:
                    stop = f"decisive at look {look_index}"
                    break
        if out_of_budget:
            stop = f"budget of {design.budget_s:g} s spent"
            break
        if capped:
            stop = f"the cap of {design.blocks} block pairs reached"
            break
    for key, side in (("baseline", base), ("candidate", cand)):
        if isinstance(side, _Side) and side.device_times:
            sides[key].device_s = list(side.device_times)
    return {
        "sides": sides,
        "ratios": ratios,
        "logs": logs,
        "looks": looks,
        "decision": decision,
        "stop": stop,
        "warnings": warnings,
        "design": {
            "loops_per_sample": loops,
            "samples_per_block": block_size,
            "warmup_samples_per_side": warm,
            "harness_overhead_s": overhead,
            "clock": clock,
            "cpu_over_wall": shares,
            "sync": how_b if how_b == how_c else f"{how_b} / {how_c}",
            "processes": "in-process"
            if processes == 1 and isinstance(base, _Side)
            else f"{processes} worker processes per side, block pairs rotating over them",
            "block_pairs": pair,
            "elapsed_s": time.perf_counter() - started,
            "alpha": design.alpha,
            "looks": "alpha spent over looks" if design.budget_s is not None else "one look",
        },
        "output_check": f"checked on the first call and after each of {checks} block pairs"
        if check_outputs is not None
        else "not checked",
    }


def _validate(budget, blocks, alpha, threshold) -> None:
    if not 0 < alpha < 0.5:
        raise InputError(f"alpha must lie in (0, 0.5), got {alpha}")
    if budget is not None and not budget > 0:
        raise InputError(f"budget must be > 0 seconds, got {budget}")
    if threshold is not None and not (isinstance(threshold, (int, float)) and threshold > 0):
        raise InputError(
            f"threshold must be a change > 0 (for example 0.02 for 2%), got {threshold!r}",
            hint="a change of 0 cannot be told from noise; leave it unset to calibrate A/A",
        )
    if blocks is not None and budget is None:
        needed = _stats.min_pairs(alpha)
        if blocks < needed:
            raise InputError(
                f"blocks={blocks}: a {1 - alpha:.0%} interval on paired ratios needs at least "
                f"{needed} block pairs",
                hint=f"pass blocks >= {needed} or a time budget",
            )


def run_bench(
    baseline: Callable[..., Any] | str,
    candidate: Callable[..., Any] | str,
    *,
    workload: str,
    budget: float | None = None,
    blocks: int | None = None,
    threshold: float | None = None,
    alpha: float = _stats.DEFAULT_ALPHA,
    block_size: int | None = None,
    warmup: int = 0,
    sync: Callable[[Any], None] | bool | None = None,
    check_outputs: Callable[[Any, Any], Any] | None = None,
    memory_probe: Callable[[], dict[str, float]] | None = None,
    provenance: dict[str, Any] | None = None,
    names: tuple[str, str] = ("baseline", "candidate"),
    processes: int | None = None,
    flush: Callable[[], None] | bool | None = None,
    noise: bool = True,
    recalibrate: bool = False,
    cache_dir: str | None = None,
    clock: str = "wall",
) -> BenchResult:
    """Time ``candidate`` against ``baseline`` in interleaved blocks and decide with the rule.

    Sides are plain callables (``fn()``), callables taking one :class:`Iteration` (to time
    stages), or ``"module:attribute"`` names. With ``budget`` (seconds) block pairs run until a
    look is decisive or the budget is spent; with only ``blocks``, exactly that many run and are
    analysed once (at least :func:`min_pairs` of them). Neither: a 10 s budget.

    ``threshold`` is the smallest relative change worth calling (0.03 = 3 %); unset, it is the
    A/A threshold of this machine and workload (cached; measured on the first run).
    ``check_outputs(baseline_out, candidate_out)`` runs on the first call and after every block
    pair, outside the timed region; a falsy result or an exception aborts (in worker processes
    it receives each side's outputs flattened to numpy arrays, ``{name: array}``).

    ``processes``: worker processes per side (block pairs rotate over them, each fresh, as pyperf
    does, to average out memory layout and allocator state); ``0`` runs both sides in this
    process; unset, 4 when both sides can be imported by name, else in-process.

    Torch CUDA outputs are timed with CUDA events next to the synchronized wall clock (the
    decision uses the wall clock; event times per call are kept in ``SideSamples.device_s``).
    ``flush=True`` evicts the GPU's L2 cache before every sample (outside the timings); a
    callable flushes whatever it flushes.

    ``clock``: ``"wall"`` (elapsed time, the default) or ``"cpu"`` (the process's CPU time, which
    leaves out time spent preempted by other work on a busy machine; for CPU-bound code whose
    outputs need no synchronization; a side using several threads is flagged in ``warnings``).
    """
    if clock not in _timing.CLOCKS:
        raise InputError(f"clock must be one of {sorted(_timing.CLOCKS)}, got {clock!r}")
    from ..execution import timing_alone

    timing_alone(f"benchmark {workload!r}")  # never beside other units (docs/scale-out.md)
    if budget is None and blocks is None:
        budget = 10.0
    _validate(budget, blocks, alpha, threshold)
    _stats.prepare(alpha)  # scipy and the first looks' critical values, before any clock runs
    count, base_name, cand_name = plan_processes(baseline, candidate, processes, sync)
    mode = f"{count} processes" if count else "in-process"
    if clock != "wall":
        mode += f", {clock} clock"
    from . import _noise

    before = _noise.snapshot() if noise else {}
    if threshold is None:
        threshold, source = aa_threshold(
            baseline,
            workload=workload,
            budget=budget,
            blocks=blocks,
            alpha=alpha,
            sync=sync,
            recalibrate=recalibrate,
            cache_dir=cache_dir,
            processes=count,
            import_name=base_name,
            clock=clock,
            noise_reading=before if noise else None,
        )
    else:
        source = "(stated)"
    design = _Design(budget, blocks, block_size, warmup, alpha)
    base = cand = None
    try:
        base = make_side(names[0], baseline, count, base_name, clock)
        cand = make_side(names[1], candidate, count, cand_name, clock)
        run = _measure(
            base,
            cand,
            workload=workload,
            design=design,
            threshold=threshold,
            sync=sync,
            check_outputs=check_outputs,
            memory_probe=memory_probe,
            flush=flush,
        )
    finally:
        for side in (base, cand):
            if side is not None:
                side.close()
    after = _noise.snapshot() if noise else {}
    logs = run["logs"]
    decision = run["decision"]
    final_alpha = alpha if budget is None else None
    if decision is None or (budget is None):
        if budget is None:
            decision = _stats.decide(logs, threshold, alpha)
        else:
            needed = _stats.min_decisive_pairs(_stats.look_alpha(alpha, 0))
            decision = _inconclusive(logs, threshold, needed)
    warnings = list(run["warnings"])
    for label, reading in (("before", before), ("after", after)):
        for reason in _noise.unstable_reasons(reading):
            warnings.append(f"unstable ({label} the run): {reason}")
    prov = dict(provenance or {})
    prov.setdefault("workload", workload)
    prov.setdefault("sync", run["design"]["sync"])
    prov["design"] = run["design"]
    prov["harness_version"] = HARNESS_VERSION
    prov["mode"] = mode
    if noise:
        from ..provenance import machine_facts

        prov["machine"] = machine_facts()
        prov["noise"] = {"before": before, "after": after}
    stop = run["stop"]
    if final_alpha is None and decision.verdict is Verdict.INCONCLUSIVE and not run["looks"]:
        first = _stats.min_decisive_pairs(_stats.look_alpha(alpha, 0))
        stop += f" before the first look's {first} pairs"
    elif final_alpha is not None and len(logs) < _stats.min_decisive_pairs(alpha):
        stop += f"; undecided: a verdict needs {_stats.min_decisive_pairs(alpha)} block pairs"
    return BenchResult(
        workload=workload,
        verdict=decision.verdict,
        ratio=decision.ratio,
        ratio_ci=decision.ratio_ci,
        confidence=decision.confidence,
        threshold=threshold,
        threshold_source=source,
        blocks=len(logs),
        more_blocks=decision.more_pairs,
        stop_reason=stop,
        baseline=run["sides"]["baseline"],
        candidate=run["sides"]["candidate"],
        pair_ratios=run["ratios"],
        looks=run["looks"],
        warnings=warnings,
        provenance=prov,
        output_check=run["output_check"],
    )


def _inconclusive(logs: list[float], threshold: float, needed: int) -> _stats.Decision:
    """The budget ended before the first look had its pairs: no interval, no call."""
    ratio = math.exp(statistics.median(logs)) if logs else math.nan
    return _stats.Decision(
        verdict=Verdict.INCONCLUSIVE,
        ratio=ratio,
        ratio_ci=(0.0, math.inf),
        confidence=0.0,
        threshold=threshold,
        pairs=len(logs),
        more_pairs=needed - len(logs),
    )


def time_side(
    fn: Callable[..., Any],
    *,
    name: str,
    iterations: int,
    warmup: int = 5,
    sync: Callable[[Any], None] | bool | None = None,
    check_output: Callable[[Any], Any] | None = None,
) -> SideSamples:
    """Time one side alone (a latency claim): one call per sample (percentiles are of calls),
    cold call apart, warm-up uncounted, raw samples kept. ``check_output`` runs on an untimed
    call after warm-up; a falsy result aborts."""
    if iterations < 1 or warmup < 0:
        raise InputError("iterations must be >= 1 and warmup >= 0")
    from ..execution import timing_alone

    timing_alone(f"timing {name!r}")  # never beside other units (docs/scale-out.md)
    side = _Side(name, resolve(fn))
    cold, _, _ = side.cold(sync)
    samples = SideSamples(name=name, cold_s=cold, warmup_samples=warmup)
    if warmup:
        side.take(warmup)
    if check_output is not None and not check_output(side.checked_output()):
        raise UserError(
            f"{name}: the output while timing differs from the output that was checked",
            hint="the code timed must be the code gated",
        )
    times, stages = side.take(iterations)
    _record(samples, times, stages)
    return samples


# --------------------------------------------------------------------------------------------
# The default effect threshold: what A/A pairs on this machine and workload show.
#
# Seed 003 asks that a change count only when it exceeds the run-to-run variability the pairing
# leaves. Here that is measured directly: the baseline is run against itself (A/A) with the same
# harness, and the threshold is the largest A/A shift the data cannot exclude at the run's level,
# ``max(|lo|, |hi|)`` of the A/A interval, and never below 0.5 %. It is cached per machine
# (hardware facts), workload name, harness version and level, never per source revision: the
# revision under test must not move its own yardstick.


FLOOR = 0.005  # no shared machine resolves less than 0.5 % between two identical sides


def cache_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    base = cache_dir or os.environ.get("PARITYGATE_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "paritygate"
    return root / "bench-aa-thresholds.json"


def _key(workload: str, alpha: float, mode: str, load: str) -> tuple[str, dict[str, Any]]:
    from ..provenance import machine_facts

    facts = machine_facts()
    basis = {
        "machine": {k: facts.get(k) for k in ("system", "machine", "cpu", "cpu_count", "hostname")},
        "gpu": facts.get("gpu"),
        "workload": workload,
        "harness_version": HARNESS_VERSION,
        "alpha": alpha,
        "mode": mode,
        "load": load,
    }
    text = json.dumps(basis, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16], basis


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}  # an unreadable cache is recomputed, never trusted
    return data if isinstance(data, dict) and data.get("format_version") == 1 else {}


def aa_threshold(
    baseline: Any,
    *,
    workload: str,
    budget: float | None,
    blocks: int | None,
    alpha: float,
    sync: Any = None,
    recalibrate: bool = False,
    cache_dir: str | None = None,
    processes: int = 0,
    import_name: str | None = None,
    clock: str = "wall",
    noise_reading: dict[str, Any] | None = None,
) -> tuple[float, str]:
    """(threshold, where it came from): cached, or measured now by an A/A run of ``baseline``.

    The cache is keyed by the load class of ``noise_reading`` (the noise check taken before the
    run, :func:`paritygate.bench._noise.load_class`): a threshold measured on a quiet machine is
    not reused for a busy run, nor the other way round."""
    from ._noise import load_class

    mode = f"{processes} processes" if processes else "in-process"
    if clock != "wall":
        mode += f", {clock} clock"
    path = cache_path(cache_dir)
    load = load_class(noise_reading or {})
    key, basis = _key(workload, alpha, mode, load)
    cache = _load(path)
    entry = (cache.get("entries") or {}).get(key)
    if entry and not recalibrate:
        return float(entry["threshold"]), (
            f"(A/A on this machine, {load}, {entry['blocks']} block pairs, {entry['date']}, cached)"
        )
    # the calibration runs once per machine and workload: give it at least 20 s so that its own
    # interval (which bounds the threshold) is narrow
    design = _Design(None if budget is None else max(budget, 20.0), blocks, None, 0, alpha)
    sides = []
    try:
        for name in ("A", "A'"):  # the same baseline twice; in workers, separate processes
            sides.append(make_side(name, baseline, processes, import_name, clock))
        run = _measure(
            sides[0],
            sides[1],
            workload=f"{workload} (A/A)",
            design=design,
            threshold=None,
            sync=sync,
            check_outputs=None,
            memory_probe=None,
        )
    finally:
        for side in sides:
            side.close()
    logs = run["logs"]
    needed = _stats.min_pairs(alpha)
    if len(logs) < needed:
        raise InputError(
            f"the A/A calibration of {workload!r} got {len(logs)} block pairs; "
            f"its interval needs {needed}",
            hint="raise the budget, or state the smallest change worth calling (threshold)",
        )
    _, ci = _stats.hodges_lehmann_interval(logs, alpha)
    assert ci is not None
    shift = max(abs(ci[0]), abs(ci[1]))
    threshold = max(math.expm1(shift), FLOOR)
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    entries = dict(cache.get("entries") or {})
    entries[key] = {
        "threshold": threshold,
        "blocks": len(logs),
        "ratio_ci": [math.exp(ci[0]), math.exp(ci[1])],
        "date": date,
        "basis": basis,
        "noise": noise_reading or {},
    }
    try:
        from ..files import atomic_write_bytes

        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"format": "paritygate-bench-aa", "format_version": 1, "entries": entries}
        atomic_write_bytes(path, json.dumps(payload, indent=1).encode())
    except OSError:
        pass  # an unwritable cache only costs the next run a calibration
    return threshold, f"(A/A on this machine, {load}, {len(logs)} block pairs, {date})"

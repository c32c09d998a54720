"""The paired oracle: baseline and candidate back to back in one process.

Within one process, two runs of the same numerical path agree byte for byte on every framework
paritygate supports, so byte equality is a trustworthy no-op oracle here where a stored golden
file is not (the file also records the script that produced it). One *order* is three runs:

* ``forward``: baseline -> candidate -> baseline again. Check (a): the candidate equals the first
  baseline. Check (b): the second baseline equals the first, which catches state the candidate
  leaked (a callback left registered, a proxy or marker left installed, a patched method).
* ``reversed``: candidate -> baseline -> candidate again. Check (a): the first candidate equals
  the baseline, which catches a candidate that only matches after the baseline warmed the
  process up. Check (b): the second candidate equals the first.

Without a tolerance (a no-op configuration) every check is byte equality: same dtype, same shape,
the same bytes (NaN payloads and signed zeros included). With a tolerance, check (a) uses that
metric through :func:`paritygate.compare.compare`, while check (b) stays byte equality: it
compares two runs of one unchanged path. With ``check_a=False`` only check (b) runs and, with
``keep_outputs=True``, the host copies of every run stay on the result, so a caller (the gate)
can evaluate check (a) with a claim's own metric and scope (per edge, per output, SSIM ...).
Lazy results are evaluated inside each run (``mx.eval``, ``block_until_ready``, CUDA
synchronization) so a run's wall time is its real compute time; the host copies and comparisons
are timed apart and reported as the oracle's overhead.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ._dtypes import is_ml_float
from ._host import flatten, synchronize_tree, to_numpy
from .drift import check_input_after_run
from .equivalence import evaluate_claim
from .errors import InputError, RunFailure
from .results import ClaimVerdict, Failure, GateResult, Tolerance, to_jsonable
from .runners import make_runner
from .spec import Claim, Spec

__all__ = [
    "paired",
    "PairedResult",
    "PairedCheck",
    "OutputDifference",
    "RunRecord",
    "ORDERS",
    "byte_differences",
]

# order -> the three runs as (side, role); checks name runs by role.
ORDERS: dict[str, tuple[tuple[str, str], ...]] = {
    "forward": (
        ("baseline", "baseline-before"),
        ("candidate", "candidate"),
        ("baseline", "baseline-after"),
    ),
    "reversed": (
        ("candidate", "candidate-before"),
        ("baseline", "baseline"),
        ("candidate", "candidate-after"),
    ),
}
# order -> check -> (actual role, expected role)
_CHECKS: dict[str, dict[str, tuple[str, str]]] = {
    "forward": {"a": ("candidate", "baseline-before"), "b": ("baseline-after", "baseline-before")},
    "reversed": {
        "a": ("candidate-before", "baseline"),
        "b": ("candidate-after", "candidate-before"),
    },
}


@dataclass
class RunRecord:
    """One run: which order and position, which side, and its wall time (lazy work included)."""

    order: str
    position: int
    side: str  # "baseline" | "candidate"
    role: str  # e.g. "baseline-after"
    wall_s: float


@dataclass
class OutputDifference:
    """How one output differs between two runs.

    ``reason`` is ``"bytes"`` (same dtype and shape, different bytes), ``"dtype"``, ``"shape"``,
    ``"value"`` (non-array leaves), ``"missing"`` / ``"extra"`` (the output exists in one run
    only) or ``"tolerance"`` (the claim's metric failed). ``max_abs`` is taken over positions
    finite on both sides (infinite when a non-finite value is matched by something else).
    """

    path: str
    reason: str
    detail: str = ""
    size: int | None = None
    n_differ: int | None = None
    max_abs: float | None = None
    first_index: tuple[int, ...] | None = None
    actual_at_first: Any = None
    expected_at_first: Any = None

    def describe(self) -> str:
        if self.reason in ("bytes", "tolerance") and self.first_index is not None:
            text = f"max_abs {self.max_abs:.6g}" if self.max_abs is not None else ""
            index = ",".join(str(i) for i in self.first_index)
            which = "first difference" if self.reason == "bytes" else "worst element"
            text += f", {which} at index ({index}): {self.actual_at_first!r} vs "
            text += f"{self.expected_at_first!r}"
            if self.n_differ is not None and self.size is not None:
                text += f" ({self.n_differ} of {self.size} elements differ)"
            if self.detail:
                text += f"; {self.detail}"
            return text.lstrip(", ")
        return self.detail or self.reason


@dataclass
class PairedCheck:
    """One check of one order: two runs compared output by output."""

    order: str
    check: str  # "a" | "b"
    actual_run: str
    expected_run: str
    exact: bool  # byte equality (True) or the claim's metric (False)
    passed: bool
    differences: list[OutputDifference] = field(default_factory=list)
    compare_s: float = 0.0

    @property
    def title(self) -> str:
        return f"({self.check}) {self.actual_run} vs {self.expected_run}"

    def __bool__(self) -> bool:
        return self.passed

    def messages(self) -> list[str]:
        how = "byte equality" if self.exact else "the claim's metric"
        return [
            f"{self.order} order, check {self.title} ({how}): output '{d.path or '<root>'}' "
            "differs: "
            f"{d.describe()}"
            for d in self.differences
        ]


@dataclass
class PairedResult:
    """Every run and check of a paired comparison; truthy when both checks hold in every order."""

    label: str
    exact: bool
    tolerance: Tolerance | None
    orders: list[str]
    runs: list[RunRecord]
    checks: list[PairedCheck]
    run_counts: dict[str, int]
    compare_s: float  # host copies and comparisons, all orders together
    # order -> role -> flat host leaves of that run; filled only with keep_outputs=True and left
    # out of to_dict (arrays are evidence for the caller, not for the JSON report).
    outputs: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict, repr=False)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def run_s_median(self) -> float:
        return statistics.median(r.wall_s for r in self.runs) if self.runs else 0.0

    @property
    def overhead(self) -> float:
        """Comparison time per order as a fraction of one run (median wall time)."""
        per_order = self.compare_s / max(len(self.orders), 1)
        median = self.run_s_median
        return per_order / median if median > 0 else math.inf

    def failing(self) -> list[PairedCheck]:
        return [c for c in self.checks if not c.passed]

    def messages(self) -> list[str]:
        """One line per differing output of every failed check."""
        prefix = f"{self.label}: " if self.label else ""
        return [prefix + m for c in self.checks for m in c.messages()]

    def summary(self) -> str:
        if not any(c.check == "a" for c in self.checks):
            head = "paired oracle (leaked-state checks only)"
        else:
            head = "paired " + ("byte equality" if self.exact else "tolerance") + " oracle"
        if self.label:
            head += f" [{self.label}]"
        counts = ", ".join(f"{side} ran {n}x" for side, n in self.run_counts.items())
        verdict = "holds" if self.passed else "FAILS"
        lines = [
            f"{head} {verdict} over orders {', '.join(self.orders)} ({counts}; "
            f"median run {self.run_s_median * 1e3:.3g} ms, comparison overhead "
            f"{self.overhead:.2%} of one run per order)"
        ]
        lines += ["  " + m for m in self.messages()]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        data = to_jsonable(replace(self, outputs={}))
        del data["outputs"]
        data["passed"] = self.passed
        data["overhead"] = to_jsonable(self.overhead)
        data["run_s_median"] = self.run_s_median
        data["messages"] = self.messages()
        return data


def paired(
    baseline: Callable[[], Any],
    candidate: Callable[[], Any],
    *,
    reset: Callable[[], None] | None = None,
    tolerance: Tolerance | Mapping[str, Any] | None = None,
    orders: Sequence[str] = ("forward", "reversed"),
    label: str = "",
    check_a: bool = True,
    keep_outputs: bool = False,
) -> PairedResult:
    """Run baseline and candidate back to back in this process and check both orders.

    ``baseline`` and ``candidate`` take no arguments and return an output tree (an array, or
    nested dicts / lists / tuples of arrays and numbers). The candidate callable installs what
    it tests, runs and uninstalls it; check (b) is what tells whether uninstalling restored the
    process. ``reset`` is called before every run, for state that legitimately carries over
    between runs (a random seed, a KV cache); it must not undo the candidate's leftovers, or
    check (b) can no longer see them. ``tolerance`` is None for byte equality (a no-op
    configuration), or a :class:`~paritygate.results.Tolerance` (or its keyword arguments) for
    check (a) of a changed numerical path. ``check_a=False`` runs only the leaked-state checks
    (b), for a caller that evaluates (a) itself on the runs kept by ``keep_outputs=True`` in
    ``result.outputs[order][role]`` (flat host leaves, e.g. ``outputs["forward"]["candidate"]``).

    Each order runs its three callables exactly once; exceptions from them propagate with a note
    naming the order and the run.
    """
    tol = _tolerance(tolerance)
    orders = list(orders)
    if not orders:
        raise InputError("paired needs at least one order", hint="use 'forward' and/or 'reversed'")
    for order in orders:
        if order not in ORDERS:
            raise InputError(f"unknown order {order!r}", hint="use 'forward' and/or 'reversed'")
    if not callable(baseline) or not callable(candidate):
        raise InputError("baseline and candidate must be callables taking no arguments")
    if not check_a and tol is not None:
        raise InputError(
            "a tolerance is the metric of check (a); with check_a=False it would be ignored",
            hint="drop the tolerance, or keep check (a)",
        )

    runs: list[RunRecord] = []
    checks: list[PairedCheck] = []
    counts = {"baseline": 0, "candidate": 0}
    compare_s = 0.0
    sides = {"baseline": baseline, "candidate": candidate}
    kept: dict[str, dict[str, dict[str, Any]]] = {}
    for order in orders:
        host: dict[str, dict[str, Any]] = {}
        for position, (side, role) in enumerate(ORDERS[order]):
            if reset is not None:
                reset()
            start = time.perf_counter()
            try:
                tree = sides[side]()
                leaves = flatten(tree)
                synchronize_tree(leaves)
            except Exception as exc:
                exc.add_note(f"paritygate.paired: raised by the {role} run of the {order} order")
                raise
            wall = time.perf_counter() - start
            counts[side] += 1
            runs.append(RunRecord(order, position, side, role, wall))
            start = time.perf_counter()
            host[role] = {path: _host_leaf(value, path) for path, value in leaves.items()}
            compare_s += time.perf_counter() - start
        if keep_outputs:
            kept[order] = host
        for check, (actual_role, expected_role) in _CHECKS[order].items():
            if check == "a" and not check_a:
                continue
            start = time.perf_counter()
            exact = tol is None or check == "b"
            if exact:
                differences = byte_differences(host[actual_role], host[expected_role])
            else:
                differences = _tolerance_differences(host[actual_role], host[expected_role], tol)
            elapsed = time.perf_counter() - start
            compare_s += elapsed
            checks.append(
                PairedCheck(
                    order=order,
                    check=check,
                    actual_run=actual_role,
                    expected_run=expected_role,
                    exact=exact,
                    passed=not differences,
                    differences=differences,
                    compare_s=elapsed,
                )
            )
    return PairedResult(
        label=label,
        exact=tol is None,
        tolerance=tol,
        orders=orders,
        runs=runs,
        checks=checks,
        run_counts=counts,
        compare_s=compare_s,
        outputs=kept,
    )


def _tolerance(value: Tolerance | Mapping[str, Any] | None) -> Tolerance | None:
    if value is None or isinstance(value, Tolerance):
        return value
    if isinstance(value, Mapping):
        try:
            return Tolerance(**value)
        except TypeError as exc:
            raise InputError(f"bad tolerance {dict(value)!r}: {exc}") from None
    raise InputError(
        f"tolerance must be None, a Tolerance or a mapping, got {type(value).__name__}"
    )


def _host_leaf(value: Any, path: str) -> Any:
    array = to_numpy(value, path=path)
    return value if array is None else array


# --------------------------------------------------------------------------------------------
# Byte equality


_UINT_BY_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def byte_differences(
    actual: Mapping[str, Any], expected: Mapping[str, Any]
) -> list[OutputDifference]:
    """Every output whose dtype, shape or bytes differ between two flat trees of host leaves."""
    differences: list[OutputDifference] = []
    for path in expected:
        if path not in actual:
            differences.append(OutputDifference(path, "missing", "absent from the actual run"))
    for path in actual:
        if path not in expected:
            differences.append(OutputDifference(path, "extra", "absent from the expected run"))
            continue
        difference = _byte_difference(path, actual[path], expected[path])
        if difference is not None:
            differences.append(difference)
    return differences


def _byte_difference(path: str, a: Any, e: Any) -> OutputDifference | None:
    a_arr, e_arr = isinstance(a, np.ndarray), isinstance(e, np.ndarray)
    if not (a_arr and e_arr):
        if a_arr != e_arr or type(a) is not type(e) or a != e:
            return OutputDifference(path, "value", f"{a!r} vs {e!r}")
        return None
    if a.dtype != e.dtype:
        return OutputDifference(path, "dtype", f"dtype {a.dtype} vs {e.dtype}")
    if a.shape != e.shape:
        return OutputDifference(path, "shape", f"shape {a.shape} vs {e.shape}")
    if a.dtype.hasobject and a.size:  # two empty ones (an empty string output) are equal
        raise InputError("object arrays cannot be compared byte for byte", where=path)
    mask = _differing_elements(a, e)
    n_differ = int(np.count_nonzero(mask))
    if n_differ == 0:
        return None
    flat_first = int(np.argmax(mask.reshape(-1)))
    first = tuple(int(i) for i in np.unravel_index(flat_first, a.shape)) if a.ndim else ()
    a_first, e_first = a.reshape(-1)[flat_first], e.reshape(-1)[flat_first]
    max_abs, detail = _numeric_gap(a, e, mask)
    return OutputDifference(
        path,
        "bytes",
        detail,
        size=int(a.size),
        n_differ=n_differ,
        max_abs=max_abs,
        first_index=first,
        actual_at_first=_scalar(a_first),
        expected_at_first=_scalar(e_first),
    )


def _differing_elements(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Element mask of differing bytes (the arrays' shape, a 0-d one included), without
    copying contiguous arrays."""
    shape = a.shape
    a = np.ascontiguousarray(a)  # a 0-d array comes back 1-d
    e = np.ascontiguousarray(e)
    size = a.dtype.itemsize
    if size == 0 or a.size == 0:
        return np.zeros(shape, dtype=bool)
    if size in _UINT_BY_SIZE:
        uint = _UINT_BY_SIZE[size]
        return (a.view(uint) != e.view(uint)).reshape(shape)
    a_bytes = a.reshape(-1).view(np.uint8).reshape(a.size, size)
    e_bytes = e.reshape(-1).view(np.uint8).reshape(e.size, size)
    return (a_bytes != e_bytes).any(axis=1).reshape(shape)


def _numeric_gap(a: np.ndarray, e: np.ndarray, mask: np.ndarray) -> tuple[float | None, str]:
    """max |a - e| over the differing elements, and a note on NaN payloads and signed zeros."""
    if a.dtype.kind not in "biufc" and not is_ml_float(a.dtype):
        return None, ""
    av, ev = a[mask], e[mask]
    if a.dtype.kind == "c":
        av, ev = av.astype(np.complex128), ev.astype(np.complex128)
        nan_a, nan_e = np.isnan(av), np.isnan(ev)
    else:
        av, ev = av.astype(np.float64), ev.astype(np.float64)
        nan_a, nan_e = np.isnan(av), np.isnan(ev)
    notes = []
    payload = nan_a & nan_e
    if payload.any():
        notes.append(f"{int(payload.sum())} NaN with different payloads")
    rest = ~payload
    with np.errstate(invalid="ignore", over="ignore"):
        gaps = np.abs(av[rest] - ev[rest])
    gaps = np.where(np.isnan(gaps), np.inf, gaps)
    max_abs = float(gaps.max()) if gaps.size else 0.0
    zeros = int(np.count_nonzero(gaps == 0))
    if zeros and (a.dtype.kind in "fc" or is_ml_float(a.dtype)):
        notes.append(f"{zeros} signed zeros differ")
    return max_abs, "; ".join(notes)


def _scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        if value.dtype.kind in "biuf" or is_ml_float(value.dtype):
            if value.dtype.kind == "b":
                return bool(value)
            if value.dtype.kind in "iu":
                return int(value)
            return float(value)
        return str(value)
    return value


# --------------------------------------------------------------------------------------------
# A claim's metric


def _tolerance_differences(
    actual: Mapping[str, Any], expected: Mapping[str, Any], tolerance: Tolerance
) -> list[OutputDifference]:
    from .compare import compare_output

    differences = [
        OutputDifference(path, "missing", "absent from the actual run")
        for path in expected
        if path not in actual
    ]
    differences += [
        OutputDifference(path, "extra", "absent from the expected run")
        for path in actual
        if path not in expected
    ]
    for path in expected:
        if path not in actual:
            continue
        output = compare_output(actual[path], expected[path], tolerance, path)
        if output.passed:
            continue
        worst = output.worst[0] if output.worst else None
        differences.append(
            OutputDifference(
                path,
                "tolerance",
                "; ".join(f.describe() for f in output.failures),
                size=output.size,
                n_differ=output.mismatches,
                max_abs=output.max_abs,
                first_index=tuple(worst.index) if worst else None,
                actual_at_first=worst.actual if worst else None,
                expected_at_first=worst.expected if worst else None,
            )
        )
    return differences


# --------------------------------------------------------------------------------------------
# A spec's paired claims: the gate's verdicts


def paired_verdicts(
    spec: Spec, claim: Claim, candidate: str, cases: list[str], result: GateResult
) -> list[ClaimVerdict]:
    """Paired mode: the reference runs live in this process, back to back with the candidate,
    through the paired oracle (both orders, three runs each). Check (b), a side run again after
    the other, is byte equality for every oracle: it compares two runs of one unchanged path, so
    any difference is state the other side leaked. Check (a) is byte equality for no-op claims;
    for the others it is the claim itself, evaluated in its own metric and scope on both orders'
    candidate and reference runs."""
    verdicts: list[ClaimVerdict] = []
    ref_runner = make_runner(spec.reference, spec)
    cand_runner = make_runner(spec.runners[candidate], spec)
    try:
        ref_runner.activate()
        cand_runner.activate()
    except RunFailure as exc:
        result.errors.append(exc.describe())
        ref_runner.deactivate()
        cand_runner.deactivate()
        return verdicts
    counter = claim.activity.counter if claim.activity is not None else None

    def kept(outputs: dict[str, Any]) -> dict[str, Any]:
        # The covered outputs, and the candidate's activity counter the claim's band reads; the
        # paired oracle's flattener keeps flat names as they are ('boxes/editor').
        return {k: v for k, v in outputs.items() if claim.covers(k) or k == counter}

    def declared(runner: str, case: str, outputs: dict[str, Any]) -> dict[str, Any]:
        missing = spec.not_produced(outputs)
        if missing:
            error = (
                f"runner {runner}, case {case}: declared output(s) "
                f"{', '.join(map(repr, missing))} not produced"
            )
            if error not in result.errors:
                result.errors.append(error)
        return outputs

    try:
        for case_name in cases:
            case = spec.cases[case_name]
            try:
                noop = claim.oracle == "no-op"
                outcome = paired(
                    lambda case=case, case_name=case_name: kept(
                        declared(spec.reference.name, case_name, ref_runner.run(case).outputs)
                    ),
                    lambda case=case: kept(cand_runner.run(case).outputs),
                    label=f"{claim.id} {case_name}",
                    check_a=noop,
                    keep_outputs=not noop,
                )
                check_input_after_run(
                    spec, case_name, f"runner {spec.reference.name} or {candidate}", result
                )
                if noop:
                    verdicts.append(_noop_verdict(claim, candidate, case_name, outcome))
                else:
                    verdicts.append(_paired_claim_verdict(claim, candidate, case_name, outcome))
            except RunFailure as exc:
                result.errors.append(exc.describe())
    finally:
        cand_runner.deactivate()
        ref_runner.deactivate()
    return verdicts


def _byte_failures(outcome: Any) -> list[Failure]:
    """One failure per differing output of every failed byte-equality check, naming the order,
    the check, the two runs and the output."""
    failures = []
    for check in outcome.checks:
        if check.passed or not check.exact:
            continue
        for diff in check.differences or [None]:
            failures.append(
                Failure(
                    "byte_equality",
                    0,
                    None,
                    where=f"{check.order} check {check.check}: {check.actual_run} vs "
                    f"{check.expected_run}" + (f", {diff.path}" if diff else ""),
                    detail=(f"{diff.reason}: {diff.describe()}" if diff else ""),
                )
            )
    return failures


def _noop_verdict(claim: Claim, candidate: str, case: str, outcome: Any) -> ClaimVerdict:
    failures = _byte_failures(outcome)
    observed = max((d.max_abs or 0.0 for c in outcome.checks for d in c.differences), default=0.0)
    return ClaimVerdict(
        claim.id,
        candidate,
        case,
        not failures and bool(outcome),
        claim.oracle,
        claim.metric,
        claim.bound,
        claim.unit,
        observed=observed,
        excess=observed if failures else None,
        failures=failures,
        evidence={"paired": outcome.to_dict()},
    )


def _paired_claim_verdict(claim: Claim, candidate: str, case: str, outcome: Any) -> ClaimVerdict:
    """The claim on the forward order (candidate vs baseline-before) and on the reversed order
    (candidate-before vs baseline: a candidate that holds only once the reference warmed the
    process up), plus the leaked-state checks (b) as byte-equality failures."""
    forward, backward = outcome.outputs["forward"], outcome.outputs["reversed"]
    verdict = evaluate_claim(
        claim, candidate, case, forward["candidate"], forward["baseline-before"]
    )
    warm = evaluate_claim(
        claim, candidate, case, backward["candidate-before"], backward["baseline"]
    )
    failures = list(verdict.failures)
    said = {(f.metric, f.where) for f in failures}
    # A violation both orders show is reported once; one only the reversed order shows is named so.
    failures += [
        replace(
            f,
            where="reversed order, candidate-before vs baseline"
            + (f", {f.where}" if f.where else ""),
        )
        for f in warm.failures
        if (f.metric, f.where) not in said
    ]
    failures += _byte_failures(outcome)
    observed = verdict.observed
    if observed is None or (
        warm.observed is not None and claim.holds(observed) and not claim.holds(warm.observed)
    ):
        observed = warm.observed  # the order that breaks the claim gives the worst value
    elif (
        isinstance(observed, (int, float))
        and isinstance(warm.observed, (int, float))
        and not math.isnan(observed)
    ):
        if not math.isnan(warm.observed):
            observed = (
                max(observed, warm.observed)
                if claim.direction == "max"
                else min(observed, warm.observed)
            )
    excess = None
    if isinstance(observed, (int, float)) and not claim.holds(observed):
        excess = claim.excess(observed)
    evidence = dict(verdict.evidence)
    evidence["reversed_order"] = {"observed": warm.observed, "passed": warm.passed}
    evidence["paired"] = outcome.to_dict()
    return replace(
        verdict,
        passed=not failures,
        observed=observed,
        excess=excess,
        failures=failures,
        evidence=evidence,
    )

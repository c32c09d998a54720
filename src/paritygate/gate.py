"""The gate: verify, then every candidate on every case, then every claim. Binary.

Order of a run:

1. :func:`paritygate.drift.verify` — any drift ends the run with exit 3 before anything runs;
   a drift verdict says something shifted, never that the candidate is wrong. The recorded
   outputs the stored claims compare are read right then, so the gate finishes on the reference
   version it verified (named in ``provenance.reference``) even if records replace it meanwhile.
2. Claims whose hardware class is not this machine's are listed as not evaluated, by name.
3. Every candidate (and each of its adapters) runs every case; after each run the case's file is
   checked against its pin again (a runner that modified its input is drift on that case). A
   crash, a timeout, unparseable output, a missing or an extra output is a failure, with the
   runner's stderr. Each missing or extra output is reported once: inside the verdict of a claim
   that covers it (or of the cross-adapter check, for an adapter), otherwise as an error of the
   run.
4. Every claim is evaluated in its scope: per element, per edge, per output per case, over the
   dataset, or speed. The claim's bound is the gate's tolerance; there is no second number.
5. Cross-adapter: every adapter of a candidate must agree with it at zero tolerance on every case.

The run passes only when every verdict holds, nothing drifted, no runner failed and at least one
claim was evaluated.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .drift import VerifyResult, check_input_after_run, runners_that_run, verify
from .equivalence import evaluate_claim, structure_failures
from .errors import InputError, SpecError, WrongHardware
from .execution import Plan, execute, plan
from .provenance import capture, machine_facts, utc_now
from .results import ClaimVerdict, Failure, GateResult, NotEvaluated, Tolerance
from .spec import Claim, Spec, did_you_mean

__all__ = ["run_gate", "current_hardware", "CROSS_ADAPTER_PREFIX", "Progress"]

CROSS_ADAPTER_PREFIX = "cross-adapter:"
HARDWARE_ENV = "PARITYGATE_HARDWARE"

# progress(stage, done, total): stage names what runs ("port: leetcode"); done == total at the end.
Progress = Callable[[str, int, int], None]


def current_hardware(spec: Spec, override: Iterable[str] | str | None = None) -> list[str]:
    """Hardware classes this machine belongs to: 'any' plus every [hardware.<name>] whose
    conditions (globs over system, machine, cpu, gpu, hostname) all match. ``override`` (or the
    PARITYGATE_HARDWARE environment variable, comma-separated) names them instead."""
    if override is None:
        override = os.environ.get(HARDWARE_ENV) or None
    if override is not None:
        names = [
            n.strip()
            for n in (override.split(",") if isinstance(override, str) else override)
            if n.strip()
        ]
        unknown = [n for n in names if n != "any" and n not in spec.hardware]
        if unknown:
            raise SpecError(
                f"unknown hardware class {', '.join(unknown)}; the spec declares: "
                f"{', '.join(spec.hardware) or 'none'}",
                where=str(spec.path),
            )
        return ["any", *[n for n in names if n != "any"]]
    facts = machine_facts()
    classes = ["any"]
    for hw in spec.hardware.values():
        ok = True
        for key, pattern in hw.conditions.items():
            values = facts.get(key)
            values = values if isinstance(values, list) else [values]
            if not any(v is not None and fnmatch.fnmatchcase(str(v), pattern) for v in values):
                ok = False
                break
        if ok:
            classes.append(hw.name)
    return classes


@dataclass
class _Runs:
    outputs: dict[str, dict[str, dict[str, Any]]] = field(
        default_factory=dict
    )  # runner -> case -> outputs
    seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    stderr: dict[str, dict[str, str]] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Claim evaluation


def _cross_adapter(
    candidate: str, adapter: str, case: str, primary: dict[str, Any], other: dict[str, Any]
) -> ClaimVerdict:
    from .compare import compare_output

    failures = structure_failures(other, primary, f"adapter {adapter}", f"candidate {candidate}")
    worst = 0.0
    evidence: dict[str, Any] = {}
    for name in sorted(set(primary) & set(other)):
        try:
            oc = compare_output(other[name], primary[name], Tolerance(), name)
        except InputError as exc:
            failures.append(Failure("input", None, None, where=name, detail=exc.message))
            worst = math.inf
            continue
        observed = oc.max_abs if oc.passed or oc.mismatches else math.inf
        # NaN or an infinity on one side only: the finite max-abs reads 0 there, yet the two
        # entry points disagree; say what differs instead of "observed 0, exceeded by 0".
        nonfinite = [f for f in oc.failures if f.metric in ("nan", "inf")]
        sized = [f for f in oc.failures if f.metric == "size"]
        if nonfinite or sized:
            observed = math.inf
        evidence[name] = {"max_abs": oc.max_abs, "mismatches": oc.mismatches}
        if nonfinite:
            evidence[name]["nonfinite"] = [f.describe() for f in nonfinite]
        worst = max(worst, observed)
        if sized:  # an empty output on one side: a different number of elements, not a NaN
            failures += [
                Failure("size", f.bound, f.observed, where=name, detail=f.detail) for f in sized
            ]
            continue
        if not oc.passed:
            where = name
            detail = ""
            if oc.worst:
                el = oc.worst[0]
                where += " at index " + ",".join(str(i) for i in el.index)
                detail = f"{adapter} {el.actual}, {candidate} {el.expected}"
            if nonfinite:
                nf = oc.nonfinite
                parts = []
                if nf is not None and nf.nan_one_side:
                    parts.append(
                        f"NaN on one side only at {nf.nan_one_side} of {oc.size} position(s) "
                        f"({adapter} {nf.actual_nan} NaN, {candidate} {nf.expected_nan} NaN)"
                    )
                if nf is not None and nf.inf_mismatch:
                    parts.append(f"{nf.inf_mismatch} infinity(ies) not matched")
                detail = "; ".join(parts + ([detail] if detail else []))
                failures.append(Failure("nonfinite", 0, None, None, where=where, detail=detail))
                continue
            failures.append(Failure("max_abs", 0, observed, observed, where=where, detail=detail))
    return ClaimVerdict(
        claim_id=f"{CROSS_ADAPTER_PREFIX}{candidate}",
        candidate=adapter,
        case=case,
        passed=not failures,
        oracle="cross-adapter",
        metric="max_abs",
        bound=0,
        observed=worst,
        excess=worst if worst > 0 else None,
        failures=failures,
        evidence=evidence,
    )


# --------------------------------------------------------------------------------------------
# The run


def _run_all(
    spec: Spec,
    names: list[str],
    cases: list[str],
    result: GateResult,
    runs: _Runs,
    progress: Progress | None,
    violated: Callable[[str, str, dict[str, Any]], bool] | None = None,
    execution: Plan | None = None,
) -> bool:
    """Run every runner on every case on the run's engine (:mod:`paritygate.execution`), then
    take the outcomes in serial order, so the result does not depend on the engine; with
    ``violated``, stop after the first run it flags (returns True when it stopped)."""
    executed = execute(spec, names, cases, execution, progress=progress, stop=violated)
    for name in names:
        runs.outputs[name], runs.seconds[name], runs.stderr[name] = {}, {}, {}
        if name in executed.activation:
            result.errors.append(executed.activation[name].describe())
            continue
        for case in cases:
            outcome = executed.outcomes.get((name, case))
            if outcome is None:
                continue  # not run: stopped at the first violation
            if outcome.failure is not None:
                result.errors.append(outcome.failure.describe())
                continue
            check_input_after_run(spec, case, f"runner {name}", result)
            runs.outputs[name][case] = outcome.outputs or {}
            runs.seconds[name][case] = outcome.seconds
            if outcome.stderr.strip():
                runs.stderr[name][case] = outcome.stderr
    result.provenance["execution"] = executed.summary(execution or Plan())
    return executed.stopped


def _spec_argument(spec: Spec) -> str:
    """The spec's path as the user would type it (relative to the working folder when inside)."""
    import os

    try:
        relative = os.path.relpath(spec.path)
    except ValueError:
        return str(spec.path)
    return str(spec.path) if relative.startswith("..") else relative


def basis_warnings(spec: Spec, claims: Iterable[Claim]) -> list[str]:
    """A claim whose bound was calibrated in another mode than the one it is gated in: the
    bound measured stored-mode noise (or paired), not what the gate now compares."""
    out = []
    for claim in claims:
        measured = claim.basis.get("mode") if isinstance(claim.basis, dict) else None
        if measured and measured != claim.mode:
            out.append(
                f"claims.{claim.id}: gated in {claim.mode} mode, but its bound was calibrated in "
                f"{measured} mode (basis.mode); re-calibrate: paritygate calibrate "
                f"{_spec_argument(spec)} --claim {claim.id}"
            )
    return out


def raise_if_never_recorded(spec: Spec, checked: Any) -> None:
    """Input errors (exit 2) that verify would otherwise call drift: a reference never recorded,
    a case file that never existed (the reference holds no outputs recorded from it), a case
    added after recording. A pinned file that disappears after recording stays drift (exit 3)."""
    recorded = checked.reference.cases if checked.reference is not None else {}
    command = f"paritygate record {_spec_argument(spec)}"
    for item in checked.drift:
        if item.kind == "case-input" and item.observed is None and item.subject not in recorded:
            case = spec.cases[item.subject]
            what = case.missing if case.sequence else f"input file {case.path} does not exist"
            raise InputError(
                f"cases.{item.subject}: {what} (no reference was "
                f"recorded from it); fix the path or create the file, then run `{command}`",
                where=str(spec.path),
            )
    added = [i.subject for i in checked.drift if i.kind == "case-not-recorded"]
    if added:
        raise InputError(
            f"case(s) {', '.join(added)} added after the reference was recorded; record them: "
            f"run `{command}`",
            where=str(spec.path),
        )
    for item in checked.drift:
        if item.kind == "reference-missing":
            raise InputError(
                f"no reference recorded yet in {spec.references}; run `{command}` first",
                where=str(spec.path),
            )


SPEED_IN_TESTS = (
    "speed claim: evaluated only by a gate run on its hardware class, never inside a unit-test "
    "suite"
)


def run_gate(
    spec: Spec,
    *,
    claims: Iterable[str] | None = None,
    cases: Iterable[str] | None = None,
    hardware: Iterable[str] | str | None = None,
    progress: Progress | None = None,
    speed: bool = True,
    stop_at_first_violation: bool = False,
    execution: Plan | None = None,
) -> GateResult:
    """Verify, run every candidate on every case, evaluate every claim; see the module docstring.

    ``claims`` / ``cases`` restrict the run (unknown names are a SpecError). ``hardware`` names
    this machine's hardware classes instead of matching the spec's conditions. ``speed=False``
    (the pytest plugin) lists speed claims as not evaluated: timing belongs to gate runs.
    ``stop_at_first_violation`` (``gate -x``) stops running stored candidates at the first case
    that violates a per-case claim; what did not run is listed as not evaluated.
    ``execution`` (:func:`paritygate.execution.plan`) runs the stored candidates serially (the
    default), on a process pool or on Ray; verdicts are computed here either way, and speed
    claims are timed afterwards, in this process, with no unit running beside them.
    """
    claim_ids = list(claims) if claims is not None else list(spec.claims)
    case_names = list(cases) if cases is not None else list(spec.cases)
    _check_names(spec, claim_ids, case_names)
    result = GateResult(spec=str(spec.path), started=utc_now())
    classes = current_hardware(spec, hardware)
    selected = _select_claims(spec, claim_ids, classes, speed, result)
    if not selected:
        _raise_if_wrong_hardware(spec, claim_ids, classes)
    checked = _verify(spec, selected, case_names, classes, result)
    if checked.drift:
        result.drift = checked.drift
        for claim in selected:
            result.not_evaluated.append(
                NotEvaluated(claim.id, "not run: drift (re-record deliberately)")
            )
        result.finished = utc_now()
        return result
    if not selected:
        result.errors.append("no claim was evaluated: a run that evaluates none proves nothing")
        result.finished = utc_now()
        return result

    runs = _Runs()
    stored = [c for c in selected if c.mode == "stored"]
    expected = _Recorded(spec, checked.reference, result)
    if stored and checked.reference is not None:
        # The gate finishes on the reference version it verified: every recorded output it
        # compares is read now, before anything runs, so a record that replaces the reference
        # (and a second one that removes the replaced version) during the run changes nothing.
        reference = checked.reference
        result.provenance["reference"] = {
            "version": reference.version,
            "digest": reference.manifest.get("digest"),
            "created": reference.manifest.get("created"),
        }
        for case in case_names:
            expected(case)
    # Paired claims first, while the process is fresh: the reference runs live, back to back
    # with the candidate, and nothing the stored runs do can leak into the baseline.
    from .paired import paired_verdicts

    for claim in selected:
        if claim.mode == "paired":
            for candidate in claim.candidates:
                result.verdicts.extend(paired_verdicts(spec, claim, candidate, case_names, result))
    stored_names = runners_that_run(spec, [c.id for c in stored])
    stopped = _run_all(
        spec,
        [n for n in stored_names if n != spec.reference.name],
        case_names,
        result,
        runs,
        progress,
        expected.violation_check(stored) if stop_at_first_violation else None,
        execution if execution is not None else plan(spec),
    )
    if stored:
        _undeclared_reference_outputs(spec, case_names, expected, result)
    _structure_errors(spec, stored, stored_names, case_names, runs, expected, result)
    _stored_verdicts(spec, stored, case_names, runs, expected, result)
    _cross_adapter_verdicts(spec, stored, case_names, runs, result)
    if stopped:
        _drop_unrun(result, runs, {c.id for c in stored})
    stderr = {n: s for n, s in runs.stderr.items() if s}
    if stderr:
        result.provenance["stderr"] = stderr
    result.provenance["seconds"] = runs.seconds
    result.finished = utc_now()
    return result


def _check_names(spec: Spec, claim_ids: list[str], case_names: list[str]) -> None:
    """A claim or case the spec does not have is a SpecError naming the closest one."""
    for cid in claim_ids:
        if cid not in spec.claims:
            raise SpecError(
                f"no claim {cid!r}{did_you_mean(cid, spec.claims)}; the spec has: "
                f"{', '.join(spec.claims)}",
                where=str(spec.path),
            )
    for case in case_names:
        if case not in spec.cases:
            raise SpecError(
                f"no case {case!r}{did_you_mean(case, spec.cases)}; the spec has: "
                f"{', '.join(spec.cases)}",
                where=str(spec.path),
            )


def _select_claims(
    spec: Spec, claim_ids: list[str], classes: list[str], speed: bool, result: GateResult
) -> list[Claim]:
    """The claims this run evaluates; the others are listed as not evaluated, with the reason
    (another hardware class, or a speed claim in a test run)."""
    selected: list[Claim] = []
    for cid in claim_ids:
        claim = spec.claims[cid]
        if claim.hardware not in classes:
            result.not_evaluated.append(
                NotEvaluated(
                    cid,
                    f"holds for hardware class {claim.hardware!r}; this machine is "
                    f"{', '.join(classes)}",
                )
            )
        elif claim.scope == "speed" and not speed:
            result.not_evaluated.append(NotEvaluated(cid, SPEED_IN_TESTS))
        else:
            selected.append(claim)
    return selected


def _raise_if_wrong_hardware(spec: Spec, claim_ids: list[str], classes: list[str]) -> None:
    """Every claim of the run holds for a hardware class this machine is not: nothing was
    violated and nothing can be checked here, which is neither a pass nor a failure
    (:class:`~paritygate.errors.WrongHardware`, exit 4)."""
    needed = sorted({spec.claims[c].hardware for c in claim_ids})
    if not claim_ids or any(hw in classes for hw in needed):
        return
    from .provenance import machine_facts

    def described(name: str) -> str:
        hw = spec.hardware.get(name)
        conditions = ", ".join(f"{k} {v}" for k, v in hw.conditions.items()) if hw else ""
        return f"{name!r}" + (f" ({conditions})" if conditions else "")

    facts = machine_facts()
    gpus = ", ".join(facts.get("gpu") or []) or "no GPU"
    detected = [c for c in classes if c != "any"]
    raise WrongHardware(
        f"every claim it would evaluate holds for hardware class "
        f"{' or '.join(described(n) for n in needed)}; this machine is "
        f"{', '.join(repr(c) for c in detected) if detected else 'in no declared class'} "
        f"({facts.get('system')} {facts.get('machine')}, {gpus}): nothing was evaluated",
        where=str(spec.path),
        hint=f"run it on a {' or '.join(needed)} machine, or name the class with --hardware "
        f"or {HARDWARE_ENV} if this machine is one",
    )


def _verify(
    spec: Spec, selected: list[Claim], case_names: list[str], classes: list[str], result: GateResult
) -> VerifyResult:
    """Check every pin the selected claims rest on (:func:`paritygate.drift.verify`) and write
    the run's provenance into ``result``; returns the verification (its drift and reference)."""
    names = runners_that_run(spec, [c.id for c in selected])
    checked = verify(spec, runners=names, cases=case_names)
    if not any(c.mode == "stored" for c in selected):
        # Paired claims run the reference live: a reference never recorded is no concern.
        unused = ("reference-missing", "case-not-recorded")
        checked.drift = [d for d in checked.drift if d.kind not in unused]
    raise_if_never_recorded(spec, checked)
    result.provenance = capture(root=spec.root, spec_pins=spec.pins)
    result.provenance["hardware_classes"] = classes
    result.provenance["unpinned_differences"] = checked.info
    result.provenance["warnings"] = basis_warnings(spec, selected)
    # What each runner that runs declares it is (model, revision, preprocessing ...): their
    # package and file pins were checked above; the free-form ones travel with the result.
    result.provenance["runner_pins"] = {
        n: spec.runners[n].pins for n in names if spec.runners[n].pins
    }
    return checked


class _Recorded:
    """The recorded reference outputs of a case (the gate reads them all right after verifying;
    later calls come from the reference's cache): a damaged file found then is still drift, once
    per case (added to the result; the case then has no expected outputs)."""

    def __init__(self, spec: Spec, reference: Any, result: GateResult):
        self.spec = spec
        self.reference = reference
        self.result = result

    def __call__(self, case: str) -> dict[str, Any] | None:
        from .drift import _manifest_moved
        from .errors import DriftError

        if self.reference is None:
            return None
        try:
            return self.reference.outputs(case)
        except DriftError as exc:
            if any(d.subject == f"case {case}" for d in self.result.drift):
                return None  # reported once
            item = _drift_item(case, exc)
            if "file not found" in exc.message and _manifest_moved(self.spec, self.reference):
                item.detail = (
                    f"the reference was re-recorded while the gate read version "
                    f"{self.reference.version} (its files are gone); run the gate again"
                )
            self.result.drift.append(item)
            return None

    def violation_check(self, stored: list[Claim]) -> Callable[[str, str, dict[str, Any]], bool]:
        """For ``gate -x``: whether a runner's outputs of a case violate a per-case claim."""

        def violated(name: str, case: str, outputs: dict[str, Any]) -> bool:
            try:
                expected = self.reference.outputs(case) if self.reference is not None else None
            except Exception:
                return False  # reported by the evaluation afterwards
            if expected is None:
                return False
            return any(
                not evaluate_claim(claim, name, case, outputs, expected).passed
                for claim in stored
                if name in claim.candidates and claim.scope in ("element", "edge", "output")
            )

        return violated


def _undeclared_reference_outputs(
    spec: Spec, case_names: list[str], expected_for: _Recorded, result: GateResult
) -> None:
    """Declared outputs the recorded reference lacks: nothing would ever compare them."""
    for case in case_names:
        expected = expected_for(case)
        missing = spec.not_produced(expected) if expected is not None else []
        if missing:
            result.errors.append(
                f"reference {spec.reference.name}, case {case}: declared output(s) "
                f"{', '.join(map(repr, missing))} not in the recorded reference (the reference "
                "runner does not produce them)"
            )


def _structure_errors(
    spec: Spec,
    stored: list[Claim],
    stored_names: list[str],
    case_names: list[str],
    runs: _Runs,
    expected_for: _Recorded,
    result: GateResult,
) -> None:
    """Every runner's outputs against the reference's: a missing or extra output no verdict
    reports is a run error. Outputs of a ``cast = "reference"`` runner take the reference's
    dtypes here, for every later comparison."""
    from .approximation import CALLS_PREFIX

    # Activity counts exist on the candidate's side only.
    counters = {c.activity.counter for c in stored if c.activity is not None}
    for name in stored_names:
        if name == spec.reference.name:
            continue
        for case in case_names:
            out = runs.outputs.get(name, {}).get(case)
            expected = expected_for(case)
            if out is None or expected is None:
                continue
            if spec.runners[name].cast == "reference":
                out = {
                    k: (v.astype(expected[k].dtype) if k in expected else v) for k, v in out.items()
                }
                runs.outputs[name][case] = out
            out = {
                k: v
                for k, v in out.items()
                if not k.startswith(CALLS_PREFIX) and (k not in counters or k in expected)
            }
            for f in structure_failures(out, expected):
                if _said_by_a_verdict(
                    spec,
                    stored,
                    name,
                    f,
                    runs.outputs.get(spec.runners[name].adapter_of or "", {}).get(case),
                ):
                    continue
                result.errors.append(
                    f"runner {name}, case {case}: {f.metric.replace('_', ' ')} {f.where!r} "
                    f"({f.detail})"
                )


def _stored_verdicts(
    spec: Spec,
    stored: list[Claim],
    case_names: list[str],
    runs: _Runs,
    expected_for: _Recorded,
    result: GateResult,
) -> None:
    """Every stored claim's verdicts: per candidate for speed and dataset claims, per candidate
    and case for the others (a case the candidate produced nothing for fails as ``run``)."""
    from .dataset import dataset_verdict
    from .speed import speed_verdict

    for claim in stored:
        for candidate in claim.candidates:
            produced = runs.outputs.get(candidate, {})
            if claim.scope == "speed":
                result.verdicts.append(speed_verdict(spec, claim, candidate, case_names, produced))
                continue
            if claim.scope == "dataset":
                expected_all = {c: e for c in case_names if (e := expected_for(c)) is not None}
                result.verdicts.append(
                    dataset_verdict(claim, candidate, spec, case_names, produced, expected_all)
                )
                continue
            for case in case_names:
                actual = produced.get(case)
                expected = expected_for(case)
                if expected is None:
                    continue
                if actual is None:
                    result.verdicts.append(_produced_nothing(claim, candidate, case))
                    continue
                result.verdicts.append(evaluate_claim(claim, candidate, case, actual, expected))


def _produced_nothing(claim: Claim, candidate: str, case: str) -> ClaimVerdict:
    return ClaimVerdict(
        claim.id,
        candidate,
        case,
        False,
        claim.oracle,
        claim.metric,
        claim.bound,
        claim.unit,
        failures=[
            Failure(
                "run",
                None,
                None,
                detail=f"runner {candidate} produced no outputs for this case "
                "(its run error says why)",
            )
        ],
    )


def _cross_adapter_verdicts(
    spec: Spec, stored: list[Claim], case_names: list[str], runs: _Runs, result: GateResult
) -> None:
    """Every adapter of a gated candidate against that candidate, case by case (exact)."""
    for candidate in dict.fromkeys(c for claim in stored for c in claim.candidates):
        for adapter in spec.adapters_of(candidate):
            for case in case_names:
                primary = runs.outputs.get(candidate, {}).get(case)
                other = runs.outputs.get(adapter.name, {}).get(case)
                if primary is None or other is None:
                    continue  # the failed run is already an error of the run
                result.verdicts.append(
                    _cross_adapter(candidate, adapter.name, case, primary, other)
                )


def _drop_unrun(result: GateResult, runs: _Runs, stored: set[str]) -> None:
    """After a stop at the first violation: keep the verdicts of the runs made; list the rest."""
    kept, dropped = [], []
    for verdict in result.verdicts:
        ran = verdict.case is not None and verdict.case in runs.outputs.get(verdict.candidate, {})
        paired = verdict.claim_id not in stored and not verdict.claim_id.startswith(
            "cross-adapter:"
        )
        (kept if ran or paired else dropped).append(verdict)
    result.verdicts = kept
    for claim_id in dict.fromkeys(v.claim_id for v in dropped):
        result.not_evaluated.append(
            NotEvaluated(claim_id, "stopped at the first violation (-x): not run on every case")
        )


def _said_by_a_verdict(
    spec: Spec, stored: list[Claim], runner: str, failure: Failure, primary: dict[str, Any] | None
) -> bool:
    """Whether a verdict already states this missing / extra output, so the report says it once.

    A candidate's output covered by one of its per-case or dataset claims fails that claim's
    verdict, which names it; an adapter's output that its candidate has (missing) or lacks (extra)
    fails the cross-adapter verdict, which names it. Everything else (an output no claim covers,
    a difference the adapter shares with its candidate) is an error of the run."""
    output = failure.where or ""
    if spec.runners[runner].role == "adapter":
        if primary is None:
            return False
        return (
            (output in primary) if failure.metric == "missing_output" else (output not in primary)
        )
    return any(runner in c.candidates and c.scope != "speed" and c.covers(output) for c in stored)


def _drift_item(case: str, exc: Exception) -> Any:
    from .results import DriftItem

    return DriftItem(
        "reference-file", f"case {case}", None, None, getattr(exc, "message", str(exc))
    )

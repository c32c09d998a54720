"""A claim of a spec calibrated the way the gate measures it; the bound written back with its
basis (and the cases it rests on) into the spec."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..spec import basis_table
from .measure import calibrate
from .mutations import DEFAULT_MUTATIONS, Mutation
from .proposal import _split_by_noise
from .result import DIRECTIONS, CalibrationResult

# --------------------------------------------------------------------------------------------
# A claim of a spec, measured the way the gate measures it


def calibrate_claim(
    spec: Any,
    claim_id: str,
    *,
    candidate: str | None = None,
    cases: int | Sequence[str] | None = None,
    repeats: int = 1,
    reorder: bool = False,
    margin_for: Mapping[str, float] | None = None,
    mutations: Sequence[Mutation] = DEFAULT_MUTATIONS,
    model_mutations: Mapping[str, str] | None = None,
    min_cases: int = 16,
    seed: int = 0,
    execution: Any = None,
) -> CalibrationResult:
    """Calibrate ``[claims.<claim_id>]`` of a spec (a path or a loaded Spec) in the claim's mode.

    A paired claim runs the reference runner and the candidate back to back in this process for
    every case; a stored claim compares the candidate against the recorded reference. ``cases``
    is a count (the first n cases of the spec) or case names; all cases by default.
    ``model_mutations`` maps a name to a ``module:function`` (resolved from the spec's folder, like
    a runner's callable) that stands in for the candidate: a mutated model.

    ``execution`` (:func:`paritygate.execution.plan`) runs the calibration's units -- a runner on
    a case, each repeat of it, a model mutation on a case -- on a pool of workers or on Ray;
    the workers are sent the mutations by name. Serially (the default) the reference and the
    candidate run back to back in this process, case by case.
    """
    from ..execution import loaded_modules
    from ..spec import Spec, load_spec

    loaded: Spec = spec if isinstance(spec, Spec) else load_spec(spec)
    claim, metric, where = _calibrated_claim(loaded, claim_id)
    candidate = _chosen_candidate(claim, candidate, where)
    chosen = _spec_cases(loaded, cases, where)
    params = claim.params
    if metric == "ssim" and "data_range" not in params:
        raise InputError("an ssim claim needs params.data_range to be calibrated", where=where)

    recorded = None
    if claim.mode == "stored":
        from ..references import load_reference

        recorded = load_reference(loaded)
    reference = loaded.reference.name if claim.mode == "paired" else None
    mutations_run = _mutation_keys(loaded, candidate, model_mutations or {})
    band = claim.activity
    skipped = band is not None and band.calls is not None and band.measure == "skipped"
    reference_calls: dict[str, Any] = {}

    def as_skipped(case: Any, outputs: dict[str, Any]) -> dict[str, Any]:
        # measure = "skipped": the reference's counted calls on this case less the run's own.
        if skipped and band.counter in outputs and case.name in reference_calls:
            outputs = dict(outputs)
            outputs[band.counter] = reference_calls[case.name] - outputs[band.counter]
        return outputs

    def baseline_of(case: Any, outputs: dict[str, Any] | None) -> Any:
        if outputs is None:
            return recorded.outputs(case.name)
        if skipped and band.counter in outputs:
            reference_calls[case.name] = outputs[band.counter]
        return outputs

    with _Units(loaded, reference, candidate, mutations_run, execution) as units:
        units.run_all([c.name for c in chosen], repeats)

        def run_pair(case: Any) -> tuple[Any, Any]:
            baseline = baseline_of(case, units.next(reference, case))
            return baseline, as_skipped(case, units.next(candidate, case))

        def mutant(key: str) -> Callable[[Any], Any]:
            return lambda case: as_skipped(case, units.next(key, case))

        result = calibrate(
            run_pair,
            chosen,
            metric=metric,
            outputs=list(claim.outputs),
            repeats=repeats,
            reorder=reorder,
            mutations=mutations,
            model_mutations={name: mutant(key) for name, (key, _) in mutations_run.items()},
            margin_for=margin_for,
            mode=claim.mode,
            min_cases=min_cases,
            rel_eps=float(params.get("rel_eps", 1e-12)),
            ssim_data_range=params.get("data_range"),
            params=params,
            seed=seed,
            claim_id=claim_id,
            activity_band=(band.counter, band.low, band.high) if band else None,
            label=f"{candidate} against "
            f"{'the recorded reference' if recorded else loaded.reference.name}",
        )
    if units.modules is not None:  # the libraries the workers loaded moved the numbers too
        from .measure import _environment

        result.environment["versions"] = _environment(units.modules | loaded_modules())["versions"]
    _explain(result, claim)
    return result


def _calibrated_claim(spec: Any, claim_id: str) -> tuple[Any, str, str]:
    """(claim, the metric its distribution is measured in, where it is) for a claim that can
    be calibrated from output pairs; InputError naming why otherwise."""
    claim = spec.claims.get(claim_id)
    where = f"{spec.path}: {spec.key('claims', claim_id)}"
    if claim is None:
        known = ", ".join(spec.claims) or "none"
        raise InputError(f"no claim {claim_id!r} (claims: {known})", where=str(spec.path))
    # Some claims are calibrated through another metric's distribution (the registry's
    # calibrated_through): an exact claim (byte equality) through max_abs, where zero noise
    # proposes it; labelled boxes and segments too, every edge delta being |a - e| of one
    # coordinate of one covered output.
    metric = claim.metric_entry.calibrated_through or claim.metric
    if claim.metric == "max_edge_delta" and claim.params.get("match") == "iou":
        raise InputError(
            "IoU-matched boxes cannot be calibrated from output pairs yet: the pairing "
            "itself changes with the noise",
            where=where,
            hint="calibrate labelled boxes (one output per box) or segments",
        )
    if metric not in DIRECTIONS:
        raise InputError(
            f"metric {claim.metric!r} cannot be calibrated from output pairs",
            where=where,
            hint=f"calibration measures {', '.join(DIRECTIONS)} (and exact claims through max_abs)",
        )
    return claim, metric, where


def _chosen_candidate(claim: Any, candidate: str | None, where: str) -> str:
    """The candidate to calibrate: the one named (a candidate of the claim), or the claim's
    only one."""
    if candidate is None:
        if len(claim.candidates) != 1:
            raise InputError(
                f"the claim covers candidates {', '.join(claim.candidates)}: name one with "
                "--candidate",
                where=where,
            )
        return claim.candidates[0]
    if candidate not in claim.candidates:
        raise InputError(
            f"{candidate!r} is not a candidate of this claim ({', '.join(claim.candidates)})",
            where=where,
        )
    return candidate


def _mutation_keys(
    spec: Any, candidate: str, model_mutations: Mapping[str, str]
) -> dict[str, tuple[str, str]]:
    """Each model mutation's name -> (the name its units run under, ``candidate[name]``; its
    ``module:function``)."""
    keys = {}
    for name, target in model_mutations.items():
        if ":" not in target:
            raise InputError(f"model mutation {name!r}: expected module:function, got {target!r}")
        key = f"{candidate}[{name}]"
        if key in spec.runners:
            raise InputError(f"model mutation {name!r}: the spec has a runner {key!r}")
        keys[name] = (key, target)
    return keys


class _Units:
    """The runs a calibration measures: the reference (paired claims), the candidate (every
    repeat) and each model mutation, on every case.

    Serially they run in this process when the measurement asks for them (the reference and the
    candidate back to back, case by case, as the gate's paired oracle runs them). On a pool or on
    Ray (``execution``) they are units of :func:`paritygate.execution.execute`, all run before
    the measurement reads them: a repeat is the runner under the key ``runner (repeat r)``, a
    mutation the candidate's runner with its model replaced, sent to the workers by its
    ``module:function``. The first failure in the measurement's order is raised either way."""

    def __init__(
        self,
        spec: Any,
        reference: str | None,
        candidate: str,
        mutations: dict[str, tuple[str, str]],
        execution: Any,
    ):
        from ..execution import Variant

        self.spec = spec
        self.execution = execution
        self.bases = [r for r in (reference, candidate) if r is not None]
        self.variants: dict[str, Variant] = {
            key: (candidate, name, target) for name, (key, target) in mutations.items()
        }
        self.mutations = list(self.variants)
        self.served: dict[tuple[str, str], int] = {}  # (runner, case) -> runs handed out
        self.outcomes: dict[tuple[str, str], Any] = {}
        self.live: dict[str, Any] = {}  # serially: the activated runners
        self.modules: set[str] | None = None  # pool or Ray: what the units' processes loaded

    @property
    def serial(self) -> bool:
        return self.execution is None or self.execution.engine == "serial"

    def __enter__(self) -> _Units:
        from ..execution import make_unit_runner

        if self.serial:
            try:
                for name in [*self.bases, *self.mutations]:
                    self.live[name] = make_unit_runner(self.spec, name, self.variants)
                    self.live[name].activate()
            except BaseException:
                self.__exit__(None)
                raise
        return self

    def __exit__(self, *exc: Any) -> None:
        for runner in reversed(list(self.live.values())):
            if runner.active:
                runner.deactivate()
        self.live.clear()

    def _key(self, runner: str, repeat: int) -> str:
        if repeat == 0 or runner in self.mutations:
            return runner
        return f"{runner} (repeat {repeat + 1})"

    def run_all(self, cases: list[str], repeats: int) -> None:
        """On a pool or Ray: every unit, before the measurement reads them."""
        if self.serial:
            return
        from ..execution import execute

        names, variants = [], dict(self.variants)
        for repeat in range(repeats):
            for base in self.bases:
                key = self._key(base, repeat)
                names.append(key)
                if key != base:
                    variants[key] = (base, None, None)
        names += self.mutations
        executed = execute(self.spec, names, cases, self.execution, variants=variants)
        self.modules = executed.modules
        order = [
            (self._key(base, repeat), case)
            for repeat in range(repeats)
            for case in cases
            for base in self.bases
        ] + [(m, case) for m in self.mutations for case in cases]
        for key, case in order:
            failure = executed.activation.get(key)
            outcome = executed.outcomes.get((key, case))
            if failure is None and outcome is not None:
                failure = outcome.failure
            if failure is not None:
                raise failure
            self.outcomes[(key, case)] = outcome.outputs

    def next(self, runner: str | None, case: Any) -> dict[str, Any] | None:
        """The runner's outputs for the next run (repeat) of ``case``; None for no runner."""
        if runner is None:
            return None
        repeat = self.served.get((runner, case.name), 0)
        self.served[(runner, case.name)] = repeat + 1
        if self.serial:
            return self.live[runner].run(case).outputs
        return self.outcomes[(self._key(runner, repeat), case.name)]


def _explain(result: CalibrationResult, claim: Any) -> None:
    """What the result says in the claim's own terms: a per-edge claim's proposal, and why an
    approximation claim is calibrated against model-level bugs."""
    if claim.metric == "max_edge_delta":
        result.claim_metric_name = "max_edge_delta"
        result.label += " (max_edge_delta: the per-edge deltas, measured as max_abs)"
        if result.proposal == "exact":
            result.reason = (
                f"the measured noise is exactly zero over {result.n} cases: propose bound 0 "
                "on every edge (max_edge_delta = 0)"
            )
    hidden = (
        _split_by_noise(result)[0] if result.refused and result.claim_metric.gap is not None else []
    )
    if claim.oracle == "approximation" and any(
        m.kind == "output" and m.name in hidden for m in result.mutations
    ):
        # An approximation changes the output on purpose, by more than a float16 drop or 1 %
        # noise may: those output-level mutations measure numerical noise, not its bugs.
        result.reason += (
            "; an approximation claim is calibrated against the bugs it must catch: "
            "model-level "
            "mutations of the approximation (--model-mutation) with --mutations none, unless "
            "the output-level ones inside the noise are bugs this claim must catch"
        )


def _spec_cases(spec: Any, cases: int | Sequence[str] | None, where: str) -> list[Any]:
    every = list(spec.cases.values())
    if cases is None:
        return every
    if isinstance(cases, int):
        if cases < 1 or cases > len(every):
            raise InputError(
                f"asked for {cases} cases, the spec has {len(every)}", where=str(spec.path)
            )
        return every[:cases]
    unknown = [c for c in cases if c not in spec.cases]
    if unknown:
        raise InputError(f"unknown case(s) {', '.join(unknown)}", where=str(spec.path))
    return [spec.cases[c] for c in cases]


# --------------------------------------------------------------------------------------------
# Writing the bound, plotting


def write_bound(
    spec_path: str | Path,
    claim_id: str,
    result: CalibrationResult,
    *,
    cases: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Store the proposal in ``[claims.<claim_id>]``: bound, status = "calibrated" and the basis.

    ``cases`` names the subset of the spec's cases the calibration ran on (see
    :func:`choose_cases`): part of what the bound rests on, so the basis records it. Comments and
    layout of the spec are kept. Refuses (InputError) when the calibration refused. Returns the
    fields written.
    """
    if result.refused:
        raise InputError(
            f"calibration refused, nothing written: {result.reason}", where=str(spec_path)
        )
    if result.claim_id and result.claim_id != claim_id:
        raise InputError(
            f"this calibration measured claim {result.claim_id!r}, not {claim_id!r}",
            where=str(spec_path),
        )
    basis = result.basis()
    if cases is not None:
        basis["cases"] = list(cases)
    fields: dict[str, Any] = {"status": "calibrated", "basis": basis_table(basis)}
    if result.claim_metric_name:
        # max_edge_delta keeps its metric and scope; zero noise gives bound 0 on every edge.
        bound = 0 if result.proposal == "exact" else result.proposed_bound
        fields.update(metric=result.claim_metric_name, bound=bound, mode=result.mode)
    elif result.proposal == "exact":
        fields.update(metric="exact", bound=0, mode=result.mode)
    else:
        fields.update(metric=result.metric, bound=result.proposed_bound, mode=result.mode)
    from ..spec import load_spec, update_claim

    claim = load_spec(spec_path).claims.get(claim_id)
    if claim is not None and claim.oracle == "no-op" and result.proposal == "tolerance":
        # Measured noise is not zero: the candidate is not a no-op; its claim is a tolerance.
        fields["oracle"] = "equivalence"
    if (
        claim is not None
        and claim.oracle == "equivalence"
        and result.proposal == "exact"
        and result.mode == "paired"
    ):
        # Zero noise in paired mode: the strongest oracle the boundary allows is the no-op one
        # (both orders, leaked state caught by check (b)), not a single byte comparison.
        fields["oracle"] = "no-op"

    update_claim(spec_path, claim_id, **fields)
    return {**fields, "basis": basis}  # plain data for the caller


def choose_cases(
    spec: str | Path, count: int | None, names: Sequence[str], skipped: Sequence[str]
) -> int | list[str] | None:
    """The ``cases`` of :func:`calibrate_claim`: a count, the named cases, all but the skipped
    ones, or None for all. At most one of the three may be given; unknown names are refused."""
    from ..spec import load_spec

    if sum(bool(x) for x in (count is not None, names, skipped)) > 1:
        raise InputError("use one of --cases, --case and --skip-case")
    if not (names or skipped):
        return count
    known = list(load_spec(spec).cases)
    unknown = [n for n in (*names, *skipped) if n not in known]
    if unknown:
        raise InputError(
            f"unknown case(s) {', '.join(unknown)} (cases: {', '.join(known)})", where=str(spec)
        )
    if names:
        return list(dict.fromkeys(names))
    return [n for n in known if n not in skipped]

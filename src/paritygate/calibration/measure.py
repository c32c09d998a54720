"""Measurement: the comparison run over the cases, the bugs injected, every metric's
distribution recorded (through the claim-metric registry)."""

from __future__ import annotations

import fnmatch
import math
import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import claim_metrics
from .._host import flatten, synchronize_tree, to_numpy
from ..errors import InputError
from ..results import Tolerance
from .mutations import DEFAULT_MUTATIONS, Mutation
from .proposal import _margins, _propose
from .result import (
    DEFAULT_METRICS,
    DIRECTIONS,
    CalibrationResult,
    MetricDistribution,
    MutationSummary,
    _g,
)

# --------------------------------------------------------------------------------------------
# Measurement


Tree = Any
RunPair = Callable[[Any], "tuple[Tree, Tree]"]


def calibrate(
    run_pair: RunPair,
    cases: Sequence[Any] | int,
    *,
    metric: str = "max_abs",
    metrics: Iterable[str] = DEFAULT_METRICS,
    outputs: Sequence[str] | None = None,
    repeats: int = 1,
    reorder: bool = False,
    mutations: Sequence[Mutation] = DEFAULT_MUTATIONS,
    model_mutations: Mapping[str, Callable[[Any], Tree]] | None = None,
    margin_for: Mapping[str, float] | None = None,
    mode: str = "paired",
    min_cases: int = 16,
    rel_eps: float = 1e-12,
    ssim_data_range: float | None = None,
    ssim_channel_axis: int | None = None,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    claim_id: str = "",
    label: str = "",
    counters: Sequence[str] = (),
    activity_band: tuple[str, float, float] | None = None,
) -> CalibrationResult:
    """Measure the noise of a comparison and the signal of injected bugs; propose a bound.

    ``run_pair(case)`` returns ``(baseline_outputs, candidate_outputs)`` measured the way the gate
    will measure the claim: back to back in one process for a paired claim, the recorded
    reference against a fresh candidate run for a stored one (``mode`` only labels the result and
    chooses the form of an exact claim). ``cases`` is a sequence of case objects (or a count, for
    ``range(n)``). ``metric`` is the claim's metric, the one the bound is proposed for; every
    metric in ``metrics`` is recorded. ``outputs`` are glob patterns selecting the claim's outputs
    (all by default). ``model_mutations`` maps a name to a callable returning a mutated
    candidate's outputs for a case (a zeroed block, a scaled residual). ``margin_for`` names the
    spread a bound must absorb beyond this machine's noise, as factors (``{"other machine": 2}``).
    SSIM (for image outputs) needs ``ssim_data_range`` and, for colour images,
    ``ssim_channel_axis``. ``params`` are the claim's metric params (a sequence metric's
    ``top_k``), read by the measure functions as the gate reads them.
    ``counters`` names activity counters the candidate reports (``skipped_steps``): their values
    are recorded per run, and per model mutation, so an activity band can be read off them.
    ``activity_band`` is the claim's band ``(counter, min, max)``: a model mutation whose counter
    leaves the band in every case is caught by the band, so it is reported but kept out of the
    metric's gap (the claim is the metric and the band together).
    """
    recorded = _recorded_metrics(metric, metrics)
    cases = _checked_cases(cases, min_cases)
    if not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"repeats must be a whole number >= 1, got {repeats!r}")
    if mode not in ("paired", "stored"):
        raise InputError(f"mode must be 'paired' or 'stored', got {mode!r}")
    margins = _margins(margin_for)
    model_mutations = dict(model_mutations or {})
    names = [m.name for m in mutations] + list(model_mutations)
    if len(set(names)) != len(names):
        raise InputError(f"mutation names must be unique, got {names}")
    counters = list(counters)
    if activity_band is not None and activity_band[0] not in counters:
        counters.append(activity_band[0])

    rng = np.random.default_rng(seed)
    measure = _Measure(recorded, rel_eps, ssim_data_range, ssim_channel_axis, params)
    noise = _Noise(recorded, [_case_name(c) for c in cases], counters)
    noise.measure(run_pair, cases, measure, metric, outputs, repeats, reorder, rng)
    bugs: dict[str, dict[str, list[float]]] = {m: {} for m in recorded}
    summaries = _output_mutations(mutations, noise, measure, seed, bugs)
    summaries += _model_mutations(model_mutations, cases, noise, measure, outputs, bugs)

    band_caught = _caught_by_band(activity_band, model_mutations, noise.activity)
    outside_gap = {
        name_m: {m: bugs[m].pop(name_m) for m in recorded if name_m in bugs[m]}
        for name_m in band_caught
    }
    distributions = {
        name: _distribution(name, noise.values[name], noise.by_output[name], bugs[name])
        for name in recorded
    }
    claim = distributions[metric]
    for summary in summaries:
        signals = claim.bugs.get(summary.name, outside_gap.get(summary.name, {}).get(metric, []))
        summary.smallest_signal = _least_detectable(metric, signals) if signals else None
        if summary.name in band_caught:
            counter, low, high = activity_band
            summary.caught_by = f"activity band {counter} in {_g(low)}..{_g(high)}"

    spread = None
    if repeats > 1:
        spread = max(max(v) - min(v) for v in noise.per_case_claim.values())
    result = CalibrationResult(
        metric=metric,
        direction=DIRECTIONS[metric],
        mode=mode,
        cases=noise.case_names,
        repeats=repeats,
        reorder=reorder,
        outputs=noise.covered,
        by_metric=distributions,
        mutations=summaries,
        noise_exactly_zero=noise.exactly_zero,
        proposal="none",
        proposed_bound=None,
        bound_before_margin=None,
        margins=margins,
        refused=False,
        reason="",
        risk=1.0 / (len(cases) + 1),
        repeat_spread=spread,
        environment=_environment(),
        activity=noise.activity,
        band_caught_signals=outside_gap,
        claim_id=claim_id,
        label=label,
    )
    _propose(result)
    for summary in summaries:
        if summary.caught_by:
            summary.caught = band_caught[summary.name]
    return result


def _recorded_metrics(metric: str, metrics: Iterable[str]) -> list[str]:
    """The claim's metric first, then every other metric recorded; unknown ones refused."""
    if metric not in DIRECTIONS:
        raise InputError(
            f"cannot calibrate metric {metric!r}", hint=f"use one of {', '.join(DIRECTIONS)}"
        )
    recorded = list(dict.fromkeys([metric, *metrics]))
    for name in recorded:
        if name not in DIRECTIONS:
            raise InputError(f"unknown metric {name!r}", hint=f"use {', '.join(DIRECTIONS)}")
    return recorded


def _checked_cases(cases: Sequence[Any] | int, min_cases: int) -> list[Any]:
    """The cases as a list (a count is ``range(n)``), at least ``min_cases`` of them."""
    if isinstance(cases, int):
        cases = list(range(cases))
    cases = list(cases)
    if not cases:
        raise InputError("calibration needs cases: got none")
    if len(cases) < min_cases:
        raise InputError(
            f"calibration needs at least {min_cases} cases, got {len(cases)}: with n cases the "
            "next "
            f"case exceeds the largest observed noise with probability about 1/(n+1)",
            hint="add cases, or pass min_cases= to accept the larger risk knowingly",
        )
    return cases


class _Noise:
    """The unmutated pairs, measured over every case and repeat: each metric's worst value per
    run (overall and per output), the claim metric per case, the activity counters, and the
    first repeat's host outputs that the mutations start from."""

    def __init__(self, recorded: list[str], case_names: list[str], counters: list[str]):
        self.recorded = recorded
        self.case_names = case_names
        self.counters = counters
        self.values: dict[str, list[float]] = {m: [] for m in recorded}
        self.by_output: dict[str, dict[str, list[float]]] = {m: {} for m in recorded}
        self.per_case_claim: dict[int, list[float]] = {}
        self.exactly_zero = True
        self.baselines: dict[int, dict[str, np.ndarray]] = {}
        self.candidates: dict[int, dict[str, np.ndarray]] = {}
        self.candidate_paths: dict[int, set[str]] = {}  # every output the candidate reported
        self.covered: list[str] = []
        self.activity: dict[str, dict[str, list[float]]] = {c: {"candidate": []} for c in counters}

    def measure(
        self,
        run_pair: RunPair,
        cases: list[Any],
        measure: _Measure,
        metric: str,
        outputs: Sequence[str] | None,
        repeats: int,
        reorder: bool,
        rng: np.random.Generator,
    ) -> None:
        covered: list[str] | None = None
        for repeat in range(repeats):
            order = list(range(len(cases)))
            if reorder and repeat > 0:
                order = [int(i) for i in rng.permutation(len(cases))]
            for index in order:
                where = f"case {self.case_names[index]}"
                baseline_tree, candidate_tree = _pair(run_pair(cases[index]), where)
                baseline = _host_tree(baseline_tree, where + " (baseline)", outputs)
                candidate = _host_tree(candidate_tree, where + " (candidate)", outputs)
                if covered is None:
                    covered = _select(baseline, outputs, baseline_tree)
                _same_outputs(baseline, candidate, covered, where)
                values, zero = measure(candidate, baseline, covered)
                self.exactly_zero &= zero
                for name in self.recorded:
                    self.values[name].append(_worst(name, [values[path][name] for path in covered]))
                    for path in covered:
                        self.by_output[name].setdefault(path, []).append(values[path][name])
                self.per_case_claim.setdefault(index, []).append(self.values[metric][-1])
                for counter in self.counters:
                    self.activity[counter]["candidate"].append(
                        _counter(candidate_tree, counter, where)
                    )
                if repeat == 0:
                    self.baselines[index] = {p: baseline[p] for p in covered}
                    self.candidates[index] = {p: candidate[p] for p in covered}
                    self.candidate_paths[index] = set(candidate)
        assert covered is not None  # at least one case ran
        self.covered = covered

    def worst_values(self, measure: _Measure, index: int, mutated: dict[str, Any]) -> dict:
        """Every recorded metric's worst value over the covered outputs of a mutated case."""
        values, _ = measure(mutated, self.baselines[index], self.covered)
        return {
            name: _worst(name, [values[p][name] for p in self.covered]) for name in self.recorded
        }


def _output_mutations(
    mutations: Sequence[Mutation],
    noise: _Noise,
    measure: _Measure,
    seed: int,
    bugs: dict[str, dict[str, list[float]]],
) -> list[MutationSummary]:
    """Each output mutation applied to the candidate's outputs of every case it changes; the
    metrics of each changed case go into ``bugs``."""
    summaries = []
    for mi, mutation in enumerate(mutations):
        changed_cases: list[str] = []
        for index in range(len(noise.case_names)):
            mutated, changed = {}, False
            case_rng = np.random.default_rng([seed, mi, index])
            for path in noise.covered:
                original = noise.candidates[index][path]
                result = mutation.apply(original, case_rng)
                if result is None:
                    mutated[path] = original
                    continue
                changed |= not _bytes_equal(result, original)
                mutated[path] = result
            if not changed:
                continue  # the mutation injected nothing here: no bug to measure
            changed_cases.append(noise.case_names[index])
            for name, value in noise.worst_values(measure, index, mutated).items():
                bugs[name].setdefault(mutation.name, []).append(value)
        summaries.append(
            MutationSummary(
                mutation.name,
                "output",
                mutation.description,
                len(changed_cases),
                None,
                changed_cases=changed_cases,
            )
        )
    return summaries


def _model_mutations(
    model_mutations: Mapping[str, Callable[[Any], Tree]],
    cases: list[Any],
    noise: _Noise,
    measure: _Measure,
    outputs: Sequence[str] | None,
    bugs: dict[str, dict[str, list[float]]],
) -> list[MutationSummary]:
    """Each mutated model run on every case; a case whose outputs it changes is a signal (a
    changed output structure at the metric's worst value), its counters go into the activity."""
    summaries = []
    for name_m, make in model_mutations.items():
        changed_cases: list[str] = []
        structure_changed: list[str] = []
        for index in range(len(cases)):
            case_name = noise.case_names[index]
            where = f"model mutation {name_m!r}, case {case_name}"
            try:
                mutated_tree = make(cases[index])
            except Exception as exc:
                exc.add_note(f"paritygate.calibrate: raised by {where}")
                raise
            mutated = _host_tree(mutated_tree, where, outputs)
            for counter in noise.counters:
                noise.activity[counter].setdefault(name_m, []).append(
                    _counter(mutated_tree, counter, where)
                )
            changes = _structure_changes(
                noise.baselines[index], mutated, noise.covered, noise.candidate_paths[index]
            )
            if changes:
                # A mutated model that changes an output's structure fails the claim in the most
                # obvious way: caught in this case, at the metric's worst value, never noise.
                changed_cases.append(case_name)
                structure_changed.append(
                    f"case {case_name}: structure changed: {'; '.join(changes)}"
                )
                for name in noise.recorded:
                    bugs[name].setdefault(name_m, []).append(claim_metrics.get(name).worst)
                continue
            if all(_bytes_equal(mutated[p], noise.candidates[index][p]) for p in noise.covered):
                continue  # the same rule as output mutations: nothing injected in this case
            changed_cases.append(case_name)
            for name, value in noise.worst_values(measure, index, mutated).items():
                bugs[name].setdefault(name_m, []).append(value)
        description = (getattr(make, "__doc__", None) or "").strip().splitlines()
        summaries.append(
            MutationSummary(
                name_m,
                "model",
                description[0] if description else "",
                len(changed_cases),
                None,
                structure_changed=structure_changed,
                changed_cases=changed_cases,
            )
        )
    return summaries


def _caught_by_band(
    activity_band: tuple[str, float, float] | None,
    model_mutations: Mapping[str, Any],
    activity: dict[str, dict[str, list[float]]],
) -> dict[str, int]:
    """Model mutations whose counter leaves the activity band in every case (by case count)."""
    caught: dict[str, int] = {}
    if activity_band is not None:
        counter, low, high = activity_band
        for name_m in model_mutations:
            values = activity[counter].get(name_m, [])
            if values and all(not low <= v <= high for v in values):
                caught[name_m] = len(values)
    return caught


def _pair(value: Any, where: str) -> tuple[Any, Any]:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise InputError(
            "run_pair must return (baseline_outputs, candidate_outputs), got "
            f"{type(value).__name__}",
            where=where,
        )
    return value


def _counter(tree: Any, name: str, where: str) -> float:
    """An activity counter the run reported, as a number."""
    leaves = flatten(tree)
    if name not in leaves:
        raise InputError(f"{where}: the run reports no activity counter {name!r}", where=name)
    value = leaves[name]
    array = to_numpy(value, path=name)
    array = np.asarray(value if array is None else array)
    if array.size != 1 or array.dtype.kind not in "biuf":
        raise InputError(
            f"{where}: activity counter {name!r} is not one number ({array.dtype}, shape "
            f"{array.shape})"
        )
    return float(array.reshape(()))


def _case_name(case: Any) -> str:
    name = getattr(case, "name", None)
    return str(name) if isinstance(name, str) else str(case)


def _host_tree(tree: Any, where: str, patterns: Sequence[str] | None = None) -> dict[str, Any]:
    """The leaves a claim covers (all without patterns), evaluated and copied to the host."""
    leaves = flatten(tree)
    if patterns is not None:
        leaves = {
            p: v
            for p, v in leaves.items()
            if p in patterns or any(fnmatch.fnmatchcase(p, pat) for pat in patterns)
        }
    synchronize_tree(leaves)
    host = {}
    for path, value in leaves.items():
        array = to_numpy(value, path=f"{where}: {path or 'output'}")
        if array is None:
            raise InputError(
                f"output {path!r} is not numeric ({type(value).__name__})", where=where
            )
        host[path] = array
    return host


def _select(baseline: Mapping[str, Any], patterns: Sequence[str] | None, tree: Any) -> list[str]:
    if baseline:
        return list(baseline)
    names = ", ".join(flatten(tree)) or "none"
    raise InputError(f"output patterns {list(patterns or [])} match none of the outputs ({names})")


def _same_outputs(
    baseline: Mapping[str, Any], other: Mapping[str, Any], covered: Sequence[str], where: str
) -> None:
    # The unmutated candidate against the baseline: a change of structure here is an error of the
    # measurement itself (there is no noise to calibrate), unlike a mutated model's, which is
    # caught.
    why = "the unmutated candidate must report the baseline's outputs in the baseline's shapes"
    missing = [p for p in covered if p not in other]
    if missing:
        raise InputError(
            f"outputs {missing} missing from the unmutated candidate", where=where, hint=why
        )
    for path in covered:
        if path not in baseline:
            raise InputError(
                f"output {path!r} missing from the baseline side", where=where, hint=why
            )
        if baseline[path].shape != other[path].shape:
            raise InputError(
                f"output {path!r} of the unmutated candidate: shape {other[path].shape} against "
                "the "
                f"baseline's {baseline[path].shape}",
                where=where,
                hint=why,
            )


def _structure_changes(
    baseline: Mapping[str, Any],
    mutated: Mapping[str, Any],
    covered: Sequence[str],
    unmutated: set[str],
) -> list[str]:
    """How a mutated model's outputs differ in structure from the baseline: missing, extra (an
    output the unmutated candidate does not report either), reshaped."""
    changes = [f"output {p!r} missing" for p in covered if p not in mutated]
    changes += [f"extra output {p!r}" for p in mutated if p not in covered and p not in unmutated]
    changes += [
        f"output {p!r} shape {mutated[p].shape} against {baseline[p].shape}"
        for p in covered
        if p in mutated and mutated[p].shape != baseline[p].shape
    ]
    return changes


def _bytes_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _worst(metric: str, values: list[float]) -> float:
    return max(values) if DIRECTIONS[metric] == "max" else min(values)


def _least_detectable(metric: str, values: list[float]) -> float:
    return min(values) if DIRECTIONS[metric] == "max" else max(values)


class _Measure:
    """Metric values per output for one (actual, expected) pair, through the shared comparison."""

    def __init__(
        self,
        metrics: list[str],
        rel_eps: float,
        ssim_data_range: float | None,
        ssim_channel_axis: int | None,
        params: Mapping[str, Any] | None = None,
    ):
        images = [m for m in metrics if claim_metrics.get(m).comparison == "images"]
        if images and ssim_data_range is None:
            raise InputError(
                f"{images[0]} needs the images' data range (ssim_data_range=): 255 for uint8 "
                "pixels, 1.0 for [0, 1], 2.0 for [-1, 1]; it is never guessed"
            )
        self.metrics = metrics
        self.tolerance = Tolerance(rel_eps=rel_eps, worst_k=0)
        self.params = {
            **(params or {}),
            "data_range": ssim_data_range,
            "channel_axis": ssim_channel_axis,
        }

    def __call__(
        self,
        actual: Mapping[str, np.ndarray],
        expected: Mapping[str, np.ndarray],
        paths: Sequence[str],
    ) -> tuple[dict[str, dict[str, float]], bool]:
        values: dict[str, dict[str, float]] = {}
        zero = True
        for path in paths:
            a, e = actual[path], expected[path]
            pair = claim_metrics.Pair(a, e, path, self.params, self.tolerance)
            out = pair.compared
            nf = out.nonfinite
            nonfinite = bool(nf.nan_one_side or nf.inf_mismatch)
            # An exact claim is byte equality: a zero difference in value with other bytes
            # (a signed zero, a NaN payload, another dtype) is not exactly zero noise.
            zero &= out.max_abs == 0 and not nonfinite and _bytes_equal(a, e)
            row: dict[str, float] = {}
            for name in self.metrics:
                entry = claim_metrics.get(name)
                if nonfinite and entry.comparison != "images":
                    value = entry.worst  # NaN or an infinity on one side: the worst value
                else:
                    value = entry.measure(pair)
                if value is None or math.isnan(value):
                    # Undefined: the worst value where that is a failure (a zero-norm side's
                    # cosine), else left out (the ULP distance of integer outputs).
                    value = entry.worst if entry.undefined_is_worst else math.nan
                row[name] = float(value)
            values[path] = row
        return values, zero


def _distribution(
    metric: str, noise: list[float], by_output: dict[str, list[float]], bugs: dict[str, list[float]]
) -> MetricDistribution:
    direction = DIRECTIONS[metric]
    clean = [v for v in noise if not math.isnan(v)]
    largest = (max(clean) if direction == "max" else min(clean)) if clean else None
    smallest, where = None, None
    for name, signals in bugs.items():
        values = [v for v in signals if not math.isnan(v)]
        if not values:
            continue
        least = _least_detectable(metric, values)
        if smallest is None or (least < smallest if direction == "max" else least > smallest):
            smallest, where = least, name
    gap = None
    if largest is not None and smallest is not None:
        gap = smallest - largest if direction == "max" else largest - smallest
    return MetricDistribution(
        metric, direction, noise, by_output, bugs, largest, smallest, where, gap
    )


def _environment(modules: set[str] | None = None) -> dict[str, Any]:
    """Hardware, date and the versions of the libraries loaded (by this process, or the
    ``modules`` the processes that ran the units loaded)."""
    from ..execution import loaded_modules
    from ..provenance import machine_facts, package_versions, utc_now

    facts = machine_facts()
    hardware = facts.get("cpu") or facts.get("machine") or platform.machine()
    gpus = facts.get("gpu") or []
    if gpus:
        hardware = f"{hardware}; {', '.join(map(str, gpus))}"
    # Versions of the libraries actually loaded: those that moved the numbers.
    modules = loaded_modules() if modules is None else modules
    loaded = {
        name: version
        for name, version in package_versions().items()
        if _MODULE_OF.get(name, name.replace("-", "_")) in modules
    }
    return {
        # The SIMD level too: framework kernels round by it (an AVX2 and an AVX-512 CPU differ).
        "hardware": f"{hardware} ({facts.get('system')} {facts.get('machine')}"
        + (f", {facts['cpu_isa']})" if facts.get("cpu_isa") else ")"),
        "date": utc_now(),
        "versions": loaded,
    }


_MODULE_OF = {
    "scikit-image": "skimage",
    "scikit-learn": "sklearn",
    "pillow": "PIL",
    "opencv-python": "cv2",
    "opencv-python-headless": "cv2",
    "mlx-metal": "mlx",
    "onnxruntime-gpu": "onnxruntime",
}

"""Tolerance calibration: measure the noise, inject bugs, check the gap, propose a bound.

A tolerance is a meaningful test only when the measured noise of the comparison and the smallest
bug worth catching lie on either side of it. :func:`calibrate` therefore

1. runs the comparison over many cases (16 at least by default), optionally repeated and in a
   shuffled order, and records the raw distribution of every metric (no pass/fail);
2. injects bugs: output-level mutations of the candidate's outputs (additive noise, a single-element
   spike, an off-by-one shift, a swapped channel pair, a drop to float16 / bfloat16) and
   model-level mutations the caller supplies as callables, and measures each one's signal on the
   same metrics;
3. reports the gap between the largest noise and the smallest bug signal, and the risk that comes
   with n cases (the next case exceeds the largest of n observed values with probability about
   1/(n+1));
4. proposes a bound just past the noise, widened only by the spread the caller names (another
   machine, another library version), or an exact claim when the noise is exactly zero, or
   refuses when no gap exists: then the comparison must change, not the constant.

:func:`write_bound` stores the bound, ``status = "calibrated"`` and the basis beside the constant
in the spec, keeping the file's comments and layout.

The package's parts: :mod:`.mutations` (the bugs injected), :mod:`.measure` (the comparison over
the cases and every metric's distribution), :mod:`.proposal` (the bound or the refusal),
:mod:`.result` (what was found), :mod:`.claims` (a spec's claim calibrated the way the gate
measures it, and the bound written back), :mod:`.dataset` (dataset claims over resampled cases)
and :mod:`.plots`.
"""

from __future__ import annotations

from .claims import calibrate_claim, choose_cases, write_bound
from .dataset import DatasetCalibration, calibrate_dataset_claim
from .measure import calibrate
from .mutations import (
    BUILTIN_MUTATIONS,
    DEFAULT_MUTATIONS,
    Mutation,
    additive_noise,
    mutations_named,
    reduced_precision,
    shift,
    spike,
    swap_channels,
)
from .plots import calibration_plot
from .result import (
    DEFAULT_METRICS,
    DIRECTIONS,
    NO_GAP_REASON,
    CalibrationResult,
    MetricDistribution,
    MutationSummary,
)

__all__ = [
    "calibrate",
    "calibrate_claim",
    "write_bound",
    "calibrate_dataset_claim",
    "DatasetCalibration",
    "choose_cases",
    "mutations_named",
    "calibration_plot",
    "CalibrationResult",
    "MetricDistribution",
    "MutationSummary",
    "Mutation",
    "additive_noise",
    "spike",
    "shift",
    "swap_channels",
    "reduced_precision",
    "DEFAULT_MUTATIONS",
    "BUILTIN_MUTATIONS",
    "DEFAULT_METRICS",
    "DIRECTIONS",
    "NO_GAP_REASON",
]

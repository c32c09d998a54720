"""paritygate: every published number of an ML port becomes a claim enforced by a binary gate.

The public API is what ``__all__`` lists here, and the ``__all__`` of the public submodules named
in :data:`PUBLIC_MODULES` (calibration, structured comparisons, benchmarks, reports, the claim
metric registry, provenance, the pytest helpers and the CLI entry point). Everything else is
internal and may
change between releases; the examples use only the public API (a test checks their imports).

Importing paritygate imports no ML framework and not pytest; frameworks are reached lazily
through :mod:`paritygate.backends` when their arrays are compared.
"""

from __future__ import annotations

from typing import Any

from .approximation import ActivityBand, check_activity, count_calls
from .calibration import CalibrationResult, calibrate, calibrate_claim, write_bound
from .compare import compare, compare_output
from .drift import verify
from .equivalence import check_equivalence, evaluate_claim
from .errors import (
    DriftError,
    InputError,
    InternalError,
    ParitygateError,
    RunFailure,
    SpecError,
    UserError,
)
from .files import load_outputs, save_outputs
from .gate import current_hardware, run_gate
from .outputs import flatten_outputs
from .paired import PairedResult, paired
from .references import load_reference, record, recorded_outputs
from .results import (
    ClaimVerdict,
    Comparison,
    Element,
    Failure,
    GateResult,
    NonFinite,
    OutputComparison,
    Tolerance,
)
from .spec import Claim, Spec, load_spec, update_claim
from .structured import compare_class_decisions, compare_images, compare_keyed_boxes
from .testing import assert_parity

__version__ = "0.1.0"

#: Submodules whose own ``__all__`` is public API too.
PUBLIC_MODULES = (
    "paritygate.bench",
    "paritygate.calibration",
    "paritygate.claim_metrics",
    "paritygate.cli",
    "paritygate.provenance",
    "paritygate.reports",
    "paritygate.sequence",
    "paritygate.structured",
    "paritygate.testing",
)

# Names whose module is imported on first use (the reports bring rich and their renderers).
_LAZY = {"format_comparison": "paritygate.reports.text"}

__all__ = [
    "__version__",
    "PUBLIC_MODULES",
    # comparing outputs
    "compare",
    "compare_output",
    "assert_parity",
    "flatten_outputs",
    "format_comparison",
    "load_outputs",
    "save_outputs",
    "Comparison",
    "OutputComparison",
    "Element",
    "NonFinite",
    "Failure",
    "Tolerance",
    # specs, references and the gate
    "load_spec",
    "update_claim",
    "Spec",
    "Claim",
    "record",
    "load_reference",
    "recorded_outputs",
    "verify",
    "run_gate",
    "current_hardware",
    "GateResult",
    "ClaimVerdict",
    # the oracles
    "paired",
    "PairedResult",
    "check_equivalence",
    "evaluate_claim",
    "ActivityBand",
    "check_activity",
    "count_calls",
    "compare_keyed_boxes",
    "compare_class_decisions",
    "compare_images",
    # calibration
    "calibrate",
    "calibrate_claim",
    "write_bound",
    "CalibrationResult",
    # errors
    "ParitygateError",
    "UserError",
    "InputError",
    "SpecError",
    "DriftError",
    "RunFailure",
    "InternalError",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'paritygate' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

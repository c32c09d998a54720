"""paritygate: every published number of an ML port becomes a claim enforced by a binary gate.

Importing paritygate imports no ML framework and not pytest; frameworks are reached lazily
through :mod:`paritygate.backends` when their arrays are compared.
"""

from __future__ import annotations

from .approximation import ActivityBand, check_activity
from .calibration import CalibrationResult, calibrate
from .compare import compare, compare_output
from .errors import DriftError, InputError, InternalError, ParitygateError, SpecError, UserError
from .outputs import flatten_outputs
from .paired import PairedResult, paired
from .results import Comparison, Element, Failure, NonFinite, OutputComparison, Tolerance
from .testing import assert_parity

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "assert_parity",
    "paired",
    "PairedResult",
    "ActivityBand",
    "check_activity",
    "calibrate",
    "CalibrationResult",
    "compare",
    "compare_output",
    "flatten_outputs",
    "Comparison",
    "DriftError",
    "Element",
    "Failure",
    "InputError",
    "InternalError",
    "NonFinite",
    "OutputComparison",
    "ParitygateError",
    "SpecError",
    "Tolerance",
    "UserError",
]

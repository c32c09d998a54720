"""paritygate: every published number of an ML port becomes a claim enforced by a binary gate.

The public API is what ``__all__`` lists here, and the ``__all__`` of the public submodules named
in :data:`PUBLIC_MODULES` (calibration, structured comparisons, benchmarks, reports, the claim
metric registry, provenance, the processes a runner starts, the pytest helpers and the CLI entry
point). Everything else is internal and may change between releases; the examples use only the
public API (a test checks their imports).

Importing paritygate imports no ML framework and not pytest; frameworks are reached lazily
through :mod:`paritygate.backends` when their arrays are compared.
"""

from __future__ import annotations

import sys
import types

# Each public name and the module that defines it. Importing paritygate imports none of them:
# a name's module is imported on first use, so that ``import paritygate`` and the command line
# start in milliseconds (a Ctrl-C during start-up finds the command line's handler already in
# place) and import no framework.
_SOURCES: dict[str, tuple[str, ...]] = {
    "approximation": ("ActivityBand", "check_activity", "count_calls"),
    "calibration": ("CalibrationResult", "calibrate", "calibrate_claim", "write_bound"),
    "compare": ("compare", "compare_output"),
    "drift": ("verify",),
    "equivalence": ("check_equivalence", "evaluate_claim"),
    "errors": (
        "DriftError",
        "InputError",
        "InternalError",
        "ParitygateError",
        "RunFailure",
        "SpecError",
        "UserError",
    ),
    "files": ("load_outputs", "save_outputs"),
    "gate": ("current_hardware", "run_gate"),
    "outputs": ("flatten_outputs",),
    "paired": ("PairedResult", "paired"),
    "references": ("load_reference", "record", "recorded_outputs"),
    "results": (
        "ClaimVerdict",
        "Comparison",
        "Element",
        "Failure",
        "GateResult",
        "NonFinite",
        "OutputComparison",
        "Tolerance",
    ),
    "spec": ("Claim", "Spec", "load_spec", "update_claim"),
    "structured": ("compare_class_decisions", "compare_images", "compare_keyed_boxes"),
    "testing": ("assert_parity",),
    "reports.text": ("format_comparison",),
}
_LAZY = {name: f"paritygate.{module}" for module, names in _SOURCES.items() for name in names}

__version__ = "0.1.0"

#: Submodules whose own ``__all__`` is public API too.
PUBLIC_MODULES = (
    "paritygate.bench",
    "paritygate.calibration",
    "paritygate.children",
    "paritygate.claim_metrics",
    "paritygate.cli",
    "paritygate.locate",
    "paritygate.mutation",
    "paritygate.provenance",
    "paritygate.reports",
    "paritygate.seeded",
    "paritygate.sequence",
    "paritygate.structured",
    "paritygate.testing",
)

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


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'paritygate' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """``compare`` and ``paired`` are public functions defined in modules of the same name:
    importing such a module must not replace the function with the module on the package (the
    functions are what ``paritygate.compare`` has always been)."""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == f"{__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

"""The equivalence oracle: a changed numerical path (a re-walked forward pass, a compiled graph,
another runtime) held to a measured tolerance on the claim's metric.

The gate and a project's own tests share one evaluation, :func:`paritygate.gate.evaluate_claim`;
this module lets a test hold in-process outputs (framework arrays included, evaluated first) to a
claim of its spec, with the same verdict the gate would give.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._host import flatten, synchronize_tree, to_numpy
from .errors import InputError
from .results import ClaimVerdict

__all__ = ["check_equivalence"]


def check_equivalence(
    claim: Any,
    actual: Any,
    expected: Any,
    *,
    spec: str | Path | None = None,
    candidate: str = "candidate",
    case: str | None = None,
) -> ClaimVerdict:
    """The claim's verdict on one pair of output trees (``actual`` = candidate, ``expected`` =
    baseline). ``claim`` is a :class:`~paritygate.spec.Claim`, or a claim id with ``spec``."""
    from .gate import evaluate_claim
    from .spec import Claim, load_spec

    if not isinstance(claim, Claim):
        if spec is None:
            raise InputError(f"claim {claim!r} is an id: pass spec= to look it up")
        loaded = load_spec(spec)
        if claim not in loaded.claims:
            raise InputError(
                f"no claim {claim!r} (claims: {', '.join(loaded.claims) or 'none'})",
                where=str(spec),
            )
        claim = loaded.claims[claim]
    if claim.oracle != "equivalence":
        raise InputError(
            f"claim {claim.id!r} answers the {claim.oracle} question, not equivalence",
            hint="no-op claims run through paritygate.paired; approximation claims through the gate",
        )
    return evaluate_claim(
        claim, candidate, case, _host(actual, "actual"), _host(expected, "expected")
    )


def _host(tree: Any, side: str) -> dict[str, Any]:
    leaves = flatten(tree)
    synchronize_tree(leaves)
    host = {}
    for path, value in leaves.items():
        array = to_numpy(value, path=f"{side}: {path}")
        host[path] = value if array is None else array
    return host

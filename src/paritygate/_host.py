"""Leaves of an output tree on the host: synchronizing lazy frameworks and copying to numpy.

The paired oracle, calibration and the runners need every leaf evaluated (MLX and JAX build
graphs lazily, torch queues CUDA work) and, for byte equality, the exact bytes on the host.
Framework arrays go through their backend module (:mod:`paritygate.backends`), which keeps
bfloat16 and float8 exact by reinterpreting their bits instead of converting values; nothing
here knows a framework by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._dtypes import is_numeric
from .backends import synchronize_all
from .errors import InputError
from .outputs import ROOT, flatten_outputs, framework_backend

__all__ = ["flatten", "synchronize_tree", "to_numpy", "host_arrays"]


def flatten(tree: Any) -> dict[str, Any]:
    """Named leaves of an output tree (``a/b/0``; a bare leaf is named ``""``)."""
    return dict(flatten_outputs(tree))


def host_arrays(tree: Any, *, root: str = ROOT) -> dict[str, np.ndarray]:
    """The numeric leaves of an output tree as host numpy arrays, dtypes kept (bfloat16 too).

    Names follow :func:`~paritygate.outputs.flatten_outputs` (a bare leaf is named ``root``).
    A leaf that is not numeric (a string, a record) raises InputError naming it.
    """
    arrays: dict[str, np.ndarray] = {}
    for name, value in flatten_outputs(tree, root=root).items():
        shown = name or "output"
        array = to_numpy(value, path=shown)
        if array is None:
            raise InputError(f"output {shown!r} is {type(value).__name__}, not a number or array")
        if not is_numeric(array.dtype, "biuf"):
            raise InputError(f"output {shown!r} has dtype {array.dtype}, not numeric")
        arrays[name] = array
    return arrays


def synchronize_tree(leaves: dict[str, Any]) -> None:
    """Force every pending computation of the leaves (one ``mx.eval`` call for all MLX leaves)."""
    synchronize_all(leaves.values())


def to_numpy(value: Any, *, path: str = "output") -> np.ndarray | None:
    """A host copy of one leaf with its dtype kept (bfloat16 via ml_dtypes); None for non-arrays.

    Python numbers and bools become 0-d arrays; strings, bytes and None return None (they are
    compared by equality). Framework arrays are copied by their backend.
    """
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, (bool, int, float, complex)):
        return np.asarray(value)
    if value is None or isinstance(value, (str, bytes)):
        return None
    backend = framework_backend(value)
    if backend is not None:
        return np.asarray(backend.to_numpy(value))
    if hasattr(value, "__array__"):
        return np.asarray(value)
    raise InputError(f"cannot read a {type(value).__name__} as an array", where=path)

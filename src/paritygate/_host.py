"""Leaves of an output tree on the host: synchronizing lazy frameworks and copying to numpy.

The paired oracle and calibration need every leaf evaluated (MLX and JAX build graphs lazily,
torch queues CUDA work) and, for byte equality, the exact bytes on the host. Framework arrays go
through their backend module when one is registered; the fallbacks below cover the frameworks
whose backend module is not available, and keep bfloat16 exact by reinterpreting its bits
instead of converting values.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ._dtypes import is_numeric
from .errors import InputError
from .outputs import ROOT, flatten_outputs

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


def _backend(obj: Any) -> Any | None:
    try:
        from .backends import get_backend

        return get_backend(obj)
    except ImportError:  # a framework is imported but its backend module is not available
        return None


def synchronize_tree(leaves: dict[str, Any]) -> None:
    """Force every pending computation of the leaves (one ``mx.eval`` call for all MLX leaves)."""
    mlx_leaves = [v for v in leaves.values() if _module_of(v) == "mlx"]
    if mlx_leaves:
        import mlx.core as mx

        mx.eval(*mlx_leaves)
    for value in leaves.values():
        framework = _module_of(value)
        if framework in (None, "mlx", "numpy"):
            continue
        backend = _backend(value)
        if backend is not None:
            backend.synchronize(value)
        elif framework == "jax":
            value.block_until_ready()
        elif framework == "torch" and getattr(value, "is_cuda", False):
            import torch

            torch.cuda.synchronize(value.device)


def _module_of(value: Any) -> str | None:
    module = type(value).__module__.split(".")[0]
    if module in ("mlx", "torch", "jax", "jaxlib", "numpy"):
        return "jax" if module == "jaxlib" else module
    return None


def to_numpy(value: Any, *, path: str = "output") -> np.ndarray | None:
    """A host copy of one leaf with its dtype kept (bfloat16 via ml_dtypes); None for non-arrays.

    Python numbers and bools become 0-d arrays; strings, bytes and None return None (they are
    compared by equality).
    """
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, (bool, int, float, complex)):
        return np.asarray(value)
    if value is None or isinstance(value, (str, bytes)):
        return None
    framework = _module_of(value)
    if framework == "mlx":
        return _mlx_to_numpy(value)
    if framework == "torch":
        return _torch_to_numpy(value)
    backend = _backend(value)
    if backend is not None:
        return np.asarray(backend.to_numpy(value))
    if framework == "jax" or hasattr(value, "__array__"):
        return np.asarray(value)
    raise InputError(f"cannot read a {type(value).__name__} as an array", where=path)


def _mlx_to_numpy(value: Any) -> np.ndarray:
    mx = sys.modules["mlx.core"]
    if value.dtype == mx.bfloat16:
        import ml_dtypes

        return np.array(value.view(mx.uint16)).view(ml_dtypes.bfloat16)
    return np.array(value)


def _torch_to_numpy(value: Any) -> np.ndarray:
    torch = sys.modules["torch"]
    tensor = value.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.resolve_conj().resolve_neg().numpy()

"""Framework array support, found through a registry keyed by array type.

A backend knows one framework's arrays: how to recognise them, how to synchronize pending work
(``mx.eval``, ``torch.cuda.synchronize``, ``jax.block_until_ready``), and how to compute the
comparison metrics on the device where the data lives so that only scalars and the worst-k
elements cross to the host.

Only frameworks already imported by the caller (present in ``sys.modules``) are considered, so
looking up a backend never imports a framework (the approach of einops' ``get_backend``).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..results import OutputComparison, Tolerance

__all__ = [
    "Backend",
    "get_backend",
    "registered_backends",
    "synchronize",
    "synchronize_all",
    "seed_frameworks",
]


class Backend(Protocol):
    """What each ``backends/<framework>.py`` module provides (as module-level names)."""

    name: str

    def is_array(self, obj: Any) -> bool: ...

    def synchronize(self, obj: Any) -> None: ...

    def describe(self, obj: Any) -> tuple[tuple[int, ...], str, str]:
        """(shape, dtype name, device) without moving data."""
        ...

    def compare_arrays(
        self, actual: Any, expected: Any, tolerance: Tolerance, path: str
    ) -> OutputComparison: ...

    def to_numpy(self, obj: Any) -> Any:
        """Copy to a numpy array, dtype kept (bfloat16 and float8 through ml_dtypes)."""
        ...

    # Optional: ``synchronize_many(objs)`` waits for several arrays in one call (MLX evaluates
    # them in one ``mx.eval``); ``seed(value)`` seeds the framework's global generator.


# top-level framework module -> paritygate backend module. Order matters only for speed.
_REGISTRY: dict[str, str] = {
    "torch": "paritygate.backends.torch",
    "mlx": "paritygate.backends.mlx",
    "jax": "paritygate.backends.jax",
    "onnxruntime": "paritygate.backends.onnxruntime",
}
_loaded: dict[str, Any] = {}


def _backend_module(framework: str) -> Any:
    module = _loaded.get(framework)
    if module is None:
        module = importlib.import_module(_REGISTRY[framework])
        _loaded[framework] = module
    return module


def registered_backends() -> list[str]:
    return list(_REGISTRY)


def get_backend(obj: Any) -> Any | None:
    """The backend module for a framework array, or None for numpy arrays and Python data."""
    for framework in _REGISTRY:
        if framework not in sys.modules:
            continue
        backend = _backend_module(framework)
        if backend.is_array(obj):
            return backend
    return None


def synchronize(obj: Any) -> None:
    """Wait for pending work on a framework array (a no-op for numpy and Python data)."""
    backend = get_backend(obj)
    if backend is not None:
        backend.synchronize(obj)


def synchronize_all(values: Any) -> None:
    """Wait for pending work on every framework array among ``values``: one call per backend
    where it offers ``synchronize_many`` (one ``mx.eval`` for all MLX arrays)."""
    groups: dict[str, tuple[Any, list[Any]]] = {}
    for value in values:
        backend = get_backend(value)
        if backend is not None:
            groups.setdefault(backend.name, (backend, []))[1].append(value)
    for backend, arrays in groups.values():
        many = getattr(backend, "synchronize_many", None)
        if many is not None:
            many(arrays)
        else:
            for array in arrays:
                backend.synchronize(array)


def seed_frameworks(seed: int) -> None:
    """Seed the global generator of every framework already imported whose backend has one
    (``torch.manual_seed``, ``mx.random.seed``); never imports a framework."""
    for framework in _REGISTRY:
        if framework in sys.modules:
            seed_one = getattr(_backend_module(framework), "seed", None)
            if seed_one is not None:
                seed_one(seed)

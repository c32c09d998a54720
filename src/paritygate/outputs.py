"""Output trees: nested dicts, lists and tuples flattened into named leaves.

A model's outputs are named by their path in the tree, parts joined by ``/``: ``logits``,
``boxes/editor``, ``layers/0``. A list or tuple that is rectangular and holds only numbers (or
bools) is one array leaf, not a container, so ``[[1, 2], [3, 4]]`` is a single 2x2 output. Numpy
arrays, numpy and Python scalars, strings and framework tensors are leaves. A bare leaf (an
array passed as the whole tree) is named ``""``.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import InputError

__all__ = ["flatten_outputs", "ROOT"]

#: The name of a tree that is a single leaf.
ROOT = ""

_SCALARS = (bool, int, float, complex, np.generic)


def framework_backend(obj: Any) -> Any | None:
    """The backend module of a framework array, or None (numpy arrays, Python data).

    A framework whose backend module is not part of this installation is treated as having no
    backend: its arrays are read through numpy instead.
    """
    from .backends import get_backend

    try:
        return get_backend(obj)
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("paritygate.backends."):
            return None
        raise


def _is_framework_array(obj: Any) -> bool:
    if framework_backend(obj) is not None:
        return True
    # Arrays of frameworks without a backend (and array-likes) expose shape and dtype.
    return (
        hasattr(obj, "shape")
        and hasattr(obj, "dtype")
        and not isinstance(obj, (Mapping, list, tuple))
    )


def _is_numeric_scalar(obj: Any) -> bool:
    if isinstance(obj, (np.bool_, bool)):
        return True
    if isinstance(obj, np.generic):
        return obj.dtype.kind in "biufc"
    return isinstance(obj, numbers.Number)


def _numeric_shape(obj: Any) -> tuple[int, ...] | None:
    """The shape of a rectangular, purely numeric nested list/tuple, or None if it is not one."""
    if _is_numeric_scalar(obj):
        return ()
    if not isinstance(obj, (list, tuple)):
        return None
    if not obj:
        return (0,)
    first = _numeric_shape(obj[0])
    if first is None:
        return None
    for item in obj[1:]:
        if _numeric_shape(item) != first:
            return None
    return (len(obj),) + first


def _join(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key


def flatten_outputs(tree: Any) -> dict[str, Any]:
    """Named leaves of an output tree, in tree order: ``{"boxes/editor": array, ...}``.

    Raises InputError naming the path for keys that are not strings, keys containing ``/``,
    two paths that collide, and values that are neither containers nor leaves (``None``,
    arbitrary objects).
    """
    leaves: dict[str, Any] = {}
    _flatten(tree, ROOT, leaves)
    return leaves


def _flatten(node: Any, path: str, leaves: dict[str, Any]) -> None:
    where = path or "output tree"
    if isinstance(node, np.ndarray) or isinstance(node, (str, bytes)) or _is_numeric_scalar(node):
        _add(leaves, path, node)
    elif isinstance(node, Mapping):
        for key, value in node.items():
            if not isinstance(key, str):
                raise InputError(
                    f"output names must be strings, got {type(key).__name__} key {key!r}",
                    where=where,
                )
            if not key or "/" in key:
                raise InputError(
                    f"output name {key!r} must be non-empty and must not contain '/'",
                    where=where,
                    hint="'/' joins the parts of nested output names",
                )
            _flatten(value, _join(path, key), leaves)
    elif isinstance(node, (list, tuple)):
        if _numeric_shape(node) is not None:
            _add(leaves, path, np.asarray(node))
        else:
            for i, value in enumerate(node):
                _flatten(value, _join(path, str(i)), leaves)
    elif _is_framework_array(node):
        _add(leaves, path, node)
    else:
        raise InputError(
            f"cannot compare a value of type {type(node).__name__}: outputs are arrays, tensors, "
            "numbers, strings, or dicts/lists/tuples of them",
            where=where,
        )


def _add(leaves: dict[str, Any], path: str, leaf: Any) -> None:
    if path in leaves:  # e.g. {"0": ...} beside a list element named "0" cannot happen, but be safe
        raise InputError("two outputs share this name", where=path or "output tree")
    leaves[path] = leaf

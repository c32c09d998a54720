"""Output trees: nested dicts, lists and tuples flattened into named leaves.

A model's outputs are named by their path in the tree, parts joined by ``/``: ``logits``,
``boxes/editor``, ``layers/0``. A list or tuple that is rectangular and holds only numbers (or
bools) is one array leaf, not a container, so ``[[1, 2], [3, 4]]`` is a single 2x2 output. Numpy
arrays, numpy and Python scalars, strings and framework tensors are leaves. A bare leaf (an
array passed as the whole tree) is named ``""`` (runners name it ``"output"``).

This is the one flattener: comparison, the paired oracle, calibration, runners and the files all
name outputs through it, and :func:`nest_outputs` is its inverse (flat ``/``-joined names back to
the tree they name). :func:`paritygate._host.host_arrays` flattens and copies the leaves to numpy.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import InputError

__all__ = ["flatten_outputs", "nest_outputs", "ROOT"]

#: The name of a tree that is a single leaf.
ROOT = ""

_SCALARS = (bool, int, float, complex, np.generic)
# numpy's limit on dimensions (32 before numpy 2)
_MAX_DIMS = getattr(np, "MAXDIMS", None) or (64 if int(np.__version__.split(".")[0]) >= 2 else 32)


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


def flatten_outputs(tree: Any, *, root: str = ROOT) -> dict[str, Any]:
    """Named leaves of an output tree, in tree order: ``{"boxes/editor": array, ...}``.

    A tree that is a single leaf is named ``root``. A key may hold a ``/``-joined name
    (``{"boxes/editor": x}`` names the same output as ``{"boxes": {"editor": x}}``). Raises
    InputError naming the path for keys that are not strings or have an empty part, two paths
    that collide or an output that is also a folder of others, and values that are neither
    containers nor leaves (``None``, arbitrary objects). An empty nested table names no output
    (a detector that found no box, a VAD that found no segment): whatever the other side holds
    under it is a missing output there, which every comparison reports as a failure.
    """
    leaves: dict[str, Any] = {}
    _flatten(tree, ROOT, leaves)
    _check_folders(leaves)
    if ROOT in leaves and root != ROOT:
        return {root: leaves[ROOT]}
    return leaves


def nest_outputs(flat: Mapping[str, Any], *, where: str | None = None) -> dict[str, Any]:
    """The tree that flat names stand for: ``{"boxes/editor": x}`` -> ``{"boxes": {"editor": x}}``.

    The inverse of :func:`flatten_outputs` for names read from files or produced by runners.
    A name with an empty part, or one that is both an output and a folder of others, raises
    InputError (``where`` names the file or runner).
    """
    tree: dict[str, Any] = {}
    for name, value in flat.items():
        parts = name.split("/")
        if not all(parts):
            raise InputError(f"output name {name!r} has an empty part", where=where)
        node = tree
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InputError(
                    f"output {'/'.join(parts[: i + 1])!r} is both an array and a "
                    f"group (of {name!r})",
                    where=where,
                )
            node = child
        if parts[-1] in node:
            raise InputError(f"output {name!r} is both an array and a group", where=where)
        node[parts[-1]] = value
    return tree


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
            if not key or "" in key.split("/"):
                raise InputError(
                    f"output name {key!r} must be non-empty and have no empty part",
                    where=where,
                    hint="'/' joins the parts of nested output names",
                )
            _flatten(value, _join(path, key), leaves)
    elif isinstance(node, (list, tuple)):
        shape = _numeric_shape(node)
        if shape is not None and len(shape) > _MAX_DIMS:
            raise InputError(
                f"a list of numbers nested {len(shape)} levels deep; an array has at most "
                f"{_MAX_DIMS} dimensions",
                where=where,
            )
        if shape is not None:
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
    if path in leaves:  # {"a/b": x} beside {"a": {"b": y}}
        raise InputError("two outputs share this name", where=path or "output tree")
    leaves[path] = leaf


def _check_folders(leaves: dict[str, Any]) -> None:
    """An output that is also a folder of others (``{"a": x, "a/b": y}``) is refused."""
    for path in leaves:
        parts = path.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            if folder in leaves:
                raise InputError(f"output {folder!r} is also a folder of {path!r}", where=path)

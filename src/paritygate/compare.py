"""``compare(actual, expected, ...)``: every output of two output trees, compared and reported.

Each leaf pair goes to the kernel where its data lives: framework tensors to their backend (the
metrics are computed on the device, only scalars and the worst-k elements cross to the host),
numpy arrays and Python data to the host kernel. Outputs present on one side only are reported in
``Comparison.missing`` / ``Comparison.extra`` (they fail the comparison); inputs that cannot be
compared at all (shapes, incompatible dtypes, strings against numbers) raise InputError naming the
output path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._dtypes import is_numeric
from .backends import host
from .errors import InputError
from .metrics import dtype_kind, promote
from .outputs import ROOT, flatten_outputs, framework_backend
from .results import Comparison, Failure, OutputComparison, Tolerance

__all__ = ["compare", "compare_output"]


class _Unset:
    def __repr__(self) -> str:
        return "<default>"


_UNSET: Any = _Unset()


def compare(
    actual: Any,
    expected: Any,
    *,
    tolerance: Tolerance | None = None,
    atol: float = _UNSET,
    rtol: float = _UNSET,
    min_cosine: float | None = _UNSET,
    max_ulp: int | None = _UNSET,
    max_mean_abs: float | None = _UNSET,
    equal_nan: bool = _UNSET,
    rel_eps: float = _UNSET,
    rel_denominator: str = _UNSET,
    worst_k: int = _UNSET,
    label: str = "",
) -> Comparison:
    """Compare two outputs (arrays, tensors, scalars, strings, or nested dicts/lists/tuples).

    Bounds come either from ``tolerance`` or from the keyword bounds (the defaults of
    :class:`~paritygate.results.Tolerance` demand exact equality), not both. An element passes
    when ``|actual - expected| <= atol + rtol * |expected|``. The result is truthy when every
    output is within bounds and both trees have the same outputs.
    """
    bounds = dict(
        atol=atol,
        rtol=rtol,
        min_cosine=min_cosine,
        max_ulp=max_ulp,
        max_mean_abs=max_mean_abs,
        equal_nan=equal_nan,
        rel_eps=rel_eps,
        rel_denominator=rel_denominator,
        worst_k=worst_k,
    )
    given = {name: value for name, value in bounds.items() if value is not _UNSET}
    if tolerance is not None:
        if given:
            raise InputError(
                f"pass either tolerance= or keyword bounds ({', '.join(sorted(given))}), not both"
            )
        if not isinstance(tolerance, Tolerance):
            raise InputError(f"tolerance must be a Tolerance, got {type(tolerance).__name__}")
        tol = tolerance
    else:
        tol = Tolerance(**given)

    leaves_actual = flatten_outputs(actual)
    leaves_expected = flatten_outputs(expected)
    missing = [path for path in leaves_expected if path not in leaves_actual]
    extra = [path for path in leaves_actual if path not in leaves_expected]
    empty_against_nested = _empty_against_nested(
        missing, extra, leaves_actual, leaves_expected, tol
    )
    _check_same_structure(missing, extra, leaves_actual, leaves_expected)
    outputs = [
        compare_output(leaves_actual[path], leaf, tol, path)
        for path, leaf in leaves_expected.items()
        if path in leaves_actual
    ] + empty_against_nested
    return Comparison(outputs=outputs, missing=missing, extra=extra, tolerance=tol, label=label)


def _empty_leaf(leaf: Any) -> tuple[tuple[int, ...], str] | None:
    facts = _shape_and_dtype(leaf, framework_backend(leaf))
    if facts is None or math.prod(facts[0]) != 0:
        return None
    return facts


def _empty_against_nested(
    missing: list[str],
    extra: list[str],
    leaves_actual: dict,
    leaves_expected: dict,
    tolerance: Tolerance,
) -> list[OutputComparison]:
    """An empty output on one side where the other nests outputs (JSON ``[]`` against
    ``["a"]``: an empty list reads as an empty array, a list of strings as one output per
    element) is an empty output against a non-empty one: a size failure, not a structure
    mismatch. The paths involved leave ``missing`` / ``extra`` (edited in place)."""
    found: list[OutputComparison] = []
    for side, leaves, others, other_paths in (
        ("actual", leaves_actual, missing, extra),
        ("expected", leaves_expected, extra, missing),
    ):
        for path in list(other_paths):
            inside = _nested_under(path, others)
            facts = _empty_leaf(leaves[path]) if inside else None
            if facts is None:
                continue
            shape, dtype = facts
            nested_shape = (len(inside),)
            shape_a, shape_e = (shape, nested_shape) if side == "actual" else (nested_shape, shape)
            dtype_a, dtype_e = (dtype, "nested") if side == "actual" else ("nested", dtype)
            found.append(
                _size_failure(
                    path,
                    tolerance,
                    shape_a,
                    shape_e,
                    dtype_a,
                    dtype_e,
                    "none",
                    None,
                    "host",
                    nested=inside,
                )
            )
            other_paths.remove(path)
            for nested in inside:
                others.remove(nested)
    return found


def _nested_under(path: str, others: list[str]) -> list[str]:
    """The paths of ``others`` that lie inside ``path`` (all of them when ``path`` is the root)."""
    if path == ROOT:
        return list(others)
    return [other for other in others if other.startswith(path + "/")]


def _check_same_structure(
    missing: list[str], extra: list[str], leaves_actual: dict, leaves_expected: dict
) -> None:
    """Raise InputError where one side has a single output and the other a container there.

    A ragged or mixed JSON list, or a dict where the other side has an array, is not a missing
    output plus extra ones: the two trees disagree on what the output is, like a shape mismatch.
    """
    for one, paths, leaves, other, others in (
        ("expected", missing, leaves_expected, "actual", extra),
        ("actual", extra, leaves_actual, "expected", missing),
    ):
        for path in paths:
            inside = _nested_under(path, others)
            if inside:
                raise InputError(
                    f"structure mismatch: {one} has one output ({_describe(leaves[path])}) "
                    f"here but {other} has {len(inside)} nested output(s) ({_some(inside)})",
                    where=path or "output tree",
                    hint="a ragged or mixed list is a container; a rectangular list of numbers is "
                    "one array",
                )


def _some(paths: list[str], shown: int = 3) -> str:
    text = ", ".join(paths[:shown])
    return text + (f", ... {len(paths) - shown} more" if len(paths) > shown else "")


def _is_text(obj: Any) -> bool:
    return isinstance(obj, (str, bytes))


def _text_kind(obj: Any) -> str:
    return type(obj).__name__


def compare_output(actual: Any, expected: Any, tolerance: Tolerance, path: str) -> OutputComparison:
    """Compare one leaf pair (two arrays, tensors, scalars or strings) named ``path``."""
    if _is_text(actual) or _is_text(expected):
        if not (_is_text(actual) and _is_text(expected)):
            raise InputError(
                f"cannot compare {_describe(actual)} with {_describe(expected)}: "
                "strings are only compared with strings",
                where=path or None,
            )
        return _compare_text(actual, expected, tolerance, path)

    backend_actual = framework_backend(actual)
    backend_expected = framework_backend(expected)
    one_side_empty = _empty_against_non_empty(
        actual, expected, backend_actual, backend_expected, tolerance, path
    )
    if one_side_empty is not None:
        return one_side_empty
    if (
        backend_actual is not None
        and backend_expected is not None
        and backend_actual is not backend_expected
    ):
        # Two frameworks: no device holds both, so both cross to the host and say so.
        a_np = backend_actual.to_numpy(actual)
        e_np = backend_expected.to_numpy(expected)
        result = _compare_host(a_np, e_np, tolerance, path)
        note = (
            f"actual from {backend_actual.name} and expected from {backend_expected.name} "
            "copied to numpy (different frameworks)"
        )
        result.promotion = f"{result.promotion}; {note}" if result.promotion else note
        return result
    backend = backend_actual or backend_expected
    if backend is not None:
        other_actual = actual if backend_actual is not None else _host_side(actual, "actual", path)
        other_expected = (
            expected if backend_expected is not None else _host_side(expected, "expected", path)
        )
        return backend.compare_arrays(other_actual, other_expected, tolerance, path)
    return _compare_host(actual, expected, tolerance, path)


def _shape_and_dtype(obj: Any, backend: Any) -> tuple[tuple[int, ...], str] | None:
    """Shape and dtype name of a leaf without reading its data; None when it has none."""
    if backend is not None:
        shape, dtype, _device = backend.describe(obj)
        return tuple(shape), dtype
    if isinstance(obj, (np.ndarray, np.generic)):
        return obj.shape, host.dtype_name(obj.dtype)
    try:
        if hasattr(obj, "shape") and hasattr(obj, "dtype"):
            # An array of a framework without a backend: its facts, never a copy of its data.
            return tuple(int(s) for s in obj.shape), host.dtype_name(obj.dtype)
        if isinstance(obj, (bool, int, float, complex, list, tuple)):
            arr = np.asarray(obj)  # Python numbers and numeric lists are small
            return arr.shape, host.dtype_name(arr.dtype)
    except Exception:
        pass  # the comparison itself reports what cannot be read
    return None


def _empty_against_non_empty(
    actual: Any,
    expected: Any,
    backend_actual: Any,
    backend_expected: Any,
    tolerance: Tolerance,
    path: str,
) -> OutputComparison | None:
    """An empty output against a non-empty one: a failing output (the two differ), not bad input.

    Two empty outputs of the same shape are equal and go through the kernels like any pair;
    incompatible dtypes stay input errors whatever the sizes.
    """
    facts_a = _shape_and_dtype(actual, backend_actual)
    facts_e = _shape_and_dtype(expected, backend_expected)
    if facts_a is None or facts_e is None:
        return None
    (shape_a, dtype_a), (shape_e, dtype_e) = facts_a, facts_e
    size_a, size_e = math.prod(shape_a), math.prod(shape_e)
    if (size_a == 0) == (size_e == 0) or "other" in (dtype_kind(dtype_a), dtype_kind(dtype_e)):
        return None  # strings, objects ...: the kernels' own checks name what is wrong
    compared_as, promotion, _ = promote(dtype_a, dtype_e, path=path)
    return _size_failure(
        path,
        tolerance,
        shape_a,
        shape_e,
        dtype_a,
        dtype_e,
        compared_as,
        promotion,
        (backend_actual or backend_expected or host).name,
    )


def _size_failure(
    path: str,
    tolerance: Tolerance,
    shape_a: tuple[int, ...],
    shape_e: tuple[int, ...],
    dtype_a: str,
    dtype_e: str,
    compared_as: str,
    promotion: str | None,
    backend: str,
    nested: list[str] | None = None,
) -> OutputComparison:
    """The failing result of an empty output against a non-empty one (``nested``: the other
    side holds these outputs under the path instead of one array; its shape is their count)."""
    size_a, size_e = math.prod(shape_a), math.prod(shape_e)
    empty, full, full_shape = (
        ("actual", "expected", shape_e) if size_a == 0 else ("expected", "actual", shape_a)
    )
    has = (
        f"{len(nested)} nested output(s) ({_some(nested)})"
        if nested is not None
        else f"{max(size_a, size_e)} element(s) with shape {full_shape}"
    )
    failure = Failure(
        "size",
        bound=size_e,
        observed=size_a,
        detail=f"{empty} is empty with shape {shape_a if size_a == 0 else shape_e}, {full} has "
        + has,
    )
    return OutputComparison(
        path=path,
        passed=False,
        shape=None,
        dtype_actual=dtype_a,
        dtype_expected=dtype_e,
        compared_as=compared_as,
        promotion=promotion,
        size=0,
        tolerance=tolerance,
        cosine_undefined=f"{empty} is empty",
        failures=[failure],
        backend=backend,
    )


def _host_side(obj: Any, side: str, path: str) -> np.ndarray:
    """A non-framework side handed to a framework backend, as a numpy array."""
    arr = np.asarray(obj) if not isinstance(obj, np.ndarray) else obj
    if not is_numeric(arr.dtype):
        raise InputError(
            f"{side} is {host.dtype_name(arr.dtype)} of shape {arr.shape}; cannot compare it with "
            "a tensor",
            where=path or None,
        )
    return arr


def _compare_host(actual: Any, expected: Any, tolerance: Tolerance, path: str) -> OutputComparison:
    a = actual if isinstance(actual, np.ndarray) else _to_host(actual, "actual", path)
    e = expected if isinstance(expected, np.ndarray) else _to_host(expected, "expected", path)
    a, e = _strings_of_objects(a), _strings_of_objects(e)
    if a.dtype.kind in "USa" and e.dtype.kind in "USa":
        return _compare_string_arrays(a, e, tolerance, path)
    if (a.dtype.kind in "USa") != (e.dtype.kind in "USa"):
        raise InputError(
            f"cannot compare actual {_describe(a)} with expected {_describe(e)}: "
            "strings against numbers",
            where=path or None,
        )
    return host.compare_arrays(a, e, tolerance, path)


def _strings_of_objects(x: np.ndarray) -> np.ndarray:
    """An object array holding only Python strings (what ONNX Runtime returns for string
    outputs) as a string array, compared exactly; any other object array is left to be refused."""
    if x.dtype.kind != "O":
        return x
    if x.size == 0:
        # An empty string output (ONNX Runtime gives object arrays): holds no object at all.
        return np.empty(x.shape, dtype=str)
    items = x.reshape(-1).tolist()
    if all(isinstance(v, str) for v in items):
        return np.array(items, dtype=str).reshape(x.shape)
    if all(isinstance(v, bytes) for v in items):
        return np.array(items, dtype=bytes).reshape(x.shape)
    return x


def _to_host(obj: Any, side: str, path: str) -> np.ndarray:
    try:
        return np.asarray(obj)
    except Exception as exc:
        raise InputError(
            f"{side} ({type(obj).__name__}) cannot be read as an array: {exc}", where=path or None
        ) from None


def _describe(obj: Any) -> str:
    if isinstance(obj, (str, bytes)):
        return f"a {_text_kind(obj)} of length {len(obj)}"
    shape = getattr(obj, "shape", None)
    dtype = getattr(obj, "dtype", None)
    if shape is not None and dtype is not None:
        try:
            dtype = host.dtype_name(dtype)
        except TypeError:
            pass
        return f"{dtype} of shape {tuple(shape)}"
    return type(obj).__name__


def _context(text: Any, at: int, width: int = 20) -> str:
    start = max(0, at - width)
    piece = text[start : at + width]
    return ("…" if start else "") + repr(piece) + ("…" if at + width < len(text) else "")


def _compare_text(actual: Any, expected: Any, tolerance: Tolerance, path: str) -> OutputComparison:
    """Two strings (or bytes) compare exactly; a difference reports the first divergence."""
    failures: list[Failure] = []
    if type(actual) is not type(expected):
        raise InputError(
            f"cannot compare {_describe(actual)} with {_describe(expected)}", where=path or None
        )
    if actual != expected:
        first = next(
            (i for i, (x, y) in enumerate(zip(actual, expected)) if x != y),
            min(len(actual), len(expected)),
        )
        failures.append(
            Failure(
                metric="text",
                bound="exact",
                observed=f"first divergence at position {first}",
                where=f"position {first}",
                detail=f"actual {_context(actual, first)} vs expected {_context(expected, first)}; "
                f"lengths {len(actual)} and {len(expected)}",
            )
        )
    kind = _text_kind(expected)
    return OutputComparison(
        path=path,
        passed=not failures,
        shape=None,
        dtype_actual=_text_kind(actual),
        dtype_expected=kind,
        compared_as=kind,
        promotion=None,
        size=len(expected),
        tolerance=tolerance,
        mismatches=1 if failures else 0,
        failures=failures,
        backend="host",
    )


def _compare_string_arrays(
    a: np.ndarray, e: np.ndarray, tolerance: Tolerance, path: str
) -> OutputComparison:
    """Arrays of strings compare exactly, element by element; an empty one against a non-empty
    one fails on its size, as numeric outputs do."""
    one_empty = (a.size == 0) != (e.size == 0)
    if a.shape != e.shape and not one_empty:
        raise InputError(
            f"shape mismatch: actual {a.shape} {host.dtype_name(a.dtype)} vs expected {e.shape} "
            f"{host.dtype_name(e.dtype)}",
            where=path or None,
        )
    if (a.dtype.kind == "S") != (e.dtype.kind == "S"):
        raise InputError(
            f"cannot compare actual {_describe(a)} with expected {_describe(e)}: "
            "bytes against text",
            where=path or None,
        )
    if a.shape != e.shape:
        return _size_failure(
            path,
            tolerance,
            a.shape,
            e.shape,
            host.dtype_name(a.dtype),
            host.dtype_name(e.dtype),
            "str",
            None,
            "host",
        )
    differ = a != e
    count = int(np.count_nonzero(differ))
    failures: list[Failure] = []
    if count:
        first = tuple(int(i) for i in np.argwhere(differ)[0])
        failures.append(
            Failure(
                metric="text",
                bound="exact",
                observed=f"{count} of {a.size} differ",
                where="index " + ",".join(str(i) for i in first),
                detail=f"actual {a[first]!r} vs expected {e[first]!r}",
            )
        )
    return OutputComparison(
        path=path,
        passed=not failures,
        shape=tuple(int(s) for s in a.shape),
        dtype_actual=host.dtype_name(a.dtype),
        dtype_expected=host.dtype_name(e.dtype),
        compared_as="str",
        promotion=None,
        size=int(a.size),
        tolerance=tolerance,
        mismatches=count,
        failures=failures,
        backend="host",
    )

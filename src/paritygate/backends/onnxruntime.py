"""ONNX Runtime ``OrtValue`` tensors, compared by the host kernel without copying.

``InferenceSession.run`` already returns numpy arrays; ``run_with_ort_values`` and IO binding
return ``OrtValue``s. An ``OrtValue`` in CPU memory is viewed as a numpy array over the same
buffer (``OrtValue.numpy()`` shares it; bfloat16 is viewed through its address, as numpy has no
bfloat16 of its own), so the comparison is the host kernel's (:mod:`paritygate.backends.host`)
and nothing is copied. An ``OrtValue`` in device memory (CUDA, DirectML ...) is copied to the
host first, and the comparison's ``promotion`` says so.
"""

from __future__ import annotations

from typing import Any

from .._dtypes import ML_DTYPES_NAMES, numpy_dtype
from ..errors import InputError
from ..results import OutputComparison, Tolerance

__all__ = ["name", "is_array", "synchronize", "describe", "compare_arrays", "to_numpy"]

name = "onnxruntime"

# ONNX tensor element types (OrtValue.data_type()) -> numpy-style dtype names.
_ONNX_TYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
    "tensor(int8)": "int8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
    "tensor(float8e4m3fn)": "float8_e4m3fn",
    "tensor(float8e5m2)": "float8_e5m2",
    "tensor(string)": "str",
}


def _ort_value_types() -> tuple[type, ...]:
    import onnxruntime

    types: list[type] = [onnxruntime.OrtValue]
    c_type = getattr(getattr(onnxruntime, "capi", None), "onnxruntime_pybind11_state", None)
    if c_type is not None and hasattr(c_type, "OrtValue"):
        types.append(c_type.OrtValue)
    return tuple(types)


def is_array(obj: Any) -> bool:
    return isinstance(obj, _ort_value_types())


def _wrapped(obj: Any) -> Any:
    """The Python-level OrtValue (session.run_with_ort_values may hand out the C-level one)."""
    import onnxruntime

    return obj if isinstance(obj, onnxruntime.OrtValue) else onnxruntime.OrtValue(obj)


def dtype_name(value: Any) -> str:
    onnx_type = value.data_type()
    try:
        return _ONNX_TYPES[onnx_type]
    except KeyError:
        raise InputError(f"OrtValue of type {onnx_type} cannot be compared numerically") from None


def describe(obj: Any) -> tuple[tuple[int, ...], str, str]:
    value = _wrapped(obj)
    return tuple(int(s) for s in value.shape()), dtype_name(value), value.device_name().lower()


def synchronize(obj: Any) -> None:
    # Session.run returns once its outputs are complete: there is nothing pending to wait for.
    return None


def _host_view(value: Any) -> Any:
    """A numpy array over the OrtValue's own CPU buffer (no copy)."""
    import ctypes

    import numpy as np

    shape = tuple(int(s) for s in value.shape())
    name_ = dtype_name(value)
    if name_ in ML_DTYPES_NAMES:
        dtype = numpy_dtype(name_)
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:
            return np.zeros(shape, dtype=dtype)
        buffer = (ctypes.c_byte * (count * dtype.itemsize)).from_address(value.data_ptr())
        return np.frombuffer(buffer, dtype=dtype).reshape(shape)
    return value.numpy()


def to_numpy(obj: Any) -> Any:
    """The tensor as numpy: a view of a CPU OrtValue, a copy of a device one."""
    import numpy as np

    value = _wrapped(obj)
    if value.device_name().lower() == "cpu":
        return _host_view(value)
    return np.asarray(value.numpy())


def compare_arrays(actual: Any, expected: Any, tolerance: Tolerance, path: str) -> OutputComparison:
    """Compare OrtValues (or an OrtValue and a numpy array) with the host kernel."""
    from . import host

    notes = []
    sides = []
    for side, obj in (("actual", actual), ("expected", expected)):
        if is_array(obj):
            value = _wrapped(obj)
            device = value.device_name().lower()
            if device != "cpu":
                notes.append(f"{side} copied from {device} memory to the host")
            sides.append(to_numpy(value))
        else:
            sides.append(obj)
    result = host.compare_arrays(sides[0], sides[1], tolerance, path)
    if notes:
        note = "; ".join(notes)
        result.promotion = f"{result.promotion}; {note}" if result.promotion else note
    result.backend = f"{name} ({result.backend} kernel)"
    return result

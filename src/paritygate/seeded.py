"""Seeded case inputs: a case generated from a declaration instead of stored as a file.

``[cases.x] generate = { shape = [2, 8], dtype = "float32", distribution = "normal", seed = 0 }``
declares the input; its values are derived from the raw 64-bit integers of numpy's PCG64 bit
generator (``np.random.PCG64(seed).random_raw(n)``), never from numpy's distribution methods
(whose algorithms have changed between numpy versions), by these formulas:

- ``uniform`` (``low`` default 0, ``high`` default 1): ``u = (r >> 11) * 2**-53`` in [0, 1),
  ``x = low + (high - low) * u`` in float64 (two correctly rounded operations), then rounded to
  the dtype (round to nearest even: a float32 value may round up to ``high``);
- ``normal`` (``mean`` default 0, ``std`` default 1): Box–Muller on consecutive pairs of raw
  integers ``(r1, r2)``: ``u1 = ((r1 >> 11) + 1) * 2**-53`` in (0, 1], ``u2 = (r2 >> 11) * 2**-53``,
  ``z1 = sqrt(-2 ln u1) cos(2 pi u2)``, ``z2 = sqrt(-2 ln u1) sin(2 pi u2)`` (interleaved, the
  last one dropped for an odd count), ``x = mean + std * z`` in float64 with Python's ``math``
  (the platform's C library; never numpy's vectorized transcendental functions, which differ
  between CPUs), then rounded to the dtype (at most 2**22 elements: they are computed one by
  one);
- ``integers`` (``low`` default 0, ``high`` required, exclusive): ``x = low + ((r * (high - low))
  >> 64)`` in exact integer arithmetic (Lemire's multiply-shift without rejection: a bias below
  ``(high - low) / 2**64``; computed from 32-bit limbs, exactly), in an integer dtype that holds
  every value.

A custom ``generator = "module:function"`` is called as ``function(shape=..., dtype=...,
seed=..., **params)`` and returns an array (or a dict of arrays).

The generated input is written to ``<spec folder>/.paritygate/cases/<case>.npy`` (an array: npy
version 1.0 with the header written here, byte for byte the same everywhere) or ``.safetensors``
(a dict of arrays), and the spec pins that file's sha256 like any case file: a changed generator,
seed or declaration is drift (exit 3), not a silently different input. The basic distributions
in float32 and the integers are bit-identical across platforms and numpy versions; ``normal``
in float64 goes through the C library's ``log``, ``cos`` and ``sin``, whose last bit may differ
between platforms in rare elements (the pin reports it as drift).

A ``sweep = { axis = 0, values = [1, 2, 7] }`` declares one case per value, with that length on
that axis: ``x.1``, ``x.2``, ``x.7`` (a dot, not brackets: brackets are glob characters in
shells and in claim patterns), each pinned by the matching entry of a ``sha256`` list.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DISTRIBUTIONS",
    "GENERATED_FOLDER",
    "Generation",
    "generate",
    "npy_bytes",
]

DISTRIBUTIONS = ("uniform", "normal", "integers")
#: Where generated inputs are written, relative to the spec's folder.
GENERATED_FOLDER = ".paritygate/cases"

_FLOATS = ("float16", "float32", "float64", "bfloat16")
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_MAX_ELEMENTS = 1 << 26
_MAX_NORMAL = 1 << 22


@dataclass(frozen=True)
class Generation:
    """A case's ``generate`` declaration, validated."""

    shape: tuple[int, ...]
    dtype: str
    distribution: str | None  # None with a custom generator
    seed: int
    params: dict[str, float | int] = field(default_factory=dict)  # low, high, mean, std
    generator: str | None = None  # module:function

    def describe(self) -> str:
        """The declaration in one line, for messages."""
        what = self.generator or self.distribution
        extra = "".join(f", {k}={v}" for k, v in sorted(self.params.items()))
        return f"{what} {self.dtype}{list(self.shape)} seed={self.seed}{extra}"


def _uniforms(raw: Any) -> Any:
    import numpy as np

    return (raw >> np.uint64(11)).astype(np.float64) * (2.0**-53)


def generate(generation: Generation, *, root: Path | None = None) -> Any:
    """The input ``generation`` declares: a numpy array (or a dict of arrays from a custom
    generator). ``root``: the spec's folder, put on ``sys.path`` to import a custom generator."""
    import numpy as np

    if generation.generator is not None:
        return _custom(generation, root)
    n = math.prod(generation.shape)
    p = generation.params
    bits = np.random.PCG64(generation.seed)
    if generation.distribution == "uniform":
        low, high = float(p.get("low", 0.0)), float(p.get("high", 1.0))
        values = low + (high - low) * _uniforms(bits.random_raw(n).astype(np.uint64))
    elif generation.distribution == "normal":
        mean, std = float(p.get("mean", 0.0)), float(p.get("std", 1.0))
        raw = [int(r) >> 11 for r in bits.random_raw(2 * ((n + 1) // 2))]
        out: list[float] = []
        for i in range(0, len(raw), 2):
            u1 = (raw[i] + 1) * 2.0**-53
            u2 = raw[i + 1] * 2.0**-53
            radius = math.sqrt(-2.0 * math.log(u1))
            angle = 2.0 * math.pi * u2
            out.append(mean + std * (radius * math.cos(angle)))
            out.append(mean + std * (radius * math.sin(angle)))
        values = np.array(out[:n], dtype=np.float64)
    else:
        low, high = int(p.get("low", 0)), int(p["high"])
        offsets = _mulhi(bits.random_raw(n).astype(np.uint64), high - low)
        # low + offset in wrapping 64-bit arithmetic: exact, as the sum fits the dtype
        total = offsets + np.uint64(low % 2**64)
        dtype = _np_dtype(generation.dtype)
        values = total.view(np.int64) if dtype.kind == "i" else total
    return values.astype(_np_dtype(generation.dtype)).reshape(generation.shape)


def _mulhi(a: Any, b: int) -> Any:
    """``(a * b) >> 64`` for uint64 ``a`` and an integer ``0 < b <= 2**64``, exactly, from 32-bit
    limbs (numpy has no 128-bit product)."""
    import numpy as np

    if b == 2**64:
        return a.copy()
    mask = np.uint64(0xFFFFFFFF)
    a_lo, a_hi = a & mask, a >> np.uint64(32)
    b_lo, b_hi = np.uint64(b & 0xFFFFFFFF), np.uint64(b >> 32)
    hi_lo = a_hi * b_lo
    cross = ((a_lo * b_lo) >> np.uint64(32)) + (hi_lo & mask) + a_lo * b_hi
    return a_hi * b_hi + (hi_lo >> np.uint64(32)) + (cross >> np.uint64(32))


def _np_dtype(name: str) -> Any:
    import numpy as np

    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _custom(generation: Generation, root: Path | None) -> Any:
    import importlib
    import sys

    module_name, _, attr = (generation.generator or "").partition(":")
    added = root is not None and str(root) not in sys.path
    if added:
        sys.path.insert(0, str(root))
    try:
        function = getattr(importlib.import_module(module_name), attr)
    finally:
        if added:
            sys.path.remove(str(root))
    return function(
        shape=generation.shape, dtype=generation.dtype, seed=generation.seed, **generation.params
    )


def npy_bytes(array: Any) -> bytes:
    """``array`` as an .npy file (format version 1.0) with a header written here, so that the
    bytes depend only on the values, the dtype and the shape (not on numpy's writer)."""
    import numpy as np

    array = np.asarray(array)
    array = array if array.flags.c_contiguous else array.copy(order="C")
    descr = array.dtype.str if array.dtype.names is None else None
    if descr is None or array.dtype.kind not in "biuf":
        raise ValueError(f"cannot write dtype {array.dtype} as a generated input")
    if descr[0] == ">" or (descr[0] == "=" and np.little_endian is False):
        array = array.astype(array.dtype.newbyteorder("<"))
        descr = array.dtype.str
    shape = repr(tuple(int(d) for d in array.shape))
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    total = 10 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    prefix = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little")
    return prefix + header.encode("latin1") + array.tobytes()


def input_bytes(value: Any) -> tuple[bytes, str]:
    """A generated input as file bytes and the file's suffix: ``.npy`` for an array,
    ``.safetensors`` for a dict of arrays."""
    import numpy as np

    if isinstance(value, Mapping):
        from safetensors.numpy import save

        arrays = {str(k): np.ascontiguousarray(v) for k, v in sorted(value.items())}
        return save(arrays), ".safetensors"
    return npy_bytes(np.asarray(value)), ".npy"


def check_declaration(data: Mapping[str, Any]) -> tuple[Generation | None, str | None, str]:
    """Validate a ``generate`` table: ``(generation, None, "")`` or ``(None, key, message)``
    naming the offending key. Kept free of the spec's validator so that it reads alone."""
    allowed = {"shape", "dtype", "distribution", "seed", "low", "high", "mean", "std", "generator"}
    for key in data:
        if key not in allowed:
            return None, key, f"unknown key; expected one of: {', '.join(sorted(allowed))}"
    shape = data.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        return None, "shape", f"expected a list of non-negative integers, got {shape!r}"
    if math.prod(shape) > _MAX_ELEMENTS:
        return None, "shape", f"{math.prod(shape)} elements; a generated case holds at most 2**26"
    if data.get("distribution") == "normal" and math.prod(shape) > _MAX_NORMAL:
        return (
            None,
            "shape",
            f"{math.prod(shape)} elements; a normal case holds at most 2**22 (its values are "
            "computed one by one with the C library, for values that do not depend on the CPU)",
        )
    seed = data.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        return None, "seed", f"expected a non-negative integer, got {seed!r}"
    generator = data.get("generator")
    distribution = data.get("distribution")
    dtype = data.get("dtype", "float32")
    if generator is not None:
        if (
            not isinstance(generator, str)
            or generator.count(":") != 1
            or not all(generator.split(":"))
        ):
            return None, "generator", f"expected 'module:function', got {generator!r}"
        if distribution is not None:
            return None, "distribution", "give either a distribution or a generator, not both"
        if not isinstance(dtype, str):
            return None, "dtype", f"expected a dtype name, got {dtype!r}"
        params = {k: data[k] for k in ("low", "high", "mean", "std") if k in data}
        return Generation(tuple(shape), dtype, None, seed, params, generator), None, ""
    if distribution not in DISTRIBUTIONS:
        return (
            None,
            "distribution",
            f"expected one of {', '.join(DISTRIBUTIONS)}, got {distribution!r}",
        )
    wanted = _INTEGERS if distribution == "integers" else _FLOATS
    if dtype not in wanted:
        return None, "dtype", f"{distribution} draws {' / '.join(wanted)}, got {dtype!r}"
    names = ("low", "high") if distribution != "normal" else ("mean", "std")
    for key in ("low", "high", "mean", "std"):
        if key in data and key not in names:
            return None, key, f"not a parameter of {distribution} (it takes {' and '.join(names)})"
    params: dict[str, Any] = {}
    for key in names:
        if key not in data:
            continue
        value = data[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if distribution == "integers" and (not isinstance(value, int) or isinstance(value, bool)):
            return None, key, f"expected an integer, got {value!r}"
        if not number or not math.isfinite(value):
            return None, key, f"expected a finite number, got {value!r}"
        params[key] = value
    if distribution == "integers":
        if "high" not in params:
            return None, "high", "integers need high (exclusive)"
        low, high = params.get("low", 0), params["high"]
        if high <= low:
            return None, "high", f"expected high > low, got low={low}, high={high}"
        import numpy as np

        info = np.iinfo(dtype)
        if low < info.min or high - 1 > info.max:
            return None, "dtype", f"{dtype} cannot hold [{low}, {high})"
    elif distribution == "uniform" and params.get("high", 1.0) <= params.get("low", 0.0):
        return None, "high", "expected high > low"
    elif distribution == "normal" and params.get("std", 1.0) <= 0:
        return None, "std", "expected std > 0"
    return Generation(tuple(shape), dtype, distribution, seed, params), None, ""

"""Output-level mutations: the bugs calibration injects into a candidate's outputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._dtypes import is_float
from ..errors import InputError

# --------------------------------------------------------------------------------------------
# Output-level mutations


@dataclass(frozen=True)
class Mutation:
    """A bug injected into one output array. ``apply`` returns the mutated copy, or None where the
    mutation does not apply (an integer output for additive noise, an axis too short to swap)."""

    name: str
    description: str
    apply: Callable[[np.ndarray, np.random.Generator], np.ndarray | None]


def _is_float(array: np.ndarray) -> bool:
    return is_float(array.dtype)


def _finite64(array: np.ndarray) -> np.ndarray:
    values = array.astype(np.float64).reshape(-1)
    return values[np.isfinite(values)]


def additive_noise(rel: float = 1e-2) -> Mutation:
    """Gaussian noise with standard deviation ``rel`` times the output's root mean square."""

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        finite = _finite64(x)
        if not _is_float(x) or finite.size == 0:
            return None
        rms = float(np.sqrt(np.mean(finite**2)))
        if rms == 0:
            return None
        noise = rng.standard_normal(x.shape) * (rel * rms)
        return (x.astype(np.float64) + noise).astype(x.dtype)

    return Mutation(
        f"noise({rel:g})", f"additive Gaussian noise, {rel:g} x the output's RMS", apply
    )


def spike(scale: float = 0.1) -> Mutation:
    """One element moved by ``scale`` times the output's range (max - min)."""

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        finite = _finite64(x)
        if not _is_float(x) or finite.size == 0:
            return None
        span = float(finite.max() - finite.min()) or float(np.abs(finite).max()) or 1.0
        out = x.astype(np.float64).reshape(-1)
        out[int(rng.integers(out.size))] += scale * span
        return out.reshape(x.shape).astype(x.dtype)

    return Mutation(
        f"spike({scale:g})", f"one element moved by {scale:g} x the output's range", apply
    )


def shift(axis: int = -1, by: int = 1) -> Mutation:
    """An off-by-``by`` shift along ``axis`` (a misaligned index, a wrong padding offset)."""

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        if x.ndim == 0 or x.shape[axis] < 2:
            return None
        return np.roll(x, by, axis=axis)

    return Mutation(f"shift(axis={axis},by={by})", f"off-by-{by} shift along axis {axis}", apply)


def swap_channels(axis: int = -1, i: int = 0, j: int = 1) -> Mutation:
    """Two entries along ``axis`` swapped (RGB read as BGR, a transposed head order)."""

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        if x.ndim == 0 or x.shape[axis] <= max(i, j):
            return None
        out = np.array(x, copy=True)
        first, second = np.take(x, i, axis=axis), np.take(x, j, axis=axis)
        index_i = [slice(None)] * x.ndim
        index_j = [slice(None)] * x.ndim
        index_i[axis], index_j[axis] = i, j
        out[tuple(index_i)], out[tuple(index_j)] = second, first
        return out

    return Mutation(
        f"swap(axis={axis},{i}<->{j})", f"entries {i} and {j} swapped along axis {axis}", apply
    )


def reduced_precision(dtype: str = "float16") -> Mutation:
    """The output rounded through a less precise float (a silent float16 / bfloat16 drop)."""
    import ml_dtypes

    target = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}.get(dtype)
    if target is None:
        raise InputError(f"reduced_precision supports float16 and bfloat16, got {dtype!r}")

    def apply(x: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        if not _is_float(x) or np.dtype(target).itemsize >= x.dtype.itemsize:
            return None
        with np.errstate(over="ignore"):
            return x.astype(target).astype(x.dtype)

    return Mutation(f"{dtype}", f"rounded through {dtype}", apply)


DEFAULT_MUTATIONS: tuple[Mutation, ...] = (
    additive_noise(1e-2),
    spike(0.1),
    shift(-1),
    swap_channels(-1),
    reduced_precision("float16"),
    reduced_precision("bfloat16"),
)
# Short names of the built-ins (the command line selects them with --mutations).
BUILTIN_MUTATIONS: dict[str, Mutation] = dict(
    zip(("noise", "spike", "shift", "swap", "float16", "bfloat16"), DEFAULT_MUTATIONS)
)


def mutations_named(text: str) -> tuple[Mutation, ...]:
    """Built-in mutations by name, comma-separated; ``all`` or ``none``."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return tuple(BUILTIN_MUTATIONS.values())
    if names == ["none"]:
        return ()
    unknown = [n for n in names if n not in BUILTIN_MUTATIONS]
    if unknown or not names:
        raise InputError(
            f"--mutations: unknown {', '.join(unknown) or 'empty list'}; "
            f"use {', '.join(BUILTIN_MUTATIONS)}, 'all' or 'none'"
        )
    return tuple(BUILTIN_MUTATIONS[n] for n in names)

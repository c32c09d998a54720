"""PyTorch tensors (CPU and CUDA): metrics computed by torch on the tensor's device.

The output pair is reduced chunk by chunk (``CHUNK_CPU`` / ``CHUNK_DEVICE`` elements) so that the
extra memory stays bounded whatever the tensor size: every chunk yields one small vector of
partial statistics and its k candidates of largest excess; after the last chunk the partials are
reduced and the k best candidates selected on the device, and a single transfer (one
synchronization) brings ``len(STATS) + 3k`` numbers to the host. Nothing else is copied: no
``.cpu()``, ``.numpy()``, ``__array__`` or ``__dlpack__`` on the data.

Complex tensors are compared as (real, imaginary) pairs along a last axis of length 2
(``torch.view_as_real``, no copy), as the host engine compares complex arrays.

Accuracy: the chunked path compares values and accumulates sums in float64 (CPU and CUDA; MPS has
no float64 and uses float32 there), so ``cosine(x, x)`` is 1 within 1e-12, and
``one_minus_cosine`` is within ``1e-12 * |a - e|^2 / (2 |a| |e|)`` of its exact value (relative
precision near cos = 1; tests/test_backend_cosine.py, also run on an H200). The Triton kernels
compute in float32 with float64 block sums: within ``2e-6 * ...``, counts and ULPs exact
(:mod:`paritygate.backends._triton`). Integers are
compared in float64
with an exact inequality test, so no wrap-around occurs and a difference of one is never lost;
integer values beyond 2**53 are reported rounded to float64 in the worst-k list. Bool outputs are
compared as 0/1 exactly.

A numpy array on the other side is moved to the tensor's device one chunk at a time.

Two contiguous CUDA tensors of bfloat16 / float16 / float32 take the Triton kernels when Triton
is installed (:mod:`paritygate.backends._triton`): one pass over both tensors, the same
definitions, the same single transfer. ``PARITYGATE_TORCH_KERNEL`` picks the path: ``auto`` (the
default: the Triton kernels where they apply, else the chunked path), ``triton`` (demands the
Triton kernels: a float32 pass, then float64 over the blocks it flags) or ``chunked``.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import InputError
from ..results import OutputComparison, Tolerance
from ._device import (
    COUNT_STATS,
    MAX_STATS,
    ML_DTYPES_NAMES,
    STATS,
    SUM_STATS,
    ULP_INT_BITS,
    empty_stats,
    finish_plan,
    kernel_tolerance,
    plan,
    raw_stats,
    split_stats,
)

__all__ = ["name", "is_array", "synchronize", "describe", "compare_arrays", "to_numpy"]

name = "torch"

CHUNK_CPU = 1 << 18  # 256 Ki elements: float64 temporaries of 2 MiB, cache-friendly on the host
CHUNK_DEVICE = 1 << 22  # 4 Mi elements: ~15 float64 temporaries stay well under 1 GiB

KERNEL_ENV = "PARITYGATE_TORCH_KERNEL"  # auto | triton | chunked
KERNEL_CHOICES = ("auto", "triton", "chunked")


def _torch() -> Any:
    import torch

    return torch


def is_array(obj: Any) -> bool:
    return isinstance(obj, _torch().Tensor)


def dtype_name(dtype: Any) -> str:
    text = str(dtype).removeprefix("torch.")
    return "bool" if text == "bool" else text


def describe(obj: Any) -> tuple[tuple[int, ...], str, str]:
    return tuple(int(s) for s in obj.shape), dtype_name(obj.dtype), str(obj.device)


def synchronize(obj: Any) -> None:
    torch = _torch()
    if isinstance(obj, torch.Tensor) and obj.device.type == "cuda":
        torch.cuda.synchronize(obj.device)


def seed(value: int) -> None:
    _torch().manual_seed(value)


def to_numpy(obj: Any) -> Any:
    """Copy a tensor to numpy (bfloat16 and float8 through ml_dtypes; a conjugate or negative
    view resolved first, which .numpy() refuses)."""
    torch = _torch()
    import numpy as np

    t = obj.detach()
    name_ = dtype_name(t.dtype)
    if name_ in ML_DTYPES_NAMES:
        import ml_dtypes

        bits = torch.int16 if name_ == "bfloat16" else torch.uint8
        return t.view(bits).cpu().numpy().view(getattr(ml_dtypes, name_))
    return np.asarray(t.cpu().resolve_conj().resolve_neg().numpy())


def _torch_dtype(name_: str) -> Any:
    torch = _torch()
    return torch.bool if name_ == "bool" else getattr(torch, name_)


class _Side:
    """One side of the comparison, read chunk by chunk on the comparison device."""

    def __init__(self, obj: Any, device: Any, path: str):
        torch = _torch()
        self.device = device
        self.tensor = None
        self.flat = None
        self.np_flat = None
        self.np_array = None
        if isinstance(obj, torch.Tensor):
            if obj.layout != torch.strided:
                raise InputError(f"{obj.layout} tensors are not supported", where=path or None)
            t = obj.detach()
            self.shape, self.dtype = tuple(t.shape), dtype_name(t.dtype)
            if t.is_contiguous():
                self.flat = t.reshape(-1)  # a view
            else:
                self.tensor = t
        else:
            import numpy as np

            arr = obj if isinstance(obj, np.ndarray) else np.asarray(obj)
            self.shape, self.dtype = tuple(arr.shape), arr.dtype.name
            if self.dtype == "bool_":
                self.dtype = "bool"
            if arr.flags.c_contiguous:
                self.np_flat = arr.reshape(-1)
            else:
                self.np_array = arr

    def chunk(self, start: int, stop: int) -> Any:
        torch = _torch()
        if self.flat is not None:
            part = self.flat[start:stop]
            return part if part.device == self.device else part.to(self.device)
        if self.tensor is not None:
            # Non-contiguous: gather the chunk's elements in flat (C) order; bounded by the chunk.
            idx = torch.arange(start, stop, device=self.tensor.device)
            part = self.tensor[torch.unravel_index(idx, self.tensor.shape)]
            return part if part.device == self.device else part.to(self.device)
        part = (
            self.np_flat[start:stop] if self.np_flat is not None else self.np_array.flat[start:stop]
        )
        if self.dtype in ML_DTYPES_NAMES:
            bits = "int16" if self.dtype == "bfloat16" else "uint8"
            view = torch.from_numpy(part.view(bits)).view(_torch_dtype(self.dtype))
        else:
            view = torch.from_numpy(part)
        return view.to(self.device)


def _device_of(actual: Any, expected: Any, path: str) -> Any:
    torch = _torch()
    devices = [x.device for x in (actual, expected) if isinstance(x, torch.Tensor)]
    accelerators = {d for d in devices if d.type != "cpu"}
    if len(accelerators) > 1:
        a, e = (str(getattr(x, "device", "host")) for x in (actual, expected))
        raise InputError(
            f"tensors on different devices: actual {a}, expected {e}", where=path or None
        )
    return accelerators.pop() if accelerators else torch.device("cpu")


def _ordered(raw: Any, ulp_name: str) -> Any:
    """Map floats (rounded to the ULP dtype) to int64 integers ordered like the floats.

    Sign-magnitude bits become two's complement: -x maps to -bits(x), so +0 and -0 coincide and
    adjacent floats are one apart.
    """
    torch = _torch()
    nbits = ULP_INT_BITS[ulp_name]
    int_t = {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[nbits]
    bits = raw.to(_torch_dtype(ulp_name)).view(int_t).to(torch.int64)
    magnitude = bits & ((1 << (nbits - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def _chunk_stats(
    a_raw: Any, e_raw: Any, p: Any, tol: Tolerance, acc: Any, k: int, branch_free: bool
) -> tuple:
    """Partial statistics of one chunk (a vector in STATS order) and its k worst candidates.

    ``branch_free`` (accelerators): no data-dependent branch, so nothing waits for the device.
    On the host the non-finite bookkeeping is skipped for chunks where every difference is
    finite, which is exact (a NaN or an infinity on either side makes the difference non-finite).
    """
    torch = _torch()
    inf = math.inf
    a = a_raw.to(acc)
    e = e_raw.to(acc)
    n = a.numel()
    zero = torch.zeros((), dtype=acc, device=a.device)
    d = a - e
    nonfinite = None
    if p.kind == "float" and (branch_free or not bool(torch.isfinite(d).all())):
        nan_a, nan_e = torch.isnan(a), torch.isnan(e)
        inf_a, inf_e = torch.isinf(a), torch.isinf(e)
        nan_any = nan_a | nan_e
        nonfinite = nan_any | inf_a | inf_e
        nan_both = nan_a & nan_e
        nan_one = nan_a ^ nan_e
        inf_mismatch = (inf_a | inf_e) & ~nan_any & (a != e)
        nf_mismatch = nan_one | inf_mismatch
        if not tol.equal_nan:
            nf_mismatch = nf_mismatch | nan_both
        a = a.masked_fill(nonfinite, 0.0)
        e = e.masked_fill(nonfinite, 0.0)
        d = a - e
        n_finite = n - nonfinite.sum()
        nonfinite_counts = [
            nan_a.sum(),
            nan_e.sum(),
            nan_both.sum(),
            nan_one.sum(),
            inf_a.sum(),
            inf_e.sum(),
            inf_mismatch.sum(),
        ]
    else:
        n_finite = torch.full((), n, dtype=acc, device=a.device)
        nonfinite_counts = [zero] * 7
    diff = d.abs()
    if p.compared_as in ("int64", "uint64"):
        # float64 cannot tell 2**53 from 2**53 + 1: the exact inequality keeps a difference of one.
        ne = a_raw.to(torch.int64) != e_raw.to(torch.int64)
        diff = torch.where(ne, diff.clamp_min(1.0), 0.0)
    abs_e = e.abs()
    # slack = |a-e| - rtol|e|: its maximum is atol_needed, and excess = slack - atol.
    slack = diff - tol.rtol * abs_e if tol.rtol else diff
    max_slack = slack.max()
    rel = (diff / (abs_e + tol.rel_eps)).max()
    rel_sym = (diff / (torch.maximum(a.abs(), abs_e) + tol.rel_eps)).max()
    # (|a-e| - atol)^+ / |e|: x/0 is inf for a difference past atol at |e| = 0, and 0/0 means 0.
    rtol_need = ((diff - tol.atol).clamp_min_(0.0) / abs_e).nan_to_num_(nan=0.0, posinf=inf).max()
    # sum (a - e)^2 and sum (a - e)(a + e) from the difference: 1 - cosine (metrics.py)
    sums = [
        diff.sum(),
        torch.dot(a, e),
        torch.dot(a, a),
        torch.dot(e, e),
        torch.dot(diff, diff),
        torch.dot(d, a + e),
    ]
    if nonfinite is not None:
        max_excess = slack.masked_fill(nonfinite, -inf).max() - tol.atol
    else:
        max_excess = max_slack - tol.atol
    # Worst-k ranking: equal elements (non-finite positions were zeroed) never enter the list;
    # non-finite mismatches come first.
    rank = slack.masked_fill(diff == 0, -inf)
    if nonfinite is not None:
        rank = rank.masked_fill(nf_mismatch, inf)
    if p.ulp_dtype is not None and p.kind == "float":
        ulp = (_ordered(a_raw, p.ulp_dtype).to(acc) - _ordered(e_raw, p.ulp_dtype).to(acc)).abs_()
        if nonfinite is not None:
            ulp = ulp.masked_fill(nonfinite, 0)
        ulp_max = ulp.max()
        ulp_nonzero = (ulp > 0).sum()
        ulp_over = (ulp > tol.max_ulp).sum() if tol.max_ulp is not None else zero
    else:
        ulp_max = ulp_nonzero = ulp_over = zero
    maxes = [diff.max(), rel, rel_sym, max_excess, max_slack.clamp_min(0.0), rtol_need, ulp_max]
    counts = [n_finite, (slack > tol.atol).sum(), ulp_nonzero, ulp_over, *nonfinite_counts]
    vector = torch.stack([x.to(acc) for x in sums + maxes + counts])
    if k:
        top_rank, top_idx = torch.topk(rank, min(k, n))
        candidates = (top_rank, top_idx, a_raw[top_idx].to(acc), e_raw[top_idx].to(acc))
    else:
        candidates = None
    return vector, candidates


def compare_arrays(actual: Any, expected: Any, tolerance: Tolerance, path: str) -> OutputComparison:
    """Compare a torch tensor with a torch tensor or a numpy array on the tensor's device."""
    _torch()
    device = _device_of(actual, expected, path)
    side_a, side_e = _Side(actual, device, path), _Side(expected, device, path)
    if side_a.dtype.startswith("complex") and side_e.dtype.startswith("complex"):
        return _compare_complex(actual, expected, side_a, side_e, tolerance, path)
    p = plan(side_a.shape, side_e.shape, side_a.dtype, side_e.dtype, path)
    ktol = kernel_tolerance(p, tolerance)
    if _use_triton(actual, expected, p):
        stats_vec, worst = _reduce_triton(actual, expected, p, ktol)
    else:
        stats_vec, worst = _reduce(side_a, side_e, p, ktol, device)
    stats = raw_stats(p, *split_stats(stats_vec, worst), ktol)
    return finish_plan(stats, p, tolerance, path, name)


def _real_view(obj: Any) -> Any:
    """A complex tensor or array as (real, imaginary) pairs along a new last axis, without a copy
    where the layout allows it."""
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return torch.view_as_real(obj.detach().resolve_conj())
    import numpy as np

    arr = np.ascontiguousarray(obj)
    component = "float64" if arr.dtype == np.complex128 else "float32"
    return arr[..., None].view(component)


def _compare_complex(
    actual: Any, expected: Any, side_a: _Side, side_e: _Side, tolerance: Tolerance, path: str
) -> OutputComparison:
    """Complex outputs as (real, imaginary) pairs, reported as the host engine reports them."""
    from ..metrics import promote

    if side_a.shape != side_e.shape:
        plan(side_a.shape, side_e.shape, side_a.dtype, side_e.dtype, path)  # raises the shape error
    compared_as, note, _ = promote(side_a.dtype, side_e.dtype, path=path)
    component = "float64" if compared_as == "complex128" else "float32"
    result = compare_arrays(_real_view(actual), _real_view(expected), tolerance, path)
    pair_note = (
        f"{compared_as} compared as ({component} real, imaginary) pairs: last index 0=real 1=imag"
    )
    result.dtype_actual, result.dtype_expected = side_a.dtype, side_e.dtype
    result.compared_as = component
    result.promotion = f"{note}; {pair_note}" if note else pair_note
    return result


def _use_triton(actual: Any, expected: Any, p: Any) -> bool:
    """Whether the Triton kernels compare these tensors (else the chunked path), by
    PARITYGATE_TORCH_KERNEL."""
    import os

    choice = os.environ.get(KERNEL_ENV, "auto").lower()
    if choice not in KERNEL_CHOICES:
        raise InputError(f"{KERNEL_ENV} must be one of {', '.join(KERNEL_CHOICES)}, got {choice!r}")
    if choice == "chunked":
        return False
    from . import _triton

    supported = _triton.supports(actual, expected, p)
    if choice != "auto" and not supported:
        raise InputError(
            f"{KERNEL_ENV}={choice} needs Triton and two contiguous CUDA tensors of bfloat16, "
            "float16 or float32",
            where=p.path or None,
        )
    return supported


def _reduce_triton(actual: Any, expected: Any, p: Any, tol: Tolerance) -> tuple:
    torch = _torch()
    from . import _triton

    acc = torch.float64

    def revisit(a: Any, e: Any, k: int) -> tuple:
        return _chunk_stats(a, e, p, tol, acc, k, True)[1]

    with torch.no_grad():
        parts, kk = _triton.reduce(actual.detach(), expected.detach(), p, tol, acc, revisit)
        # The single device-to-host transfer (and the single synchronization) of the comparison.
        host = torch.cat([x.to(acc).reshape(-1) for x in parts]).cpu().numpy()
    return host, kk


def _reduce(side_a: _Side, side_e: _Side, p: Any, tol: Tolerance, device: Any) -> tuple:
    """All chunks, then one transfer: returns (host float64 vector, number of worst candidates)."""
    torch = _torch()
    acc = torch.float32 if device.type == "mps" else torch.float64
    if p.size == 0:
        return empty_stats(), 0
    k = tol.worst_k
    chunk = CHUNK_CPU if device.type == "cpu" else CHUNK_DEVICE
    branch_free = device.type != "cpu"
    nchunks = -(-p.size // chunk)
    kc = min(k, chunk)
    with torch.no_grad():
        # Every result buffer is allocated before the first chunk: nothing allocated inside the
        # loop outlives its chunk, so the host allocator reuses the same blocks chunk after chunk
        # (small long-lived allocations between them would fragment the heap and grow it).
        m = torch.empty((nchunks, len(STATS)), dtype=acc, device=device)
        c_rank = torch.full((nchunks, kc), -math.inf, dtype=acc, device=device)
        c_idx = torch.zeros((nchunks, kc), dtype=torch.int64, device=device)
        c_a = torch.zeros((nchunks, kc), dtype=acc, device=device)
        c_e = torch.zeros((nchunks, kc), dtype=acc, device=device)
        for i, start in enumerate(range(0, p.size, chunk)):
            stop = min(start + chunk, p.size)
            vector, cand = _chunk_stats(
                side_a.chunk(start, stop), side_e.chunk(start, stop), p, tol, acc, k, branch_free
            )
            m[i] = vector
            if cand is not None:
                rank, idx, va, ve = cand
                j = rank.numel()
                c_rank[i, :j] = rank
                c_idx[i, :j] = idx + start
                c_a[i, :j] = va
                c_e[i, :j] = ve
            del vector, cand
        ns, nm = len(SUM_STATS), len(MAX_STATS)
        reduced = torch.cat([m[:, :ns].sum(0), m[:, ns : ns + nm].amax(0), m[:, ns + nm :].sum(0)])
        parts = [reduced]
        kk = 0
        if k:
            kk = min(k, p.size)
            _, best = torch.topk(c_rank.reshape(-1), kk)
            parts += [c_idx.reshape(-1)[best].to(acc), c_a.reshape(-1)[best], c_e.reshape(-1)[best]]
        # The single device-to-host transfer (and the single synchronization) of the comparison.
        host = torch.cat(parts).to(torch.float64).cpu().numpy()
    assert len(COUNT_STATS) + ns + nm == len(STATS)
    return host, kk

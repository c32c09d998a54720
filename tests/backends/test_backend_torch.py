"""The torch backend: agreement with the host engine, failures, and no host copies."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
import torch
from backend_reference import cases, check, reference, run_isolated

from paritygate import compare, flatten_outputs, paired
from paritygate.backends import get_backend
from paritygate.backends import torch as torch_backend
from paritygate.errors import InputError
from paritygate.results import Tolerance

CASES = cases()


@pytest.fixture(autouse=True)
def one_thread():
    # Chunks are cache-sized; one intra-op thread avoids oversubscription beside other jobs.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def to_torch(x: np.ndarray) -> torch.Tensor:
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_agrees_with_reference(case):
    name, a, e, tol = case
    result = torch_backend.compare_arrays(to_torch(a), to_torch(e), tol, name)
    check(result, reference(a, e, tol))
    assert result.backend == "torch"
    assert result.dtype_actual == a.dtype.name and result.dtype_expected == e.dtype.name
    assert result.shape == a.shape


@pytest.mark.parametrize("case", CASES[:8:3] + CASES[-6:], ids=lambda c: c[0])
def test_numpy_on_the_other_side(case):
    name, a, e, tol = case
    result = torch_backend.compare_arrays(to_torch(a), e, tol, name)
    check(result, reference(a, e, tol))
    result = torch_backend.compare_arrays(a, to_torch(e), tol, name)
    check(result, reference(a, e, tol))


def test_many_chunks_worst_across_chunks(monkeypatch):
    monkeypatch.setattr(torch_backend, "CHUNK_CPU", 1000)  # 38 chunks, a short last one
    for name, a, e, tol in CASES:
        if name in ("float32-planted", "nonfinite", "uint8", "bool"):
            check(
                torch_backend.compare_arrays(to_torch(a), to_torch(e), tol, name),
                reference(a, e, tol),
            )


def test_non_contiguous_tensors():
    name, a, e, tol = next(c for c in CASES if c[0] == "float32-planted")
    at, et = to_torch(a).T, to_torch(e).T  # strided views, not copies
    assert not at.is_contiguous()
    check(torch_backend.compare_arrays(at, et, tol, name), reference(a.T, e.T, tol))


def test_pass_and_fail_with_the_right_failures():
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((64, 64)).astype(np.float32))
    same = torch_backend.compare_arrays(
        x, x.clone(), Tolerance(max_ulp=0, min_cosine=1 - 1e-12), "y"
    )
    assert same.passed and same.mismatches == 0 and same.ulp_max == 0 and same.max_abs == 0
    assert same.cosine == pytest.approx(1.0, abs=1e-15)
    assert not same.failures and same.worst == []  # equal elements never enter the worst list

    y = x.clone()
    y[3, 5] += 0.5
    y[60, 1] = float("nan")
    result = torch_backend.compare_arrays(y, x, Tolerance(atol=1e-3, max_ulp=8), "y")
    assert not result.passed
    assert {f.metric for f in result.failures} == {"elements", "nan", "ulp"}
    assert result.mismatches == 2
    assert result.worst[0].index == (60, 1) and result.worst[0].excess == math.inf
    assert result.worst[1].index == (3, 5)
    assert result.worst[1].abs_diff == pytest.approx(0.5, rel=1e-6)

    # uint8 never wraps: 0 vs 255 is 255 apart
    u = torch_backend.compare_arrays(
        torch.tensor([0, 7], dtype=torch.uint8),
        torch.tensor([255, 7], dtype=torch.uint8),
        Tolerance(atol=254),
        "u",
    )
    assert not u.passed and u.max_abs == 255 and u.mismatches == 1 and u.atol_needed == 255


def test_empty_and_bad_input():
    empty = torch.zeros((0, 3))
    result = torch_backend.compare_arrays(empty, empty.clone(), Tolerance(min_cosine=0.9), "e")
    assert result.passed and result.size == 0
    with pytest.raises(InputError, match=r"shape mismatch.*\(2, 3\).*\(3, 2\)"):
        torch_backend.compare_arrays(torch.zeros((2, 3)), torch.zeros((3, 2)), Tolerance(), "o")
    with pytest.raises(InputError, match="complex"):
        torch_backend.compare_arrays(
            torch.zeros(2, dtype=torch.complex64), torch.zeros(2), Tolerance(), "c"
        )


def test_registry_and_describe():
    t = torch.zeros((2, 3), dtype=torch.bfloat16)
    assert get_backend(t) is torch_backend
    assert get_backend(np.zeros(2)) is None
    assert torch_backend.describe(t) == ((2, 3), "bfloat16", "cpu")
    if torch.cuda.is_available():
        on_gpu = t.cuda()
        assert torch_backend.describe(on_gpu) == ((2, 3), "bfloat16", str(on_gpu.device))
        assert torch_backend.to_numpy(on_gpu).dtype.name == "bfloat16"
    back = torch_backend.to_numpy(t)
    assert back.dtype.name == "bfloat16" and back.shape == (2, 3)


def test_cosine_of_x_with_itself_is_one_within_1e_12():
    # 64 Mi float32 elements of magnitude 1e3 (the accuracy bound of the metric definitions)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(1 << 26, generator=g) * 2e3 - 1e3
    result = torch_backend.compare_arrays(x, x, Tolerance(min_cosine=1.0 - 1e-12), "x")
    assert abs(result.cosine - 1.0) <= 1e-12 and result.passed
    y = x[: 1 << 20] + 1.0
    small = torch_backend.compare_arrays(x[: 1 << 20], y, Tolerance(), "x")
    xs, ys = x[: 1 << 20].double().numpy(), y.double().numpy()
    assert small.cosine == pytest.approx(
        float(xs @ ys) / math.sqrt(float(xs @ xs) * float(ys @ ys)), abs=1e-14
    )


LIMIT = 256  # the statistics vector and 3 x worst_k candidates, far below one chunk


def test_interception_no_host_copies_and_one_transfer(monkeypatch):
    """.cpu(), .numpy(), __array__ and __dlpack__ raise above LIMIT elements; the comparison
    runs."""
    calls = []

    def guard(method_name):
        original = getattr(torch.Tensor, method_name)

        def guarded(self, *args, **kwargs):
            if self.numel() > LIMIT:
                raise AssertionError(f"{method_name} on {self.numel()} elements")
            calls.append(method_name)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method_name, guarded)

    for method_name in ("cpu", "numpy", "__array__", "__dlpack__"):
        guard(method_name)
    n = 1 << 22
    x = torch.randn(n)
    y = x.clone()
    y[123_456] += 1.0
    y[4_000_000] = float("inf")
    with pytest.raises(AssertionError, match="numpy on"):
        x.numpy()  # the guard is live
    calls.clear()
    result = torch_backend.compare_arrays(x, y, Tolerance(atol=1e-6, max_ulp=1), "guarded")
    assert not result.passed and result.mismatches == 2
    assert [w.index for w in result.worst[:2]] == [(4_000_000,), (123_456,)]
    assert calls == ["cpu", "numpy"]  # one transfer of the small result vector


def test_host_memory_two_1gib_tensors():
    """Comparing two 1 GiB tensors (failing everywhere) adds at most 64 MiB of host memory."""
    values = run_isolated(
        """
        import resource, torch
        from paritygate.backends import torch as tb
        from paritygate.results import Tolerance
        torch.set_num_threads(1)
        n = (1 << 30) // 8  # 1 GiB of float64 each
        a = torch.randn(n, dtype=torch.float64)
        b = a + 1e-3  # every element differs
        # One small comparison first: the lazy imports and torch's first-use kernels cost ~45 MiB
        # once per process; the bound is on what a comparison adds (as in the other backends).
        tb.compare_arrays(a[:1000], b[:1000], Tolerance(max_ulp=0), "warm")
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = tb.compare_arrays(a, b, Tolerance(max_ulp=0), "big")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print("extra_mib=", (peak - base) / 1024)
        print("mismatches=", r.mismatches)
        print("worst=", len(r.worst))
        """
    )
    assert values["mismatches"] == (1 << 30) // 8 and values["worst"] == 10
    assert values["extra_mib"] <= 64, values


def cuda_available() -> bool:
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("kernel", ["auto", "triton", "chunked"])
def test_cuda_agrees_with_reference_and_stays_on_device(monkeypatch, kernel):
    """CUDA tensors, Triton (by default where installed, and demanded) and chunked: the host's
    numbers, on device."""
    from paritygate.backends import _triton

    for name, a, e, tol in CASES:
        # a demanded Triton path refuses pairs Triton does not take (float64, integers, empty):
        # those run as auto, which is what a user's unset variable does
        takes = a.size > 0 and {a.dtype.name, e.dtype.name} <= set(_triton.FLOAT_INPUTS)
        monkeypatch.setenv(torch_backend.KERNEL_ENV, kernel if takes else "auto")
        result = torch_backend.compare_arrays(to_torch(a).cuda(), to_torch(e).cuda(), tol, name)
        check(result, reference(a, e, tol), rel=1e-6)
        assert result.backend == "torch"
    # numpy on the other side moves to the device chunk by chunk
    monkeypatch.setenv(torch_backend.KERNEL_ENV, "auto" if kernel != "chunked" else kernel)
    name, a, e, tol = next(c for c in CASES if c[0] == "nonfinite")
    check(torch_backend.compare_arrays(to_torch(a).cuda(), e, tol, name), reference(a, e, tol))
    # bounded device memory and no host copies: two 1 GiB bf16 tensors, at most 1 GiB extra
    n = 1 << 29
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = x + 1
    torch.cuda.synchronize()
    moved = []
    for method_name in ("cpu", "numpy", "__array__", "__dlpack__"):
        original = getattr(torch.Tensor, method_name)

        def guarded(self, *args, _original=original, **kwargs):
            moved.append(self.numel())
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method_name, guarded)
    monkeypatch.setenv(torch_backend.KERNEL_ENV, kernel)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = torch_backend.compare_arrays(x, y, Tolerance(max_ulp=0), "big")
    extra = torch.cuda.max_memory_allocated() - before
    assert not result.passed and result.mismatches == n and len(result.worst) == 10
    assert extra <= 1 << 30, extra
    assert max(moved) <= LIMIT, moved


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs an NVIDIA GPU")
def test_cuda_cosine_of_x_with_itself_and_triton_matches_chunked(monkeypatch):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(1 << 26, generator=g, device="cuda") * 2e3 - 1e3
    y = (x + torch.randn(1 << 26, generator=g, device="cuda")).to(torch.bfloat16)
    r = torch_backend.compare_arrays(x, x.clone(), Tolerance(min_cosine=1 - 1e-12), "x")
    assert abs(r.cosine - 1.0) <= 1e-12 and r.passed
    tol = Tolerance(atol=0.5, rtol=1e-3, max_ulp=1)
    triton = torch_backend.compare_arrays(y, x, tol, "x")
    monkeypatch.setenv(torch_backend.KERNEL_ENV, "chunked")
    chunked = torch_backend.compare_arrays(y, x, tol, "x")
    # the kernel's float32 arithmetic: counts and ULPs exact, floats within float32 rounding
    check(triton, chunked, rel=1e-6, cosine_abs=1e-9)


def test_kernel_choice_is_checked(monkeypatch):
    """PARITYGATE_TORCH_KERNEL: an unknown value (the removed triton-fused included) and a demanded
    Triton kernel that cannot run (CPU tensors) are one-line input errors; auto and chunked
    compare on the CPU."""
    x = torch.arange(6, dtype=torch.float32)
    for unknown in ("fused", "triton-fused"):
        monkeypatch.setenv(torch_backend.KERNEL_ENV, unknown)
        with pytest.raises(InputError, match=f"auto, triton, chunked, got '{unknown}'$"):
            torch_backend.compare_arrays(x, x.clone(), Tolerance(), "x")
    monkeypatch.setenv(torch_backend.KERNEL_ENV, "triton")
    with pytest.raises(InputError, match="triton needs Triton and two contiguous CUDA tensors"):
        torch_backend.compare_arrays(x, x.clone(), Tolerance(), "x")
    for choice in ("auto", "chunked"):
        monkeypatch.setenv(torch_backend.KERNEL_ENV, choice)
        assert torch_backend.compare_arrays(x, x.clone(), Tolerance(), "x").passed


def test_complex_tensors_compared_as_pairs_like_the_host():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((30, 40)) + 1j * rng.standard_normal((30, 40))).astype(np.complex64)
    e = a.copy()
    e[3, 4] += 0.5j
    tol = Tolerance(atol=1e-3, max_ulp=2)
    for expected in (e, e.astype(np.complex128)):
        result = torch_backend.compare_arrays(
            torch.from_numpy(a), torch.from_numpy(expected), tol, "c"
        )
        check(result, reference(a, expected, tol))
        assert result.backend == "torch" and result.worst[0].index == (3, 4, 1)
    assert torch_backend.compare_arrays(torch.from_numpy(a), a.copy(), tol, "c").passed
    with pytest.raises(InputError, match="complex"):
        torch_backend.compare_arrays(torch.from_numpy(a), a.real.copy(), tol, "c")


# The small model of tests/unit/test_paired.py: a stack of tanh layers.
PAIRED_RNG = np.random.default_rng(0)
WEIGHTS = PAIRED_RNG.standard_normal((4, 16, 16)).astype(np.float32) / 4
INPUT = PAIRED_RNG.standard_normal((8, 16)).astype(np.float32)

# ---------------------------------------------------------------------------------------------
# torch arrays through the framework-free layers (comparison, outputs, paired, calibration,
# equivalence)


def test_torch_tensors_are_compared_exactly():
    import torch

    w = torch.from_numpy(WEIGHTS)

    def torch_model(scale: float = 1.0):
        h = torch.from_numpy(INPUT)
        for i in range(w.shape[0]):
            h = torch.tanh(h @ w[i])
        return (h * scale, h.to(torch.bfloat16))

    assert paired(torch_model, torch_model)
    planted = paired(torch_model, lambda: torch_model(1.5), orders=("forward",))
    assert [d.path for d in planted.checks[0].differences] == ["0"]


def test_framework_tensors_are_leaves():
    import torch

    t = torch.zeros(2, 3)
    leaves = flatten_outputs({"hidden": t, "pair": (t, t)})
    assert leaves["hidden"] is t and list(leaves) == ["hidden", "pair/0", "pair/1"]


def test_framework_tensor_goes_to_its_backend():
    import torch

    e = np.linspace(-1, 1, 100, dtype=np.float32)
    t = torch.from_numpy(e.copy())
    t[7] += 0.5
    out = compare({"x": t}, {"x": e}, atol=1e-3)["x"]
    assert out.backend == "torch"
    assert out.mismatches == 1 and out.worst[0].index == (7,)
    assert compare({"x": torch.from_numpy(e.copy())}, {"x": e}).passed


def test_two_frameworks_meet_on_the_host_and_say_so():
    import mlx.core as mx
    import torch

    e = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = e.copy()
    a[2, 1] = 100.0
    out = compare(torch.from_numpy(a), mx.array(e), atol=1e-3)[""]
    assert "different frameworks" in out.promotion
    assert "torch" in out.promotion and "mlx" in out.promotion
    assert out.mismatches == 1 and out.worst[0].index == (2, 1)
    assert compare(torch.from_numpy(e), mx.array(e)).passed


# ---------------------------------------------------------------------------------------------
# The Triton kernels, run by Triton's interpreter on CPU tensors: the same kernel source as on
# CUDA. TRITON_INTERPRET=1 must be set before Triton is first imported, so these run in a fresh
# interpreter. Triton ships with the CUDA builds of torch only.


def triton_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


needs_triton = pytest.mark.skipif(
    not triton_installed(),
    reason="no Triton wheel for this platform (the test extra installs it on Linux x86-64)",
)

_INTERPRETED = """
import os, sys, json, traceback
os.environ["TRITON_INTERPRET"] = "1"
os.environ["PARITYGATE_TORCH_KERNEL"] = "triton"
TESTS = {tests!r}
sys.path.insert(0, TESTS)
import numpy as np, torch
from backend_reference import cases, check, reference
from paritygate.backends import _triton, torch as torch_backend
from paritygate.results import Tolerance
# CPU tensors of the kernel's dtypes take the (interpreted) kernel; several blocks per case
FLOATS = _triton.FLOAT_INPUTS
_triton.supports = lambda a, e, p: (
    p.size > 0 and p.dtype_actual in FLOATS and p.dtype_expected in FLOATS
)
# tiles of 512 rows x VEC elements (1 or 2 per block), the exact pass in one step
_triton.SPLIT_BLOCK, _triton.SPLIT_WARPS, _triton.SPLIT_ROWS = 1 << 12, 4, 4
_triton.EXACT_TILE, _triton.EXACT_PROGRAMS = 1 << 12, 3

def to_torch(x):
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())

out = {{}}
{body}
print("RESULT=" + json.dumps(out))
"""


def run_interpreted(body: str) -> dict:
    import json
    import os
    import subprocess
    import sys
    import textwrap

    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = _INTERPRETED.format(tests=tests, body=textwrap.dedent(body))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT="))
    return json.loads(line[len("RESULT=") :])


@needs_triton
def test_triton_kernel_agrees_with_the_host():
    """Float32 arithmetic with float64 block sums: counts, ULPs, failures and worst elements as
    on the host, every float within 1e-6; blocks with a NaN or an infinity take the exact pass.
    A planted fault (the count of finite mismatches dropped) is caught by the same check."""
    out = run_interpreted(
        """
        for name, a, e, tol in cases():
            if a.dtype.name not in ("float32", "float16", "bfloat16"):
                continue
            got = torch_backend.compare_arrays(to_torch(a), to_torch(e), tol, name)
            try:
                check(got, reference(a, e, tol), rel=1e-6, cosine_abs=1e-9)
                out[name] = "ok"
            except AssertionError as exc:
                out[name] = str(exc)[:300]
        # The last, partial block (3000 of 4096 lanes) with 1096 NaNs on one side: counted
        # lane by lane, its finite positions must not be mistaken for a clean block.
        e = np.random.default_rng(3).standard_normal(2 * 4096 + 3000).astype(np.float32)
        a = e.copy()
        a[2 * 4096 : 2 * 4096 + 1096] = np.nan
        tol = Tolerance(atol=1e-6)
        got = torch_backend.compare_arrays(to_torch(a), to_torch(e), tol, "tail")
        try:
            check(got, reference(a, e, tol), rel=1e-6, cosine_abs=1e-9)
            out["tail"] = "ok"
        except AssertionError as exc:
            out["tail"] = str(exc)[:300]
        real = _triton.partials
        def planted(*args):
            fsum, fmax, cnt = real(*args)
            cnt[:, 1] = 0
            return fsum, fmax, cnt
        _triton.partials = planted
        name, a, e, tol = next(c for c in cases() if c[0] == "float32-planted")
        try:
            check(torch_backend.compare_arrays(to_torch(a), to_torch(e), tol, name),
                  reference(a, e, tol), rel=1e-6, cosine_abs=1e-9)
            out["planted fault"] = "not caught"
        except AssertionError as exc:
            out["planted fault"] = str(exc)[:300]
        """
    )
    planted = out.pop("planted fault")
    assert planted.startswith("passed") or planted.startswith("mismatches"), planted
    assert len(out) >= 10 and set(out.values()) == {"ok"}, out


@needs_triton
def test_triton_decisions_at_the_bound_are_exact():
    """Elements within float32 rounding of atol + rtol |e| are decided in float64 by the exact
    pass, as the host decides them; without that pass (NEAR = 0, and the split kernels' float32
    bounds rounded to nearest instead of outward) the float32 decisions of some differ and the
    mismatch count is wrong."""
    out = run_interpreted(
        """
        rng = np.random.default_rng(7)
        e = rng.uniform(0.5, 2.0, 1 << 14).astype(np.float32)
        tol = Tolerance(atol=1e-3, rtol=1e-2)
        e64 = e.astype(np.float64)
        a = (e64 + (tol.atol + tol.rtol * e64)).astype(np.float32)  # on the bound, rounded
        ref = reference(a, e, tol)
        out["host"] = ref.mismatches
        for near in (_triton.NEAR, 0.0):
            _triton.NEAR = near
            if near == 0:
                # no band left: the split kernels' float32 constants rounded to nearest, not outward
                _triton._float32_above = _triton._float32_below = lambda x: float(np.float32(x))
            got = torch_backend.compare_arrays(torch.from_numpy(a), torch.from_numpy(e), tol, "x")
            out[str(near)] = got.mismatches
        """
    )
    assert 0 < out["host"] < 1 << 14, out  # a real split at the bound
    assert out["1e-06"] == out["host"], out
    assert out["0.0"] != out["host"], out


@needs_triton
def test_triton_one_minus_cosine_within_the_float32_bound():
    """The kernel's float32 arithmetic keeps 1 - cosine within the float32 bound of
    test_backend_cosine.py on its adversarial pairs (cos within 1e-6 .. 1e-17 of 1)."""
    out = run_interpreted(
        """
        sys.path.insert(0, os.path.join(TESTS, "backends"))
        import test_backend_cosine as tc
        for case, (a, e) in tc.adversarial().items():
            if a.dtype.name == "float32":
                got = torch_backend.compare_arrays(to_torch(a), to_torch(e), Tolerance(), "x")
                exact, scale = tc.reference(case)
                out[case] = abs(got.one_minus_cosine - exact) / scale
        out["bound"] = tc.B_FLOAT32
        """
    )
    bound = out.pop("bound")
    assert len(out) == 5 and max(out.values()) <= bound, out


def split_blocks(B: int) -> tuple:
    """Six blocks of B float32 elements for the split kernels: 0 clean (with a sign flip 2**31
    ULP apart: the unsigned distance), 1 a NaN, 2 an element past the bound by less than NEAR
    (relative), 3 a float32 overflow of a - e, 4 values whose squares underflow float32, 5 the
    partial last block. Returns (actual, expected, tolerance, relative distance of block 2's
    element past its bound)."""
    rng = np.random.default_rng(5)
    e = rng.standard_normal(5 * B + 1000).astype(np.float32)
    a = (e + rng.standard_normal(e.size).astype(np.float32) * 1e-3).astype(np.float32)
    tol = Tolerance(atol=1e-2, rtol=1e-3, max_ulp=4)
    a[3], e[3] = 2.0, -2.0
    a[B + 7] = np.nan
    e[2 * B + 9] = 2.0**-10
    bound = np.abs(np.float64(e[2 * B + 9])) * tol.rtol + tol.atol  # the host's operations
    x = np.float32(np.float64(e[2 * B + 9]) + bound)
    while not np.float64(x) - np.float64(e[2 * B + 9]) > bound:
        x = np.nextafter(x, np.float32(1))
    a[2 * B + 9] = x
    near = (np.float64(x) - np.float64(e[2 * B + 9]) - bound) / bound
    a[3 * B + 1], e[3 * B + 1] = 3e38, -3e38
    a[4 * B : 5 * B] *= 1e-30
    e[4 * B : 5 * B] *= 1e-30
    return a, e, tol, float(near)


def _split_setup() -> str:
    """The interpreted tests' data: split_blocks at the interpreted block size, and a verdict."""
    import inspect

    return inspect.getsource(split_blocks) + textwrap.dedent(
        """
        a, e, tol, near = split_blocks(_triton.SPLIT_BLOCK)
        ref = reference(a, e, tol)

        def verdict(result):
            try:
                check(result, ref, rel=1e-6, cosine_abs=1e-9)
                return "ok"
            except AssertionError as exc:
                return str(exc)[:300]
        """
    )


@needs_triton
def test_triton_split_recomputes_flagged_blocks_exactly():
    """The fast pass flags exactly the blocks float32 cannot decide (a NaN, a decision within
    NEAR of the bound, a float32 overflow, squares lost to underflow, the partial last block);
    the exact pass recomputes them and the report equals the host's."""
    out = run_interpreted(
        _split_setup()
        + textwrap.dedent(
            """
        real = _triton._exact_pass
        seen = []
        def spy(a_, e_, p, tol_, ids, nflag, *rest):
            seen.append(sorted(ids[: int(nflag[0])].tolist()))
            return real(a_, e_, p, tol_, ids, nflag, *rest)
        _triton._exact_pass = spy
        out["near"] = near
        out["verdict"] = verdict(torch_backend.compare_arrays(to_torch(a), to_torch(e), tol, "x"))
        out["flagged"] = seen
        out["mismatches"] = int(ref.mismatches)
        """
        )
    )
    assert 0 < out["near"] < 1e-6, out  # the planted decision is one float32 cannot make
    assert out["flagged"] == [[1, 2, 3, 4, 5]], out
    assert out["mismatches"] >= 3 and out["verdict"] == "ok", out


@needs_triton
def test_triton_split_dropped_flags_are_caught():
    """Planted faults: without the exact launch, or with one flagged block (the decision within
    NEAR of the bound) left out of it, the report differs from the host's and the check says
    where."""
    out = run_interpreted(
        _split_setup()
        + textwrap.dedent(
            """
        real = _triton._exact_pass
        _triton._exact_pass = lambda *args: None
        out["no exact launch"] = verdict(
            torch_backend.compare_arrays(to_torch(a), to_torch(e), tol, "x")
        )
        def drop_block_2(a_, e_, p, tol_, ids, nflag, *rest):
            keep = [i for i in ids[: int(nflag[0])].tolist() if i != 2]
            ids[: len(keep)] = torch.tensor(keep, dtype=ids.dtype)
            nflag[0] = len(keep)
            return real(a_, e_, p, tol_, ids, nflag, *rest)
        _triton._exact_pass = drop_block_2
        out["block 2 dropped"] = verdict(
            torch_backend.compare_arrays(to_torch(a), to_torch(e), tol, "x")
        )
        """
        )
    )
    assert out["no exact launch"] != "ok", out
    assert out["block 2 dropped"].startswith("mismatches: "), out


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs an NVIDIA GPU")
def test_cuda_split_recomputes_flagged_blocks_exactly(monkeypatch):
    """The split kernels as compiled for the GPU (fused multiply-adds, the approximate division):
    the same six blocks at the production block size are flagged and recomputed, and the report
    equals the host's; without the exact launch it does not."""
    from paritygate.backends import _device, _triton

    monkeypatch.setenv(torch_backend.KERNEL_ENV, "triton")
    probe = np.zeros(1, np.float32)
    block = _triton.block_size(_device.plan(probe.shape, probe.shape, "float32", "float32", "x"))
    a, e, tol, near = split_blocks(block)
    assert 0 < near < _triton.NEAR
    ref = reference(a, e, tol)
    real = _triton._exact_pass
    seen = []

    def spy(a_, e_, p, tol_, ids, nflag, *rest):
        seen.append(sorted(ids[: int(nflag[0])].tolist()))
        return real(a_, e_, p, tol_, ids, nflag, *rest)

    monkeypatch.setattr(_triton, "_exact_pass", spy)
    result = torch_backend.compare_arrays(to_torch(a).cuda(), to_torch(e).cuda(), tol, "x")
    assert seen == [[1, 2, 3, 4, 5]]
    check(result, ref, rel=1e-6, cosine_abs=1e-9)
    monkeypatch.setattr(_triton, "_exact_pass", lambda *args: None)
    dropped = torch_backend.compare_arrays(to_torch(a).cuda(), to_torch(e).cuda(), tol, "x")
    with pytest.raises(AssertionError):
        check(dropped, ref, rel=1e-6, cosine_abs=1e-9)

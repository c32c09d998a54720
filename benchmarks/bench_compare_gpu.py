"""GPU benchmark of the device backends, with the anchors run side by side in the same process.

torch (CUDA): two 4 GiB bfloat16 tensors (2**31 elements each).
  anchors: one read of both tensors (``x.sum(); y.sum()``), torch.testing.assert_close passing and
  failing; paritygate's torch backend passing and failing, each path in the same run
  (``PARITYGATE_TORCH_KERNEL``): ``triton`` (the split kernels, the default) and ``chunked``,
  and whether their failing reports agree; for the Triton path, where its time goes (the fast
  kernel alone, both kernels, the reduction with the worst-k revisit, the flagged blocks). For each:
  median time, extra device memory
  (max_memory_allocated delta), and the largest number of elements any ``.cpu()`` /
  ``.numpy()`` / ``__array__`` / ``__dlpack__`` call moved to the host (intercepted).
MLX (GPU): two 2 GiB bfloat16 arrays of shape (32768, 32768) (MLX 0.32 rejects 1-D arrays of
  2**31 elements): one read of both, and paritygate's MLX backend passing and failing (time and
  MLX peak memory above the inputs); then the float32 arithmetic against the host engine on a
  slice of 2**25 elements (counts, max_abs, ULPs, worst elements exact).

JAX (GPU, without x64): two 4 GiB bfloat16 arrays (2**31 elements each).
  anchors: one read of both (one jitted float32 sum of each), and a naive jitted report (max and
  mean |a - e|, cosine, mismatch count) fused by XLA; paritygate's JAX backend passing and failing
  (time, and the device's peak bytes in use above the inputs when the runtime reports it), through
  the XLA path (``PARITYGATE_JAX_KERNEL=chunked``) and the Pallas kernel (``pallas``) side by side,
  and whether their failing reports agree (counts, ULPs, max_abs, worst elements exactly; sums
  within the float32 bounds); XLA's account of the whole-array reduction's temporaries and the
  number of calls per comparison of the XLA path. ``--elements`` shrinks the arrays (without a GPU
  the kernel runs in Pallas's interpreter: a check of the script, not a timing).

Usage: python benchmarks/bench_compare_gpu.py torch|jax|mlx [--tune] [--json OUT.json]
       python benchmarks/bench_compare_gpu.py torch [--kernels triton,chunked] [--log2-size N]
       python benchmarks/bench_compare_gpu.py torch --resources   (registers for sm_90, no GPU)
       TRITON_INTERPRET=1 python benchmarks/bench_compare_gpu.py torch --interpret --log2-size 14
       python benchmarks/bench_compare_gpu.py jax [--elements N]
Prints one line per measurement and the ratios to one read of both arrays (torch: and a table).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

TORCH_KERNELS = ("triton", "chunked")


def agrees(k, c, cosine_rel: float) -> bool:
    """A float32 kernel's report ``k`` against the chunked path's ``c``: counts, ULPs, max_abs and
    the worst elements exactly; mean_abs within 1e-6 and 1 - cosine within ``cosine_rel``
    (relative), the float32 bounds (the chunked path sums in float64)."""
    return (
        k.mismatches == c.mismatches
        and k.ulp_max == c.ulp_max
        and k.ulp_nonzero == c.ulp_nonzero
        and k.ulp_over == c.ulp_over
        and k.nonfinite == c.nonfinite
        and k.max_abs == c.max_abs
        and abs(k.mean_abs - c.mean_abs) <= 1e-6 * c.mean_abs
        and abs(k.one_minus_cosine - c.one_minus_cosine) <= cosine_rel * c.one_minus_cosine
        and [(w.index, w.excess) for w in k.worst] == [(w.index, w.excess) for w in c.worst]
    )


def bench_torch(
    reps: int,
    tune: bool,
    log2_size: int = 31,
    kernels: tuple = TORCH_KERNELS,
    interpret: bool = False,
) -> dict:
    """The torch rows. ``interpret``: CPU tensors through Triton's interpreter (a dry run of the
    script on a machine without a GPU: the times mean nothing)."""
    import os

    import torch

    from paritygate.backends import _triton
    from paritygate.backends import torch as torch_backend
    from paritygate.results import Tolerance

    if interpret:
        dev = torch.device("cpu")
        floats = _triton.FLOAT_INPUTS
        _triton.supports = lambda a, e, p: (
            p.size > 0 and p.dtype_actual in floats and p.dtype_expected in floats
        )
        sync = reset_peak = lambda: None  # noqa: E731
        allocated = max_allocated = lambda: 0  # noqa: E731
    else:
        dev = torch.device("cuda")
        sync = torch.cuda.synchronize
        reset_peak = torch.cuda.reset_peak_memory_stats
        allocated, max_allocated = torch.cuda.memory_allocated, torch.cuda.max_memory_allocated
    n = 1 << log2_size
    x = torch.randn(n, device=dev, dtype=torch.bfloat16)
    x2 = x.clone()
    y = x + (torch.randn(n, device=dev, dtype=torch.bfloat16) * 0.01)
    sync()
    name = "cpu (Triton interpreter)" if interpret else torch.cuda.get_device_name()
    out: dict = {"device": name, "torch": torch.__version__, "elements": n}

    moved = []

    def intercept():
        for name in ("cpu", "numpy", "__array__", "__dlpack__"):
            original = getattr(torch.Tensor, name)

            def guarded(self, *a, _original=original, **k):
                moved.append(self.numel())
                return _original(self, *a, **k)

            setattr(torch.Tensor, name, guarded)

    def timed(fn, warm: int = 2, reps: int = reps) -> tuple[float, int]:
        for _ in range(warm):
            fn()
        sync()
        times = []
        reset_peak()
        before = allocated()
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        extra = max_allocated() - before
        return statistics.median(times) * 1e3, extra

    def read():
        x.sum(dtype=torch.float32)
        y.sum(dtype=torch.float32)

    out["read_ms"], _ = timed(read)

    def assert_close_pass():
        torch.testing.assert_close(x, x2, atol=1e-3, rtol=0)

    def assert_close_fail():
        try:
            torch.testing.assert_close(y, x, atol=1e-3, rtol=0)
        except AssertionError:
            pass

    out["assert_close_pass_ms"], out["assert_close_pass_extra_bytes"] = timed(
        assert_close_pass, warm=1
    )
    out["assert_close_fail_ms"], out["assert_close_fail_extra_bytes"] = timed(
        assert_close_fail, warm=1
    )

    tol = Tolerance(atol=1e-3, max_ulp=0, min_cosine=0.999)
    if tune:
        # Launch shapes of the split kernel, timed on the failing pair; the fastest is kept.
        # (rows of 16 bytes; a block is at most 32 tiles: each lane adds at most 32 float32 terms)
        os.environ["PARITYGATE_TORCH_KERNEL"] = "triton"
        configs = [(1 << 15, 4, 1), (1 << 15, 8, 1), (1 << 15, 4, 2), (1 << 14, 4, 1)]
        timings = {}
        for block, warps, rows in configs:
            _triton.SPLIT_BLOCK, _triton.SPLIT_WARPS, _triton.SPLIT_ROWS = block, warps, rows
            key = f"tune_block{block}_warps{warps}_rows{rows}"
            try:
                ms, _ = timed(lambda: torch_backend.compare_arrays(y, x, tol, "x"), warm=1, reps=3)
            except Exception as exc:
                out[key + "_error"] = f"{type(exc).__name__}: {exc}"[:500]
                continue
            timings[(block, warps, rows)] = ms
            out[key + "_ms"] = ms
        if timings:
            best = min(timings, key=timings.get)
            _triton.SPLIT_BLOCK, _triton.SPLIT_WARPS, _triton.SPLIT_ROWS = best
            out["split_config"] = {"SPLIT_BLOCK": best[0], "SPLIT_WARPS": best[1], "ROWS": best[2]}
        os.environ.pop("PARITYGATE_TORCH_KERNEL")

    intercept()
    results = {}

    for kernel in kernels:
        os.environ["PARITYGATE_TORCH_KERNEL"] = kernel
        fast = kernel != "chunked"
        for case, (a, e) in (("pass", (x, x2)), ("fail", (y, x))):
            moved.clear()
            holder = {}

            def run(a=a, e=e, holder=holder):
                holder["r"] = torch_backend.compare_arrays(a, e, tol, "x")

            k_reps = reps if fast else 1
            key = f"paritygate_{kernel}_{case}"
            try:
                ms, extra = timed(run, warm=2 if fast else 1, reps=k_reps)
            except Exception as exc:  # report and go on with the other paths
                out[key + "_error"] = f"{type(exc).__name__}: {exc}"[:2000]
                continue
            r = holder["r"]
            out[key + "_ms"] = ms
            out[key + "_extra_bytes"] = extra
            out[key + "_max_elements_to_host"] = max(moved) if moved else 0
            out[key + "_calls_to_host_per_run"] = len(moved) / (k_reps + (2 if fast else 1))
            results[key] = r
            if kernel == "triton":  # after the count of transfers above: it makes its own
                out.update(triton_breakdown(a, e, tol, key, timed))
        os.environ.pop("PARITYGATE_TORCH_KERNEL")
    if "paritygate_triton_fail" in results:
        t = results["paritygate_triton_fail"]
        out["fail_mismatches"] = t.mismatches
        out["fail_failures"] = [f.metric for f in t.failures]
        out["fail_cosine"] = t.cosine
        out["pass_passed"] = bool(results["paritygate_triton_pass"].passed)
    if "paritygate_triton_fail" in results and "paritygate_chunked_fail" in results:
        t, c = results["paritygate_triton_fail"], results["paritygate_chunked_fail"]
        out["agrees_with_chunked"] = agrees(t, c, cosine_rel=2e-6)
        out["mean_abs_rel_diff_chunked"] = abs(t.mean_abs - c.mean_abs) / c.mean_abs
    return out


def triton_breakdown(a, e, tol, key: str, timed) -> dict:
    """Where the split Triton path's time goes: the fast kernel alone, both kernels (the exact one
    over the flagged blocks), the partials reduced with the worst-k revisit (everything but the
    transfer and the report), and how many blocks the fast kernel flagged."""
    from paritygate.backends import _triton
    from paritygate.backends import torch as torch_backend
    from paritygate.backends._device import kernel_tolerance, plan
    from paritygate.backends.torch import _Side

    side_a, side_e = _Side(a, a.device, "x"), _Side(e, e.device, "x")
    p = plan(side_a.shape, side_e.shape, side_a.dtype, side_e.dtype, "x")
    ktol = kernel_tolerance(p, tol)
    flat_a, flat_e = a.reshape(-1), e.reshape(-1)
    out = {}
    real_exact = _triton._exact_pass
    flagged = []

    def no_exact(*args, **kwargs):
        flagged.append(args[5])  # nflag, read after the timing

    _triton._exact_pass = no_exact
    try:
        out[key + "_fast_kernel_ms"], _ = timed(lambda: _triton.partials(flat_a, flat_e, p, ktol))
    finally:
        _triton._exact_pass = real_exact
    out[key + "_flagged_blocks"] = int(flagged[-1].item()) if flagged else None
    out[key + "_both_kernels_ms"], _ = timed(lambda: _triton.partials(flat_a, flat_e, p, ktol))
    out[key + "_reduce_and_revisit_ms"], _ = timed(
        lambda: torch_backend._reduce_triton(a, e, p, ktol)
    )
    return out


def triton_resources() -> dict:
    """Registers, stack (spills) and instruction counts of the Triton kernels compiled for an H200
    (sm_90) at the benchmark's settings (bfloat16, atol only, max_ulp): needs Triton's own ptxas,
    cuobjdump and nvdisasm, not a GPU."""
    import os
    import re
    import subprocess
    import tempfile

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from paritygate.backends import _triton as T

    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")

    def build(fn, sig: dict, consts: dict, warps: int, fusion: bool = True) -> str:
        signature = dict(sig, **{k: "constexpr" for k in consts})
        attrs = {
            (i,): [["tt.divisibility", 16]]
            for i, (k, v) in enumerate(signature.items())
            if v.startswith("*") or k == "n"
        }
        src = ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs)
        options = {"num_warps": warps, "enable_fp_fusion": fusion}
        c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.cubin")
            with open(path, "wb") as fh:
                fh.write(c.asm["cubin"])
            usage = subprocess.run(
                [os.path.join(bindir, "cuobjdump"), "--dump-resource-usage", path],
                capture_output=True,
                text=True,
            ).stdout
            sass = subprocess.run(
                [os.path.join(bindir, "nvdisasm"), "-c", path], capture_output=True, text=True
            ).stdout
        m = re.search(r"REG:(\d+) STACK:(\d+)", usage)
        count = sum(1 for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4,}\*/", line))
        return f"{m.group(1)} registers, stack {m.group(2)}, {count} instructions" if m else usage

    ulp = dict(ULP_DT=tl.bfloat16, ULP_INT=tl.int16, ULP_MASK=0x7FFF, HAS_MAX_ULP=True)
    ptr = {"a_ptr": "*bf16", "e_ptr": "*bf16", "n": "i64"}
    out = {}
    fast, exact = T._split_kernels()
    sig = dict(ptr, params_ptr="*fp32", max_ulp="i32", fsum_ptr="*fp64", fmax_ptr="*fp64")
    sig.update(cnt_ptr="*i64", ids_ptr="*i32", nflag_ptr="*i32")
    for warps, rows in ((T.SPLIT_WARPS, T.SPLIT_ROWS), (8, 1), (4, 2)):
        consts = dict(
            ulp,
            BLOCK=min(T.SPLIT_BLOCK, 32 * 32 * warps * rows * 8),
            ROWS=32 * warps * rows,
            VEC=8,
            ULP_BITS=16,
            RTOL_ZERO=True,
            REL_EPS_ZERO=False,
            TINY=T.TINY_SQUARES,
            FAST_DIV=True,
        )
        key = f"split fast kernel, {warps} warps x {rows} rows"
        out.setdefault(key, build(fast, sig, consts, warps))
    consts = dict(
        ulp,
        BLOCK=T.SPLIT_BLOCK,
        TILE=T.EXACT_TILE,
        PROGRAMS=T.EXACT_PROGRAMS,
        ULP_WIDE=tl.int32,
        EQUAL_NAN=True,
    )
    sig = dict(ptr, params_ptr="*fp64", max_ulp="i32", ids_ptr="*i32", nflag_ptr="*i32")
    sig.update(fsum_ptr="*fp64", fmax_ptr="*fp64", cnt_ptr="*i64")
    out["split exact kernel"] = build(exact, sig, consts, T.EXACT_WARPS, fusion=False)
    return out


def torch_table(out: dict) -> str:
    """The torch rows as a compact table: time, ratio to one read of both, extra memory."""
    read = out["read_ms"]
    lines = [f"one read of both ({out['elements']} elements each): {read:.3f} ms"]
    lines.append(
        f"{'path':<26}{'pass ms':>11}{'x read':>10}{'fail ms':>11}{'x read':>10}{'MiB':>8}"
    )
    rows = [("assert_close", "assert_close_{}")]
    rows += [(f"paritygate {k}", f"paritygate_{k}_{{}}") for k in TORCH_KERNELS]
    for label, key in rows:
        cells = []
        mib = 0.0
        for case in ("pass", "fail"):
            ms = out.get(key.format(case) + "_ms")
            if ms is None:
                cells.append(f"{'-':>11}{'-':>10}")
                continue
            cells.append(f"{ms:>11.3f}{ms / read:>9.2f}x")
            mib = max(mib, out.get(key.format(case) + "_extra_bytes", 0) / 2**20)
        lines.append(f"{label:<26}{''.join(cells)}{mib:>8.1f}")
    return "\n".join(lines)


def bench_jax(reps: int, n: int = 1 << 31) -> dict:
    import jax
    import jax.numpy as jnp

    from paritygate.backends import jax as jax_backend
    from paritygate.results import Tolerance

    device = jax.devices()[0]
    x = jax.random.normal(jax.random.key(0), (n,), jnp.bfloat16)
    x2 = x + jnp.zeros((), jnp.bfloat16)  # an equal copy
    y = (x + jax.random.normal(jax.random.key(1), (n,), jnp.bfloat16) * 0.01).astype(jnp.bfloat16)
    jax.block_until_ready((x, x2, y))
    out: dict = {"device": str(device), "jax": jax.__version__, "elements": n}

    def peak() -> int | None:
        stats = device.memory_stats() or {}
        return stats.get("peak_bytes_in_use")

    def timed(fn, warm: int = 2) -> float:
        for _ in range(warm):
            jax.block_until_ready(fn())
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    read = jax.jit(lambda a, b: (a.sum(dtype=jnp.float32), b.sum(dtype=jnp.float32)))
    out["read_ms"] = timed(lambda: read(x, y))

    @jax.jit
    def naive(a, b):
        a32, b32 = a.astype(jnp.float32), b.astype(jnp.float32)
        d = jnp.abs(a32 - b32)
        cos = (a32 * b32).sum() / jnp.sqrt((a32 * a32).sum() * (b32 * b32).sum())
        return d.max(), d.mean(), cos, (d > 1e-3).sum()

    out["naive_jitted_report_ms"] = timed(lambda: naive(y, x))
    tol = Tolerance(atol=1e-3, max_ulp=0, min_cosine=0.999)
    # XLA's own account of the whole-array reduction's temporaries (buffers beyond its inputs).
    spec = jax_backend._Spec("float", "bfloat16", tol, False)
    compiled = jax_backend._kernel(spec, n, True, True).lower(y, x, jax_backend._index(0)).compile()
    analysis = compiled.memory_analysis()
    if analysis is not None:
        out["xla_temp_bytes"] = analysis.temp_size_in_bytes
    side = jax_backend._Side(x)
    ranges = jax_backend._ranges(n, jax_backend._accelerator(device), True, spec, side, side)
    out["paritygate_calls_per_comparison"] = len(ranges)
    inputs = peak()
    # The XLA path (chunked where XLA would not fuse it) and the Pallas kernel, side by side
    # (pallas-interpret without a GPU: a check of this script on small arrays, not a timing).
    pallas = "pallas" if device.platform == "gpu" else "pallas-interpret"
    results = {}
    # The Pallas kernel first: the runtime's peak is a high-water mark, so its reading is the
    # kernel's own; the XLA path's then reads the larger of the two.
    from paritygate.backends import _pallas

    # the kernel is the default on a GPU; the XLA path (chunked) is timed beside it as the one
    # it replaced
    paths = [(pallas, "pallas"), ("chunked", "chunked")]
    while paths:
        kernel, label = paths.pop(0)
        if label == "pallas_ieee":
            # the kernel failed with the fast division's inline assembly: IEEE division instead
            _pallas.FAST_DIVISION = False
            jax_backend._pallas_kernel.cache_clear()
        os.environ[jax_backend.KERNEL_ENV] = kernel
        for case, (a, e) in (("pass", (x, x2)), ("fail", (y, x))):
            holder = {}
            key = f"paritygate_{label}_{case}"

            def run(a=a, e=e, holder=holder):
                holder["r"] = jax_backend.compare_arrays(a, e, tol, "x")
                return ()

            try:
                out[key + "_ms"] = timed(run, warm=1)
            except Exception as exc:  # report it and go on with the other path
                out[key + "_error"] = f"{type(exc).__name__}: {exc}"[:2000]
                continue
            after = peak()
            if inputs is not None and after is not None:
                out[key + "_peak_above_inputs_bytes"] = after - inputs
            r = holder["r"]
            results[key] = r
            if kernel == "triton":  # after the count of transfers above: it makes its own
                out.update(triton_breakdown(a, e, tol, key, timed))
            out[key + "_passed"] = bool(r.passed)
            out[key + "_mismatches"] = r.mismatches
            out[key + "_one_minus_cosine"] = getattr(r, "one_minus_cosine", None)
        os.environ.pop(jax_backend.KERNEL_ENV)
        if label == "pallas" and "paritygate_pallas_fail_ms" not in out:
            paths.append((pallas, "pallas_ieee"))
    if "paritygate_pallas_ieee_fail_ms" in out:
        results["paritygate_pallas_fail"] = results["paritygate_pallas_ieee_fail"]
    c, k = results.get("paritygate_chunked_fail"), results.get("paritygate_pallas_fail")
    if c is not None and k is not None:
        out["kernels_agree"] = agrees(k, c, cosine_rel=4e-6)
        out["mean_abs_rel_diff"] = abs(k.mean_abs - c.mean_abs) / c.mean_abs
        out["one_minus_cosine_rel_diff"] = (
            abs(k.one_minus_cosine - c.one_minus_cosine) / c.one_minus_cosine
        )
    return out


def bench_mlx(reps: int, size: tuple | None = None) -> dict:
    import mlx.core as mx

    from paritygate.backends import mlx as mlx_backend
    from paritygate.results import Tolerance

    out: dict = {"device": str(mx.default_device()), "mlx": mx.__version__}
    shape = (1 << 15, 1 << 15) if size is None else size
    x = mx.random.normal(shape).astype(mx.bfloat16)
    x2 = mx.array(x)
    y = (x + mx.random.normal(shape) * 0.01).astype(mx.bfloat16)
    mx.eval(x, x2, y)
    out["elements"] = x.size

    def timed(fn, warm: int = 2) -> tuple[float, int]:
        for _ in range(warm):
            fn()
        mx.synchronize()
        mx.reset_peak_memory()
        before = mx.get_active_memory()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            mx.synchronize()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3, mx.get_peak_memory() - before

    out["read_ms"], _ = timed(
        lambda: mx.eval(x.astype(mx.float32).sum(), y.astype(mx.float32).sum())
    )
    tol = Tolerance(atol=1e-3, max_ulp=0, min_cosine=0.999)
    for case, (a, e) in (("pass", (x, x2)), ("fail", (y, x))):
        holder = {}
        ms, extra = timed(
            lambda a=a, e=e, holder=holder: holder.update(
                r=mlx_backend.compare_arrays(a, e, tol, "x")
            ),
            warm=1,
        )
        out[f"paritygate_{case}_ms"] = ms
        out[f"paritygate_{case}_extra_bytes"] = extra
        out[f"paritygate_{case}_mismatches"] = holder["r"].mismatches
        out[f"paritygate_{case}_passed"] = bool(holder["r"].passed)
        out[f"paritygate_{case}_extra_mib"] = round(extra / 2**20, 1)
    # (The chunked path, PARITYGATE_MLX_KERNEL=chunked, is not timed here: MLX builds its compiled
    # step's CUDA kernels for about a minute on a fresh machine. Its figures: benchmarks/README.md.)
    # Exactness of the float32 arithmetic against the host engine (float64, numpy) on a slice of
    # 2**25 elements: counts, maxima, ULPs and worst elements must be equal, sums within 1e-6.
    from paritygate.backends import host

    rows = slice(0, 1024)
    got = mlx_backend.compare_arrays(y[rows], x[rows], tol, "x")
    ref = host.compare_arrays(
        mlx_backend.to_numpy(y[rows]), mlx_backend.to_numpy(x[rows]), tol, "x"
    )
    out["host_check_elements"] = got.size
    for key in ("mismatches", "max_abs", "ulp_max", "ulp_nonzero", "ulp_over"):
        out[f"host_check_{key}"] = f"{getattr(got, key)} vs host {getattr(ref, key)}"
    out["host_check_worst_equal"] = [(w.index, w.excess) for w in got.worst] == [
        (w.index, w.excess) for w in ref.worst
    ]
    out["host_check_mean_abs_rel"] = abs(got.mean_abs - ref.mean_abs) / ref.mean_abs
    out["host_check_cosine_abs"] = abs(got.cosine - ref.cosine)
    out["host_check_exact"] = (
        got.mismatches == ref.mismatches
        and got.max_abs == ref.max_abs
        and got.ulp_max == ref.ulp_max
        and got.ulp_nonzero == ref.ulp_nonzero
        and out["host_check_worst_equal"]
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("framework", choices=("torch", "jax", "mlx"))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--tune", action="store_true", help="time launch shapes of the split Triton kernel first"
    )
    parser.add_argument(
        "--log2-size", type=int, default=31, help="torch: 2**N elements per tensor (default 31)"
    )
    parser.add_argument(
        "--kernels",
        default=",".join(TORCH_KERNELS),
        help="torch: the paths to time, of " + ", ".join(TORCH_KERNELS),
    )
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="torch: CPU tensors through Triton's interpreter (a dry run; times mean nothing)",
    )
    parser.add_argument(
        "--resources",
        action="store_true",
        help="torch: registers and instructions of the Triton kernels compiled for sm_90 (no GPU)",
    )
    parser.add_argument(
        "--elements", type=int, default=1 << 31, help="jax: elements per array (default 2**31)"
    )
    args = parser.parse_args()
    if args.framework == "torch" and args.resources:
        for key, value in triton_resources().items():
            print(f"{key}: {value}", flush=True)
        return
    if args.framework == "torch":
        kernels = tuple(k for k in args.kernels.split(",") if k)
        unknown = set(kernels) - set(TORCH_KERNELS)
        if unknown:
            parser.error(f"--kernels: unknown {', '.join(sorted(unknown))}")
        out = bench_torch(args.reps, args.tune, args.log2_size, kernels, args.interpret)
    elif args.framework == "jax":
        out = bench_jax(args.reps, args.elements)
    else:
        out = bench_mlx(args.reps)
    out["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    read = out["read_ms"]
    for key, value in out.items():
        line = f"{key}: {value}"
        if key.endswith("_ms") and key != "read_ms":
            line += f"  ({value / read:.2f}x one read of both)"
        print(line, flush=True)
    if args.framework == "torch":
        print(torch_table(out), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2, default=str)


if __name__ == "__main__":
    main()

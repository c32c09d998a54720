"""GPU benchmark of the device backends, with the anchors run side by side in the same process.

torch (CUDA): two 4 GiB bfloat16 tensors (2**31 elements each).
  anchors: one read of both tensors (``x.sum(); y.sum()``), torch.testing.assert_close passing and
  failing; paritygate's torch backend (fused Triton kernel, and the chunked torch path) passing
  and failing. For each: median time, extra device memory (max_memory_allocated delta), and the
  largest number of elements any ``.cpu()`` / ``.numpy()`` / ``__array__`` / ``__dlpack__`` call
  moved to the host (intercepted).
MLX (GPU): two 2 GiB bfloat16 arrays of shape (32768, 32768) (MLX 0.32 rejects 1-D arrays of
  2**31 elements): one read of both, and paritygate's MLX backend passing and failing (time and
  MLX peak memory above the inputs); then the float32 arithmetic against the host engine on a
  slice of 2**25 elements (counts, max_abs, ULPs, worst elements exact).

JAX (GPU, without x64): two 4 GiB bfloat16 arrays (2**31 elements each).
  anchors: one read of both (one jitted float32 sum of each), and a naive jitted report (max and
  mean |a - e|, cosine, mismatch count) fused by XLA; paritygate's JAX backend passing and failing
  (time, and the device's peak bytes in use above the inputs when the runtime reports it), XLA's
  account of the whole-array reduction's temporaries and the number of calls per comparison (1:
  the whole arrays at once).

Usage: python benchmarks/bench_compare_gpu.py torch|jax|mlx [--tune] [--json OUT.json]
Prints one line per measurement and the ratios to one read of both arrays.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def bench_torch(reps: int, tune: bool) -> dict:
    import os

    import torch

    from paritygate.backends import torch as torch_backend
    from paritygate.results import Tolerance

    dev = torch.device("cuda")
    n = 1 << 31
    x = torch.randn(n, device=dev, dtype=torch.bfloat16)
    x2 = x.clone()
    y = x + (torch.randn(n, device=dev, dtype=torch.bfloat16) * 0.01)
    torch.cuda.synchronize()
    out: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "elements": n}

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
        torch.cuda.synchronize()
        times = []
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        extra = torch.cuda.max_memory_allocated() - before
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
        # Launch shapes of the fused kernel, timed on the failing pair; the fastest is kept.
        from paritygate.backends import _triton

        os.environ["PARITYGATE_TORCH_KERNEL"] = "triton"
        # (BLOCK / TILE, the float32 terms each lane adds, stays at 32 or below: the sums' bound)
        configs = [
            (1 << 14, 1 << 9, 4),
            (1 << 14, 1 << 10, 8),
            (1 << 13, 1 << 10, 4),
            (1 << 15, 1 << 11, 8),
        ]
        timings = {}
        for block, tile, warps in configs:
            _triton.BLOCK, _triton.TILE, _triton.NUM_WARPS = block, tile, warps
            try:
                ms, _ = timed(lambda: torch_backend.compare_arrays(y, x, tol, "x"), warm=1, reps=3)
            except Exception as exc:
                out[f"tune_{block}_{tile}_{warps}_error"] = f"{type(exc).__name__}: {exc}"[:500]
                continue
            timings[(block, tile, warps)] = ms
            out[f"tune_block{block}_tile{tile}_warps{warps}_ms"] = ms
        if timings:
            best = min(timings, key=timings.get)
            _triton.BLOCK, _triton.TILE, _triton.NUM_WARPS = best
            out["triton_config"] = {"BLOCK": best[0], "TILE": best[1], "NUM_WARPS": best[2]}
        os.environ.pop("PARITYGATE_TORCH_KERNEL")

    intercept()
    results = {}

    for kernel in ("triton", "chunked"):
        os.environ["PARITYGATE_TORCH_KERNEL"] = kernel
        for case, (a, e) in (("pass", (x, x2)), ("fail", (y, x))):
            moved.clear()
            holder = {}

            def run(a=a, e=e, holder=holder):
                holder["r"] = torch_backend.compare_arrays(a, e, tol, "x")

            k_reps = reps if kernel == "triton" else 1
            key = f"paritygate_{kernel}_{case}"
            try:
                ms, extra = timed(run, warm=2 if kernel == "triton" else 1, reps=k_reps)
            except Exception as exc:  # report and go on with the other path
                out[key + "_error"] = f"{type(exc).__name__}: {exc}"[:2000]
                continue
            r = holder["r"]
            out[key + "_ms"] = ms
            out[key + "_extra_bytes"] = extra
            out[key + "_max_elements_to_host"] = max(moved) if moved else 0
            out[key + "_calls_to_host_per_run"] = len(moved) / (
                k_reps + (2 if kernel == "triton" else 1)
            )
            results[key] = r
        os.environ.pop("PARITYGATE_TORCH_KERNEL")
    if "paritygate_triton_fail" not in results or "paritygate_chunked_fail" not in results:
        return out
    t, c = results["paritygate_triton_fail"], results["paritygate_chunked_fail"]
    out["fail_mismatches"] = t.mismatches
    out["fail_failures"] = [f.metric for f in t.failures]
    out["fail_cosine"] = t.cosine
    # Counts, ULPs, max_abs and the worst elements exactly; the Triton kernel's float32 sums
    # within its float32 bound (the chunked path sums in float64).
    out["kernels_agree"] = (
        t.mismatches == c.mismatches
        and t.ulp_max == c.ulp_max
        and t.ulp_nonzero == c.ulp_nonzero
        and t.max_abs == c.max_abs
        and abs(t.mean_abs - c.mean_abs) <= 1e-6 * c.mean_abs
        and abs(t.one_minus_cosine - c.one_minus_cosine) <= 2e-6 * c.one_minus_cosine
        and [w.excess for w in t.worst] == [w.excess for w in c.worst]
    )
    out["mean_abs_rel_diff"] = abs(t.mean_abs - c.mean_abs) / c.mean_abs
    out["one_minus_cosine_rel_diff"] = (
        abs(t.one_minus_cosine - c.one_minus_cosine) / c.one_minus_cosine
    )
    out["pass_passed"] = bool(results["paritygate_triton_pass"].passed)
    return out


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
    for case, (a, e) in (("pass", (x, x2)), ("fail", (y, x))):
        holder = {}

        def run(a=a, e=e, holder=holder):
            holder["r"] = jax_backend.compare_arrays(a, e, tol, "x")
            return ()

        out[f"paritygate_{case}_ms"] = timed(run, warm=1)
        after = peak()
        if inputs is not None and after is not None:
            out[f"paritygate_{case}_peak_above_inputs_bytes"] = after - inputs
        r = holder["r"]
        out[f"paritygate_{case}_passed"] = bool(r.passed)
        out[f"paritygate_{case}_mismatches"] = r.mismatches
        out[f"paritygate_{case}_one_minus_cosine"] = getattr(r, "one_minus_cosine", None)
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
    from paritygate.backends import numpy as host

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
        "--tune", action="store_true", help="time launch shapes of the fused kernel first"
    )
    args = parser.parse_args()
    if args.framework == "torch":
        out = bench_torch(args.reps, args.tune)
    elif args.framework == "jax":
        out = bench_jax(args.reps)
    else:
        out = bench_mlx(args.reps)
    out["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    read = out["read_ms"]
    for key, value in out.items():
        line = f"{key}: {value}"
        if key.endswith("_ms") and key != "read_ms":
            line += f"  ({value / read:.2f}x one read of both)"
        print(line, flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2, default=str)


if __name__ == "__main__":
    main()

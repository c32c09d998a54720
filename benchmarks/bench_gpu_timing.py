"""GPU timing of the benchmark harness, checked on a real GPU: CUDA events beside the wall clock
for torch, the L2 flush, synchronization for JAX and MLX, and the refusal of unsynchronized timing.

Each framework present on the machine gets an A/A run and a run against 1.10x the work (a matrix
product over 10 % more rows, so the extra work is real, not a busy-wait), both through
``paritygate.bench.run_bench`` with its own A/A threshold. The L2 flush is shown on a reduction
over a buffer that fits in L2: per-call event times with and without the flush, side by side.

    python benchmarks/bench_gpu_timing.py [--budget 8]

Prints one table; every figure comes from this run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile


def _fmt_us(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e6:.1f} µs"


def _median(values) -> float | None:
    return statistics.median(values) if values else None


def _row(framework: str, what: str, result, note: str = "") -> str:
    base, cand = result.baseline, result.candidate
    return (
        f"| {framework} | {what} | {result.verdict.value} | {result.ratio:.4f} "
        f"[{result.ratio_ci[0]:.4f}, {result.ratio_ci[1]:.4f}] | {result.threshold:.2%} "
        f"| {_fmt_us(_median(base.end_to_end_s))} | {_fmt_us(_median(base.device_s))} "
        f"| {_fmt_us(_median(cand.end_to_end_s))} | {_fmt_us(_median(cand.device_s))} "
        f"| {result.blocks} | {result.provenance['design'].get('sync')} | {note} |"
    )


def _refusal(first_output) -> str:
    from paritygate.bench import run_bench
    from paritygate.errors import InputError

    try:
        run_bench(
            lambda: first_output,
            lambda: first_output,
            workload="refusal",
            blocks=6,
            threshold=0.5,
            sync=False,
            processes=0,
            noise=False,
        )
    except InputError as exc:
        return f"refused: {str(exc)[:70]}..."
    return "NOT REFUSED"


def _matmul_rows(label: str, mm, a, a2, b, w, budget: float, cache: str) -> list[str]:
    """A/A (same shape, other values) and 10 % more rows, against ``a @ w``."""
    from paritygate.bench import run_bench

    rows = []
    for what, cand in (("A/A", lambda: mm(a2, w)), ("+10% rows", lambda: mm(b, w))):
        result = run_bench(
            lambda: mm(a, w),
            cand,
            workload=f"gpu timing {label} matmul",
            budget=budget,
            processes=0,
            cache_dir=cache,
        )
        rows.append(_row(label, what, result, _refusal(mm(a, w))))
    return rows


def torch_rows(budget: float, cache: str) -> list[str]:
    import torch

    from paritygate.bench import run_bench

    if not torch.cuda.is_available():
        return ["| torch | no CUDA device | | | | | | | | | | |"]
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 4096
    w = torch.randn(n, n, device="cuda")
    a = torch.randn(n, n, device="cuda")
    a2 = torch.randn(n, n, device="cuda")
    b = torch.randn(round(n * 1.10), n, device="cuda")
    rows = _matmul_rows("torch CUDA", lambda x, y: x @ y, a, a2, b, w, budget, cache)
    # L2: a reduction over 16 MiB (fits the H200's L2), with and without evicting it first
    small = torch.randn(4 << 20, device="cuda")
    times = {}
    for flush in (False, True):
        result = run_bench(
            lambda: small.sum(),
            lambda: small.sum(),
            workload="gpu timing torch l2",
            budget=budget / 2,
            threshold=0.05,
            processes=0,
            flush=flush or None,
            cache_dir=cache,
        )
        times[flush] = _median(result.baseline.device_s)
        rows.append(_row("torch CUDA", f"sum 16 MiB, flush={flush}", result))
    if times[False] and times[True]:
        rows.append(
            f"| torch CUDA | L2 flush effect | | event time flushed / warm "
            f"{times[True] / times[False]:.2f}x | | | | | | | | |"
        )
    return rows


def jax_rows(budget: float, cache: str) -> list[str]:
    import jax
    import jax.numpy as jnp

    if jax.default_backend() != "gpu":
        return [f"| JAX | backend {jax.default_backend()}, not gpu | | | | | | | | | | |"]
    n = 4096
    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (n, n))
    a = jax.random.normal(jax.random.PRNGKey(1), (n, n))
    a2 = jax.random.normal(jax.random.PRNGKey(2), (n, n))
    b = jax.random.normal(jax.random.PRNGKey(3), (round(n * 1.10), n))
    mm = jax.jit(lambda x, y: jnp.matmul(x, y, precision="highest"))
    return _matmul_rows("JAX GPU", mm, a, a2, b, w, budget, cache)


def mlx_rows(budget: float, cache: str) -> list[str]:
    try:
        import mlx.core as mx
    except ImportError:
        return ["| MLX | not installed | | | | | | | | | | |"]
    if mx.default_device() != mx.gpu:
        return [f"| MLX | default device {mx.default_device()}, not a GPU | | | | | | | | | | |"]

    n = 4096
    w = mx.random.normal((n, n))
    a = mx.random.normal((n, n))
    a2 = mx.random.normal((n, n))
    b = mx.random.normal((round(n * 1.10), n))
    mx.eval(w, a, a2, b)
    label = f"MLX {mx.default_device()}"
    return _matmul_rows(label, lambda x, y: x @ y, a, a2, b, w, budget, cache)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=8.0)
    parser.add_argument("--only", choices=("torch", "jax", "mlx"), action="append")
    args = parser.parse_args(argv)
    print(
        "| framework | run | verdict | ratio [95% CI] | threshold | base wall | base event "
        "| cand wall | cand event | block pairs | sync | unsynchronized |"
    )
    print("| --- " * 12 + "|")
    with tempfile.TemporaryDirectory() as cache:
        for name, fn in (("torch", torch_rows), ("jax", jax_rows), ("mlx", mlx_rows)):
            if args.only and name not in args.only:
                continue
            try:
                rows = fn(args.budget, cache)
            except Exception as exc:  # one framework failing must not hide the others
                rows = [f"| {name} | error: {type(exc).__name__}: {exc} |" + " |" * 10]
            for row in rows:
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

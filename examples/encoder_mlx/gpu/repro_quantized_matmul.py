#!/usr/bin/env python3
"""Minimal reproduction: MLX CUDA's ``quantized_matmul`` with an input width of one group.

Standalone (MLX and NumPy only; nothing of the example or of paritygate), seeded. For every
shape it quantizes a random weight matrix (``mx.quantize``, affine, group size 64) on the CPU,
then compares ``mx.quantized_matmul`` on the device under test with the same packed weights
dequantized on the CPU (``mx.dequantize``) and multiplied in float64 by NumPy:

* ``max_abs``: the largest |device - dequantized product|;
* ``deterministic``: the device's repeated calls are byte-identical.

A shape is bad when the difference exceeds ``--tol`` x (1 + max |expected|) or the repeated calls
differ. It prints one line per shape, then the bad ones, and exits 1 when it found any (0 when
none, 2 on bad arguments)::

    python repro_quantized_matmul.py                      # MLX's default device (the GPU)
    python repro_quantized_matmul.py --device cpu         # MLX's CPU backend: finds none
    MLX_ENABLE_TF32=0 python repro_quantized_matmul.py    # TF32 off (read once per process)

On MLX 0.32.4 CUDA (H200) the input width 64 with 8 or more rows was found wrong by 3.6 to 9.1
in absolute value and not deterministic, while 128 and wider agreed to 1e-6.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        msg = f"expected comma-separated whole numbers, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected whole numbers >= 1, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("default", "gpu", "cpu"), default="default")
    ap.add_argument("--widths", type=_ints, default=[64, 128, 256], help="input widths (K)")
    ap.add_argument("--rows", type=_ints, default=[1, 4, 7, 8, 16, 45, 130], help="rows (M)")
    ap.add_argument("--out-features", type=_ints, default=[64, 192], help="output widths (N)")
    ap.add_argument("--bits", type=_ints, default=[8, 4])
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--dtypes", default="float32", help="comma-separated: float32,float16,bfloat16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-2, help="relative to 1 + max |expected|")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import mlx.core as mx
    import numpy as np

    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if d not in ("float32", "float16", "bfloat16"):
            ap.error(f"unknown dtype {d!r} (float32, float16, bfloat16)")
    if args.device == "gpu":
        try:
            mx.set_default_device(mx.gpu)
        except ValueError as exc:
            print(f"repro_quantized_matmul.py: no GPU backend in this MLX ({exc})", file=sys.stderr)
            return 2
    elif args.device == "cpu":
        mx.set_default_device(mx.cpu)
    device = mx.default_device()
    cuda = getattr(mx, "cuda", None)
    backends = {p: v for p in ("mlx", "mlx-cuda-13", "mlx-cuda", "mlx-cpu") if (v := _version(p))}
    print(
        f"MLX {mx.__version__} {backends}, device {device}, "
        f"CUDA {bool(cuda.is_available()) if cuda else 'n/a'}, "
        f"MLX_ENABLE_TF32={os.environ.get('MLX_ENABLE_TF32', 'unset (default)')}, "
        f"Python {platform.python_version()}, {platform.machine()}, seed {args.seed}",
        flush=True,
    )
    rng = np.random.default_rng(args.seed)
    bad = []
    print("bits dtype     K    N    M  max_abs     expected_max  deterministic  verdict")
    for bits in args.bits:
        for dtype in dtypes:
            dt = getattr(mx, dtype)
            for k in args.widths:
                for n in args.out_features:
                    w = (rng.standard_normal((n, k)) / 8).astype(np.float32)
                    with mx.stream(mx.cpu):
                        wq, scales, biases = mx.quantize(
                            mx.array(w).astype(dt), group_size=args.group_size, bits=bits
                        )
                        deq = mx.dequantize(
                            wq, scales, biases, group_size=args.group_size, bits=bits
                        )
                        deq = np.array(deq.astype(mx.float32)).astype(np.float64)
                    for m in args.rows:
                        x = rng.standard_normal((m, k)).astype(np.float32)
                        xd = mx.array(x).astype(dt)
                        x64 = np.array(xd.astype(mx.float32)).astype(np.float64)
                        expected = x64 @ deq.T
                        runs = []
                        for _ in range(args.repeats):
                            y = mx.quantized_matmul(
                                xd,
                                wq,
                                scales,
                                biases,
                                transpose=True,
                                group_size=args.group_size,
                                bits=bits,
                            )
                            runs.append(np.array(y.astype(mx.float32)))
                        got = runs[0].astype(np.float64)
                        finite = bool(np.isfinite(got).all())
                        max_abs = float(np.abs(got - expected).max()) if finite else float("inf")
                        scale = float(np.abs(expected).max())
                        determ = all(np.array_equal(r, runs[0]) for r in runs[1:])
                        # half-precision inputs round the product: the tolerance grows with it
                        tol = args.tol * (1.0 + scale) * (1 if dtype == "float32" else 4)
                        ok = finite and max_abs <= tol and determ
                        row = (bits, dtype, k, n, m, max_abs, scale, determ)
                        print(
                            f"{bits:4d} {dtype:8s} {k:4d} {n:4d} {m:4d}  {max_abs:<11.4g} "
                            f"{scale:<13.4g} {str(determ):13s}  {'ok' if ok else 'BAD'}",
                            flush=True,
                        )
                        if not ok:
                            bad.append(row)
    total = len(args.bits) * len(dtypes) * len(args.widths) * len(args.out_features)
    total *= len(args.rows)
    if not bad:
        print(f"no bad shape among {total} ({device})")
        return 0
    print(f"{len(bad)} bad shape(s) of {total} ({device}):")
    for bits, dtype, k, n, m, max_abs, scale, determ in bad:
        print(
            f"  bits={bits} dtype={dtype} x=({m}, {k}) w=({n}, {k}) group_size={args.group_size}: "
            f"max |got - expected| = {max_abs:.4g} (expected values up to {scale:.3g}), "
            f"deterministic={determ}"
        )
    return 1


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())

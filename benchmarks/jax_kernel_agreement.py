"""Every field of the JAX paths' reports against the host engine, field by field.

Usage: JAX_ENABLE_X64=1 python benchmarks/jax_kernel_agreement.py [LOG2_ELEMENTS]   (default 24)

The data of tests/backends/test_backend_jax.py::test_pallas_kernel_on_the_gpu_agrees_with_the_host
(2**N + 77 elements with NaN, infinities and signed zeros; atol = rtol = 1e-2, max_ulp 4), in
bfloat16, float16 and float32, both argument orders. Where the test stops at the first
difference, this prints every differing field of the XLA path (``chunked``) and the Pallas kernel
(compiled on a GPU, interpreted elsewhere), or AGREE.
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from paritygate.backends import host
from paritygate.backends import jax as jax_backend
from paritygate.results import Tolerance

FIELDS = ["mismatches", "ulp_max", "ulp_nonzero", "ulp_over", "max_abs", "size", "nonfinite"]


def main() -> None:
    gpu = jax.default_backend() == "gpu"
    n = (1 << int(sys.argv[1] if len(sys.argv) > 1 else 24)) + 77
    rng = np.random.default_rng(7)
    e = (rng.standard_normal(n) * 10).astype(np.float32)
    a = e + (rng.standard_normal(n) * 1e-2).astype(np.float32)
    picks = rng.choice(n, 40, replace=False)
    a[picks[:10]] = np.nan
    e[picks[5:15]] = np.nan
    a[picks[15:20]] = np.inf
    e[picks[18:25]] = -np.inf
    a[picks[25:30]] += 5.0
    a[picks[30]], e[picks[30]] = -0.0, 0.0
    tol = Tolerance(atol=1e-2, rtol=1e-2, max_ulp=4, min_cosine=0.999)
    for name in ("bfloat16", "float16", "float32"):
        dt = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
        x, y = a.astype(dt), e.astype(dt)
        for order, (p, q) in enumerate(((x, y), (y, x))):
            expected = host.compare_arrays(p, q, tol, "x", kernel="numpy")
            got = {}
            for kernel in ("chunked", "auto" if gpu else "pallas-interpret"):
                os.environ[jax_backend.KERNEL_ENV] = kernel
                jax_backend._pallas_kernel.cache_clear()
                got[kernel] = jax_backend.compare_arrays(jnp.asarray(p), jnp.asarray(q), tol, "x")
            diffs = [
                f"{field}: host {getattr(expected, field, None)} "
                + " ".join(f"{k} {getattr(r, field, None)}" for k, r in got.items())
                for field in FIELDS
                if any(
                    getattr(r, field, None) != getattr(expected, field, None) for r in got.values()
                )
            ]
            print(name, order, "AGREE" if not diffs else "; ".join(diffs), flush=True)


if __name__ == "__main__":
    main()

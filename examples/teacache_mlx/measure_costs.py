"""Measure what sized this example and what its paired oracle costs (offline, about a minute).

    python measure_costs.py     # writes calibration/costs.json

* GEMM throughput of MLX's CPU backend against numpy (OpenBLAS) at the model's shapes, best of
  20 alternating calls (why the model is small: MLX 0.32's CPU GEMM is a slow reference);
* wall time of one single-case generation, vanilla and with the cache at the default threshold,
  interleaved in alternating order (medians of ``--repeats`` pairs; no speed claim is made from
  these: a shared 2-core machine is too noisy for one);
* the paired oracle's comparison overhead as a fraction of one run (paritygate.paired).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

HERE = Path(__file__).resolve().parent


def gemm(m: int, k: int, n: int, repeats: int = 20) -> dict[str, float]:
    a, b = mx.random.normal((m, k)), mx.random.normal((k, n))
    mx.eval(a, b)
    an, bn = np.array(a), np.array(b)
    mx.eval(a @ b)
    t_mlx = t_np = float("inf")
    for _ in range(repeats):  # best of: the machine is shared, the minimum is its capability
        start = time.perf_counter()
        mx.eval(a @ b)
        t_mlx = min(t_mlx, time.perf_counter() - start)
        start = time.perf_counter()
        an @ bn
        t_np = min(t_np, time.perf_counter() - start)
    flops = 2.0 * m * k * n
    return {
        "shape": [m, k, n],
        "mlx_gflops": flops / t_mlx / 1e9,
        "numpy_gflops": flops / t_np / 1e9,
    }


def main() -> None:
    import gate_runners
    import teacache

    from paritygate import load_spec, paired

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    spec = load_spec(HERE / "parity.toml")
    case = spec.cases["seed0-digit0"]
    pipeline = gate_runners.shared_pipeline()
    inputs = gate_runners.case_inputs(case)

    def cached():
        teacache.install(pipeline, "proxy")
        try:
            return pipeline.sample(*inputs)
        finally:
            teacache.uninstall(pipeline)

    vanilla = lambda: pipeline.sample(*inputs)  # noqa: E731
    vanilla(), cached()  # warm-up
    times: dict[str, list[float]] = {"vanilla": [], "cached": []}
    for i in range(args.repeats):
        order = [("vanilla", vanilla), ("cached", cached)]
        for name, fn in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    ratios = [c / v for c, v in zip(times["cached"], times["vanilla"])]

    def noop_candidate():
        teacache.install(pipeline, "proxy", rel_l1_thresh=0.0)
        try:
            return {"sample": pipeline.sample(*inputs)}
        finally:
            teacache.uninstall(pipeline)

    result = paired(lambda: {"sample": pipeline.sample(*inputs)}, noop_candidate)
    out = {
        "platform": f"MLX {mx.__version__} CPU, {platform.system()} {platform.machine()}",
        "date": datetime.date.today().isoformat(),
        "gemm": [gemm(16, 64, 192), gemm(1024, 128, 512)],
        "generation_s": {k: statistics.median(v) for k, v in times.items()},
        "generation_samples_s": times,
        "cached_over_vanilla_median_ratio": statistics.median(ratios),
        "paired": {
            "passed": result.passed,
            "run_s_median": result.run_s_median,
            "overhead_fraction": result.overhead,
            "run_counts": result.run_counts,
        },
    }
    (HERE / "calibration" / "costs.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "generation_samples_s"}, indent=2))


if __name__ == "__main__":
    main()

"""Cost of the paired oracle: runs per order and comparison overhead against one run.

The target (issue 4): at most 3 runs per order, and comparison overhead (host copies plus byte or
metric comparison, per order) at most 5% of one run. Each model below takes about 50-200 ms per
run on one CPU core; the output sizes span a small latent to a 4 MiB tensor, since the
comparison cost grows with the output, not with the model.

    python benchmarks/bench_paired.py [--repeats 3]

Prints, per model: median run time, comparison time per order, their ratio, and the run counts.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from paritygate.paired import paired
from paritygate.results import Tolerance


def numpy_model(width: int, depth: int, batch: int):
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((width, width)).astype(np.float32) / np.sqrt(width) for _ in range(depth)]
    x = rng.standard_normal((batch, width)).astype(np.float32)

    def run():
        h = x
        for w in weights:
            h = np.tanh(h @ w)
        return {"hidden": h, "pooled": h.mean(axis=0)}

    return run


def mlx_model(width: int, depth: int, batch: int):
    import mlx.core as mx

    rng = np.random.default_rng(0)
    weights = [mx.array(rng.standard_normal((width, width)).astype(np.float32) / np.sqrt(width)) for _ in range(depth)]
    x = mx.array(rng.standard_normal((batch, width)).astype(np.float32))

    def run():  # lazy: the graph is evaluated by the oracle, inside the timed run
        h = x
        for w in weights:
            h = mx.tanh(h @ w)
        return {"hidden": h, "pooled": h.mean(axis=0)}

    return run


def measure(name: str, run, repeats: int, tolerance: Tolerance | None = None) -> dict:
    ratios, runs, compares = [], [], []
    for _ in range(repeats):
        result = paired(run, run, tolerance=tolerance)
        assert result, result.summary()
        ratios.append(result.overhead)
        runs.append(result.run_s_median)
        compares.append(result.compare_s / len(result.orders))
    counts = result.run_counts
    row = {
        "model": name,
        "mode": "bytes" if tolerance is None else "metric",
        "run_ms": statistics.median(runs) * 1e3,
        "compare_ms": statistics.median(compares) * 1e3,
        "overhead": statistics.median(ratios),
        "runs": f"{counts['baseline']}+{counts['candidate']} in {len(result.orders)} orders",
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="paired calls per model (median reported)")
    args = parser.parse_args()
    cases = [
        ("numpy 512x512 x16, out 128x512", numpy_model(512, 16, 128)),
        ("numpy 1024x1024 x2, out 1024x1024 (4 MiB)", numpy_model(1024, 2, 1024)),
        ("mlx 512x512 x16, out 128x512 (lazy)", mlx_model(512, 16, 128)),
        ("mlx 1024x1024 x2, out 1024x1024 (lazy)", mlx_model(1024, 2, 1024)),
    ]
    rows = []
    for name, run in cases:
        rows.append(measure(name, run, args.repeats))
        rows.append(measure(name, run, args.repeats, Tolerance(atol=1e-6, min_cosine=0.999)))
    print(f"{'model':<44} {'check':<6} {'run ms':>8} {'compare ms':>11} {'overhead':>9}  runs")
    for r in rows:
        print(
            f"{r['model']:<44} {r['mode']:<6} {r['run_ms']:8.1f} {r['compare_ms']:11.2f} "
            f"{r['overhead']:9.2%}  {r['runs']}"
        )
    worst = max(r["overhead"] for r in rows)
    print(f"worst overhead {worst:.2%} of one run per order (target <= 5%)")


if __name__ == "__main__":
    main()

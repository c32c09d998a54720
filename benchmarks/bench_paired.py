"""Cost of the paired oracle: runs per order and comparison overhead against one run.

The target (issue 4): at most 3 runs per order, and comparison overhead (host copies plus byte or
metric comparison, per order) at most 5% of one run. Each model below takes about 50-200 ms per
run on one CPU core; the output sizes span a small latent to a 4 MiB tensor, since the
comparison cost grows with the output, not with the model.

    python benchmarks/bench_paired.py [--repeats 5]

Prints, per model: median run time, comparison time per order, their ratio (median of the
per-call ratios, and fastest comparison / fastest run, which other processes on a shared machine
cannot inflate), the run counts, and the once-per-process cost of loading the compiled kernel.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from paritygate.paired import paired
from paritygate.results import Tolerance


def numpy_model(width: int, depth: int, batch: int):
    rng = np.random.default_rng(0)
    weights = [
        (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        for _ in range(depth)
    ]
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
    weights = [
        mx.array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
        for _ in range(depth)
    ]
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
        # Interference from other processes only adds time: the ratio of the fastest comparison
        # to the fastest run is the oracle's own cost, the median ratio what this machine saw.
        "overhead_best": min(compares) / min(runs),
        "runs": f"{counts['baseline']}+{counts['candidate']} in {len(result.orders)} orders",
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=5, help="paired calls per model (median reported)"
    )
    args = parser.parse_args()
    cases = [
        ("numpy 512x512 x16, out 128x512", numpy_model(512, 16, 128)),
        ("numpy 1024x1024 x2, out 1024x1024 (4 MiB)", numpy_model(1024, 2, 1024)),
        ("mlx 512x512 x16, out 128x512 (lazy)", mlx_model(512, 16, 128)),
        ("mlx 1024x1024 x2, out 1024x1024 (lazy)", mlx_model(1024, 2, 1024)),
    ]
    # The first comparison large enough for the compiled kernel loads it (from numba's disk cache
    # after the first process on this machine, compiled before that): a once-per-process cost,
    # reported on its own rather than folded into the per-call ratios below.
    import time

    from paritygate.compare import compare_output

    probe = np.ones(1 << 20, dtype=np.float32)
    start = time.perf_counter()
    compare_output(probe, probe.copy(), Tolerance(atol=1e-6), "probe")
    first_s = time.perf_counter() - start
    rows = []
    for name, run in cases:
        rows.append(measure(name, run, args.repeats))
        rows.append(measure(name, run, args.repeats, Tolerance(atol=1e-6, min_cosine=0.999)))
    print(
        f"{'model':<44} {'check':<6} {'run ms':>8} {'compare ms':>11} {'median':>8} {'best':>7}  "
        "runs"
    )
    for r in rows:
        print(
            f"{r['model']:<44} {r['mode']:<6} {r['run_ms']:8.1f} {r['compare_ms']:11.2f} "
            f"{r['overhead']:8.2%} {r['overhead_best']:7.2%}  {r['runs']}"
        )
    print(f"first comparison in this process (kernel load): {first_s * 1e3:.0f} ms, once")
    worst = max(r["overhead"] for r in rows)
    worst_best = max(r["overhead_best"] for r in rows)
    print(
        f"worst overhead of one run per order (target <= 5%): {worst:.2%} median of per-call "
        "ratios, "
        f"{worst_best:.2%} fastest comparison / fastest run"
    )


if __name__ == "__main__":
    main()

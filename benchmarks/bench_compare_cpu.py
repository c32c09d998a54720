"""CPU comparison speed and memory: paritygate against numpy.testing and torch.testing.

Two float32 arrays of 64 Mi elements (256 MiB each). For each case (passing, failing with a few
elements out of bounds, failing with every element out of bounds) the contestants run
interleaved in the same process, several rounds, and the script prints the best and median
times, the ratios of the best times and the median of each round's own ratio against
``assert_allclose`` (the steadier figure on a loaded machine), and the ratios the project tracks:

* required: paritygate's full report (metrics, worst-k, text rendering) at least 10x faster than
  ``numpy.testing.assert_allclose`` on a failing comparison;
* goal: at most 2x the time of one read of both arrays by every core the kernel uses (a parallel
  numba sum of each array over as many threads as the kernel runs, the anchor the ratios use);
  numpy's single-threaded ``a.sum(); b.sum()`` is printed beside it;
* the numpy fallback never slower than ``assert_allclose`` in any case.

Cold start: the first comparison (4 Mi float32 elements, numba kernel) in a fresh interpreter,
with the kernel's disk cache warm and with an empty cache (``NUMBA_CACHE_DIR`` a new folder).

Extra memory of each paritygate kernel is measured in a child process (so that one
measurement cannot hide another's peak): the tracemalloc peak, and the peak RSS (sampled every
0.5 ms by a thread) over the RSS just before the comparison.

    python benchmarks/bench_compare_cpu.py [--size-mi 64] [--rounds 3] [--skip-torch]
                                           [--skip-cold-start]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc

import numpy as np

ATOL = 1e-5
RTOL = 1e-5
CHUNK = 1 << 22


def make_arrays(n: int, case: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """expected and actual, built chunk by chunk so that no whole-array temporary exists."""
    rng = np.random.default_rng(seed)
    expected = np.empty(n, np.float32)
    actual = np.empty(n, np.float32)
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        block = rng.standard_normal(stop - start, dtype=np.float32)
        expected[start:stop] = block
        if case == "pass":
            noise = rng.standard_normal(stop - start, dtype=np.float32) * np.float32(1e-7)
            np.add(block, noise, out=actual[start:stop])
        elif case == "fail-dense":
            noise = rng.standard_normal(stop - start, dtype=np.float32) * np.float32(1e-3)
            np.add(block, noise, out=actual[start:stop])
        else:
            actual[start:stop] = block
    if case == "fail-sparse":
        actual[::1000] += np.float32(1e-2)  # 67 109 elements out of bounds, in every block
    return actual, expected


def paritygate_report(actual: np.ndarray, expected: np.ndarray, kernel: str) -> bool:
    from paritygate import compare
    from paritygate.reports.text import format_comparison

    os.environ["PARITYGATE_KERNEL"] = kernel
    # ULP distances, cosine and worst-k are computed and rendered; the bounds are assert_allclose's.
    result = compare(actual, expected, atol=ATOL, rtol=RTOL, worst_k=10)
    format_comparison(result)
    return result.passed


def numpy_allclose(actual: np.ndarray, expected: np.ndarray) -> bool:
    try:
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)
    except AssertionError:
        return False
    return True


def torch_close(actual: np.ndarray, expected: np.ndarray) -> bool:
    import torch

    try:
        torch.testing.assert_close(
            torch.from_numpy(actual), torch.from_numpy(expected), rtol=RTOL, atol=ATOL
        )
    except AssertionError:
        return False
    return True


def one_read(actual: np.ndarray, expected: np.ndarray) -> bool:
    actual.sum()
    expected.sum()
    return True


_parallel_sum = None


def parallel_read(actual: np.ndarray, expected: np.ndarray) -> bool:
    """One read of both arrays by as many threads as paritygate's kernel uses (numba prange)."""
    global _parallel_sum
    import numba

    from paritygate.backends._numba_kernel import _threads

    if _parallel_sum is None:

        @numba.njit(parallel=True, fastmath=True, cache=True)
        def total(x):
            s = 0.0
            for i in numba.prange(x.size):
                s += x[i]
            return s

        _parallel_sum = total
    numba.set_num_threads(min(_threads(), numba.config.NUMBA_NUM_THREADS))
    _parallel_sum(actual.reshape(-1))
    _parallel_sum(expected.reshape(-1))
    return True


COLD_START = """
import time, numpy as np
t0 = time.perf_counter()
from paritygate import compare
rng = np.random.default_rng(0)
e = rng.standard_normal(1 << 22).astype(np.float32)
a = e + np.float32(1e-6)
t1 = time.perf_counter()
r = compare(a, e, atol=1e-5)
t2 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f} {r.outputs[0].backend}")
"""


def cold_start() -> None:
    """First comparison in a fresh interpreter: empty numba cache, then warm cache."""
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, PARITYGATE_KERNEL="numba")
        for label in ("cold cache (empty NUMBA_CACHE_DIR)", "warm cache (second process)"):
            out = subprocess.run(
                [sys.executable, "-c", COLD_START], capture_output=True, text=True, env=env
            )
            if out.returncode:
                print(f"  {label}: failed: {out.stderr.strip()[-500:]}")
                continue
            setup, first, backend = out.stdout.split()
            print(
                f"  {label:36s}: import + data {float(setup):6.3f} s, first comparison "
                f"{float(first):6.3f} s ({backend})"
            )


def memory_child(kernel: str, size_mi: int, case: str) -> None:
    """Child process: print the extra memory of one paritygate comparison as JSON."""
    import threading

    import psutil

    n = size_mi * 2**20
    actual, expected = make_arrays(n, case)
    # Compile / warm up on a small slice first: the JIT's own memory is not the comparison's.
    paritygate_report(actual[: 1 << 20], expected[: 1 << 20], kernel)
    process = psutil.Process()
    rss_before = process.memory_info().rss
    peak_rss = rss_before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_rss
        while not done.is_set():
            peak_rss = max(peak_rss, process.memory_info().rss)
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    tracemalloc.start()
    paritygate_report(actual, expected, kernel)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    done.set()
    sampler.join()
    peak_rss = max(peak_rss, process.memory_info().rss)
    print(
        json.dumps(
            {
                "tracemalloc_peak_mib": traced_peak / 2**20,
                "rss_peak_growth_mib": (peak_rss - rss_before) / 2**20,
            }
        )
    )


def timed(fn, *args) -> tuple[float, bool]:
    start = time.perf_counter()
    ok = fn(*args)
    return time.perf_counter() - start, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mi", type=int, default=64, help="elements per array, in Mi")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-torch", action="store_true")
    parser.add_argument("--skip-cold-start", action="store_true")
    parser.add_argument(
        "--memory-child", nargs=2, metavar=("KERNEL", "CASE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child[0], args.size_mi, args.memory_child[1])
        return

    n = args.size_mi * 2**20
    print(
        f"python {platform.python_version()}, numpy {np.__version__}, cores {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"two float32 arrays of {args.size_mi} Mi elements ({n * 4 / 2**20:.0f} MiB each), "
        f"atol={ATOL:g} rtol={RTOL:g}; best / median of {args.rounds} interleaved rounds"
    )
    from paritygate.backends._numba_kernel import _threads

    print(f"paritygate kernel threads: {_threads()}")
    if not args.skip_cold_start:
        print("cold start, first comparison of 4 Mi float32 elements in a fresh process:")
        cold_start()
    anchor = f"one read, {_threads()} threads (numba)"
    contestants = [
        (anchor, parallel_read, ()),
        ("one read (a.sum(); b.sum())", one_read, ()),
        ("paritygate, numba kernel", paritygate_report, ("numba",)),
        ("paritygate, numpy kernel", paritygate_report, ("numpy",)),
        ("numpy.testing.assert_allclose", numpy_allclose, ()),
    ]
    if not args.skip_torch:
        contestants.append(("torch.testing.assert_close", torch_close, ()))
    # Warm-up: imports and compilation are not part of the comparison.
    small_a, small_e = make_arrays(1 << 20, "fail-sparse")
    for _, fn, extra in contestants:
        fn(small_a, small_e, *extra)

    summary: dict[str, dict[str, float]] = {}
    for case in ("pass", "fail-sparse", "fail-dense"):
        actual, expected = make_arrays(n, case)
        times: dict[str, list[float]] = {name: [] for name, _, _ in contestants}
        verdicts: dict[str, bool] = {}
        for _ in range(args.rounds):
            for name, fn, extra in contestants:
                seconds, ok = timed(fn, actual, expected, *extra)
                times[name].append(seconds)
                verdicts[name] = ok
        print(f"\ncase {case}:")
        best = {name: min(ts) for name, ts in times.items()}
        for name, ts in times.items():
            verdict = (
                "" if name.startswith("one read") else ("passed" if verdicts[name] else "failed")
            )
            print(
                f"  {name:32s} best {min(ts):8.3f} s  median {statistics.median(ts):8.3f} s  "
                f"{verdict}"
            )
        read = best[anchor]
        print(
            f"  anchor: {anchor}; numpy's single-threaded read "
            f"{best['one read (a.sum(); b.sum())'] / read:.1f}x it"
        )
        for kernel in ("numba", "numpy"):
            ours = best[f"paritygate, {kernel} kernel"]
            line = (
                f"  {kernel} kernel: {best['numpy.testing.assert_allclose'] / ours:6.1f}x faster "
                "than "
                f"assert_allclose, {ours / read:6.1f}x one read"
            )
            if not args.skip_torch:
                ratio = best["torch.testing.assert_close"] / ours
                line += f", {ratio:5.1f}x faster than torch assert_close"
            print(line)
        # On a loaded machine the best times can come from different moments; the ratio of
        # each round's own pair (run back to back) is the steadier figure.
        for kernel in ("numba", "numpy"):
            rounds = [
                allclose / ours
                for allclose, ours in zip(
                    times["numpy.testing.assert_allclose"],
                    times[f"paritygate, {kernel} kernel"],
                    strict=True,
                )
            ]
            print(
                f"  {kernel} kernel vs assert_allclose, per round: "
                + " ".join(f"{r:.2f}x" for r in rounds)
                + f"; median {statistics.median(rounds):.2f}x"
            )
        summary[case] = best
        del actual, expected

    read_name = anchor
    for kernel in ("numba", "numpy"):
        ratios = ", ".join(
            f"{case} {best[f'paritygate, {kernel} kernel'] / best[read_name]:.2f}x"
            for case, best in summary.items()
        )
        print(f"\n{kernel} kernel / one read by {_threads()} threads (goal <= 2x): {ratios}")

    print(
        "\nextra memory of one paritygate comparison (child process per kernel, case fail-sparse / "
        "fail-dense):"
    )
    for kernel in ("numba", "numpy"):
        for case in ("fail-sparse", "fail-dense"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--size-mi",
                    str(args.size_mi),
                    "--memory-child",
                    kernel,
                    case,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            data = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"  {kernel:5s} {case:11s}: tracemalloc peak {data['tracemalloc_peak_mib']:6.1f} "
                "MiB, "
                f"peak RSS growth {data['rss_peak_growth_mib']:6.1f} MiB"
            )


if __name__ == "__main__":
    main()
